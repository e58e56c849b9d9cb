"""Many clients on one session at once, on PostgreSQL: turns are answered one at a time, so every
user message is followed by its own reply (security finding 11: interleaved turns paired rounds
wrongly in every later context)."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

import ethan_llm
from sessions_app.models import ChatSession, Message
from tests.services.conftest import all_at_once, wait_for

CLIENTS = 20


@pytest.fixture
def slow_model(monkeypatch):
    """The offline model, thinking for `delay` seconds first: without one-at-a-time turns, the
    other clients' messages land while it thinks. The offline model acknowledges the latest
    user message of the context it is sent, so a reply names the question it answered."""
    real = ethan_llm.stream
    state = {"delay": 0.05}

    def stream(**kwargs):
        time.sleep(state["delay"])
        yield from real(**kwargs)

    monkeypatch.setattr(ethan_llm, "stream", stream)
    return state


def post_all(clients, bodies) -> tuple[list, list[BaseException]]:
    """POST /api/chat from one thread per body, all released at once; each thread has (and
    closes) its own database connection."""
    barrier = threading.Barrier(len(bodies))
    answers: list = [None] * len(bodies)
    errors: list[BaseException] = []

    def post(index: int) -> None:
        try:
            barrier.wait()
            answers[index] = clients[index].post("/api/chat", bodies[index], format="json")
        except BaseException as exc:  # reported in the test's thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=post, args=(index,)) for index in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers, errors


def noted(text: str) -> str:
    return f"(offline mode) Noted: {text}"


@pytest.mark.django_db(transaction=True)
def test_twenty_clients_on_one_session_each_get_their_own_reply(
    services_ready, owner, make_session, api_for, llm_config, slow_model, settings
):
    # The order of one person's turns, not their cap (ETHAN_TURNS_PER_PERSON, tested in
    # tests/channels): all twenty are taken.
    settings.ETHAN_TURNS_PER_PERSON = CLIENTS
    session = make_session(owner, "let us begin", "sure", channel=ChatSession.Channel.API)
    clients = [api_for(owner) for _ in range(CLIENTS)]  # the token exists before the race
    questions = [f"question {n:02d}: where were we" for n in range(CLIENTS)]
    bodies = [{"message": q, "session_id": session.pk, "model": "offline"} for q in questions]

    answers, errors = post_all(clients, bodies)

    assert errors == []
    for question, response in zip(questions, answers, strict=True):
        assert response.status_code == 200, response.content
        assert response.json()["reply"] == noted(question)  # its own answer came back
    rows = list(
        Message.objects.filter(session=session)
        .order_by("seq")
        .values_list("seq", "role", "content")
    )
    assert [seq for seq, _role, _content in rows] == list(range(1, 2 * CLIENTS + 3))  # gap-free
    # Every round is one user message and its own reply, right after it: strictly user,
    # assistant, user, assistant… and each reply acknowledges the message before it.
    assert [role for _seq, role, _content in rows] == ["user", "assistant"] * (CLIENTS + 1)
    for (_seq, _role, asked), (_next, _reply_role, reply) in zip(
        rows[2::2], rows[3::2], strict=True
    ):
        assert reply == noted(asked)
    assert sorted(content for _seq, role, content in rows[2:] if role == "user") == questions
    session = ChatSession.objects.get(pk=session.pk)
    assert (session.round_count, session.last_seq) == (CLIENTS + 1, 2 * CLIENTS + 2)
    assert (session.turn_claim, session.turn_claimed_at) == ("", None)  # all given back


@pytest.mark.django_db(transaction=True)
def test_a_turn_that_cannot_get_the_session_in_time_is_409_and_writes_nothing(
    services_ready, owner, make_session, api_for, llm_config, slow_model, settings
):
    settings.ETHAN_TURN_WAIT_SECONDS = 0.3
    slow_model["delay"] = 2.0  # the first turn outlasts the second one's wait
    session = make_session(owner, "let us begin", "sure", channel=ChatSession.Channel.API)
    clients = [api_for(owner) for _ in range(2)]
    bodies = [
        {"message": f"client {n}", "session_id": session.pk, "model": "offline"} for n in range(2)
    ]

    answers, errors = post_all(clients, bodies)

    assert errors == []
    assert sorted(response.status_code for response in answers) == [200, 409]
    [answered] = [response for response in answers if response.status_code == 200]
    [refused] = [response for response in answers if response.status_code == 409]
    assert refused.json() == {
        "detail": "another reply in this conversation is still being written; nothing was stored: "
        "retry",
        "session_id": session.pk,
        "retryable": True,
    }
    asked = bodies[answers.index(answered)]["message"]
    assert list(
        Message.objects.filter(session=session).order_by("seq").values_list("role", "content")
    ) == [
        ("user", "let us begin"),
        ("assistant", "sure"),
        ("user", asked),
        ("assistant", noted(asked)),
    ]


@pytest.mark.django_db(transaction=True)
def test_a_second_turn_on_a_new_sessions_id_waits_for_its_first(
    services_ready, owner, api_for, llm_config, slow_model
):
    """A client sees a new session's id (GET /api/sessions) while its first turn is still
    answered, and sends a turn to it: the new session was created claimed, so that turn waits
    for the first reply instead of slipping its question in before it."""
    slow_model["delay"] = 1.0
    first_client, second_client = api_for(owner), api_for(owner)

    def ask_first():
        body = {"message": "the first question", "model": "offline"}
        return first_client.post("/api/chat", body, format="json")

    def ask_second():
        assert wait_for(lambda: second_client.get("/api/sessions").json()["count"] == 1)
        [listed] = second_client.get("/api/sessions").json()["results"]
        body = {"message": "the second question", "session_id": listed["id"], "model": "offline"}
        return second_client.post("/api/chat", body, format="json")

    turns = iter([ask_first, ask_second])
    answers = all_at_once(lambda: next(turns)(), 2)

    assert [response.status_code for response in answers] == [200, 200]
    session = ChatSession.objects.get()
    assert list(
        Message.objects.filter(session=session).order_by("seq").values_list("role", "content")
    ) == [
        ("user", "the first question"),
        ("assistant", noted("the first question")),
        ("user", "the second question"),
        ("assistant", noted("the second question")),
    ]
    assert (session.turn_claim, session.turn_claimed_at) == ("", None)
