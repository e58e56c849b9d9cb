"""Reads of the cold store, every one scoped to an owner."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet

from memory_app import confidence
from memory_app.models import Fact, Procedure
from memory_app.normalize import content_key
from sessions_app.search import CANDIDATE_CAP, Ranked, bm25, matching, query_terms

# How much a fully relevant fact outweighs confidence: a relevant fact at 0.5 (0.5 + 1.0)
# goes before an unrelated one at 0.99.
RELEVANCE_WEIGHT = 1.0


def facts_for_owner(*, owner: AbstractBaseUser) -> QuerySet[Fact]:
    return Fact.objects.filter(owner=owner)


def fact_matching(*, owner: AbstractBaseUser, content: str) -> Fact | None:
    """The active fact equal to `content` (see normalize), if the owner has one."""
    return (
        facts_for_owner(owner=owner)
        .filter(content_key=content_key(content), status=Fact.Status.ACTIVE)
        .first()
    )


def facts_for_injection(
    *, owner: AbstractBaseUser, limit: int, text: str = "", mode: str | None = None
) -> list[Fact]:
    """The facts for <memory_context>.

    `seed` (the design's order): active facts with confidence >= 0.3, confidence desc, then
    last_accessed desc. `relevance` (the default, ETHAN_INJECTION): the same candidates, ranked
    by confidence + RELEVANCE_WEIGHT * r, where r in [0, 1] is the fact's BM25 score against
    `text` (the message and the previous user turn) divided by the best score; ties, and a
    message that matches no fact at all, keep the design's order, so then exactly the seed
    list is injected.
    """
    from django.conf import settings

    candidates = (
        facts_for_owner(owner=owner)
        .filter(status=Fact.Status.ACTIVE, confidence__gte=confidence.INJECTION_THRESHOLD)
        .order_by("-confidence", "-last_accessed", "-id")
    )
    mode = mode or settings.ETHAN_INJECTION
    terms = query_terms(text) if mode == "relevance" else []
    if not terms:
        return list(candidates[:limit])
    facts = list(candidates)  # at most the owner's capacity of active facts
    ranked = bm25(terms, ((fact, fact.search_tokens) for fact in facts), total_docs=len(facts))
    if not ranked:
        return facts[:limit]
    best = ranked[0].score
    relevance = {item.item.pk: item.score / best for item in ranked}
    order = {fact.pk: position for position, fact in enumerate(facts)}  # the design's order
    facts.sort(
        key=lambda fact: (
            -(fact.confidence + RELEVANCE_WEIGHT * relevance.get(fact.pk, 0.0)),
            order[fact.pk],
        )
    )
    return facts[:limit]


def facts_search(
    *, owner: AbstractBaseUser, query: str, limit: int = 10, include_inactive: bool = False
) -> list[Ranked]:
    """The owner's facts ranked by BM25 against `query` (active ones unless asked)."""
    terms = query_terms(query)
    facts = facts_for_owner(owner=owner)
    if not include_inactive:
        facts = facts.filter(status=Fact.Status.ACTIVE)
    total = facts.count()
    candidates = matching(facts, terms).order_by("-id")[:CANDIDATE_CAP]
    return bm25(terms, ((fact, fact.search_tokens) for fact in candidates), total)[:limit]


def procedures_active(*, owner: AbstractBaseUser) -> list[Procedure]:
    return list(Procedure.objects.filter(owner=owner, active=True).order_by("created_at", "id"))
