"""An export's conversations.json, streamed: a zip holding it (with whatever else the export
has: images, other JSON files) or the file itself, read with ijson one conversation at a time,
so memory stays flat however many years of history a person brings.

A file that is not what it says (a broken zip or JSON, another shape) raises ExportError with
one line that names the file and the problem.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import ijson

from ethan_site.limits import _UNSTORABLE

CONVERSATIONS = "conversations.json"


class ExportError(ValueError):
    """The export cannot be imported: one line naming the file and the problem."""


class ShapeError(ValueError):
    """A source's reader found a conversation it cannot read; conversations() names the file."""


@dataclass(frozen=True)
class Turn:
    """One message as the person saw it: user or assistant, its text with placeholders for
    what is not text ("[image]"), and when it was written."""

    role: str  # "user" | "assistant"
    content: str
    created_at: datetime | None = None


@dataclass
class Conversation:
    """One conversation of an export: its id in the source (prefixed with the source's name,
    which makes it unique across sources), title, times, model and the turns of the branch
    the person saw, in order."""

    external_id: str
    title: str
    created_at: datetime | None
    updated_at: datetime | None
    model: str = ""
    turns: list[Turn] = field(default_factory=list)

    @property
    def rounds(self) -> int:
        return sum(turn.role == "user" for turn in self.turns)


def clean(text: str) -> str:
    """Text as it can be stored: a NUL or a lone surrogate (which a JSON export may hold, and
    which no database text can) becomes U+FFFD, rather than refusing years of history for one
    character."""
    return _UNSTORABLE.sub("\ufffd", text)


def when(value: Any) -> datetime | None:
    """An export's time: epoch seconds (ChatGPT) or ISO 8601 (Claude); None when absent or
    unreadable (the conversation's own time stands in)."""
    if isinstance(value, bool) or value in (None, ""):
        return None
    if isinstance(value, int | float):
        try:
            return datetime.fromtimestamp(float(value), tz=UTC)
        except (OverflowError, OSError, ValueError):
            return None
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return None


def merged(turns: list[Turn]) -> list[Turn]:
    """Consecutive messages of one side as one turn (an assistant answer written as code, its
    output and the text after it; a person's message sent in two parts), so a round is one
    question and one answer, as memory reads rounds; empty messages dropped."""
    kept: list[Turn] = []
    for turn in turns:
        if not turn.content.strip():
            continue
        if kept and kept[-1].role == turn.role:
            last = kept[-1]
            kept[-1] = Turn(last.role, f"{last.content}\n\n{turn.content}", last.created_at)
        else:
            kept.append(turn)
    return kept


@contextmanager
def _opened(path: Path) -> Iterator[IO[bytes]]:
    """conversations.json as a binary stream: the file itself, or its member in a zip (at the
    top or in a folder; the export's other files are left alone)."""
    name = path.name
    if not path.is_file():
        raise ExportError(f"{name}: no such file")
    if zipfile.is_zipfile(path):
        try:
            archive = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, OSError) as exc:
            raise ExportError(f"{name}: not a readable zip ({exc})") from None
        with archive:
            members = [
                info
                for info in archive.infolist()
                if Path(info.filename).name == CONVERSATIONS and not info.is_dir()
            ]
            if not members:
                raise ExportError(f"{name}: the zip holds no {CONVERSATIONS}")
            members.sort(key=lambda info: info.filename.count("/"))
            try:
                with archive.open(members[0]) as stream:
                    yield stream
            except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError) as exc:
                raise ExportError(f"{name}: the zip is damaged ({exc})") from None
        return
    if path.suffix.lower() == ".zip":
        raise ExportError(f"{name}: not a readable zip (damaged or incomplete)")
    with path.open("rb") as stream:
        yield stream


def _first_character(stream: IO[bytes], name: str) -> bytes:
    """The first character past a byte-order mark and whitespace, left in the stream."""
    head = stream.read(4096)
    head = head.removeprefix(b"\xef\xbb\xbf")
    stripped = head.lstrip()
    if not stripped:
        raise ExportError(f"{name}: empty, no conversations")
    return stripped[:1]


def conversations(
    path: Path, *, source: str, read: Callable[[dict[str, Any], int], Conversation | None]
) -> Iterator[Conversation]:
    """Each conversation of the export at `path`, in file order, through the source's reader
    (None: nothing to import, such as a conversation with no visible message). ExportError
    for a file that is broken or of another shape, naming it; read only as far as the caller
    iterates, so a check reads the whole file first (services.export_check)."""
    name = path.name
    with _opened(path) as stream:
        first = _first_character(stream, name)
        if first != b"[":
            raise ExportError(
                f"{name}: not a {source} export ({CONVERSATIONS} should be a list of conversations)"
            )
        stream.seek(0)
        items = ijson.items(stream, "item", use_float=True)
        index = 0
        try:
            for index, item in enumerate(items, start=1):
                if not isinstance(item, dict):
                    raise ExportError(f"{name}: conversation {index} is not an object")
                try:
                    conversation = read(item, index)
                except ShapeError as exc:
                    raise ExportError(f"{name}: {exc}") from None
                if conversation is not None:
                    yield conversation
        except ijson.JSONError as exc:
            reason = " ".join(str(exc).split("\n")[0].split()) or type(exc).__name__
            raise ExportError(
                f"{name}: broken JSON in conversation {index + 1} ({reason})"
            ) from None
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            raise ExportError(f"{name}: the zip is damaged ({exc})") from None
        except UnicodeDecodeError as exc:
            raise ExportError(f"{name}: not UTF-8 text ({exc.reason})") from None


def shape_error(source: str, index: int, item: dict[str, Any], problem: str) -> ShapeError:
    """The refusal of a conversation of the wrong shape, pointing at the other source when it
    looks like one of its conversations."""
    other = "claude" if "chat_messages" in item else "chatgpt" if "mapping" in item else None
    hint = f"; it looks like a {other} export: --from {other}" if other and other != source else ""
    return ShapeError(f"not a {source} export: conversation {index} {problem}{hint}")
