"""The one search engine for memory: BM25 over the shared tokenizer (ethan_llm.text.tokenize: jieba
for Chinese, lower-cased, stopword-free, Snowball-stemmed English).

Each searchable row (a message, a fact, an episode) keeps its tokens in `search_tokens`, written
with the row: its own words, then, after CONTEXT_MARK, the words around it (a message's
neighbouring turns, a fact's source message), which count TUNING.context_weight each. Finding
candidates uses an index: on PostgreSQL a GIN index over `to_tsvector('simple',
search_tokens)` (the tokens are ours; 'simple' only splits them), on SQLite an FTS5 table over
the same column, kept in step by triggers (search_migrations). Ranking is BM25, computed here
over the candidates:

    score(d) = sum over query terms t of
               idf(t) * tf(t, d) * (k1 + 1) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl))
    idf(t)   = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))

with tf(t, d) = own count + context_weight * context count (|d| likewise), N the owner's
number of documents of that kind, df counted over the candidates (exact unless the candidate
cap was reached) and avgdl the mean length of the owner's rows of that kind (a sample, taken
in the statement that counts N: whichever words the query has; TUNING.avgdl). Message search
prefers the messages from the time a question names ("last May", "上周"). The values are in
TUNING; docs/search.md has the held-back LoCoMo numbers behind each.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import BooleanField, F, FloatField, Q, QuerySet
from django.db.models.expressions import RawSQL

from ethan_llm.text import TimeSpan, time_named, tokenize


@dataclass(frozen=True)
class Tuning:
    """Every weight and window of the ranking, in one place. Those chosen on LoCoMo were chosen
    on one half of its conversations (A) and measured on the other (bench/locomo_recall.py
    --tune; docs/search.md has the numbers)."""

    # The textbook values: a b tuned on LoCoMo did no better on the held-back half.
    k1: float = 1.2
    b: float = 0.75
    # How much a word of the turns around a row counts against one of its own (chosen on A;
    # B would have chosen 0.5).
    context_weight: float = 0.75
    # A message from the time the question names scores (1 + time_boost) times as much; "then"
    # runs from time_before_days before the named span (fixed: a day's margin for times of day
    # and zones) to time_after_days after it (an event is often told about days later). Boost
    # and days chosen on A (B: the same boost, 0 days).
    time_boost: float = 2.0
    time_before_days: int = 1
    time_after_days: int = 7
    # Whose mean length message search normalises by: "collection", the owner's messages (a
    # sample that does not depend on the query: sessions_app.selectors._history_size), or
    # "candidates", the rows the query matched, which made a row's normalisation change with
    # the other words of the question. Facts and episodes always use their owner's
    # (mean_length).
    avgdl: str = "collection"
    # A lower bound on a matching term's weight, so a long row is not normalised down to
    # nothing: BM25+ (`lower_bound` "plus": delta added to each matching term's weight) or
    # BM25L ("L": delta added to the length-normalised tf). Tried, no better on either shape
    # (docs/search.md): delta 0, kept for bench.locomo_recall --lengths.
    lower_bound: str = "plus"
    delta: float = 0.0


TUNING = Tuning()
# What separates a row's own words from the words around it in search_tokens. A lone "|" is
# no word for the indexes (FTS5 and to_tsvector('simple') skip punctuation) and never a term.
CONTEXT_MARK = "|"
# Candidates ranked per search at most (the newest first when more match): a word found in
# tens of thousands of messages says little, and ranking them all in Python would cost more
# than the index saves.
CANDIDATE_CAP = 1000
# Tables whose tokens are also stored as a tsvector column on PostgreSQL (migration
# sessions_app 0005): their rows are matched through the column, the others through
# to_tsvector(search_tokens), which their expression GIN index serves.
VECTOR_COLUMNS = {"sessions_app_message": "search_vector"}
# The newest-first windows, in multiples of the cap, that newest_matching looks through on
# PostgreSQL before it searches the rest of the history (see there).
WINDOWS = (20, 100)


def search_tokens(text: str) -> str:
    """What is stored in a row's search_tokens column: the tokens with a space on both sides,
    so a whole token is always ` token ` (LIKE-friendly)."""
    tokens = tokenize(text, search=True)
    return f" {' '.join(tokens)} " if tokens else ""


def with_context(own: str, context: str) -> str:
    """A row's search tokens followed, after CONTEXT_MARK, by the tokens of what is around it or
    where it came from (the neighbouring turns for a message, the source message for a fact): a
    reply is found by the words of the question, a fact by the words of the turn it was learnt
    from, and a row's own words count more (TUNING.context_weight), so the turn that says it
    ranks first. The mark is written even with no context yet: message_append adds the next
    turn's words at the end, which must land among the context."""
    extra = search_tokens(context).strip()
    own = own.strip()
    body = f"{own} {CONTEXT_MARK}" if own else CONTEXT_MARK
    return f" {body} {extra} " if extra else f" {body} "


