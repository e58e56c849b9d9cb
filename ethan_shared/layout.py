"""What every app's part of the ~/.ethan file layout (docs/files.md) shares: the error that names
the file and the place, and the few helpers for reading and writing its values.

Each layer app reads and writes its own files in its `files.py` (sessions_app: sessions.db;
memory_app: memory/facts.json and memory/procedures.json; profile_app: memory/user_profile.md;
episodes_app: memory/episodes.json; agent_app: config.yaml); agent_app.transfer puts them in
order in one transaction. Shared infrastructure: it imports no app.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from ethan_shared.limits import UnstorableText, storable_data, too_long
from ethan_shared.private import private_write_text

# Rows per INSERT of a bulk import, and per read of an export.
BATCH = 5000

# What an import did to one kind of row: {kind: (created, already there)}.
Imported = dict[str, tuple[int, int]]


class LayoutError(ValueError):
    """A file of the layout cannot be imported; the message names the file and the place."""


def file_time(value: Any, where: str) -> datetime | None:
    """Epoch seconds or an ISO 8601 string (naive means UTC); None and "" are None."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise LayoutError(f"{where}: a time must be epoch seconds or ISO 8601, not {value!r}")
    if isinstance(value, int | float):
        return datetime.fromtimestamp(float(value), tz=UTC)
    if isinstance(value, str):
        try:
            return datetime.fromtimestamp(float(value), tz=UTC)
        except ValueError:
            parsed = parse_datetime(value.strip())
            if parsed is not None:
                return parsed if timezone.is_aware(parsed) else parsed.replace(tzinfo=UTC)
    raise LayoutError(f"{where}: a time must be epoch seconds or ISO 8601, not {value!r}")


def epoch(moment: datetime | None) -> float | None:
    """A time as the layout writes it: epoch seconds, to the microsecond."""
    return None if moment is None else round(moment.timestamp(), 6)


def json_list(path: Path, name: str, key: str) -> list[dict[str, Any]]:
    """A JSON file holding a list of objects, or {key: [...]} (both occur in the wild)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise LayoutError(f"{name}: not UTF-8 text ({exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise LayoutError(f"{name}, line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    if isinstance(data, dict) and isinstance(data.get(key), list):
        data = data[key]
    if not isinstance(data, list):
        raise LayoutError(f'{name}: expected a list (or {{"{key}": [...]}})')
    for index, item in enumerate(data):
        if not isinstance(item, dict):
            raise LayoutError(f"{name}, item {index}: expected an object")
    return data


def json_write(path: Path, data: list[dict[str, Any]]) -> None:
    private_write_text(path, json.dumps(data, ensure_ascii=False, indent=2) + "\n")


def text(item: dict, key: str, where: str, required: bool = False) -> str:
    """A text value of a JSON object ("" when absent, unless required)."""
    value = item.get(key)
    if value is None:
        if required:
            raise LayoutError(f"{where}: {key} is required")
        return ""
    if not isinstance(value, str):
        raise LayoutError(f"{where}: {key} must be text, not {value!r}")
    return storable(where, key, value)


def storable(where: str, what: str, value: Any) -> Any:
    """ethan_shared.limits.storable_text on a value read (text, or JSON-like data), so a NUL or a
    lone surrogate refuses the whole import before anything is written."""
    try:
        return storable_data(what, value)
    except UnstorableText as exc:
        raise LayoutError(f"{where}: {exc}") from None


def within(where: str, what: str, value: str, limit: int) -> str:
    """ethan_shared.limits, checked while reading, so a long item refuses the whole import before
    anything is written (bulk_create skips the services and the model's validators)."""
    if len(value) > limit:
        raise LayoutError(f"{where}: {too_long(what, limit, len(value))}")
    return value


def whole_number(item: dict, key: str, where: str, default: int) -> int:
    value = item.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise LayoutError(f"{where}: {key} must be a whole number, not {value!r}")
    return value
