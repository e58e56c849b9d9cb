"""Writes of layer 3: append, overwrite and merge entries into the seven profile sections."""

from __future__ import annotations

import re

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from llm.text import terms
from profile_app.markdown import normalize_content, parse
from profile_app.models import ProfileRevision, ProfileSection
from profile_app.sections import section_for

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
    - their terms (English words, Chinese character bigrams; see llm.text) overlap by at least
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
    """Change one section; the previous text is kept as a revision. ValueError on bad input."""
    target = section_for(section)
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}: use append, overwrite or merge")
    # An overwrite keeps the text as written (indentation is Markdown); an entry is one line.
    entry = normalize_content(entry) if mode == "overwrite" else entry.strip()
    if not entry and mode != "overwrite":
        raise ValueError("the entry is empty")
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
    row.content = new
    row.updated_at = timezone.now()
    row.save(update_fields=["content", "updated_at"])
    ProfileRevision.objects.create(
        section=row, mode=mode, old_content=old, new_content=new, actor=actor
    )
    return row


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
        row = profile_update(
            owner=owner, section="psych", entry=item, mode="merge", actor="consolidator"
        )
        changed += int(row.content != (before or ""))
    return changed


@transaction.atomic
def profile_replace(*, owner: AbstractBaseUser, markdown: str, actor: str = "user") -> list[str]:
    """Save a whole user_profile.md (the 我的画像 page, PUT /api/profile): every section whose
    text changed is overwritten, with a revision. Raises ProfileParseError, having written
    nothing, for a document that cannot be taken. Returns the parser's notes."""
    parsed = parse(markdown)
    current = dict(ProfileSection.objects.filter(owner=owner).values_list("key", "content"))
    for key, content in parsed.sections.items():
        if content != current.get(key, ""):
            profile_update(owner=owner, section=key, entry=content, mode="overwrite", actor=actor)
    return parsed.notes
