"""Layer 1's part of the ~/.ethan layout (docs/files.md): sessions.db, a SQLite file with the
tables sessions(id, title, model, created_at, updated_at) and messages(session_id, role,
content, tool_calls, tool_call_id), in rowid order.

Read: validated into plain rows. Import: in bulk and idempotent (sessions by id, messages by
position in their session), with the fields an append derives from the same functions
message_append uses (search.message_search_tokens, services.message_opens_round). Export:
the same file back.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import F, Max
from django.utils import timezone

from ethan_shared.layout import BATCH, Imported, LayoutError, epoch, file_time, storable
from ethan_shared.private import private_file
from sessions_app.models import ChatSession, Message
from sessions_app.search import SPOKEN, message_search_tokens
from sessions_app.services import message_opens_round, search_tokens_add

SESSIONS_DB = "sessions.db"


@dataclass
class SessionRows:
    """sessions.db as plain rows: the sessions in file order, and each one's messages."""

    sessions: list[dict[str, Any]] = field(default_factory=list)
    messages: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def message_count(self) -> int:
        return sum(len(rows) for rows in self.messages.values())


def sessions_read(path: Path, notes: list[str]) -> SessionRows:
    """sessions.db, validated; a LayoutError names the table and the row."""
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
    rows = SessionRows()
    for index, row in enumerate(sessions, start=1):
        where = f"{SESSIONS_DB}, sessions row {index}"
        session_id = str(row["id"] or "").strip()
        if not session_id or len(session_id) > 32:
            raise LayoutError(f"{where}: the id must be 1 to 32 characters, not {row['id']!r}")
        if session_id in rows.messages:
            raise LayoutError(f"{where}: the id {session_id} appears twice")
        rows.messages[session_id] = []
        storable(where, "the id", session_id)
        rows.sessions.append(
            {
                "id": session_id,
                "title": storable(where, "the title", str(row["title"] or "")[:200]),
                "model": storable(where, "the model", str(row["model"] or "")[:100]),
                "created_at": file_time(row["created_at"], where) or timezone.now(),
                "updated_at": file_time(row["updated_at"], where),
            }
        )
    roles = set(Message.Role.values)
    for row in messages:
        where = f"{SESSIONS_DB}, messages rowid {row['rowid']}"
        session_id = str(row["session_id"] or "")
        if session_id not in rows.messages:
            raise LayoutError(f"{where}: session {session_id!r} is not in the sessions table")
        if row["role"] not in roles:
            raise LayoutError(f"{where}: role must be one of {sorted(roles)}, not {row['role']!r}")
        tool_calls = None
        if row["tool_calls"] not in (None, ""):
            try:
                tool_calls = json.loads(row["tool_calls"])
            except (TypeError, ValueError):
                raise LayoutError(f"{where}: tool_calls is not JSON") from None
        rows.messages[session_id].append(
            {
                "role": row["role"],
                "content": storable(where, "the content", str(row["content"] or "")),
                "tool_calls": storable(where, "tool_calls", tool_calls),
                "tool_call_id": storable(
                    where, "tool_call_id", str(row["tool_call_id"] or "")[:128]
                ),
            }
        )
    # A session without messages is kept as a session; only sessions with some need a list.
    rows.messages = {sid: found for sid, found in rows.messages.items() if found}
    return rows


def _spoken(row: dict[str, Any]) -> bool:
    """A turn whose words its neighbours' search tokens carry (message_append's `previous`)."""
    return row["role"] in SPOKEN and row["content"] != ""


