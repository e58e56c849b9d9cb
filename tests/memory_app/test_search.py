"""The memory search engine and relevance-aware injection."""

from __future__ import annotations

from unittest import mock

import pytest

from agent_app.memory_search import memory_search
from memory_app.selectors import (
    _FIELDS,
    _RANKED_ROWS,
    _ranked_rows,
    facts_for_injection,
    facts_search,
)
from memory_app.services import fact_write
from sessions_app import search
from sessions_app.search import bm25, query_terms, search_tokens
from sessions_app.selectors import messages_search

pytestmark = pytest.mark.django_db


def fact(owner, content, confidence):
    return fact_write(
        owner=owner, content=content, category="knowledge", confidence=confidence, source="api"
    )


@pytest.fixture
def store(owner, other_owner):
    facts = [
        fact(owner, "用户喜欢喝美式咖啡", 0.5),
        fact(owner, "The user's sister lives in Lisbon", 0.6),
        fact(owner, "用户在杭州做后端开发", 0.95),
        fact(owner, "The user prefers short answers", 0.9),
        fact(owner, "用户每周跑步三次", 0.85),
    ]
    fact(other_owner, "用户喜欢喝咖啡和茶", 1.0)
    return facts


def test_a_message_that_matches_nothing_injects_exactly_the_seed_list(owner, store):
    seed = facts_for_injection(owner=owner, limit=3, mode="seed")
    assert [f.content for f in seed] == [
        "用户在杭州做后端开发",
        "The user prefers short answers",
        "用户每周跑步三次",
    ]
    for text in ("", "今天天气怎么样", "what a nice day", "？！"):
        assert facts_for_injection(owner=owner, limit=3, text=text, mode="relevance") == seed


@pytest.mark.parametrize(
    ("text", "first"),
    [
        ("推荐一家咖啡店", "用户喜欢喝美式咖啡"),
        ("Any tips for visiting my sister in Lisbon?", "The user's sister lives in Lisbon"),
        ("明天跑步去哪儿", "用户每周跑步三次"),
    ],
)
def test_relevance_lifts_the_matching_fact_in_both_languages(owner, store, text, first):
    injected = facts_for_injection(owner=owner, limit=3, text=text, mode="relevance")
    assert injected[0].content == first
    # The rest keep the design's order.
    rest = [f for f in facts_for_injection(owner=owner, limit=5, mode="seed") if f.content != first]
    assert injected[1:] == rest[:2]


def test_the_compiled_relevance_statement_reads_what_the_orm_would_for_each_owner(
    owner, other_owner, store
):
    """The relevance statement is compiled once per connection and run with each turn's owner
    and terms: it reads exactly the rows the ORM's own statement reads (dates and numbers
    converted the same way), one owner's facts only, whichever owner compiled it."""
    weight = search.TUNING.context_weight
    builds = 0
    others = [
        fact(other_owner, "用户喜欢喝美式咖啡和茶", 0.7),
        fact(other_owner, "The user's brother lives in Lisbon", 0.8),
    ]
    for person in (owner, other_owner):
        for text in ("推荐一家咖啡店", "my sister in Lisbon", "杭州的后端开发"):
            terms = query_terms(text)
            with mock.patch("memory_app.selectors._ranked_rows", wraps=_ranked_rows) as built:
                rows = _RANKED_ROWS.rows(3, weight, owner_id=person.pk, terms=terms)
            builds += built.call_count
            assert rows == list(_ranked_rows(owner_id=person.pk, terms=terms, limit=3))
            assert rows  # the seed list at least
            assert all(row[_FIELDS.index("owner_id")] == person.pk for row in rows)
    assert builds <= 1  # built and compiled once (none if an earlier test compiled it)
    lisbon = facts_for_injection(owner=other_owner, limit=3, text="Lisbon", mode="relevance")
    assert lisbon[0].content == "The user's brother lives in Lisbon"
    assert lisbon[0].created_at == others[1].created_at  # a datetime, as the ORM reads it


def test_seed_mode_ignores_the_message(owner, store, settings):
    settings.ETHAN_INJECTION = "seed"
    assert facts_for_injection(owner=owner, limit=3, text="咖啡") == facts_for_injection(
        owner=owner, limit=3, mode="seed"
    )


def test_bm25_prefers_rare_terms_and_short_documents():
    docs = [
        ("a", search_tokens("coffee coffee tea")),
        ("b", search_tokens("coffee")),
        ("c", search_tokens("tea lisbon trip planning notes")),
    ]
    ranked = bm25(query_terms("lisbon coffee"), docs, total_docs=3)
    assert ranked[0].item == "c"  # "lisbon" is rarer than "coffee"
    assert {r.item for r in ranked} == {"a", "b", "c"}
    assert bm25(query_terms("zebra"), docs, total_docs=3) == []


def test_message_and_fact_search_in_both_languages(owner, other_owner, store, make_session):
    trip = make_session(
        owner, "我们下个月去里斯本旅行", "好的，先订机票。", "Lisbon hotels near Alfama?"
    )
    make_session(owner, "今天的周报写完了", "辛苦了")
    make_session(other_owner, "里斯本的事情别告诉别人", "好")
    found = messages_search(owner=owner, query="里斯本 旅行", limit=5)
    # The turn that says it, then the reply to it (indexed with the turn before it).
    assert [(r.item.session_id, r.item.seq) for r in found] == [(trip.pk, 1), (trip.pk, 2)]
    english = messages_search(owner=owner, query="hotel in lisbon", limit=5)
    # The turn that says it first, then its neighbour.
    assert [(r.item.session_id, r.item.seq) for r in english] == [(trip.pk, 3), (trip.pk, 2)]
    assert [r.item.content for r in facts_search(owner=owner, query="咖啡")] == [
        "用户喜欢喝美式咖啡"
    ]


def test_memory_search_merges_kinds_and_cites_sources(owner, store, make_session):
    session = make_session(owner, "我喜欢喝咖啡，尤其是美式", "记下了")
    hits = memory_search(owner=owner, query="美式咖啡", scope="all", limit=5)
    assert {hit.kind for hit in hits} == {"fact", "message"}
    message = next(hit for hit in hits if hit.kind == "message")
    assert message.cited().startswith(f"[message {session.pk} #1 ")
    assert " user] 我喜欢喝咖啡，尤其是美式" in message.cited()
    with pytest.raises(ValueError, match="unknown scope"):
        memory_search(owner=owner, query="x", scope="everything")


def test_a_first_conversation_is_searched_without_a_kind_scoring_zero(
    owner, make_session, embedder_on
):
    """A new person's memory: one short session, no fact yet, and a question with no word in
    it: its messages are found by meaning alone, scored 0. The merge of the kinds ranks such
    hits as they scored rather than dividing by that 0 (a ZeroDivisionError: a 500 on /v1)."""
    from agent_app.vectors import vectors_write

    session = make_session(owner, "What is my cat called?", "I don't remember you telling me that.")
    vectors_write(owner_id=owner.pk, session_id=session.pk)
    hits = memory_search(owner=owner, query="Where do I live?")
    assert hits and all(hit.kind == "message" for hit in hits)
