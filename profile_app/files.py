"""Layer 3's part of the ~/.ethan layout (docs/files.md): memory/user_profile.md, the seven
sections rendered as Markdown (profile_app.markdown).

Read: parsed and checked against PROFILE_MAX_CHARS. Import: the sections the file has,
overwritten through profile_sections_replace (a revision each, actor `import`). Export: the
profile as the 我的画像 page renders it.
"""

from __future__ import annotations

from pathlib import Path

from django.contrib.auth.models import AbstractBaseUser

from ethan_shared.layout import Imported, LayoutError
from ethan_shared.limits import PROFILE_MAX_CHARS
from ethan_shared.private import private_write_text
from profile_app.markdown import ProfileParseError, parse, render
from profile_app.selectors import profile_markdown
from profile_app.services import profile_sections_replace

PROFILE = "memory/user_profile.md"


def profile_read(path: Path, notes: list[str]) -> dict[str, str]:
    """memory/user_profile.md as {section key: content}, only the sections it has."""
    try:
        parsed = parse(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise LayoutError(f"{PROFILE}: not UTF-8 text ({exc.reason})") from None
    except ProfileParseError as exc:
        raise LayoutError(f"{PROFILE}: {exc}") from None
    length = len(render(parsed.sections))
    if length > PROFILE_MAX_CHARS:
        raise LayoutError(
            f"{PROFILE}: the profile is {length} characters long as Ethan writes it; at most "
            f"{PROFILE_MAX_CHARS} are kept"
        )
    # A section the file leaves out keeps its text: not worth a note on import.
    notes += [f"{PROFILE}: {note}" for note in parsed.notes if "is not in the document" not in note]
    return parsed.sections


def profile_import(*, owner: AbstractBaseUser, sections: dict[str, str]) -> Imported:
    """Overwrite the sections whose text differs (call it in a transaction)."""
    try:
        changed = profile_sections_replace(owner=owner, sections=sections, actor="import")
    except ProfileParseError as exc:  # too long with the sections the file does not have
        raise LayoutError(f"{PROFILE}: {exc}") from None
    return {"profile sections": (changed, len(sections) - changed)}


def profile_export(*, owner: AbstractBaseUser, home: Path) -> None:
    """Write `owner`'s profile as home/memory/user_profile.md."""
    private_write_text(home / PROFILE, profile_markdown(owner=owner))