def _derived(rows: list[dict[str, Any]], known: int) -> tuple[list[str], tuple[int, str] | None]:
    """The search tokens of a session's messages past the first `known` ones (stored already),
    as if each had been appended in turn; and (seq, tokens) for a stored message that gains
    the words of the first new one."""
    tokens = [""] * len(rows)
    stored_gain = None
    previous = None  # the index of the last spoken turn so far
    for index, row in enumerate(rows):
        if index >= known:
            tokens[index], gained = message_search_tokens(
                role=row["role"],
                content=row["content"],
                previous=rows[previous]["content"] if previous is not None else "",
            )
            if previous is not None and gained:
                if previous >= known:
                    tokens[previous] += gained
                else:
                    stored_gain = (previous + 1, gained)
        if _spoken(row):
            previous = index
    return tokens, stored_gain


def sessions_import(
    *,
    owner: AbstractBaseUser,
    rows: SessionRows,
    progress: Callable[[int, int], None] | None = None,
) -> Imported:
    """Write the sessions and messages `owner` does not have yet (call it in a transaction).
    A session id of another owner refuses the whole import."""
    ids = [row["id"] for row in rows.sessions]
    existing = dict(ChatSession.objects.filter(pk__in=ids).values_list("pk", "owner_id"))
    foreign = [pk for pk, owner_id in existing.items() if owner_id != owner.pk]
    if foreign:
        raise LayoutError(f"{SESSIONS_DB}: session {foreign[0]} belongs to another user")
    known = dict(
        Message.objects.filter(session_id__in=ids)
        .values("session_id")
        .annotate(last=Max("seq"))
        .values_list("session_id", "last")
    )
    sessions, grown, batch = [], [], []
    done, total, created = 0, rows.message_count, 0
    for row in rows.sessions:
        messages = rows.messages.get(row["id"], [])
        stored = known.get(row["id"]) or 0
        new = messages[stored:]
        # The counters a live append keeps: last_seq counts messages, round_count rounds.
        rounds = sum(message_opens_round(m["role"]) for m in new)
        if row["id"] not in existing:
            sessions.append(
                ChatSession(
                    id=row["id"],
                    owner=owner,
                    title=row["title"],
                    model=row["model"],
                    channel=ChatSession.Channel.IMPORT,
                    created_at=row["created_at"],
                    updated_at=row["updated_at"] or row["created_at"],
                    last_seq=len(messages),
                    round_count=rounds,
                )
            )
        elif new:
            grown.append((row["id"], len(messages), rounds))
        tokens, stored_gain = _derived(messages, stored)
        if stored_gain:
            search_tokens_add(stored_gain[1], session_id=row["id"], seq=stored_gain[0])
        batch += [
            Message(session_id=row["id"], seq=seq, search_tokens=tokens[seq - 1], **message)
            for seq, message in enumerate(new, start=stored + 1)
        ]
        done += len(messages)
        if len(batch) >= BATCH:
            created += _flush(sessions, batch)
            sessions, batch = [], []
            if progress:
                progress(done, total)
    created += _flush(sessions, batch)
    if progress and total:
        progress(total, total)
    for session_id, last_seq, rounds in grown:
        ChatSession.objects.filter(pk=session_id).update(
            last_seq=last_seq, round_count=F("round_count") + rounds
        )
    return {
        "sessions": (len(rows.sessions) - len(existing), len(existing)),
        "messages": (created, total - created),
    }


def _flush(sessions: list[ChatSession], messages: list[Message]) -> int:
    """Sessions first: their messages point at them."""
    ChatSession.objects.bulk_create(sessions, batch_size=BATCH)
    Message.objects.bulk_create(messages, batch_size=BATCH)
    return len(messages)


def sessions_export(*, owner: AbstractBaseUser, home: Path) -> dict[str, int]:
    """Write `owner`'s sessions and messages as home/sessions.db (replacing it)."""
    counts = {"sessions": 0, "messages": 0}
    path = home / SESSIONS_DB
    path.unlink(missing_ok=True)
    # 0600 before SQLite opens it, which gives its -journal the same mode (ethan_shared.private).
    db = sqlite3.connect(private_file(path))
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
                    epoch(session.created_at),
                    epoch(session.updated_at),
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
    return counts
