"""Writes of layer 3: append, overwrite and merge entries into the seven profile sections."""

from __future__ import annotations

import logging
import re

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from ethan_llm.text import terms
from ethan_shared.limits import (
    PROFILE_ENTRY_MAX_CHARS,
    PROFILE_MAX_CHARS,
    storable_text,
    too_long,
)
from profile_app.markdown import ProfileParseError, normalize_content, parse, render
from profile_app.models import ProfileRevision, ProfileSection
from profile_app.sections import SECTIONS, section_for

log = logging.getLogger(__name__)

MODES = ("append", "overwrite", "merge")
# Two bullets whose terms overlap this much (Jaccard) say the same thing: merge replaces.
MERGE_SIMILARITY = 0.5
_LABEL = re.compile(r"^\s*([^:：]{1,20})[:：]")


def _bullets(content: str) -> list[str]:
    return [line for line in content.splitlines() if line.strip()]


def _entry_text(line: str) -> str:
    return re.sub(r"^\s*[-*]\s+", "", line).strip()


def _label(text: str) -> str | None:
    match = _LABEL.match(text)
    return match.group(1).strip().lower() if match else None


def same_subject(existing: str, entry: str) -> bool:
    """The documented merge rule (the offline rule; no model is asked).

    An existing bullet is replaced by the new entry when
    - both start with the same label before a colon ("名字：张三" / "名字：李雷", "Name: …"):
      the new value contradicts or updates the old one; or
    - their terms (English words, Chinese character bigrams; see ethan_llm.text) overlap by at least
      half (Jaccard >= 0.5): they say nearly the same thing.
    """
    old_text, new_text = _entry_text(existing), _entry_text(entry)
    old_label, new_label = _label(old_text), _label(new_text)
    if old_label and old_label == new_label:
        return True
    old_terms, new_terms = terms(old_text), terms(new_text)
    if not old_terms or not new_terms:
        return old_text.lower() == new_text.lower()
    return len(old_terms & new_terms) / len(old_terms | new_terms) >= MERGE_SIMILARITY


def merged(content: str, entry: str) -> str:
    bullet = f"- {_entry_text(entry)}"
    lines = _bullets(content)
    for index, line in enumerate(lines):
        if line.lstrip().startswith(("-", "*")) and same_subject(line, entry):
            lines[index] = bullet
            return "\n".join(lines)
    return "\n".join([*lines, bullet])


@transaction.atomic
def profile_update(
    *,
    owner: AbstractBaseUser,
    section: str,
    entry: str,
    mode: str = "append",
    actor: str = "agent",
) -> ProfileSection:
    """Change one section; the previous text is kept as a revision. ValueError on bad input:
    an unknown section or mode, an empty entry, text no one can store (a NUL character, a
    lone surrogate: ethan_shared.limits.storable_text), an append/merge entry longer than
    PROFILE_ENTRY_MAX_CHARS, or a change that would make the whole rendered user_profile.md
    longer than PROFILE_MAX_CHARS (so what GET /api/profile gives can always be PUT back)."""
    target = section_for(section)
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}: use append, overwrite or merge")
    storable_text("a profile entry" if mode != "overwrite" else "the section's text", entry)
    # An overwrite keeps the text as written (indentation is Markdown); an entry is one line.
    entry = normalize_content(entry) if mode == "overwrite" else entry.strip()
    if not entry and mode != "overwrite":
        raise ValueError("the entry is empty")
    if mode != "overwrite" and len(entry) > PROFILE_ENTRY_MAX_CHARS:
        raise ValueError(too_long("a profile entry", PROFILE_ENTRY_MAX_CHARS, len(entry)))
    row, _ = ProfileSection.objects.select_for_update().get_or_create(owner=owner, key=target.key)
    old = row.content
    if mode == "append":
        new = "\n".join([*_bullets(old), f"- {_entry_text(entry)}"])
    elif mode == "overwrite":
        new = entry
    else:
        new = merged(old, entry)
    if new == old:
        return row
    profile_check_length(owner=owner, key=target.key, new=new)
    row.content = new
    row.updated_at = timezone.now()
    row.save(update_fields=["content", "updated_at"])
    ProfileRevision.objects.create(
        section=row, mode=mode, old_content=old, new_content=new, actor=actor
    )
    return row


