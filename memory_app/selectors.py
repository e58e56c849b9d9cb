"""Reads of the cold store, every one scoped to an owner."""

from __future__ import annotations

import threading

import numpy as np
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Count, Q, QuerySet, Subquery
from django.db.models.expressions import RawSQL

from memory_app import confidence
from memory_app.models import Fact, Procedure
from memory_app.normalize import content_key, same_in_other_words
from sessions_app import meaning, search
from sessions_app.search import (
    CANDIDATE_CAP,
    Ranked,
    bm25,
    match_parameter,
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
# The nearest facts a new one is compared with for a twin (fact_twin).
TWINS_LOOKED_AT = 3


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
    mode = mode or settings.ETHAN_INJECTION
    terms = query_terms(text) if mode == "relevance" else []
    vector = meaning.query_vector(text) if mode == "relevance" else None
    if not terms and vector is None:
        return list(_candidates(owner.pk)[:limit])
    pk, confidence_at, tokens_at = (_FIELDS.index(f) for f in ("id", "confidence", "search_tokens"))
    if terms:
        rows = _RankedRows.of(limit).rows(owner_id=owner.pk, terms=terms)
    else:  # no word to match: the seed list, which meaning may reorder and add to
        rows = [(*row, 0, None) for row in _candidates(owner.pk).values_list(*_FIELDS)[:limit]]
    if not rows and vector is None:
        return []
    ranked = []
    if terms and rows:
        ranked = bm25(
            terms,
            ((row, row[tokens_at]) for row in rows),
            total_docs=rows[0][-2],
            avgdl=rows[0][-1],
        )
    lexical = [(item.item[pk], item.score) for item in ranked]
    if vector is None:
        best = lexical[0][1] if lexical else 1.0
        relevance = {key: score / best for key, score in lexical}
    else:
        fused = meaning.fuse(lexical, meaning.nearest(_candidates(owner.pk), vector))
        best = fused[0].score if fused and fused[0].score > 0 else 1.0
        relevance = {item.key: item.score / best for item in fused}
        known = {row[pk] for row in rows}
        missing = [item.key for item in fused[:INJECTION_CANDIDATES] if item.key not in known]
        if missing:  # found by meaning alone: read as the other rows are
            rows += [
                (*row, 0, None)
                for row in _candidates(owner.pk).filter(pk__in=missing).values_list(*_FIELDS)
            ]
    # A stable sort: ties, and facts sharing no term, keep the design's order (the rows').
    rows.sort(key=lambda row: -(row[confidence_at] + RELEVANCE_WEIGHT * relevance.get(row[pk], 0)))
    return [Fact.from_db(Fact.objects.db, _FIELDS, row[:-2]) for row in rows[:limit]]


def _candidates(owner_id: int) -> QuerySet[Fact]:
    """The facts that may be injected, in the design's order."""
    return Fact.objects.filter(
        owner_id=owner_id,
        status=Fact.Status.ACTIVE,
        confidence__gte=confidence.INJECTION_THRESHOLD,
    ).order_by("-confidence", "-last_accessed", "-id")


# Rows as tuples of these, and model instances only for the facts injected: building a Fact for
# every ranked candidate cost more than the query.
_FIELDS = [field.attname for field in Fact._meta.concrete_fields]


def _ranked_rows(*, owner_id: int, terms: list[str], limit: int) -> QuerySet:
    """What relevance ranks: the seed list (what a message matching nothing gets, and the order
    ties fall back to) and the most trusted facts that share a term with the message, found
    through the search index, each row with the store's size and mean length for BM25.

    Loading and scoring every active fact made a turn's cost grow with the store (about 0.9 s
    a turn at 10,000 facts, bench.turn_overhead); this stays one query, and a few milliseconds,
    at any size. N for the idf is still the whole store, counted in the same query, and so is
    the mean length (a sample of it)."""
    candidates = _candidates(owner_id)
    seed = candidates.values("pk")[:limit]
    total = Subquery(
        candidates.order_by().values("owner").annotate(total=Count("pk")).values("total")[:1]
    )
    # The matching ids as a subquery of their own, compiled apart (as raw SQL, so the ORM does
    # not re-alias the table that matching() names): inside the OR, PostgreSQL otherwise walks
    # the candidates in order computing to_tsvector on each until enough match (90 ms at
    # 10,000 facts for a message whose words few facts share); as an uncorrelated subquery the
    # set comes from the GIN index once.
    matched = matching(Fact.objects.filter(owner_id=owner_id), terms).values("pk").query
    # The mean length is the store's, whatever words the message has: the ranked facts' own
    # mean changed with them.
    return (
        candidates.filter(Q(pk__in=seed) | Q(pk__in=RawSQL(*matched.sql_with_params())))
        .annotate(candidates_total=total, mean_length=mean_length(candidates))
        .order_by("-confidence", "-last_accessed", "-id")
        .values_list(*_FIELDS, "candidates_total", "mean_length")[: limit + INJECTION_CANDIDATES]
    )


class _RankedRows:
    """_ranked_rows' statement, built and compiled by the ORM once per database connection
    (a thread's: its converters are that connection's) for each limit and tuning, then run
    with each turn's parameters. Every turn runs it, and building and compiling it took most
    of its time: at least 1.6 ms less a turn on SQLite and on PostgreSQL, at 0, 20 and 200
    facts (docs/benchmarks.md, the notes after the last "Concurrent streams"). Only two kinds of
    parameter change from one turn to the next, found by compiling with markers in their
    place: the owner's id, wherever the statement names it, and matching()'s one parameter,
    the terms."""

    OWNER = -7_340_017_293  # no user has this id
    TERM = "zqxethanmarkerzqx"

    # Each thread's own: a compiled statement holds its thread's connection, and goes with the
    # thread.
    _compiled = threading.local()

    def __init__(self, limit: int, connection: BaseDatabaseWrapper):
        self.limit = limit
        self.connection = connection
        self.compiler = None
        query = _ranked_rows(owner_id=self.OWNER, terms=[self.TERM], limit=limit).query
        compiler = query.get_compiler(connection=connection)
        self.sql, params = compiler.as_sql()
        self.params = list(params)
        self.owner_at = [i for i, p in enumerate(self.params) if p == self.OWNER]
        marker = match_parameter([self.TERM])
        self.terms_at = [i for i, p in enumerate(self.params) if p == marker]
        # Compiled as expected (every marker a parameter, the terms exactly one): else the
        # ORM builds it every time, as before.
        if (
            self.owner_at
            and len(self.terms_at) == 1
            and self.TERM not in self.sql
            and str(self.OWNER) not in self.sql
        ):
            self.compiler = compiler

    @classmethod
    def of(cls, limit: int) -> _RankedRows:
        connection = connections[Fact.objects.db]
        compiled = cls._compiled.__dict__.setdefault("statements", {})
        key = (limit, search.TUNING.context_weight)  # a parameter, set by the tuning
        ranked = compiled.get(key)
        if ranked is None or ranked.connection is not connection:
            ranked = compiled[key] = cls(limit, connection)
        return ranked

    def rows(self, *, owner_id: int, terms: list[str]) -> list[tuple]:
        if self.compiler is None:
            return list(_ranked_rows(owner_id=owner_id, terms=terms, limit=self.limit))
        params = list(self.params)
        for at in self.owner_at:
            params[at] = owner_id
        params[self.terms_at[0]] = match_parameter(terms)
        with self.connection.cursor() as cursor:
            cursor.execute(self.sql, params)
            fetched = cursor.fetchall()
        if self.compiler.has_extra_select:  # as the ORM's execute_sql reads them
            fetched = [row[: self.compiler.col_count] for row in fetched]
        # The ORM's own conversion of what the database returned (dates, decimals, JSON).
        return list(self.compiler.results_iter(results=[fetched], tuple_expected=True))


def fact_twin(
    *, owner: AbstractBaseUser, content: str, vector: tuple[str, np.ndarray]
) -> Fact | None:
    """The owner's active fact that says `content` in other words, found by `vector` (the
    content's, as (embedder name, vector)) among the facts' stored vectors and confirmed by
    normalize.same_in_other_words; None when none is near enough."""
    scan = meaning.nearest(facts_for_owner(owner=owner).filter(status=Fact.Status.ACTIVE), vector)
    cosines = dict(zip(scan.ids.tolist(), scan.cosines.tolist(), strict=True))
    nearest = scan.best(TWINS_LOOKED_AT)
    found = facts_for_owner(owner=owner).in_bulk(nearest)
    for pk in nearest:
        if pk in found and same_in_other_words(content, found[pk].content, cosines[pk]):
            return found[pk]
    return None


def facts_search(
    *, owner: AbstractBaseUser, query: str, limit: int = 10, include_inactive: bool = False
) -> list[Ranked]:
    """The owner's facts ranked by BM25 against `query` (active ones unless asked)."""
    terms = query_terms(query)
    facts = facts_for_owner(owner=owner)
    if not include_inactive:
        facts = facts.filter(status=Fact.Status.ACTIVE)
    ranked = []
    if terms:
        total = facts.count()
        found = matching(facts, terms).annotate(mean_length=mean_length(facts))
        candidates = list(found.order_by("-id")[:CANDIDATE_CAP])
        avgdl = candidates[0].mean_length if candidates else None
        ranked = bm25(
            terms, ((fact, fact.search_tokens) for fact in candidates), total, avgdl=avgdl
        )
    vector = meaning.query_vector(query)
    if vector is not None:
        ranked = meaning.fused_rows(ranked, meaning.nearest(facts, vector), facts, limit=limit)
    return ranked[:limit]


def procedures_active(*, owner: AbstractBaseUser) -> list[Procedure]:
    """The rules of every turn's <behavioral_guidelines>, oldest first. The services refuse a
    rule past ETHAN_PROCEDURE_CAPACITY; rules stored before that (or above a lowered setting)
    are cut here too, so the prompt stays bounded whatever the table holds."""
    rules = Procedure.objects.filter(owner=owner, active=True).order_by("created_at", "id")
    return list(rules[: settings.ETHAN_PROCEDURE_CAPACITY])