def query_terms(text: str) -> list[str]:
    return list(dict.fromkeys(tokenize(text, search=True)))  # unique, in order


@dataclass(frozen=True)
class Query:
    """A message search's question: its terms, and the time it names (None when none)."""

    terms: list[str]
    span: TimeSpan | None


def query_parse(text: str, *, now: datetime) -> Query:
    return Query(
        terms=query_terms(text), span=time_named(text, now=now) if TUNING.time_boost else None
    )


def prefer_time(
    ranked: list[Ranked], span: TimeSpan, when: Callable[[Any], datetime]
) -> list[Ranked]:
    """`ranked` re-ordered with the rows from the time `span` names (widened by the TUNING
    window) scoring 1 + TUNING.time_boost times as much."""
    start = span.start - timedelta(days=TUNING.time_before_days)
    end = span.end + timedelta(days=TUNING.time_after_days)
    factor = 1 + TUNING.time_boost
    moved = [
        Ranked(item=r.item, score=r.score * factor) if start <= when(r.item) < end else r
        for r in ranked
    ]
    moved.sort(key=lambda r: -r.score)  # stable: ties keep BM25's order
    return moved


def match_parameter(terms: list[str], vendor: str | None = None) -> str:
    """The one parameter through which matching() hands `terms` to PostgreSQL (a tsquery) or
    SQLite (an FTS5 MATCH); the rest of its SQL is the same whatever the terms. `vendor`: the
    database's, when the statement runs on a connection of its own (the default one's else)."""
    if (vendor or connection.vendor) == "postgresql":
        return " | ".join("'" + term.replace("'", "''").replace("\\", "") + "'" for term in terms)
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)


def matching(queryset: QuerySet, terms: list[str], *, walk: bool = False) -> QuerySet:
    """Rows of `queryset` whose search_tokens hold any of `terms` (through the index).

    `walk` (PostgreSQL, tables with a vector column): the same rows, written so that the GIN
    index cannot serve it (COALESCE hides the column), for a walk along the primary key that
    tests each row it passes."""
    if not terms:
        return queryset.none()
    if connection.vendor == "postgresql":
        table = queryset.model._meta.db_table
        column = VECTOR_COLUMNS.get(table)
        if column:
            vector = f'"{table}"."{column}"'
            if walk:
                vector = f"COALESCE({vector}, ''::tsvector)"
        else:
            vector = f'to_tsvector(\'simple\', "{table}"."search_tokens")'
        return queryset.filter(
            RawSQL(
                f"{vector} @@ to_tsquery('simple', %s)",
                [match_parameter(terms)],
                output_field=BooleanField(),
            )
        )
    if connection.vendor == "sqlite":
        table = queryset.model._meta.db_table
        return queryset.filter(
            pk__in=RawSQL(
                f"SELECT rowid FROM {table}_fts WHERE {table}_fts MATCH %s",
                [match_parameter(terms)],
            )
        )
    condition = Q()
    for term in terms:
        condition |= Q(search_tokens__contains=f" {term} ")  # whole tokens only
    return queryset.filter(condition)