def profile_rendered_length(contents: dict[str, str]) -> int:
    """The length of user_profile.md for these sections: what PROFILE_MAX_CHARS bounds."""
    return len(render(contents))


def profile_check_length(*, owner: AbstractBaseUser, key: str, new: str) -> None:
    """ValueError when writing `new` into section `key` would leave the whole profile longer
    than PROFILE_MAX_CHARS. A change that shortens it is always taken, so a profile stored
    before the limit can be cut down. (profile_update calls it with the section locked; the
    admin's form calls it to refuse before saving.)"""
    contents = dict(ProfileSection.objects.filter(owner=owner).values_list("key", "content"))
    old = contents.get(key, "")
    length = profile_rendered_length({**contents, key: new})
    if length <= PROFILE_MAX_CHARS or length <= profile_rendered_length(contents):
        return
    raise ValueError(
        f"the profile would be {length} characters long; it is at most {PROFILE_MAX_CHARS} "
        f"(this change adds {len(new) - len(old)}: shorten or overwrite a section first)"
    )


def profile_apply_extraction(*, owner: AbstractBaseUser, items: list[str]) -> int:
    """The consolidator's [PROFILE_PSYCH] items (companion mode only): merged into 心理与情绪,
    never into any other section (基础特征 is only ever written by the user or the agent).
    Returns how many items changed the section."""
    changed = 0
    for item in items:
        if not item.strip():
            continue
        before = (
            ProfileSection.objects.filter(owner=owner, key="psych")
            .values_list("content", flat=True)
            .first()
        )
        try:
            row = profile_update(
                owner=owner, section="psych", entry=item, mode="merge", actor="consolidator"
            )
        except ValueError as exc:
            # Too long (an entry, or the profile is full): skipped, so the consolidation that
            # extracted it still moves on.
            log.warning("profile extraction skipped for owner %s: %s", owner.pk, exc)
            continue
        changed += int(row.content != (before or ""))
    return changed


@transaction.atomic
def profile_replace(*, owner: AbstractBaseUser, markdown: str, actor: str = "user") -> list[str]:
    """Save a whole user_profile.md (the 我的画像 page, PUT /api/profile): every section whose
    text changed is overwritten, with a revision. Raises ProfileParseError, having written
    nothing, for a document that cannot be taken. Returns the parser's notes."""
    parsed = parse(markdown)
    profile_sections_replace(owner=owner, sections=parsed.sections, actor=actor)
    return parsed.notes


@transaction.atomic
def profile_sections_replace(
    *, owner: AbstractBaseUser, sections: dict[str, str], actor: str
) -> int:
    """Overwrite the given sections (by key) whose text changed, each with a revision; the
    others stay. Raises ProfileParseError, having written nothing, when the resulting profile
    would be longer than PROFILE_MAX_CHARS. Returns how many sections changed."""
    current = dict(ProfileSection.objects.filter(owner=owner).values_list("key", "content"))
    result = {s.key: sections.get(s.key, current.get(s.key, "")) for s in SECTIONS}
    length = profile_rendered_length(result)
    if length > PROFILE_MAX_CHARS:
        # Checked on the result: sections the document leaves out keep their text, so a
        # document within the limit can still make a profile longer than it.
        raise ProfileParseError(
            f"the profile would be {length} characters long (sections not given kept as they "
            f"are); at most {PROFILE_MAX_CHARS} are kept"
        )
    changed = [
        (key, content) for key, content in sections.items() if content != current.get(key, "")
    ]

    def growth(item: tuple[str, str]) -> int:
        key, content = item
        return profile_rendered_length({key: content}) - profile_rendered_length(
            {key: current.get(key, "")}
        )

    # Sections that shrink first: then every step's profile is no longer than the result,
    # so each profile_update's own check of the whole passes.
    try:
        for key, content in sorted(changed, key=growth):
            profile_update(owner=owner, section=key, entry=content, mode="overwrite", actor=actor)
    except ValueError as exc:  # a concurrent change made it too long: nothing is kept
        raise ProfileParseError(str(exc)) from None
    return len(changed)
