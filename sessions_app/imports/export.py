"""An export's conversations.json, streamed: a zip holding it (with whatever else the export
has: images, other JSON files) or the file itself, read with ijson one conversation at a time,
so memory stays flat however many years of history a person brings.

A file that is not what it says (a broken zip or JSON, another shape) raises ExportError with
one line that names the file and the problem. So does a hostile one (ReadLimits): every byte
goes through a guard (_Guarded) before ijson's reader sees it, which refuses nesting deeper
than a conversation ever needs, a value longer than any message, more expanded bytes than
ETHAN_IMPORT_MAX_EXPANDED_BYTES (a zip's compression ratio too, from its directory, before a
byte is inflated) and reading longer than ETHAN_IMPORT_MAX_SECONDS. Measured before the guard:
an 80 KB file nested 40,000 deep took a reader to 3.9 GB (ijson's items carry each event's
path, which grows with the depth: memory and time grow with its square), and a 306 KB zip
holding one 300 MB string read for minutes at 0.9 GB.

One conversation of the wrong shape (ChatGPT's without a `mapping`, a field of another type)
is skipped, not the file: conversations() yields it as Skipped, with its line.
"""

from __future__ import annotations

import time
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import accumulate
from operator import itemgetter
from pathlib import Path
from typing import IO, Any

import ijson
from django.conf import settings

from ethan_shared.limits import _UNSTORABLE

CONVERSATIONS = "conversations.json"

# The deepest nesting read. A ChatGPT conversation's deepest value (a part's metadata inside its
# message, inside its node, inside the mapping, inside the list) is about 10 deep, a Claude
# one's less; Python's own json refuses past about 1,000.
MAX_DEPTH = 64
# The longest single value (a message's text, an attachment's extracted text), in bytes as
# written in the file: 16 MB is four times the text of a million-token context, the longest any
# model read. ijson's time on one string grows faster than its length (0.06 / 0.20 / 0.74 s
# for 4 / 8 / 16 MB here), so a longer one only costs time.
MAX_VALUE_BYTES = 16 * 1_048_576
# The expanded size from which a zip's compression ratio is looked at.
RATIO_FROM_BYTES = 16 * 1_048_576
# How each of ijson's events changes the depth.
DEPTH_CHANGE = dict.fromkeys(
    ("null", "boolean", "integer", "double", "number", "string", "map_key"), 0
) | {"start_map": 1, "start_array": 1, "end_map": -1, "end_array": -1}
first, second = itemgetter(0), itemgetter(1)
# What each read takes from the file. yajl reads a token again from its start each time more of
# it arrives, so one string costs its length squared over this: a 16 MB string took 0.74 s to
# read in ijson's 64 KB chunks.
READ_CHUNK = 1_048_576


class ExportError(ValueError):
    """The export cannot be imported: one line naming the file and the problem."""


class ShapeError(ValueError):
    """A source's reader found a conversation it cannot read: `problem` says what ("has no
    mapping of messages"), `hint` the other source when it looks like one of its
    conversations; conversations() skips it, naming the file."""

    def __init__(self, source: str, index: int, problem: str, hint: str = "") -> None:
        self.source, self.index, self.problem, self.hint = source, index, problem, hint
        super().__init__(f"not a {source} export: conversation {index} {problem}{hint}")


@dataclass(frozen=True)
class Skipped:
    """A conversation that could not be read, left out of the import: its line says which and
    why ("conversations.json: skipped conversation 3 ('Trip'): it has no mapping of
    messages")."""

    name: str  # the file's
    index: int
    title: str  # " ('Trip')", or "" for a conversation without one
    why: str  # "has no mapping of messages"
    error: ShapeError | None = None

    @property
    def line(self) -> str:
        return f"{self.name}: skipped conversation {self.index}{self.title}: it {self.why}"


@dataclass(frozen=True)
class ReadLimits:
    """What one read of an export may take (module docstring): the expanded bytes of
    conversations.json, a zip member's compression ratio, the seconds, and whether each chunk
    is scanned for depth and value length. A second read of the same file (services'
    export_import writes on its second read) has no deadline (it waits on the database) and no
    scan: the first read scanned the same bytes, and the scan costs as much as the reading
    (yajl parses every byte twice: 36 MB in 3.5 s here)."""

    expanded_bytes: int
    ratio: int
    seconds: float | None
    scan: bool = True

    @classmethod
    def configured(cls, *, again: bool = False) -> ReadLimits:
        return cls(
            expanded_bytes=settings.ETHAN_IMPORT_MAX_EXPANDED_BYTES,
            ratio=settings.ETHAN_IMPORT_MAX_RATIO,
            seconds=None if again else settings.ETHAN_IMPORT_MAX_SECONDS,
            scan=not again,
        )


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


