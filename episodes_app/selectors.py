"""Reading episodes: newest first, term-frequency search, and recall for the system prompt."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone

from episodes_app.models import Episode
from llm.text import tokenize
from llm.tokens import estimate_tokens

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


def term_frequency_score(query_terms: list[str], episode: Episode) -> float:
    """How often the query's words occur in the summary and keywords (keywords count double:
    they are what the episode was about)."""
    counts = Counter(tokenize(episode.summary))
    for keyword in episode.keywords:
        counts.update({word: 2 for word in tokenize(keyword)})
    return float(sum(counts[term] for term in set(query_terms)))


def episodes_search(
    *,
    owner: AbstractBaseUser,
    query: str,
    limit: int = 10,
    exclude_session_id: str | None = None,
    now: datetime | None = None,
    recency: bool = False,
) -> list[ScoredEpisode]:
    """Episodes whose summary or keywords share words with `query`, best first (ties: newest)."""
    terms = tokenize(query)
    if not terms:
        return []
    now = now or timezone.now()
    candidates = episodes_for_owner(owner=owner).order_by("-timestamp", "-id")
    if exclude_session_id:
        candidates = candidates.exclude(session_ref=exclude_session_id)
    scored = []
    for episode in candidates[:SEARCH_WINDOW]:
        score = term_frequency_score(terms, episode)
        if score <= 0:
            continue
        if recency:
            age_days = max(0.0, (now - episode.timestamp).total_seconds() / 86400)
            score *= 1 + RECENCY_WEIGHT * math.pow(0.5, age_days / RECENCY_HALF_LIFE_DAYS)
        scored.append(ScoredEpisode(episode=episode, score=score))
    scored.sort(key=lambda item: (-item.score, -item.episode.timestamp.timestamp()))
    return scored[:limit]


def episodes_for_recall(
    *, owner: AbstractBaseUser, text: str, budget_tokens: int, exclude_session_id: str | None = None
) -> list[Episode]:
    """The most relevant episodes for the current message, as many as fit the token budget."""
    chosen, used = [], 0
    for item in episodes_search(
        owner=owner, query=text, limit=10, exclude_session_id=exclude_session_id, recency=True
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
