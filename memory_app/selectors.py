"""Reads of the cold store, every one scoped to an owner."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Count, Exists, F, OuterRef, Q, QuerySet, Subquery
from django.db.models.expressions import RawSQL
from django.db.models.functions import Substr

from ethan_shared.compiled import ID_MARKER, Compiled, Marker
from memory_app import confidence
from memory_app.models import Fact, MemoryReview, Procedure
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
        return [
            Fact.from_db(Fact.objects.db, _FIELDS, row)
            for row in _SEED_ROWS.rows(limit, owner_id=owner.pk)
        ]
    pk, confidence_at, tokens_at = (_FIELDS.index(f) for f in ("id", "confidence", "search_tokens"))
    if terms:
        rows = _RANKED_ROWS.rows(
            limit, search.TUNING.context_weight, owner_id=owner.pk, terms=terms
        )
    else:  # no word to match: the seed list, which meaning may reorder and add to
        rows = [(*row, 0, None) for row in _SEED_ROWS.rows(limit, owner_id=owner.pk)]
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
        stored = _VECTORS.chunks(
            meaning.CHUNK, vector.name, meaning.TUNING.scan_cap, owner_id=owner.pk
        )
        scan = meaning.nearest_of((row for chunk in stored for row in chunk), vector)
        fused = meaning.fuse(lexical, scan)
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


# Every turn reads these; building and compiling them took most of their time: at least 1.6 ms
# less a turn on SQLite and on PostgreSQL, at 0, 20 and 200 facts, for the relevance statement
# alone (docs/benchmarks.md, the notes after the last "Concurrent streams"). Compiled for each
# limit and tuning (a parameter of _ranked_rows), then run with the turn's owner and terms
# (matching()'s one parameter).
_RANKED_ROWS = Compiled(
    lambda limit, _weight, owner_id, terms: _ranked_rows(
        owner_id=owner_id, terms=terms, limit=limit
    ),
    owner_id=ID_MARKER,
    terms=Marker(
        ["zqxethanmarkerzqx"], lambda terms, connection: match_parameter(terms, connection.vendor)
    ),
)
_SEED_ROWS = Compiled(
    lambda limit, owner_id: _candidates(owner_id).values_list(*_FIELDS)[:limit], owner_id=ID_MARKER
)
_VECTORS = Compiled(
    lambda name, cap, owner_id: meaning.vectors_newest(_candidates(owner_id), name=name, cap=cap),
    owner_id=ID_MARKER,
)


def fact_twin(*, owner: AbstractBaseUser, content: str, vector: meaning.Query) -> Fact | None:
    """The owner's active fact that says `content` in other words, found by `vector` (the
    content's) among the facts' stored vectors and confirmed by normalize.same_in_other_words;
    None when none is near enough."""
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


def procedures_for_owner(*, owner: AbstractBaseUser) -> QuerySet[Procedure]:
    """Every rule of the owner's, on or off (a foreign id is simply not found in it)."""
    return Procedure.objects.filter(owner=owner)


def procedures_active(*, owner: AbstractBaseUser) -> list[Procedure]:
    """The rules of every turn's <behavioral_guidelines>, oldest first. The services refuse a
    rule past ETHAN_PROCEDURE_CAPACITY; rules stored before that (or above a lowered setting)
    are cut here too, so the prompt stays bounded whatever the table holds."""
    # Every turn reads them. SQL run by Model.objects.raw: Procedures as the ORM makes them,
    # without building and compiling a query, which costs the ORM several times the read.
    return list(
        Procedure.objects.raw(
            f"SELECT * FROM {Procedure._meta.db_table} WHERE owner_id = %s AND active"
            " ORDER BY created_at, id LIMIT %s",
            [owner.pk, settings.ETHAN_PROCEDURE_CAPACITY],
        )
    )


# --- what the memory page shows (channels_app.memory_page) ---------------------------

# The facts tab's orders: the injection order (what Ethan trusts most), the newest added, the
# most recently used (injected).
FACT_ORDERS = {
    "confidence": ("-confidence", "-last_accessed", "-id"),
    "recent": ("-created_at", "-id"),
    "used": ("-last_accessed", "-id"),
}
FACT_STATUSES = ("active", "evicted", "superseded", "all")
# How many earlier versions a fact's page follows back (each is one query).
VERSIONS_SHOWN = 20


@dataclass(frozen=True)
class FactFilters:
    query: str = ""
    category: str = ""
    source: str = ""
    status: str = "active"
    sort: str = "confidence"
    client: str = ""  # an MCP client's name: the facts it wrote (the Connected apps tab's link)