def _megabytes(size: int) -> str:
    return f"{size / 1_048_576:,.0f} MB" if size >= 1_048_576 else f"{size:,} bytes"


def _too_large(name: str, size: int, limits: ReadLimits) -> ExportError:
    return ExportError(
        f"{name}: refused: {CONVERSATIONS} is over {_megabytes(limits.expanded_bytes)} "
        f"({_megabytes(size)}; ETHAN_IMPORT_MAX_EXPANDED_BYTES)"
    )


@contextmanager
def _opened(path: Path, limits: ReadLimits) -> Iterator[IO[bytes]]:
    """conversations.json as a binary stream: the file itself, or its member in a zip (at the
    top or in a folder; the export's other files are left alone). A member whose directory
    entry says it inflates past the limits is refused before a byte is inflated; zipfile then
    inflates no more than that entry says (and checks its CRC), and _Guarded counts anyway."""
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
            member = members[0]
            if member.file_size > limits.expanded_bytes:
                raise _too_large(name, member.file_size, limits)
            ratio = member.file_size / max(member.compress_size, 1)
            # A small file may compress as well as it likes (an export of a few short chats is
            # mostly the same keys): what a zip bomb costs is its size.
            if ratio > limits.ratio and member.file_size > RATIO_FROM_BYTES:
                raise ExportError(
                    f"{name}: refused: {CONVERSATIONS} inflates {ratio:,.0f} times (from "
                    f"{_megabytes(member.compress_size)} to {_megabytes(member.file_size)}), "
                    f"more than a real export's text; over {limits.ratio} "
                    "(ETHAN_IMPORT_MAX_RATIO) is taken for a zip bomb"
                )
            try:
                with archive.open(member) as stream:
                    yield stream
            except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError) as exc:
                raise ExportError(f"{name}: the zip is damaged ({exc})") from None
        return
    if path.suffix.lower() == ".zip":
        raise ExportError(f"{name}: not a readable zip (damaged or incomplete)")
    if path.stat().st_size > limits.expanded_bytes:
        raise _too_large(name, path.stat().st_size, limits)
    with path.open("rb") as stream:
        yield stream


class _Guarded:
    """A binary stream that checks each chunk before handing it on to ijson's reader: the
    expanded size and the deadline (ReadLimits), then, through ijson's basic_parse (its events
    carry no path, so its cost is linear in any depth), the depth and each value's length.
    A run of bytes with no quote in it, longer than a value may be, is refused as it arrives,
    before any parser holds it whole (one huge string, a zip bomb of spaces); a string broken by
    escaped quotes is refused by its parsed length, which the expanded size bounds."""

    def __init__(self, stream: IO[bytes], name: str, limits: ReadLimits) -> None:
        self.stream, self.name, self.limits = stream, name, limits
        self.deadline = time.monotonic() + limits.seconds if limits.seconds else None
        self.size = self.run = self.depth = 0
        self.events = ijson.sendable_list()
        # use_float, as the reader: with ijson's default, an integer of 5,000 digits crashed
        # the process (yajl2_c 3.6.0: int() fails inside the C code); with it, an integer
        # too large for 64 bits is broken JSON ("integer overflow").
        self.scan: Any = (
            ijson.basic_parse_coro(self.events, use_float=True) if limits.scan else None
        )

    def read(self, size: int = -1) -> bytes:
        if size == 0:
            return b""  # ijson asks what type the stream reads
        chunk = self.stream.read(size)
        self.size += len(chunk)
        if self.size > self.limits.expanded_bytes:
            raise _too_large(self.name, self.size, self.limits)
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise ExportError(
                f"{self.name}: refused: still reading after {self.limits.seconds:,.0f} s "
                "(ETHAN_IMPORT_MAX_SECONDS)"
            )
        quote = chunk.rfind(b'"')
        self.run = self.run + len(chunk) if quote < 0 else len(chunk) - quote - 1
        if self.run > MAX_VALUE_BYTES:
            raise self._refused(f"a value over {_megabytes(MAX_VALUE_BYTES)}")
        if self.scan is None:
            return chunk
        try:
            if chunk:
                self.scan.send(chunk)
            else:
                self.scan.close()
        except ijson.JSONError:
            # Broken JSON: ijson's reader finds it at the same place, cannot read past it, and
            # says where; the events before it are still checked.
            self.scan = None
        if self.events:
            self._check(self.events)
            self.events.clear()
        return chunk

    def _check(self, events: list[tuple[str, Any]]) -> None:
        """The depth after each event and the longest value, in C's loops (map, accumulate,
        max): the scan's cost is then yajl's parse, not a Python loop over its events."""
        depths = list(accumulate(map(DEPTH_CHANGE.__getitem__, map(first, events)), initial=0))
        if self.depth + max(depths) > MAX_DEPTH:
            raise self._refused(f"nested deeper than {MAX_DEPTH} levels")
        self.depth += depths[-1]
        # In characters (a number or a literal by its text), each at least a byte: over the
        # limit in bytes too.
        if max(map(len, map(str, map(second, events)))) > MAX_VALUE_BYTES:
            raise self._refused(f"a value over {_megabytes(MAX_VALUE_BYTES)}")

    def _refused(self, what: str) -> ExportError:
        return ExportError(f"{self.name}: refused: {what} (no real export has one)")

    def seekable(self) -> bool:
        return False


