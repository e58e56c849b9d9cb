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
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import BooleanField, Q, QuerySet
from django.db.models.expressions import RawSQL

from llm.text import tokenize

# b is lower than the textbook 0.75: turns are short and their length says little about
# relevance (measured on LoCoMo, docs/benchmarks.md).
K1, B = 1.2, 0.3
# Candidates ranked per search at most (the newest first when more match): a word found in
# tens of thousands of messages says little, and ranking them all in Python would cost more
# than the index saves.
CANDIDATE_CAP = 1000


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


def matching(queryset: QuerySet, terms: list[str]) -> QuerySet:
    """Rows of `queryset` whose search_tokens hold any of `terms` (through the index)."""
    if not terms:
        return queryset.none()
    if connection.vendor == "postgresql":
        table = queryset.model._meta.db_table
        return queryset.filter(
            RawSQL(
                f"to_tsvector('simple', \"{table}\".\"search_tokens\") @@ to_tsquery('simple', %s)",
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
    wanted = set(terms)
    df: Counter[str] = Counter()
    for _item, tokens in rows:
        df.update(wanted & set(tokens))
    n = max(total_docs, len(rows))
    avgdl = sum(len(tokens) for _item, tokens in rows) / len(rows) or 1.0
    ranked = []
    for item, tokens in rows:
        counts = Counter(token for token in tokens if token in wanted)
        if not counts:
            continue
        score = 0.0
        for term, tf in counts.items():
            idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
            score += idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * len(tokens) / avgdl))
        ranked.append(Ranked(item=item, score=score))
    ranked.sort(key=lambda r: -r.score)
    return ranked
