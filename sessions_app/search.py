"""The one search engine for memory: BM25 over the shared tokenizer (llm.text.tokenize: jieba
for Chinese, lower-cased, stopword-free, lightly stemmed English).

Each searchable row (a message, a fact, an episode) keeps its tokens in `search_tokens`, written
with the row. Finding candidates uses an index: on PostgreSQL a GIN index over
`to_tsvector('simple', search_tokens)` (the tokens are ours; 'simple' only splits them), on
SQLite an FTS5 table over the same column, kept in step by triggers (search_migrations).
Ranking is BM25, computed here over the candidates:

    score(d) = sum over query terms t of
               idf(t) * tf(t, d) * (k1 + 1) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl))
    idf(t)   = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))

with k1 = 1.2, b = 0.3, N the owner's number of documents of that kind, df counted over the
candidates (exact unless the candidate cap was reached) and avgdl their mean length.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import BooleanField, F, Q, QuerySet
from django.db.models.expressions import RawSQL

from llm.text import tokenize

# b is lower than the textbook 0.75: turns are short and their length says little about
# relevance (measured on LoCoMo, docs/benchmarks.md).
K1, B = 1.2, 0.3
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
    """A row's search tokens, twice, followed by the tokens of what is around it or where it
    came from (the neighbouring turns for a message, the source message for a fact): a reply is
    found by the words of the question, a fact by the words of the turn it was learnt from, and
    a row's own words still count double, so the turn that says it ranks first."""
    extra = search_tokens(context).strip()
    if not own:
        return f" {extra} " if extra else ""
    doubled = f"{own}{own.strip()} "
    return f"{doubled}{extra} " if extra else doubled


def query_terms(text: str) -> list[str]:
    return list(dict.fromkeys(tokenize(text, search=True)))  # unique, in order


def _tsquery(terms: list[str]) -> str:
    return " | ".join("'" + term.replace("'", "''").replace("\\", "") + "'" for term in terms)


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
                [_tsquery(terms)],
                output_field=BooleanField(),
            )
        )
    if connection.vendor == "sqlite":
        table = queryset.model._meta.db_table
        match = " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)
        return queryset.filter(
            pk__in=RawSQL(f"SELECT rowid FROM {table}_fts WHERE {table}_fts MATCH %s", [match])
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


@dataclass(frozen=True)
class Ranked:
    item: Any
    score: float


def bm25(terms: list[str], docs: Iterable[tuple[Any, str]], total_docs: int) -> list[Ranked]:
    """Rank (item, search_tokens) pairs for `terms`, best first; items sharing nothing are
    dropped."""
    rows = [(item, tokens.split()) for item, tokens in docs]
    if not rows or not terms:
        return []
    wanted = list(dict.fromkeys(terms))
    # Each row's (term, tf), in the order the terms first appear in it (the order the sum is
    # taken in). list.count per term, not a Counter per row: a few terms, short rows, and a
    # thousand rows per search.
    found = []
    df = dict.fromkeys(wanted, 0)
    for item, tokens in rows:
        counts = [(term, n) for term in wanted if (n := tokens.count(term))]
        if len(counts) > 1:
            counts.sort(key=lambda pair: tokens.index(pair[0]))
        for term, _n in counts:
            df[term] += 1
        found.append((item, len(tokens), counts))
    n = max(total_docs, len(rows))
    avgdl = sum(length for _item, length, _counts in found) / len(rows) or 1.0
    idf = {term: math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5)) for term in df}
    ranked = []
    for item, length, counts in found:
        if not counts:
            continue
        score = 0.0
        for term, tf in counts:
            score += idf[term] * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / avgdl))
        ranked.append(Ranked(item=item, score=score))
    ranked.sort(key=lambda r: -r.score)
    return ranked
