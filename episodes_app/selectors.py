"""Reading episodes: newest first, term-frequency search, and recall for the system prompt."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Count, Subquery
from django.utils import timezone

from episodes_app.models import Episode
from ethan_llm.tokens import estimate_tokens
from sessions_app import meaning
from sessions_app.search import bm25, matching, mean_length, query_terms

# Episodes scored per search: the owner's most recent ones.
SEARCH_WINDOW = 500
# Recall's recency prior: a score multiplier that halves every RECENCY_HALF_LIFE_DAYS,
# between 1 + RECENCY_WEIGHT (today) and 1 (long ago).
RECENCY_WEIGHT = 0.2
RECENCY_HALF_LIFE_DAYS = 30


@dataclass(frozen=True)
class ScoredEpisode:
    episode: Episode
    score: float


def episodes_for_owner(*, owner: AbstractBaseUser):
    return Episode.objects.filter(owner=owner)


def episodes_recent(*, owner: AbstractBaseUser, limit: int = 20) -> list[Episode]:
    return list(episodes_for_owner(owner=owner).order_by("-timestamp", "-id")[:limit])


def episodes_search(
    *,
    owner: AbstractBaseUser,
    query: str,
    limit: int = 10,
    exclude_session_id: str | None = None,
    now: datetime | None = None,
    recency: bool = False,
    meaning_of: str | None = None,
) -> list[ScoredEpisode]:
    """Episodes ranked by BM25 of their summary and keywords against `query` (the memory search
    engine) fused with their meaning's (of `meaning_of`, by default the query), best first,
    ties newest first; with `recency`, times the recency prior."""
    terms = query_terms(query)
    vector = meaning.query_vector(query if meaning_of is None else meaning_of)
    if not terms and vector is None:
        return []
    now = now or timezone.now()
    episodes = episodes_for_owner(owner=owner)
    # BM25's document count rides on the candidates' query (one round trip on every full-path
    # turn, not two): the owner's episodes, the excluded session's included.
    owner_total = episodes.order_by().values("owner").annotate(n=Count("pk")).values("n")[:1]
    # So does the mean length BM25 normalises by: the owner's episodes' (a sample), not the
    # candidates', which changed with the words of the query.
    owner_length = mean_length(episodes)
    if exclude_session_id:
        episodes = episodes.exclude(session_ref=exclude_session_id)
    candidates = list(
        matching(episodes, terms)
        .annotate(owner_total=Subquery(owner_total), owner_length=owner_length)
        .order_by("-timestamp", "-id")[:SEARCH_WINDOW]
    )
    total = candidates[0].owner_total if candidates else 0
    avgdl = candidates[0].owner_length if candidates else None
    found = bm25(terms, ((e, e.search_tokens) for e in candidates), total, avgdl=avgdl)
    if vector is not None:
        found = meaning.fused_rows(found, meaning.nearest(episodes, vector), episodes, limit=limit)
    scored = []
    for ranked in found:
        score = ranked.score
        if recency:
            age_days = max(0.0, (now - ranked.item.timestamp).total_seconds() / 86400)
            score *= 1 + RECENCY_WEIGHT * math.pow(0.5, age_days / RECENCY_HALF_LIFE_DAYS)
        scored.append(ScoredEpisode(episode=ranked.item, score=score))
    scored.sort(key=lambda item: (-item.score, -item.episode.timestamp.timestamp()))
    return scored[:limit]


def episodes_for_recall(
    *,
    owner: AbstractBaseUser,
    text: str,
    budget_tokens: int,
    exclude_session_id: str | None = None,
    meaning_of: str | None = None,
) -> list[Episode]:
    """The most relevant episodes for the current message, as many as fit the token budget.
    `meaning_of`: the text whose vector ranks them by meaning (the turn's one query vector,
    the facts' injection's), by default `text`."""
    chosen, used = [], 0
    for item in episodes_search(
        owner=owner,
        query=text,
        limit=10,
        exclude_session_id=exclude_session_id,
        recency=True,
        meaning_of=meaning_of,
    ):
        cost = estimate_tokens(recall_line(item.episode))
        if used + cost > budget_tokens:
            continue
        chosen.append(item.episode)
        used += cost
    return chosen


def recall_line(episode: Episode) -> str:
    when = timezone.localtime(episode.timestamp).strftime("%Y-%m-%d")
    keywords = ", ".join(episode.keywords)
    return f"- {when} ({episode.session_ref}; {keywords}): {episode.summary}"
