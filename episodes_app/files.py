"""Layer 4's part of the ~/.ethan layout (docs/files.md): memory/episodes.json, a list (or
{"episodes": [...]}) of {session_id, summary, timestamp, model, turn_count, keywords}.

Read: validated into plain rows. Import: in bulk and idempotent (one episode per session,
matched by session id; a session not in the database, deleted long ago, is kept by id only).
Export: the owner's episodes, oldest first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone

from episodes_app.models import Episode
from episodes_app.services import episode_search_tokens
from ethan_shared.layout import (
    Imported,
    LayoutError,
    epoch,
    file_time,
    json_list,
    json_write,
    storable,
    text,
    whole_number,
)
from sessions_app.models import ChatSession

EPISODES = "memory/episodes.json"


def episodes_read(path: Path, notes: list[str]) -> list[dict[str, Any]]:
    """memory/episodes.json, validated; a LayoutError names the item."""
    episodes, seen = [], set()
    for index, item in enumerate(json_list(path, EPISODES, "episodes")):
        where = f"{EPISODES}, item {index}"
        session_id = text(item, "session_id", where, required=True).strip()
        if not session_id:
            raise LayoutError(f"{where}: session_id is empty")
        if session_id in seen:
            raise LayoutError(f"{where}: a second episode for session {session_id}")
        seen.add(session_id)
        keywords = item.get("keywords") or []
        if not isinstance(keywords, list) or not all(isinstance(k, str) for k in keywords):
            raise LayoutError(f"{where}: keywords must be a list of text")
        storable(where, "keywords", keywords)
        turns = whole_number(item, "turn_count", where, default=0)
        episodes.append(
            {
                "session_ref": session_id[:64],
                "summary": text(item, "summary", where),
                "timestamp": file_time(item.get("timestamp"), where) or timezone.now(),
                "model": text(item, "model", where)[:100],
                "turn_count": turns,
                "keywords": keywords,
            }
        )
    return episodes


def episodes_import(*, owner: AbstractBaseUser, rows: list[dict[str, Any]]) -> Imported:
    """Add the episodes `owner` does not have yet (call it in a transaction, after the
    sessions: an episode links to its session when it is there)."""
    known = set(Episode.objects.filter(owner=owner).values_list("session_ref", flat=True))
    sessions = set(
        ChatSession.objects.filter(
            owner=owner, pk__in=[row["session_ref"] for row in rows]
        ).values_list("pk", flat=True)
    )
    new = [
        Episode(
            owner=owner,
            session_id=row["session_ref"] if row["session_ref"] in sessions else None,
            search_tokens=episode_search_tokens(row["summary"], row["keywords"]),
            **row,
        )
        for row in rows
        if row["session_ref"] not in known
    ]
    Episode.objects.bulk_create(new)
    return {"episodes": (len(new), len(rows) - len(new))}


def episodes_export(*, owner: AbstractBaseUser, home: Path) -> dict[str, int]:
    """Write `owner`'s episodes as home/memory/episodes.json, oldest first."""
    episodes = [
        {
            "session_id": e.session_ref,
            "summary": e.summary,
            "timestamp": epoch(e.timestamp),
            "model": e.model,
            "turn_count": e.turn_count,
            "keywords": e.keywords,
        }
        for e in Episode.objects.filter(owner=owner).order_by("timestamp", "id")
    ]
    json_write(home / EPISODES, episodes)
    return {"episodes": len(episodes)}