def newest_matching(
    queryset: QuerySet,
    terms: list[str],
    fields: list[str],
    *,
    newest_id: int | None,
    unscoped: QuerySet | None = None,
    keep: Callable[[list[tuple]], list[tuple]] | None = None,
) -> list[tuple]:
    """The newest CANDIDATE_CAP rows of `queryset` holding any of `terms`, newest first, as
    tuples of `fields` (the first one the id; no model instances: only the few shown need one).

    On PostgreSQL no single plan serves every word: a common word is cheapest found by
    walking the primary key backwards, testing each row's stored tsvector; a rare or absent
    one through the GIN index. The planner cannot tell an absent word from a rare one (it
    guesses a fraction of the table and walks all of it: seconds at a million rows). So:

    1. walk the newest WINDOWS[0] * cap ids (the index hidden from the planner), where a word
       in one row of twenty fills the cap: at most that many cheap tests;
    2. the next WINDOWS[1] * cap ids through the GIN index intersected with the id range: a
       word that got here is in fewer than one row of twenty, so few rows are read;
    3. the rest through the GIN index alone (`id + 0`: no range bitmap of most of the table):
       a word that got here is in fewer than one row of WINDOWS[1].

    Steps 2 and 3 read `unscoped` (the same rows but for the owner) and `keep` drops the rows
    that are not the owner's: the planner, expecting a fraction of the table there, would
    otherwise hash every session of the owner or, with a per-row lookup, cost the query high
    enough to compile it (JIT: tens of milliseconds) for the few rows it meets. Once a full
    batch held other owners' rows, the rest goes through `queryset` itself. Same rows,
    same order as one `ORDER BY id DESC LIMIT cap`. `newest_id` is the table's highest id
    (None when it is empty)."""
    if connection.vendor != "postgresql" or newest_id is None:
        return list(matching(queryset, terms).order_by("-id").values_list(*fields)[:CANDIDATE_CAP])
    first, second = (newest_id - size * CANDIDATE_CAP for size in WINDOWS)
    walk = matching(queryset, terms, walk=True).order_by("-id")
    if first <= 0:  # a small history: one walk over all of it
        return list(walk.values_list(*fields)[:CANDIDATE_CAP])
    rows = list(walk.filter(id__gt=first).values_list(*fields)[:CANDIDATE_CAP])

    def index_steps(base: QuerySet) -> list[QuerySet]:
        indexed = matching(base, terms).alias(shifted=F("id") + 0).order_by(F("shifted").desc())
        if second <= 0:  # no middle window
            return [indexed.filter(shifted__lte=first)]
        return [indexed.filter(id__lte=first, id__gt=second), indexed.filter(shifted__lte=second)]

    def everything(batch: list[tuple]) -> list[tuple]:
        return batch

    scoped = index_steps(queryset)
    steps, kept_only = (scoped, everything) if unscoped is None else (index_steps(unscoped), keep)
    for index in range(len(steps)):
        step = steps[index]
        while len(rows) < CANDIDATE_CAP:
            wanted = CANDIDATE_CAP - len(rows)
            batch = list(step.values_list(*fields)[:wanted])
            kept = kept_only(batch) if batch else []
            rows += kept
            if len(batch) < wanted:
                break  # this step is exhausted
            if len(kept) < len(batch):
                # Other owners use these words here: from now on let the scoped query (the
                # join) do it in one go rather than batch after batch of their rows.
                steps, kept_only = scoped, everything
            step = steps[index].filter(shifted__lt=batch[-1][0])  # the rest, past this batch
    return rows


# --- rebuilding stored tokens (after the tokenizer changed: ethan_reindex) -----------------


# The turns whose words a message's search tokens carry: what the person and the assistant said
# (tool traffic has none of its own). The values of sessions_app.models.Message.Role.
SPOKEN = ("user", "assistant")


def message_search_tokens(*, role: str, content: str, previous: str) -> tuple[str, str]:
    """The search tokens of a message appended after `previous` (the content of the session's
    last spoken turn before it, "" when there is none), and the tokens that previous turn
    gains. A spoken turn carries its neighbours' words (with_context): the previous turn's
    when it is appended, the next turn's when that one comes. The one rule for the column:
    message_append, the import (sessions_app.files) and a reindex all derive it here."""
    if role not in SPOKEN:
        return "", ""
    own = search_tokens(content)
    return with_context(own, previous), own.lstrip()


