"""user_profile.md: rendering the seven sections to Markdown and parsing them back, exactly.

The document is a title line, then every section in order as `## <title>`, a blank line and its
text. A line of a section's text that would read as a title or section heading (`# …`, `## …`,
after any backslashes) is written with one more backslash in front and read back without it,
so any text round-trips.

Parsing a hand-edited file:
- sections are found by title or key (`## goals` works), in any order;
- a section missing from the document is left as it is (noted);
- text under an unknown heading is kept at the end of the section before it (or the first
  section), under its heading in bold, and a note says where it went;
- text before the first section goes to the start of the first section (noted);
- a section that appears twice, or a document over MAX_CHARS, is refused (ProfileParseError).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ethan_shared.limits import PROFILE_MAX_CHARS, UnstorableText, storable_text
from profile_app.sections import SECTIONS, section_for

TITLE = "# 用户画像"
# The longest document taken (ethan_shared.limits): the services keep every stored profile's
# rendering within it too, so what is rendered can always be parsed back.
MAX_CHARS = PROFILE_MAX_CHARS
_HEADING_LIKE = re.compile(r"^(\\*)(#{1,2})(?=\s|$)")
_SECTION = re.compile(r"^##(?:\s+(.*?))?\s*$")
_TITLE_LINE = re.compile(r"^#(?:\s.*)?$")


class ProfileParseError(ValueError):
    """The document cannot be taken as a profile; the message says why and where."""


@dataclass
class ParsedProfile:
    sections: dict[str, str]  # only the sections the document has
    notes: list[str] = field(default_factory=list)


def normalize_content(text: str) -> str:
    """How a section's text is kept: Unix newlines, no blank lines around it."""
    return text.replace("\r\n", "\n").replace("\r", "\n").strip("\n")


def _escape(line: str) -> str:
    return "\\" + line if _HEADING_LIKE.match(line) else line


def _unescape(line: str) -> str:
    return line[1:] if line.startswith("\\") and _HEADING_LIKE.match(line) else line


def render(contents: dict[str, str]) -> str:
    parts = [TITLE]
    for section in SECTIONS:
        body = normalize_content(contents.get(section.key, ""))
        escaped = "\n".join(_escape(line) for line in body.split("\n")) if body else ""
        parts.append(f"## {section.title}\n\n{escaped}" if body else f"## {section.title}")
    return "\n\n".join(parts) + "\n"


def parse(text: str) -> ParsedProfile:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if len(text) > MAX_CHARS:
        raise ProfileParseError(
            f"the profile is {len(text)} characters long; at most {MAX_CHARS} are accepted"
        )
    try:
        storable_text("the profile", text)
    except UnstorableText as exc:
        raise ProfileParseError(str(exc)) from None
    bodies: dict[str, list[str]] = {}
    seen_at: dict[str, int] = {}
    notes: list[str] = []
    current: str | None = None
    preamble: list[str] = []
    title_seen = False
    for number, line in enumerate(text.split("\n"), start=1):
        heading = _SECTION.match(line)
        if heading:
            name = (heading.group(1) or "").strip()
            try:
                key = section_for(name).key
            except ValueError:
                target = current or SECTIONS[0].key
                bodies.setdefault(target, []).extend(["", f"**{name or '(untitled)'}**"])
                notes.append(
                    f"unknown heading '## {name}' (line {number}): its text was kept at the "
                    f"end of {section_for(target).title}"
                )
                current = target
                continue
            if key in seen_at:
                raise ProfileParseError(
                    f"section {section_for(key).title} appears twice (lines {seen_at[key]} "
                    f"and {number}): merge them into one"
                )
            seen_at[key] = number
            bodies.setdefault(key, [])
            current = key
            continue
        if current is None:
            if not title_seen and _TITLE_LINE.match(line):
                title_seen = True
                continue
            preamble.append(line)
            continue
        bodies[current].append(_unescape(line))
    if normalize_content("\n".join(preamble)).strip():
        first = SECTIONS[0].key
        bodies[first] = [*preamble, "", *bodies.get(first, [])]
        notes.append(f"text before the first section was kept at the start of {SECTIONS[0].title}")
    sections = {key: normalize_content("\n".join(lines)) for key, lines in bodies.items()}
    for section in SECTIONS:
        if section.key not in sections:
            notes.append(f"section {section.title} is not in the document: it was left as it is")
    return ParsedProfile(sections=sections, notes=notes)
