"""BM25's length normalisation: each search divides by the mean length of the owner's rows of
that kind (messages, facts, episodes), not of the candidates a query happened to match."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from episodes_app.models import Episode
from episodes_app.selectors import episodes_search
from memory_app.selectors import facts_search
from memory_app.services import fact_write
from sessions_app import search, selectors
from sessions_app.models import Message
from sessions_app.search import CONTEXT_MARK, bm25, search_tokens


def _length(tokens: str) -> float:
    """A row's length as bm25 counts it, at the context weight 0.75."""
    words = tokens.split()
    if CONTEXT_MARK not in words:
        return len(words)
    mark = words.index(CONTEXT_MARK)
    return mark + 0.75 * (len(words) - mark - 1)


def test_bm25_at_the_collections_mean_length_a_long_row_is_not_over_penalised():
    long_row = " lisbon " + "word " * 19  # 20 tokens, as long as the collection's rows
    short_row = " lisbon trip "
    docs = [("long", long_row), ("short", short_row)]
    # Against the candidates' mean (11) the long row is normalised down as if it were long.
    by_candidates = {r.item: r.score for r in bm25(["lisbon"], docs, 100, b=0.75)}
    unnormalised = {r.item: r.score for r in bm25(["lisbon"], docs, 100, b=0.0)}
    assert by_candidates["long"] < unnormalised["long"]
    # Against a collection of rows that long, it is a row of ordinary length: no penalty.
    by_collection = {r.item: r.score for r in bm25(["lisbon"], docs, 100, b=0.75, avgdl=20.0)}
    assert by_collection["long"] == pytest.approx(unnormalised["long"])
    assert by_collection["long"] > by_candidates["long"]


def test_bm25_with_the_collections_mean_a_rows_score_does_not_depend_on_the_other_candidates():
    row = ("row", " lisbon trip ")
    shorts = [row, ("other", " porto ")]
    longs = [row, ("other", " porto " + "word " * 40)]
    for avgdl, same in ((6.0, True), (None, False)):
        scores = [
            next(
                r.score for r in bm25(["lisbon", "porto"], docs, 50, avgdl=avgdl) if r.item == "row"
            )
            for docs in (shorts, longs)
        ]
        assert (scores[0] == pytest.approx(scores[1])) is same


@pytest.mark.django_db
def test_message_search_normalises_by_the_owners_mean_length(owner, other_owner, make_session):
    make_session(
        owner,
        "I visited Lisbon in May",
        "Lovely, the tiles and the custard tarts of Belem are something else entirely",
        "Porto is next on my list, with its bridges, wine cellars and the long river walk",
    )
    make_session(other_owner, "Lisbon " + "again " * 50)  # another owner's rows do not count
    rows = Message.objects.filter(session__owner=owner).values_list("search_tokens", flat=True)
    expected = sum(_length(t) for t in rows) / len(rows)
    _total, _newest, mean_length = selectors._history_size(owner=owner)
    assert mean_length == pytest.approx(expected)
    # A message's score for "lisbon" is the same whether or not the question's other word
    # brings a long message in among the candidates.
    alone = selectors.messages_search(owner=owner, query="Lisbon")
    beside_porto = selectors.messages_search(owner=owner, query="Lisbon bridges")
    lisbon = alone[0].item.pk
    assert alone[0].item.content == "I visited Lisbon in May"
    first_turn = next(r for r in beside_porto if r.item.pk == lisbon)
    assert first_turn.score == pytest.approx(alone[0].score)


@pytest.mark.parametrize("lower_bound", ["plus", "L"])
def test_a_lower_bound_keeps_a_very_long_rows_match_worth_something(monkeypatch, lower_bound):
    monkeypatch.setattr(search, "TUNING", replace(search.TUNING, lower_bound=lower_bound))
    docs = [("long", " lisbon " + "word " * 500), ("short", " porto ")]
    plain = bm25(["lisbon"], docs, 100, avgdl=5.0)[0].score
    monkeypatch.setattr(search, "TUNING", replace(search.TUNING, delta=0.5))
    bounded = bm25(["lisbon"], docs, 100, avgdl=5.0)[0].score
    idf = math.log(1 + (100 - 1 + 0.5) / (1 + 0.5))
    assert plain < 0.05 * idf  # normalised down to almost nothing
    assert bounded > 0.3 * idf


def _score_of(ranked, item) -> float:
    return next(r.score for r in ranked if r.item == item)


@pytest.mark.django_db
def test_fact_and_episode_scores_do_not_change_with_the_other_candidates(owner, make_session):
    def fact(content: str):
        return fact_write(
            owner=owner, content=content, category="knowledge", confidence=0.8, source="api"
        )

    sister = fact("The user's sister lives in Lisbon")
    fact("The user walks across the bridges of Porto " + "and along the river " * 8)
    alone = facts_search(owner=owner, query="Lisbon")
    beside = facts_search(owner=owner, query="Lisbon bridges")
    assert _score_of(beside, sister) == pytest.approx(_score_of(alone, sister))

    def episode(summary: str) -> Episode:
        session = make_session(owner, "hello", "hi")
        return Episode.objects.create(
            owner=owner,
            session=session,
            session_ref=session.pk,
            summary=summary,
            search_tokens=search_tokens(summary),
            turn_count=2,
            model="offline",
        )

    trip = episode("Planned the trip to Lisbon")
    episode("Talked about Porto's bridges " + "and the river " * 10)

    def score(query: str) -> float:
        found = episodes_search(owner=owner, query=query)
        return next(item.score for item in found if item.episode == trip)

    assert score("Lisbon bridges") == pytest.approx(score("Lisbon"))
