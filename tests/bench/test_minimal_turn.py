"""The bench-only minimal turn (bench/urls.py): what it stores, and how many statements it
takes (the yardstick bench.chat_throughput measures /api/chat against)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from bench.chat_throughput import transaction_control
from bench.urls import MINIMAL_REPLY, minimal_turn
from memory_app.models import Fact, Summary, WorkingState
from sessions_app.models import ChatSession, Message

# transaction=True: the turns' transactions are real ones, so the statements counted are the
# ones a server runs (inside a test's transaction they would be savepoints, counted too).
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("bench.urls")]


def api(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return client


def test_each_call_stores_one_question_and_one_reply_with_gap_free_seqs(owner):
    client = api(owner)
    session_id = None
    texts = ["plan the launch of the memory server", "我最近在学钢琴", "I prefer short answers"]
    for text in texts:
        body = {"message": text} | ({"session_id": session_id} if session_id else {})
        response = client.post("/bench/minimal-turn", body, format="json")
        assert response.status_code == 200, response.content
        answer = response.json()
        assert answer["reply"] == MINIMAL_REPLY
        assert answer["model"] == "offline"
        assert answer["usage"]["input_tokens"] > 0
        session_id = session_id or answer["session_id"]
        assert answer["session_id"] == session_id

    rows = list(
        Message.objects.filter(session_id=session_id)
        .order_by("seq")
        .values_list("seq", "role", "content")
    )
    assert [seq for seq, _, _ in rows] == [1, 2, 3, 4, 5, 6]
    assert [role for _, role, _ in rows] == ["user", "assistant"] * 3
    assert [content for _, role, content in rows if role == "user"] == texts
    session = ChatSession.objects.get(pk=session_id)
    assert (session.last_seq, session.round_count, session.turn_claim) == (6, 3, "")
    assert session.owner == owner
    assert session.title == texts[0][:40]
    # The reply is found by its question's words, as the product's are.
    reply = Message.objects.get(session_id=session_id, seq=2)
    assert "launch" in reply.search_tokens


def test_refusals_store_nothing(owner, other_owner):
    first = minimal_turn(owner=owner, text="hello there")
    response = api(other_owner).post(
        "/bench/minimal-turn", {"message": "hi", "session_id": first.session_id}, format="json"
    )
    assert response.status_code == 404
    ChatSession.objects.filter(pk=first.session_id).update(
        turn_claim="someone-else", turn_claimed_at=timezone.now()
    )
    response = api(owner).post(
        "/bench/minimal-turn", {"message": "hi", "session_id": first.session_id}, format="json"
    )
    assert response.status_code == 409
    assert Message.objects.filter(session_id=first.session_id).count() == 2
    assert (
        api(owner).post("/bench/minimal-turn", {"message": " "}, format="json").status_code == 400
    )


def statements(captured: CaptureQueriesContext) -> tuple[int, int]:
    """(all queries logged, of which transaction control: BEGIN, COMMIT, savepoints)."""
    sqls = [query["sql"] for query in captured.captured_queries]
    return len(sqls), sum(1 for sql in sqls if transaction_control(sql))


def test_statements_per_turn_are_the_same_at_every_history_size(owner):
    """Seven statements for a first turn; nine for every later one, with or without a working
    state and warm summaries, and whatever the history; plus two transactions' BEGIN and
    COMMIT each (the counted turns' contexts are checked too)."""
    with CaptureQueriesContext(connection) as first:
        session_id = minimal_turn(owner=owner, text="how should I plan the release?").session_id
    assert statements(first) == (7 + 4, 4)

    Fact.objects.create(
        owner=owner, content="The user ships the release on Tuesday", source="tool", confidence=0.9
    )
    counts = []
    for index in range(30):
        if index == 12:
            # As a caught-up consolidator leaves it: rounds 1-5 summarised, nothing extracted.
            WorkingState.objects.create(session_id=session_id, compressed_through=5)
            Summary.objects.create(
                session_id=session_id, first_round=1, last_round=5, text="rounds 1-5", model="x"
            )
        with CaptureQueriesContext(connection) as captured:
            turn = minimal_turn(
                owner=owner, text=f"what about the release? (#{index})", session_id=session_id
            )
        counts.append(statements(captured))
    assert set(counts) == {(9 + 4, 4)}, counts
    # The last turn's context: the summary block, then the verbatim rounds as the product's
    # working memory bounds them (31 rounds, 5 summarised: from round 11 on, the one of turn
    # #9), ending with its own question; the injected fact is in the system prompt.
    assert turn.context[0].content.endswith("rounds 1-5")
    assert turn.context[2].content == "what about the release? (#9)"
    assert turn.context[-1].content == "what about the release? (#29)"
    assert len(turn.context) == 2 + 2 * 21 - 1
    assert "ships the release on Tuesday" in turn.system
    assert Message.objects.filter(session_id=session_id).count() == 62