BOM = b"\xef\xbb\xbf"


def _first_character(stream: IO[bytes], name: str) -> bytes:
    """The first character past a byte-order mark and whitespace; the stream is then read
    again from its start, past the mark (which ijson does not take)."""
    head = stream.read(4096)
    stream.seek(0)
    if head.startswith(BOM):
        stream.read(len(BOM))
    stripped = head.removeprefix(BOM).lstrip()
    if not stripped:
        raise ExportError(f"{name}: empty, no conversations")
    return stripped[:1]


# What a source's reader raises on a conversation whose fields are of another type than the
# source writes (a string where an object goes): that conversation is skipped, with its line.
UNREADABLE = (ShapeError, AttributeError, TypeError, ValueError, KeyError, IndexError)


def conversations(
    path: Path,
    *,
    source: str,
    read: Callable[[dict[str, Any], int], Conversation | None],
    limits: ReadLimits | None = None,
) -> Iterator[Conversation | Skipped]:
    """Each conversation of the export at `path`, in file order, through the source's reader
    (None: nothing to import, such as a conversation with no visible message), or Skipped for
    one it cannot read. ExportError for a file that is broken, of another shape or past the
    limits (ReadLimits.configured() by default), naming it; read only as far as the caller
    iterates, so a check reads the whole file first (services.export_check)."""
    name = path.name
    limits = limits or ReadLimits.configured()
    with _opened(path, limits) as raw:
        first = _first_character(raw, name)
        if first != b"[":
            raise ExportError(
                f"{name}: not a {source} export ({CONVERSATIONS} should be a list of conversations)"
            )
        stream = _Guarded(raw, name, limits)
        items = ijson.items(stream, "item", use_float=True, buf_size=READ_CHUNK)
        index = 0
        try:
            for index, item in enumerate(items, start=1):
                if not isinstance(item, dict):
                    yield Skipped(name, index, "", "is not an object")
                    continue
                try:
                    conversation = read(item, index)
                except UNREADABLE as exc:
                    yield _skipped(name, index, item, exc)
                    continue
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


def _skipped(name: str, index: int, item: dict[str, Any], exc: Exception) -> Skipped:
    title = item.get("title") or item.get("name")
    named = f" ({clean(title)[:60]!r})" if isinstance(title, str) and title.strip() else ""
    if isinstance(exc, ShapeError):
        return Skipped(name, index, named, f"{exc.problem}{exc.hint}", exc)
    # A field of another type than the source writes: the exception says which, in one line.
    detail = " ".join(str(exc).split())[:120]
    why = f"has a field of an unexpected type ({type(exc).__name__}: {detail})"
    return Skipped(name, index, named, why)


def nothing_read(name: str, skipped: list[Skipped]) -> ExportError:
    """The refusal of an export none of whose conversations could be read: the first one's
    problem (as "not a claude export" when it looks like the other source's), and how many."""
    first = skipped[0]
    more = f" (and {len(skipped) - 1} more like it)" if len(skipped) > 1 else ""
    if first.error is not None and first.error.hint:
        return ExportError(f"{name}: {first.error}{more}")
    return ExportError(
        f"{name}: no conversation could be read: conversation {first.index}{first.title} "
        f"{first.why}{more}"
    )


def shape_error(source: str, index: int, item: dict[str, Any], problem: str) -> ShapeError:
    """A conversation of the wrong shape, pointing at the other source when it looks like one
    of its conversations."""
    other = "claude" if "chat_messages" in item else "chatgpt" if "mapping" in item else None
    hint = f"; it looks like a {other} export: --from {other}" if other and other != source else ""
    return ShapeError(source, index, problem, hint)
