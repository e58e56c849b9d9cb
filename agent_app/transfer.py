"""Import and export of the original ~/.ethan file layout (docs/files.md).

Import reads and validates every file first (naming the file and the place of the first
problem, lengths included: ethan_site.limits), then writes everything in one transaction: all
or nothing. It is idempotent: sessions by id, messages by position, facts and procedures by
normalised content, episodes by session. New active rules past ETHAN_PROCEDURE_CAPACITY are
imported switched off, with a note. Export writes the same layout back for one owner.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import Count, Max, Prefetch, Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from agent_app.models import OwnerSettings
from episodes_app.models import Episode
from ethan_site.limits import (
    FACT_MAX_CHARS,
    PROFILE_MAX_CHARS,
    RULE_CONTEXT_MAX_CHARS,
    RULE_MAX_CHARS,
    too_long,
)
from memory_app.models import Fact, FactEvent, Procedure
from memory_app.normalize import content_key, normalize
from profile_app.markdown import ProfileParseError, parse, render
from profile_app.models import ProfileSection
from profile_app.services import profile_sections_replace
from sessions_app.models import ChatSession, Message
from sessions_app.search import search_tokens, with_context

SESSIONS_DB = "sessions.db"
FACTS = "memory/facts.json"
PROCEDURES = "memory/procedures.json"
PROFILE = "memory/user_profile.md"
EPISODES = "memory/episodes.json"
CONFIG = "config.yaml"
ROLES = {"system", "user", "assistant", "tool"}
BATCH = 5000


class LayoutError(ValueError):
    """A file of the layout cannot be imported; the message names the file and the place."""


@dataclass
class Layout:
    sessions: list[dict[str, Any]] = field(default_factory=list)
    messages: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    facts: list[dict[str, Any]] = field(default_factory=list)
    procedures: list[dict[str, Any]] = field(default_factory=list)
    profile: dict[str, str] | None = None
    episodes: list[dict[str, Any]] = field(default_factory=list)
    config: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def message_count(self) -> int:
        return sum(len(rows) for rows in self.messages.values())


# --- reading and validating -------------------------------------------------------------------


def _time(value: Any, where: str) -> datetime | None:
    """Epoch seconds or an ISO 8601 string (naive means UTC); None stays None."""
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


def _epoch(moment: datetime | None) -> float | None:
    return None if moment is None else round(moment.timestamp(), 6)


def _read_sessions(path: Path, layout: Layout) -> None:
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise LayoutError(f"{SESSIONS_DB}: cannot open: {exc}") from None
    try:
        db.row_factory = sqlite3.Row
        try:
            sessions = db.execute(
                "SELECT id, title, model, created_at, updated_at FROM sessions ORDER BY rowid"
            ).fetchall()
            messages = db.execute(
                "SELECT rowid, session_id, role, content, tool_calls, tool_call_id "
                "FROM messages ORDER BY rowid"
            ).fetchall()
        except sqlite3.Error as exc:
            raise LayoutError(f"{SESSIONS_DB}: not the sessions/messages schema: {exc}") from None
    finally:
        db.close()
    known = set()
    for index, row in enumerate(sessions, start=1):
        where = f"{SESSIONS_DB}, sessions row {index}"
        session_id = str(row["id"] or "").strip()
        if not session_id or len(session_id) > 32:
            raise LayoutError(f"{where}: the id must be 1 to 32 characters, not {row['id']!r}")
        if session_id in known:
            raise LayoutError(f"{where}: the id {session_id} appears twice")
        known.add(session_id)
        layout.sessions.append(
            {
                "id": session_id,
                "title": str(row["title"] or "")[:200],
                "model": str(row["model"] or "")[:100],
                "created_at": _time(row["created_at"], where) or timezone.now(),
                "updated_at": _time(row["updated_at"], where),
            }
        )
    for row in messages:
        where = f"{SESSIONS_DB}, messages rowid {row['rowid']}"
        session_id = str(row["session_id"] or "")
        if session_id not in known:
            raise LayoutError(f"{where}: session {session_id!r} is not in the sessions table")
        if row["role"] not in ROLES:
            raise LayoutError(f"{where}: role must be one of {sorted(ROLES)}, not {row['role']!r}")
        tool_calls = None
        if row["tool_calls"] not in (None, ""):
            try:
                tool_calls = json.loads(row["tool_calls"])
            except (TypeError, ValueError):
                raise LayoutError(f"{where}: tool_calls is not JSON") from None
        layout.messages.setdefault(session_id, []).append(
            {
                "role": row["role"],
                "content": str(row["content"] or ""),
                "tool_calls": tool_calls,
                "tool_call_id": str(row["tool_call_id"] or "")[:128],
            }
        )


def _json_list(path: Path, name: str, key: str) -> list[dict[str, Any]]:
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


def _text(item: dict, key: str, where: str, required: bool = False) -> str:
    value = item.get(key)
    if value is None:
        if required:
            raise LayoutError(f"{where}: {key} is required")
        return ""
    if not isinstance(value, str):
        raise LayoutError(f"{where}: {key} must be text, not {value!r}")
    if required and not normalize(value):
        raise LayoutError(f"{where}: {key} is empty")
    return value


def _within(where: str, what: str, text: str, limit: int) -> str:
    """The services' limits, checked while reading, so a long item refuses the whole import
    before anything is written (bulk_create skips the services and the model's validators)."""
    if len(text) > limit:
        raise LayoutError(f"{where}: {too_long(what, limit, len(text))}")
    return text


def _read_facts(path: Path, layout: Layout) -> None:
    for index, item in enumerate(_json_list(path, FACTS, "facts")):
        where = f"{FACTS}, item {index}"
        confidence = item.get("confidence", 0.8)
        if (
            isinstance(confidence, bool)
            or not isinstance(confidence, int | float)
            or not (0 <= confidence <= 1)
        ):
            raise LayoutError(
                f"{where}: confidence must be a number from 0 to 1, not {confidence!r}"
            )
        category = item.get("category") or Fact.Category.KNOWLEDGE
        if category not in Fact.Category.values:
            raise LayoutError(
                f"{where}: category must be one of "
                f"{', '.join(Fact.Category.values)}, not {category!r}"
            )
        hits = item.get("hit_count", 1)
        if isinstance(hits, bool) or not isinstance(hits, int) or hits < 0:
            raise LayoutError(f"{where}: hit_count must be a whole number, not {hits!r}")
        source = item.get("source") or Fact.Source.IMPORT
        if source not in Fact.Source.values:
            layout.notes.append(f"{where}: source {source!r} is not known; stored as import")
            source = Fact.Source.IMPORT
        layout.facts.append(
            {
                "content": _within(
                    where,
                    "a fact",
                    " ".join(_text(item, "content", where, required=True).split()),
                    FACT_MAX_CHARS,
                ),
                "category": category,
                "confidence": float(confidence),
                "source": source,
                "hit_count": max(hits, 1),
                "created_at": _time(item.get("created_at"), where) or timezone.now(),
                "last_accessed": _time(item.get("last_accessed"), where),
                "sources": _fact_sources(item.get("sources"), where),
            }
        )


def _fact_sources(value: Any, where: str) -> list[tuple[str, int]]:
    """A fact's provenance as Ethan exports it: [{session_id, seq}] (absent: none)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise LayoutError(f"{where}: sources must be a list of {{session_id, seq}}")
    sources = []
    for source in value:
        sid = source.get("session_id") if isinstance(source, dict) else None
        seq = source.get("seq") if isinstance(source, dict) else None
        if not isinstance(sid, str) or isinstance(seq, bool) or not isinstance(seq, int):
            raise LayoutError(f"{where}: a source must be {{session_id: text, seq: number}}")
        sources.append((sid, seq))
    return sources


def _read_procedures(path: Path, layout: Layout) -> None:
    for index, item in enumerate(_json_list(path, PROCEDURES, "procedures")):
        where = f"{PROCEDURES}, item {index}"
        active = item.get("active", True)
        if not isinstance(active, bool):
            raise LayoutError(f"{where}: active must be true or false, not {active!r}")
        layout.procedures.append(
            {
                "rule": _within(
                    where,
                    "a rule",
                    " ".join(_text(item, "rule", where, required=True).split()),
                    RULE_MAX_CHARS,
                ),
                "context": _within(
                    where, "a rule's context", _text(item, "context", where), RULE_CONTEXT_MAX_CHARS
                ),
                "active": active,
                "created_at": _time(item.get("created_at"), where) or timezone.now(),
            }
        )


def _read_episodes(path: Path, layout: Layout) -> None:
    seen = set()
    for index, item in enumerate(_json_list(path, EPISODES, "episodes")):
        where = f"{EPISODES}, item {index}"
        session_id = _text(item, "session_id", where, required=True).strip()
        if session_id in seen:
            raise LayoutError(f"{where}: a second episode for session {session_id}")
        seen.add(session_id)
        keywords = item.get("keywords") or []
        if not isinstance(keywords, list) or not all(isinstance(k, str) for k in keywords):
            raise LayoutError(f"{where}: keywords must be a list of text")
        turns = item.get("turn_count", 0)
        if isinstance(turns, bool) or not isinstance(turns, int) or turns < 0:
            raise LayoutError(f"{where}: turn_count must be a whole number, not {turns!r}")
        layout.episodes.append(
            {
                "session_ref": session_id[:64],
                "summary": _text(item, "summary", where),
                "timestamp": _time(item.get("timestamp"), where) or timezone.now(),
                "model": _text(item, "model", where)[:100],
                "turn_count": turns,
                "keywords": keywords,
            }
        )


def _read_profile(path: Path, layout: Layout) -> None:
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
    layout.profile = parsed.sections
    layout.notes += [
        f"{PROFILE}: {note}" for note in parsed.notes if "is not in the document" not in note
    ]


def _read_config(path: Path, layout: Layout) -> None:
    from ethan_site.config import ConfigError, read_config_file

    try:
        read_config_file(path)  # the same checks as at start-up (file and line on errors)
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except ConfigError as exc:
        raise LayoutError(str(exc).replace(str(path), CONFIG)) from None
    layout.config = data


READERS: list[tuple[str, Callable[[Path, Layout], None]]] = [
    (SESSIONS_DB, _read_sessions),
    (FACTS, _read_facts),
    (PROCEDURES, _read_procedures),
    (PROFILE, _read_profile),
    (EPISODES, _read_episodes),
    (CONFIG, _read_config),
]


def layout_read(home: Path) -> Layout:
    """Every file, validated; a missing file is skipped with a note."""
    layout = Layout()
    for name, reader in READERS:
        path = home / name
        if not path.exists():
            layout.notes.append(f"{name}: not found, skipped")
            continue
        reader(path, layout)
    return layout


# --- writing ------------------------------------------------------------------------------------


@dataclass
class ImportReport:
    created: dict[str, int] = field(default_factory=dict)
    unchanged: dict[str, int] = field(default_factory=dict)

    def add(self, kind: str, created: int, unchanged: int = 0) -> None:
        self.created[kind] = self.created.get(kind, 0) + created
        self.unchanged[kind] = self.unchanged.get(kind, 0) + unchanged


def layout_import(
    *,
    owner: AbstractBaseUser,
    layout: Layout,
    dry_run: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> ImportReport:
    """Write a validated layout for `owner` in one transaction (rolled back when dry_run)."""
    report = ImportReport()
    with transaction.atomic():
        _import_sessions(owner, layout, report, progress)
        _import_facts(owner, layout, report)
        _import_procedures(owner, layout, report)
        _import_profile(owner, layout, report)
        _import_episodes(owner, layout, report)
        if layout.config is not None:
            OwnerSettings.objects.update_or_create(owner=owner, defaults={"values": layout.config})
            report.add("config", 1)
        if dry_run:
            transaction.set_rollback(True)
    return report


def _import_sessions(owner, layout: Layout, report: ImportReport, progress) -> None:
    ids = [row["id"] for row in layout.sessions]
    existing = {s.pk: s for s in ChatSession.objects.filter(pk__in=ids)}
    foreign = [pk for pk, s in existing.items() if s.owner_id != owner.pk]
    if foreign:
        raise LayoutError(f"{SESSIONS_DB}: session {foreign[0]} belongs to another user")
    new = [
        ChatSession(
            id=row["id"],
            owner=owner,
            title=row["title"],
            model=row["model"],
            channel=ChatSession.Channel.IMPORT,
            created_at=row["created_at"],
            updated_at=row["updated_at"] or row["created_at"],
        )
        for row in layout.sessions
        if row["id"] not in existing
    ]
    ChatSession.objects.bulk_create(new, batch_size=BATCH)
    report.add("sessions", len(new), len(layout.sessions) - len(new))
    have = dict(
        Message.objects.filter(session_id__in=ids)
        .values("session_id")
        .annotate(last=Max("seq"))
        .values_list("session_id", "last")
    )
    done, total, batch, created = 0, layout.message_count, [], 0
    for session_id, rows in layout.messages.items():
        known = have.get(session_id) or 0
        # The turns around each message, for its contextual search tokens (as message_append
        # builds them: the previous and the next user/assistant turn).
        spoken = [
            i for i, r in enumerate(rows) if r["role"] in ("user", "assistant") and r["content"]
        ]
        neighbours = {
            i: (
                rows[spoken[n - 1]]["content"] if n else "",
                rows[spoken[n + 1]]["content"] if n + 1 < len(spoken) else "",
            )
            for n, i in enumerate(spoken)
        }
        for seq, row in enumerate(rows, start=1):
            done += 1
            if seq <= known:
                continue  # imported before: messages are matched by position
            tokens = ""
            if seq - 1 in neighbours:
                before, after = neighbours[seq - 1]
                tokens = with_context(search_tokens(row["content"]), f"{before}\n{after}")
            batch.append(Message(session_id=session_id, seq=seq, search_tokens=tokens, **row))
            if len(batch) >= BATCH:
                Message.objects.bulk_create(batch)
                created += len(batch)
                batch = []
                if progress:
                    progress(done, total)
    Message.objects.bulk_create(batch)
    created += len(batch)
    if progress and total:
        progress(total, total)
    report.add("messages", created, total - created)
    # The counters that appends keep: the newest seq and the number of rounds.
    counts = (
        Message.objects.filter(session_id__in=ids)
        .values("session_id")
        .annotate(last=Max("seq"), rounds=Count("pk", filter=Q(role=Message.Role.USER)))
    )
    for row in counts:
        ChatSession.objects.filter(pk=row["session_id"]).update(
            last_seq=row["last"], round_count=row["rounds"]
        )


def _import_facts(owner, layout: Layout, report: ImportReport) -> None:
    known = set(Fact.objects.filter(owner=owner).values_list("content_key", flat=True))
    new: list[Fact] = []
    wanted: list[list[tuple[str, int]]] = []
    for row in layout.facts:
        key = content_key(row["content"])
        if key in known:
            continue
        known.add(key)
        wanted.append(row["sources"])
        new.append(
            Fact(
                owner=owner,
                content_key=key,
                search_tokens=search_tokens(row["content"]),
                last_accessed=row["last_accessed"] or row["created_at"],
                updated_at=row["created_at"],
                **{k: v for k, v in row.items() if k not in ("last_accessed", "sources")},
            )
        )
    Fact.objects.bulk_create(new, batch_size=BATCH)
    sources = _sources_found(owner, [ref for refs in wanted for ref in refs])
    missing = sum(1 for refs in wanted for ref in refs if ref not in sources)
    if missing:
        layout.notes.append(
            f"{FACTS}: {missing} source(s) name a message that is not in this import or the "
            "database; those facts are kept without them"
        )
    links = [
        Fact.sources.through(fact_id=fact.pk, message_id=sources[ref])
        for fact, refs in zip(new, wanted, strict=True)
        for ref in dict.fromkeys(refs)
        if ref in sources
    ]
    Fact.sources.through.objects.bulk_create(links, batch_size=BATCH)
    FactEvent.objects.bulk_create(
        [
            FactEvent(
                fact=fact,
                event=FactEvent.Kind.ADD,
                new_content=fact.content,
                new_confidence=fact.confidence,
                actor="import",
                sources=[{"session_id": s, "seq": q} for s, q in refs if (s, q) in sources],
            )
            for fact, refs in zip(new, wanted, strict=True)
        ],
        batch_size=BATCH,
    )
    report.add("facts", len(new), len(layout.facts) - len(new))


def _fact_item(fact: Fact) -> dict[str, Any]:
    """A fact as facts.json holds it; `sources` only when it has some, so a layout that never
    had them exports as it was imported."""
    item = {
        "id": fact.pk,
        "content": fact.content,
        "category": fact.category,
        "confidence": fact.confidence,
        "source": fact.source,
        "created_at": _epoch(fact.created_at),
        "last_accessed": _epoch(fact.last_accessed),
        "hit_count": fact.hit_count,
    }
    sources = [{"session_id": m.session_id, "seq": m.seq} for m in fact.sources.all()]
    if sources:
        item["sources"] = sources
    return item


def _sources_found(owner, refs: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """(session_id, seq) → the owner's message id, for the ones that exist."""
    found: dict[tuple[str, int], int] = {}
    by_session: dict[str, set[int]] = {}
    for sid, seq in refs:
        by_session.setdefault(sid, set()).add(seq)
    for sid, seqs in by_session.items():
        rows = Message.objects.filter(session_id=sid, session__owner=owner, seq__in=seqs)
        for pk, seq in rows.values_list("pk", "seq"):
            found[(sid, seq)] = pk
    return found


def _import_procedures(owner, layout: Layout, report: ImportReport) -> None:
    known = set(Procedure.objects.filter(owner=owner).values_list("rule_key", flat=True))
    # Every active rule is in every turn's prompt, so at most ETHAN_PROCEDURE_CAPACITY are
    # active (memory_app.services.procedure_check_capacity). The original CLI had no such
    # limit: rather than refuse a whole home over it, new active rules past it come in
    # switched off, in file order, and a note says so (the person chooses which to switch on).
    capacity = settings.ETHAN_PROCEDURE_CAPACITY
    room = capacity - Procedure.objects.filter(owner=owner, active=True).count()
    new, switched_off = [], 0
    for row in layout.procedures:
        key = content_key(row["rule"])
        if key in known:
            continue
        known.add(key)
        active = row["active"]
        if active and room <= 0:
            active, switched_off = False, switched_off + 1
        elif active:
            room -= 1
        new.append(
            Procedure(
                owner=owner,
                rule_key=key,
                source=Fact.Source.IMPORT,
                **{**row, "active": active},
            )
        )
    Procedure.objects.bulk_create(new)
    report.add("procedures", len(new), len(layout.procedures) - len(new))
    if switched_off:
        layout.notes.append(
            f"{PROCEDURES}: {switched_off} active rule(s) imported switched off: at most "
            f"{capacity} rules are active at once (ETHAN_PROCEDURE_CAPACITY); switch one off "
            "to switch another on"
        )


def _import_profile(owner, layout: Layout, report: ImportReport) -> None:
    if layout.profile is None:
        return
    try:
        changed = profile_sections_replace(owner=owner, sections=layout.profile, actor="import")
    except ProfileParseError as exc:  # too long with the sections the file does not have
        raise LayoutError(f"{PROFILE}: {exc}") from None
    report.add("profile sections", changed, len(layout.profile) - changed)


def _import_episodes(owner, layout: Layout, report: ImportReport) -> None:
    known = set(Episode.objects.filter(owner=owner).values_list("session_ref", flat=True))
    sessions = set(
        ChatSession.objects.filter(
            owner=owner, pk__in=[row["session_ref"] for row in layout.episodes]
        ).values_list("pk", flat=True)
    )
    new = [
        Episode(
            owner=owner,
            session_id=row["session_ref"] if row["session_ref"] in sessions else None,
            search_tokens=search_tokens(f"{row['summary']} {' '.join(row['keywords'])}"),
            **row,
        )
        for row in layout.episodes
        if row["session_ref"] not in known
    ]
    Episode.objects.bulk_create(new)
    report.add("episodes", len(new), len(layout.episodes) - len(new))


# --- export -------------------------------------------------------------------------------------


def layout_export(*, owner: AbstractBaseUser, home: Path) -> dict[str, int]:
    """Write `owner`'s memory as the original layout into `home` (the caller checks it may)."""
    (home / "memory").mkdir(parents=True, exist_ok=True)
    counts = {"sessions": 0, "messages": 0}
    db_path = home / SESSIONS_DB
    db_path.unlink(missing_ok=True)
    db = sqlite3.connect(db_path)
    try:
        db.execute(
            "CREATE TABLE sessions (id TEXT PRIMARY KEY, title TEXT, model TEXT, "
            "created_at REAL, updated_at REAL)"
        )
        db.execute(
            "CREATE TABLE messages (session_id TEXT, role TEXT, content TEXT, "
            "tool_calls TEXT, tool_call_id TEXT)"
        )
        sessions = ChatSession.objects.filter(owner=owner).order_by("created_at", "id")
        for session in sessions.iterator():
            db.execute(
                "INSERT INTO sessions VALUES (?, ?, ?, ?, ?)",
                (
                    session.pk,
                    session.title,
                    session.model,
                    _epoch(session.created_at),
                    _epoch(session.updated_at),
                ),
            )
            counts["sessions"] += 1
        rows = (
            Message.objects.filter(session__owner=owner)
            .order_by("session__created_at", "session_id", "seq")
            .values_list("session_id", "role", "content", "tool_calls", "tool_call_id")
        )
        for batch_start in range(0, rows.count(), BATCH):
            chunk = [
                (
                    sid,
                    role,
                    content,
                    json.dumps(calls, ensure_ascii=False) if calls is not None else None,
                    call_id or None,
                )
                for sid, role, content, calls, call_id in rows[batch_start : batch_start + BATCH]
            ]
            db.executemany("INSERT INTO messages VALUES (?, ?, ?, ?, ?)", chunk)
            counts["messages"] += len(chunk)
        db.commit()
    finally:
        db.close()

    facts = [
        _fact_item(f)
        for f in Fact.objects.filter(owner=owner, status=Fact.Status.ACTIVE)
        .order_by("id")
        .prefetch_related(
            Prefetch("sources", queryset=Message.objects.order_by("session_id", "seq"))
        )
    ]
    procedures = [
        {
            "id": p.pk,
            "rule": p.rule,
            "context": p.context,
            "created_at": _epoch(p.created_at),
            "active": p.active,
        }
        for p in Procedure.objects.filter(owner=owner).order_by("created_at", "id")
    ]
    episodes = [
        {
            "session_id": e.session_ref,
            "summary": e.summary,
            "timestamp": _epoch(e.timestamp),
            "model": e.model,
            "turn_count": e.turn_count,
            "keywords": e.keywords,
        }
        for e in Episode.objects.filter(owner=owner).order_by("timestamp", "id")
    ]
    for name, data in ((FACTS, facts), (PROCEDURES, procedures), (EPISODES, episodes)):
        (home / name).write_text(
            json.dumps(data, ensure_ascii=False, indent=2) + "\n", encoding="utf-8"
        )
    contents = dict(ProfileSection.objects.filter(owner=owner).values_list("key", "content"))
    (home / PROFILE).write_text(render(contents), encoding="utf-8")
    values = OwnerSettings.objects.filter(owner=owner).values_list("values", flat=True).first()
    if values is not None:
        (home / CONFIG).write_text(
            yaml.safe_dump(values, allow_unicode=True, sort_keys=False), encoding="utf-8"
        )
    counts.update(facts=len(facts), procedures=len(procedures), episodes=len(episodes))
    return counts


def text_progress(stream=sys.stderr) -> Callable[[int, int], None]:
    """A one-line progress bar for long imports (only drawn on a terminal)."""

    def show(done: int, total: int) -> None:
        if not stream.isatty() or not total:
            return
        width = 30
        filled = int(width * done / total)
        stream.write(f"\r  messages [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
        if done >= total:
            stream.write("\n")
        stream.flush()

    return show