def session_message_tokens(messages: Iterable[tuple[Any, str, str]]) -> dict[Any, str]:
    """The search_tokens message_append writes, for one session's (pk, role, content) in seq
    order: each message appended in turn (message_search_tokens)."""
    tokens: dict[Any, str] = {}
    last: tuple[Any, str] | None = None  # the last spoken turn with content: (pk, content)
    for pk, role, content in messages:
        tokens[pk], gained = message_search_tokens(
            role=role, content=content, previous=last[1] if last else ""
        )
        if last is not None and gained:
            tokens[last[0]] += gained
        if role in SPOKEN and content != "":
            last = (pk, content)
    return tokens


def messages_reindex(session_ids: list[str]) -> int:
    """Rewrite the search tokens of these sessions' messages with the current tokenizer, in one
    transaction; returns how many changed (rows already up to date are not written, so a
    second run writes nothing). The sessions are locked first (as message_append locks its
    session), so an append cannot slip its words in between the read and the write."""
    from sessions_app.models import ChatSession, Message

    with transaction.atomic(durable=True):  # a batch commits on its own: locks are short
        list(ChatSession.objects.select_for_update().filter(pk__in=session_ids).values_list("pk"))
        messages = list(
            Message.objects.filter(session_id__in=session_ids)
            .order_by("session_id", "seq")
            .only("id", "session_id", "role", "content", "search_tokens")
        )
        changed = []
        for _session, group in itertools.groupby(messages, key=lambda m: m.session_id):
            group = list(group)
            fresh = session_message_tokens((m.pk, m.role, m.content) for m in group)
            for message in group:
                if message.search_tokens != fresh[message.pk]:
                    message.search_tokens = fresh[message.pk]
                    changed.append(message)
        Message.objects.bulk_update(changed, ["search_tokens"], batch_size=500)
    return len(changed)


def rows_reindex(queryset: QuerySet, tokens_of: Callable[[Any], str]) -> int:
    """Rewrite the search tokens of `queryset`'s rows (a batch: facts, episodes) with
    `tokens_of(row)`, in one transaction; returns how many changed (up-to-date rows are not
    written)."""
    with transaction.atomic(durable=True):
        changed = []
        for row in queryset.select_for_update(of=("self",)):
            fresh = tokens_of(row)
            if row.search_tokens != fresh:
                row.search_tokens = fresh
                changed.append(row)
        queryset.model.objects.bulk_update(changed, ["search_tokens"], batch_size=500)
    return len(changed)


@dataclass(frozen=True)
class ReindexStep:
    """One batch of a reindex (ethan_reindex): rows of the kind in all, gone through so far,
    and how many this batch rewrote."""

    total: int
    done: int
    changed: int


def rows_reindex_batches(
    queryset: QuerySet, tokens_of: Callable[[Any], str], *, batch: int
) -> Iterator[ReindexStep]:
    """rows_reindex over the whole `queryset`, `batch` ids at a time in id order: how an app
    that keeps search tokens on its rows (facts, episodes) offers its reindexing."""
    ids = list(queryset.order_by("pk").values_list("pk", flat=True))
    for start in range(0, len(ids), batch):
        chunk = ids[start : start + batch]
        changed = rows_reindex(queryset.filter(pk__in=chunk), tokens_of)
        yield ReindexStep(total=len(ids), done=start + len(chunk), changed=changed)


def messages_reindex_batches(*, batch: int) -> Iterator[ReindexStep]:
    """messages_reindex over every session: whole sessions at a time (a message's tokens carry
    its neighbours'), about `batch` messages a transaction, in id order."""
    from sessions_app.models import ChatSession

    sessions = ChatSession.objects.order_by("pk").values_list("pk", "last_seq")
    total = sum(size for _pk, size in sessions)
    done = 0
    group: list[str] = []
    size = 0
    for pk, last_seq in sessions.iterator():
        group.append(pk)
        size += last_seq
        if size >= batch:
            done += size
            yield ReindexStep(total=total, done=done, changed=messages_reindex(group))
            group, size = [], 0
    if group:
        yield ReindexStep(total=total, done=total, changed=messages_reindex(group))


