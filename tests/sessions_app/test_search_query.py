"""How a question becomes a search: neighbours' words weighted below a row's own, and the
messages from the time a question names preferred."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from sessions_app import search
from sessions_app.models import Message
from sessions_app.search import CONTEXT_MARK, bm25, search_tokens, with_context
from sessions_app.selectors import messages_search


@pytest.fixture
def tuning(monkeypatch):
    """Set search.TUNING for one test: tuning(time_boost=1.0, …)."""

    def set_(**changes) -> None:
        monkeypatch.setattr(search, "TUNING", replace(search.TUNING, **changes))

    return set_


def test_context_is_stored_after_the_mark():
    own = search_tokens("I visited Lisbon")
    assert with_context(own, "Where did you go?\nLovely city") == " visit lisbon | go love citi "
    # The mark is there with no context yet: the next turn's words are appended after it.
    assert with_context(own, "") == f" visit lisbon {CONTEXT_MARK} "
    assert with_context("", "Lisbon") == " | lisbon "


def test_own_words_outrank_the_neighbours_words(tuning):
    docs = [
        ("reply", with_context(search_tokens("It was lovely"), "I visited Lisbon")),
        ("turn", with_context(search_tokens("I visited Lisbon"), "It was lovely")),
        ("other", with_context(search_tokens("Porto next year"), "")),
    ]
    tuning(context_weight=0.5)
    assert [r.item for r in bm25(["lisbon"], docs, 3)] == ["turn", "reply"]
    # Weight 0: the neighbours' words find nothing.
    tuning(context_weight=0.0)
    assert [r.item for r in bm25(["lisbon"], docs, 3)] == ["turn"]
    # A row written before the mark existed counts all its words as its own.
    assert [r.item for r in bm25(["lisbon"], [("old", " lisbon lisbon trip ")], 1)] == ["old"]


def _said(session, seq: int, when: datetime) -> None:
    Message.objects.filter(session=session, seq=seq).update(created_at=when)


@pytest.mark.django_db
def test_messages_from_the_time_a_question_names_come_first(owner, make_session, tuning):
    may = make_session(owner, "We walked around Lisbon", "Sounds great")
    october = make_session(owner, "Lisbon again! Lisbon in the rain", "Nice")
    _said(may, 1, datetime(2023, 5, 8, 14, tzinfo=UTC))
    _said(october, 1, datetime(2023, 10, 2, 9, tzinfo=UTC))
    now = datetime(2023, 10, 20, tzinfo=UTC)

    def first(query: str) -> str:
        return messages_search(owner=owner, query=query, limit=1, now=now)[0].item.session_id

    tuning(time_boost=0.0)
    assert first("what did I say about Lisbon in May?") == october.pk  # the better BM25 match
    tuning(time_boost=1.0, time_after_days=0)
    assert first("what did I say about Lisbon in May?") == may.pk
    assert first("Lisbon, three weeks ago") == october.pk  # counted from `now`
    assert first("我5月8日说的 Lisbon") == may.pk
    # Naming no time, or a time with no message, changes nothing.
    assert first("Lisbon") == october.pk
    assert first("Lisbon in 2019") == october.pk
