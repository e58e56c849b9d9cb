"""Import and export of the original ~/.ethan file layout (docs/files.md): the orchestration.

Each app reads and writes its own files in its `files.py` (validated rows, the derived fields
from the functions its live paths use). Here: the order, the one transaction and the report.
Import reads and validates every file first (the first problem names the file and the place),
then writes everything in one transaction: all or nothing, rolled back on --dry-run. It is
idempotent: what is there already is counted, not written again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from agent_app.files import CONFIG, config_export, config_import, config_read
from episodes_app.files import EPISODES, episodes_export, episodes_import, episodes_read
from ethan_shared.layout import Imported, LayoutError
from memory_app.files import (
    FACTS,
    PROCEDURES,
    facts_export,
    facts_import,
    facts_read,
    procedures_export,
    procedures_import,
    procedures_read,
)
from profile_app.files import PROFILE, profile_export, profile_import, profile_read
from sessions_app.files import (
    SESSIONS_DB,
    SessionRows,
    sessions_export,
    sessions_import,
    sessions_read,
)

__all__ = ["ImportReport", "Layout", "LayoutError", "layout_export", "layout_import", "layout_read"]


@dataclass
class Layout:
    """Every file of a home, as the apps read it (a missing file: no rows, and a note)."""

    sessions: SessionRows = field(default_factory=SessionRows)
    facts: list[dict[str, Any]] = field(default_factory=list)
    procedures: list[dict[str, Any]] = field(default_factory=list)
    profile: dict[str, str] | None = None
    episodes: list[dict[str, Any]] = field(default_factory=list)
    config: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)


# The files in the order they are read: (path under the home, Layout field, reader).
READERS: list[tuple[str, str, Callable[[Path, list[str]], Any]]] = [
    (SESSIONS_DB, "sessions", sessions_read),
    (FACTS, "facts", facts_read),
    (PROCEDURES, "procedures", procedures_read),
    (PROFILE, "profile", profile_read),
    (EPISODES, "episodes", episodes_read),
    (CONFIG, "config", config_read),
]


def layout_read(home: Path) -> Layout:
    """Every file, validated; a missing file is skipped with a note."""
    layout = Layout()
    for name, attribute, read in READERS:
        path = home / name
        if not path.exists():
            layout.notes.append(f"{name}: not found, skipped")
            continue
        setattr(layout, attribute, read(path, layout.notes))
    return layout


@dataclass
class ImportReport:
    created: dict[str, int] = field(default_factory=dict)
    unchanged: dict[str, int] = field(default_factory=dict)

    def add(self, imported: Imported) -> None:
        for kind, (created, unchanged) in imported.items():
            self.created[kind] = self.created.get(kind, 0) + created
            self.unchanged[kind] = self.unchanged.get(kind, 0) + unchanged


def layout_import(
    *,
    owner: AbstractBaseUser,
    layout: Layout,
    dry_run: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> ImportReport:
    """Write a validated layout for `owner` in one transaction (rolled back when dry_run).
    Sessions first: facts name their source messages, episodes their sessions."""
    report = ImportReport()
    notes = layout.notes
    with transaction.atomic(durable=True):  # one import, one transaction: never part of another
        report.add(sessions_import(owner=owner, rows=layout.sessions, progress=progress))
        report.add(facts_import(owner=owner, rows=layout.facts, notes=notes))
        report.add(procedures_import(owner=owner, rows=layout.procedures, notes=notes))
        if layout.profile is not None:
            report.add(profile_import(owner=owner, sections=layout.profile))
        report.add(episodes_import(owner=owner, rows=layout.episodes))
        if layout.config is not None:
            report.add(config_import(owner=owner, values=layout.config))
        if dry_run:
            transaction.set_rollback(True)
    return report


def layout_export(*, owner: AbstractBaseUser, home: Path) -> dict[str, int]:
    """Write `owner`'s memory as the original layout into `home` (the caller checks it may);
    returns how many of each kind were written."""
    counts = sessions_export(owner=owner, home=home)
    counts |= facts_export(owner=owner, home=home)
    counts |= procedures_export(owner=owner, home=home)
    counts |= episodes_export(owner=owner, home=home)
    profile_export(owner=owner, home=home)
    config_export(owner=owner, home=home)
    return counts
