"""Reads of the cold store, every one scoped to an owner."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Count, Q, QuerySet, Subquery
from django.db.models.expressions import RawSQL

from memory_app import confidence
from memory_app.models import Fact, Procedure
from memory_app.normalize import content_key
from sessions_app.search import (
    CANDIDATE_CAP,
    Ranked,
    bm25,
    matching,
    mean_length,
    query_terms,
)

# How much a fully relevant fact outweighs confidence: a relevant fact at 0.5 (0.5 + 1.0)
# goes before an unrelated one at 0.99.
RELEVANCE_WEIGHT = 1.0
# Facts sharing a term with the message that are ranked for injection at most, the most
# trusted first: only the top 15 are injected, and a word found in thousands of facts says
# little about any of them.
INJECTION_CANDIDATES = 200


def facts_for_owner(*, owner: AbstractBaseUser) -> QuerySet[Fact]:
    return Fact.objects.filter(owner=owner)


def fact_matching(
    *, owner: AbstractBaseUser, content: str, other_than: Fact | None = None
) -> Fact | None:
    """The active fact equal to `content` (see normalize), if the owner has one; with
    `other_than`, one that is not that fact (its twin, were it given these words)."""
    matching = facts_for_owner(owner=owner).filter(
        content_key=content_key(content), status=Fact.Status.ACTIVE
    )
    if other_than is not None:
        matching = matching.exclude(pk=other_than.pk)
    return matching.first()


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
    candidates = (
        facts_for_owner(owner=owner)
        .filter(status=Fact.Status.ACTIVE, confidence__gte=confidence.INJECTION_THRESHOLD)
        .order_by("-confidence", "-last_accessed", "-id")
    )
    mode = mode or settings.ETHAN_INJECTION
    terms = query_terms(text) if mode == "relevance" else []
    if not terms:
        return list(candidates[:limit])
    # Rank only what can be injected: the seed list (what a message matching nothing gets,
    # and the order ties fall back to) and the most trusted facts that share a term with the
    # message, found through the search index. Loading and scoring every active fact made a
    # turn's cost grow with the store (about 0.9 s a turn at 10,000 facts, bench.turn_overhead);
    # this stays one query, and a few milliseconds, at any size. N for the idf is still the
    # whole store, counted in the same query, and so is the mean length (a sample of it).
    seed = candidates.values("pk")[:limit]
    total = Subquery(
        candidates.order_by().values("owner").annotate(total=Count("pk")).values("total")[:1]
    )
    # Rows as tuples, and model instances only for the facts injected: building a Fact for
    # every ranked candidate cost more than the query.
    fields = [field.attname for field in Fact._meta.concrete_fields]
    # The matching ids as a subquery of their own, compiled apart (as raw SQL, so the ORM does
    # not re-alias the table that matching() names): inside the OR, PostgreSQL otherwise walks
    # the candidates in order computing to_tsvector on each until enough match (90 ms at
    # 10,000 facts for a message whose words few facts share); as an uncorrelated subquery the
    # set comes from the GIN index once.
    matched = matching(facts_for_owner(owner=owner), terms).values("pk").query
    # The mean length is the store's, whatever words the message has: the ranked facts' own
    # mean changed with them.
    rows = list(
        candidates.filter(Q(pk__in=seed) | Q(pk__in=RawSQL(*matched.sql_with_params())))
        .annotate(candidates_total=total, mean_length=mean_length(candidates))
        .order_by("-confidence", "-last_accessed", "-id")
        .values_list(*fields, "candidates_total", "mean_length")[: limit + INJECTION_CANDIDATES]
    )
    if not rows:
        return []
    pk, confidence_at, tokens_at = (fields.index(f) for f in ("id", "confidence", "search_tokens"))
    ranked = bm25(
        terms, ((row, row[tokens_at]) for row in rows), total_docs=rows[0][-2], avgdl=rows[0][-1]
    )
    relevance = {}
    if ranked:
        best = ranked[0].score
        relevance = {item.item[pk]: item.score / best for item in ranked}
    # A stable sort: ties, and facts sharing no term, keep the design's order (the rows').
    rows.sort(key=lambda row: -(row[confidence_at] + RELEVANCE_WEIGHT * relevance.get(row[pk], 0)))
    return [Fact.from_db(candidates.db, fields, row[:-2]) for row in rows[:limit]]


def facts_search(
    *, owner: AbstractBaseUser, query: str, limit: int = 10, include_inactive: bool = False
) -> list[Ranked]:
    """The owner's facts ranked by BM25 against `query` (active ones unless asked)."""
    terms = query_terms(query)
    facts = facts_for_owner(owner=owner)
    if not include_inactive:
        facts = facts.filter(status=Fact.Status.ACTIVE)
    total = facts.count()
    found = matching(facts, terms).annotate(mean_length=mean_length(facts))
    candidates = list(found.order_by("-id")[:CANDIDATE_CAP])
    avgdl = candidates[0].mean_length if candidates else None
    return bm25(terms, ((fact, fact.search_tokens) for fact in candidates), total, avgdl=avgdl)[
        :limit
    ]


def procedures_active(*, owner: AbstractBaseUser) -> list[Procedure]:
    """The rules of every turn's <behavioral_guidelines>, oldest first. The services refuse a
    rule past ETHAN_PROCEDURE_CAPACITY; rules stored before that (or above a lowered setting)
    are cut here too, so the prompt stays bounded whatever the table holds."""
    rules = Procedure.objects.filter(owner=owner, active=True).order_by("created_at", "id")
    return list(rules[: settings.ETHAN_PROCEDURE_CAPACITY])