# What a listed fact shows: the page reads only these (the search words stay behind).
SHOWN_FIELDS = (
    "id",
    "content",
    "category",
    "confidence",
    "source",
    "source_client",
    "status",
    "hit_count",
    "created_at",
    "updated_at",
    "last_accessed",
    "session",
    "message",
    "superseded_by",
)


# How much of a source message a list shows beside its link (the fact's page shows more).
SAID_EXCERPT_CHARS = 120


def facts_shown(facts: QuerySet[Fact], start: int = 0, stop: int | None = None) -> list[Fact]:
    """Rows start:stop of `facts` as a page shows them, in two queries whatever their number:
    the facts, each with `message_seq` and `message_said` (the one message facts stored before
    `sources` name, joined here rather than in `facts`, so that a paginator's count stays an
    index-only scan), then `said_in`: the (session id, seq, the start of what was said) of
    every message each was said in, as plain tuples (model instances and a related manager per
    fact cost more than the query). Only the start of a message is read: it may be long."""
    excerpt = Substr("message__content", 1, SAID_EXCERPT_CHARS + 1)
    rows = list(
        facts.only(*SHOWN_FIELDS).annotate(message_seq=F("message__seq"), message_said=excerpt)[
            start:stop
        ]
    )
    said: dict[int, list[tuple[str, int, str]]] = defaultdict(list)
    if rows:
        links = (
            Fact.sources.through.objects.filter(fact_id__in=[row.pk for row in rows])
            .annotate(said=excerpt)
            .order_by("message__session_id", "message__seq")
            .values_list("fact_id", "message__session_id", "message__seq", "said")
        )
        for fact_id, session_id, seq, text in links:
            said[fact_id].append((session_id, seq, text))
    for row in rows:
        row.said_in = said[row.pk]
    return rows


def facts_listed(*, owner: AbstractBaseUser, filters: FactFilters) -> QuerySet[Fact]:
    """The facts tab: the owner's facts filtered and ordered as asked. Every word of the search
    must be found (through the search index; a search with no words in it, only punctuation
    or symbols, looks for the text itself)."""
    facts = facts_for_owner(owner=owner)
    if filters.status != "all":
        facts = facts.filter(status=filters.status)
    if filters.category:
        facts = facts.filter(category=filters.category)
    if filters.source:
        facts = facts.filter(source=filters.source)
    if filters.client:
        facts = facts.filter(source=Fact.Source.MCP, source_client=filters.client)
    if filters.query:
        terms = query_terms(filters.query)
        if terms:
            for term in terms:
                facts = matching(facts, [term])
        else:
            facts = facts.filter(content__icontains=filters.query)
    return facts.order_by(*FACT_ORDERS[filters.sort])


def review_mark(*, owner: AbstractBaseUser) -> MemoryReview | None:
    """The owner's "reviewed up to" mark (None: they never pressed "keep all")."""
    return MemoryReview.objects.filter(owner=owner, fact__isnull=True).first()


def facts_new(*, owner: AbstractBaseUser, mark: MemoryReview | None) -> QuerySet[Fact]:
    """新记住的: active facts added after the owner's mark that they have neither kept nor
    forgotten (a forgotten fact is evicted, so no longer active), newest first."""
    facts = facts_for_owner(owner=owner).filter(status=Fact.Status.ACTIVE)
    if mark is not None:
        facts = facts.filter(created_at__gt=mark.reviewed_at)
    kept = MemoryReview.objects.filter(fact=OuterRef("pk"))
    return facts.filter(~Exists(kept)).order_by("-created_at", "-id")


def fact_versions(*, fact: Fact) -> QuerySet[Fact]:
    """The earlier versions a fact replaced (superseded by it, or by one it replaced), the
    latest replaced first: its whole history across rows. One query per step back."""
    found: list[int] = []
    wanted = [fact.pk]
    while wanted and len(found) < VERSIONS_SHOWN:
        wanted = list(
            Fact.objects.filter(owner_id=fact.owner_id, superseded_by__in=wanted)
            .exclude(pk__in=[*found, fact.pk])
            .values_list("pk", flat=True)[: VERSIONS_SHOWN - len(found)]
        )
        found += wanted
    return Fact.objects.filter(pk__in=found).order_by("-updated_at", "-id")


def fact_shown(*, fact: Fact) -> Fact:
    """One fact as the facts tab shows it (with its sources), for its own page."""
    return facts_shown(Fact.objects.filter(pk=fact.pk))[0]


def facts_learnt_in(*, owner: AbstractBaseUser, session) -> QuerySet[Fact]:
    """The owner's facts said in this session's messages, most trusted first."""
    return (
        facts_for_owner(owner=owner)
        .filter(sources__session=session)
        .distinct()
        .order_by("-confidence", "-id")
    )
