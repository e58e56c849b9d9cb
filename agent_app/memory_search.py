"""memory_search: facts, episodes and past messages of one owner through the one search engine
(sessions_app.search), for the model's tool and GET /api/search."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone

from episodes_app.selectors import episodes_search
from memory_app.selectors import facts_search
from sessions_app.display import one_line
from sessions_app.selectors import messages_search

SCOPES = ("facts", "episodes", "messages", "all")
MAX_LIMIT = 50
SNIPPET_CHARS = 200


@dataclass(frozen=True)
class Hit:
    kind: str  # fact | episode | message
    id: int
    session_id: str | None
    seq: int | None
    content: str
    score: float
    created_at: datetime
    role: str = ""

    def cited(self) -> str:
        """One short line with where it comes from, for the model."""
        when = timezone.localtime(self.created_at).strftime("%Y-%m-%d")
        text = one_line(self.content, SNIPPET_CHARS)
        if self.kind == "message":
            return f"[message {self.session_id} #{self.seq} {when} {self.role}] {text}"
        if self.kind == "episode":
            return f"[episode {self.session_id} {when}] {text}"
        return f"[fact #{self.id} {when}] {text}"


def memory_search(
    *,
    owner: AbstractBaseUser,
    query: str,
    scope: str = "all",
    limit: int = 10,
    exclude_after: tuple[str, int] | None = None,
) -> list[Hit]:
    """Best first. With scope "all" each kind's scores are divided by that kind's best score
    (BM25 scores of different collections are not comparable), then merged."""
    if scope not in SCOPES:
        raise ValueError(f"unknown scope {scope!r}: use one of {', '.join(SCOPES)}")
    limit = max(1, min(limit, MAX_LIMIT))
    groups: list[list[Hit]] = []
    if scope in ("facts", "all"):
        groups.append(
            [
                Hit(
                    "fact",
                    r.item.pk,
                    r.item.session_id,
                    None,
                    r.item.content,
                    r.score,
                    r.item.created_at,
                )
                for r in facts_search(owner=owner, query=query, limit=limit)
            ]
        )
    if scope in ("episodes", "all"):
        groups.append(
            [
                Hit(
                    "episode",
                    r.episode.pk,
                    r.episode.session_ref,
                    None,
                    r.episode.summary,
                    r.score,
                    r.episode.timestamp,
                )
                for r in episodes_search(owner=owner, query=query, limit=limit)
            ]
        )
    if scope in ("messages", "all"):
        groups.append(
            [
                Hit(
                    "message",
                    r.item.pk,
                    r.item.session_id,
                    r.item.seq,
                    r.item.content,
                    r.score,
                    r.item.created_at,
                    r.item.role,
                )
                for r in messages_search(
                    owner=owner, query=query, limit=limit, exclude_after=exclude_after
                )
            ]
        )
    if len(groups) == 1:
        return groups[0][:limit]
    merged = []
    for hits in groups:
        # A kind whose best score is 0 (BM25 over a collection of one document: its words are
        # in every document) is kept as it scored, not divided by it.
        best = hits[0].score if hits and hits[0].score > 0 else 1.0
        merged += [(hit.score / best, hit) for hit in hits]
    merged.sort(key=lambda pair: -pair[0])
    return [hit for _normalised, hit in merged[:limit]]