def length_sql(column: str) -> str:
    """SQL for a row's length as bm25 counts it (its own tokens, plus the context weight, a
    parameter, times the tokens after CONTEXT_MARK), from `column`, its search_tokens: the
    tokens are single-space separated with a space on both sides, so a row holds one token
    fewer than spaces."""
    mark = f"STRPOS({column}, '{CONTEXT_MARK}')"
    if connection.vendor != "postgresql":
        mark = f"INSTR({column}, '{CONTEXT_MARK}')"

    def tokens(text: str) -> str:
        return f"(LENGTH({text}) - LENGTH(REPLACE({text}, ' ', '')) - 1)"

    own = tokens(f"SUBSTR({column}, 1, {mark})")  # up to the mark: " a b |" holds a, b
    every = tokens(column)  # the mark included
    return f"CASE WHEN {mark} > 0 THEN {own} + %s * ({every} - {own} - 1) ELSE {every} END"


def mean_length(rows: QuerySet, *, sample: int = 1000) -> RawSQL:
    """An expression (a scalar subquery) for the mean length (length_sql) of `rows`, or of
    `sample` of them when there are more: BM25's avgdl for a kind whose rows are ranked, to
    ride on a query that is made anyway. Raw SQL, so the ORM does not re-alias the table
    `rows` names when the outer query reads the same one."""
    sql, params = rows.order_by().values("search_tokens")[:sample].query.sql_with_params()
    return RawSQL(
        f"SELECT AVG({length_sql('sample.search_tokens')}) FROM ({sql}) sample",
        [TUNING.context_weight, *params],
        output_field=FloatField(),
    )


@dataclass(frozen=True)
class Ranked:
    item: Any
    score: float


def bm25(
    terms: list[str],
    docs: Iterable[tuple[Any, str]],
    total_docs: int,
    *,
    k1: float | None = None,
    b: float | None = None,
    context_weight: float | None = None,
    avgdl: float | None = None,
) -> list[Ranked]:
    """Rank (item, search_tokens) pairs for `terms`, best first; items sharing nothing are
    dropped. k1, b and the context weight default to TUNING's. `avgdl` is the mean length of
    the collection (length_sql's, over the owner's rows); without it, the candidates' mean."""
    k1 = TUNING.k1 if k1 is None else k1
    b = TUNING.b if b is None else b
    delta = TUNING.delta
    weight = TUNING.context_weight if context_weight is None else context_weight
    if not terms:
        return []
    wanted = list(dict.fromkeys(terms))
    # Each row's (term, tf), in the order the terms first appear in it (the order the sum is
    # taken in). list.count per term, not a Counter per row: a few terms, short rows, and a
    # thousand rows per search. Words after CONTEXT_MARK count `weight` each; a row written
    # before the mark existed counts all its words as its own.
    found = []
    df = dict.fromkeys(wanted, 0)
    for item, text in docs:
        tokens = text.split()
        own, context = tokens, []
        if CONTEXT_MARK in tokens:
            mark = tokens.index(CONTEXT_MARK)
            own, context = tokens[:mark], tokens[mark + 1 :]
        counts = []
        for term in wanted:
            n = own.count(term) + (weight * context.count(term) if context else 0)
            if n:
                counts.append((term, n))
        if len(counts) > 1:
            counts.sort(key=lambda pair: tokens.index(pair[0]))
        for term, _n in counts:
            df[term] += 1
        found.append((item, len(own) + weight * len(context), counts))
    if not found:
        return []
    n = max(total_docs, len(found))
    if not avgdl:
        avgdl = sum(length for _item, length, _counts in found) / len(found) or 1.0
    idf = {term: math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5)) for term in df}
    ranked = []
    for item, length, counts in found:
        if not counts:
            continue
        score = 0.0
        for term, tf in counts:
            norm = 1 - b + b * length / avgdl
            if TUNING.lower_bound == "L":
                ctd = tf / norm + delta
                score += idf[term] * (k1 + 1) * ctd / (k1 + ctd)
            else:
                score += idf[term] * (delta + tf * (k1 + 1) / (tf + k1 * norm))
        ranked.append(Ranked(item=item, score=score))
    ranked.sort(key=lambda r: -r.score)
    return ranked
