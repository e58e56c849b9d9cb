"""POST /api/chat as Server-Sent Events: the turn's events as they happen, failures as an
`error` event that keeps the message and stores no half reply (SQLite here; PostgreSQL in the
services suite, which runs this file too)."""

from __future__ import annotations

import json
import socket

import pytest
from django.core.signals import request_finished
from django.db import close_old_connections

from sessions_app.models import ChatSession, Message
from tests.web_server import stored_contents

pytestmark = pytest.mark.django_db


def events_of(response) -> list[tuple[str, dict]]:
    """The (event, data) pairs of a text/event-stream body."""
    assert response["Content-Type"] == "text/event-stream"
    raw = b"".join(response.streaming_content).decode()
    parsed = []
    for block in raw.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        parsed.append((fields["event"], json.loads(fields["data"])))
    return parsed


def names(events) -> list[str]:
    return [name for name, _ in events]


def test_stream_true_sends_the_turn_as_events(api_for, owner, fakes):
    openai = fakes["openai"]
    openai.fake.reply(openai.text("Hello there, Ada. How can I help?"))
    response = api_for(owner).post(
        "/api/chat", {"message": "hi", "model": "gpt-4o", "stream": True}, format="json"
    )
    assert response.status_code == 200 and response["Cache-Control"] == "no-cache"
    events = events_of(response)
    assert names(events)[0] == "started" and names(events)[-1] == "done"
    deltas = [data["text"] for name, data in events if name == "delta"]
    assert len(deltas) > 1 and "".join(deltas) == "Hello there, Ada. How can I help?"
    started, done = events[0][1], events[-1][1]
    session = ChatSession.objects.get()
    assert started == {"session_id": session.pk, "path": "fast", "model": "gpt-4o"}
    assert done == {
        "session_id": session.pk,
        "reply": "Hello there, Ada. How can I help?",
        "path": "fast",
        "model": "gpt-4o",
        "usage": {"input_tokens": 11, "output_tokens": 7},
        "model_calls": 1,
        "tool_calls": 0,
    }
    assert list(session.messages.order_by("seq").values_list("role", "content")) == [
        ("user", "hi"),
        ("assistant", "Hello there, Ada. How can I help?"),
    ]


def test_accept_event_stream_asks_for_events_too(api_for, owner, llm_config):
    response = api_for(owner).post(
        "/api/chat", {"message": "hello"}, format="json", HTTP_ACCEPT="text/event-stream"
    )
    events = events_of(response)
    assert names(events)[0] == "started" and names(events)[-1] == "done"
    assert "".join(d["text"] for n, d in events if n == "delta") == events[-1][1]["reply"]


def test_tool_calls_are_events_and_are_stored(api_for, owner, llm_config):
    response = api_for(owner).post(
        "/api/chat", {"message": "记住我喜欢喝美式咖啡", "stream": True}, format="json"
    )
    events = events_of(response)
    assert names(events)[0] == "started" and names(events)[-1] == "done"
    calls = [data for name, data in events if name == "tool_call"]
    results = [data for name, data in events if name == "tool_result"]
    assert calls == [
        {
            "name": "memory_write",
            "arguments": {"content": "用户喜欢喝美式咖啡", "category": "preference"},
        }
    ]
    assert [(r["name"], r["ok"]) for r in results] == [("memory_write", True)]
    assert events[-1][1]["tool_calls"] == 1
    roles = list(ChatSession.objects.get().messages.order_by("seq").values_list("role", flat=True))
    assert roles == ["user", "assistant", "tool", "assistant"]


def test_an_invalid_body_with_stream_is_json_400_before_any_event(api_for, owner, llm_config):
    response = api_for(owner).post("/api/chat", {"message": "", "stream": True}, format="json")
    assert (response.status_code, response["Content-Type"]) == (400, "application/json")
    assert "message" in response.json()
    assert not ChatSession.objects.exists()


def test_a_model_down_before_the_first_delta_is_an_error_event_and_a_retry_works(
    api_for, owner, fakes
):
    openai = fakes["openai"]
    for _ in range(3):  # the first attempt and both retries
        openai.fake.reply(openai.error(503, "overloaded"), status=503)
    api = api_for(owner)
    events = events_of(
        api.post(
            "/api/chat", {"message": "hello", "model": "gpt-4o", "stream": True}, format="json"
        )
    )
    assert names(events) == ["started", "error"]
    error = events[-1][1]
    session = ChatSession.objects.get()
    assert error["kind"] == "model_unavailable" and error["retryable"] is True
    assert error["session_id"] == session.pk and "HTTP 503" in error["detail"]
    assert list(session.messages.order_by("seq").values_list("role", "content")) == [
        ("user", "hello")
    ]

    openai.fake.reply(openai.text("back again"))
    retry = api.post(
        "/api/chat",
        {"message": "hello", "session_id": session.pk, "model": "gpt-4o"},
        format="json",
    )
    assert retry.json()["reply"] == "back again"


def test_a_model_failing_mid_stream_stores_no_half_reply(api_for, owner, fakes):
    openai = fakes["openai"]
    openai.fake.reply(openai.text("a long answer that breaks off"), fail_after=3)
    api = api_for(owner)
    events = events_of(
        api.post(
            "/api/chat", {"message": "hello", "model": "gpt-4o", "stream": True}, format="json"
        )
    )
    assert names(events)[0] == "started" and names(events)[-1] == "error"
    assert "delta" in names(events)  # it had begun
    assert len(openai.fake.requests) == 1  # no silent retry once text was shown
    session = ChatSession.objects.get()
    assert events[-1][1]["session_id"] == session.pk
    assert list(session.messages.order_by("seq").values_list("role", "content")) == [
        ("user", "hello")
    ]
    openai.fake.reply(openai.text("whole this time"))
    retry = events_of(
        api.post(
            "/api/chat",
            {"message": "again", "session_id": session.pk, "model": "gpt-4o", "stream": True},
            format="json",
        )
    )
    assert retry[-1][1]["reply"] == "whole this time"
    assert list(session.messages.order_by("seq").values_list("role", flat=True)) == [
        "user",
        "user",
        "assistant",
    ]
    assert Message.objects.filter(role="assistant", content__startswith="a long").count() == 0


# --- over a real socket, under the server as `make serve` runs it ------------------------------

ANSWER = "Streaming means the first words arrive while the model is still writing the rest."


def _stream_request(server, token: str, body: dict):
    """Open a streamed /api/chat; returns the connection and the response to read from."""
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    connection.request(
        "POST",
        "/api/chat",
        body=json.dumps(body),
        headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
    )
    connection.last_socket = connection.sock  # the response takes it over: kept to cut it
    return connection, connection.getresponse()


@pytest.fixture
def served(tmp_path, paced_openai):
    """The server on a home of its own, its model the OpenAI fake: (server, token)."""
    from tests.web_server import served_on_openai_fake

    with served_on_openai_fake(tmp_path / "home", paced_openai) as served:
        yield served


def test_the_first_delta_reaches_the_client_before_the_model_has_finished(served, paced_openai):
    import time

    server, token = served
    # 20 chunks, the first after 100 ms and one every 50 ms: about a second of writing.
    paced_openai.reply(paced_openai.text(ANSWER), first_chunk_ms=100, chunk_ms=50)
    connection, response = _stream_request(
        server, token, {"message": "what is streaming?", "model": "gpt-4o", "stream": True}
    )
    assert response.status == 200
    first_delta_at = None
    events = []
    for raw in response:  # http.client reads the chunked body line by line as it comes
        line = raw.decode().strip()
        if line.startswith("event: "):
            events.append(line.removeprefix("event: "))
            if events[-1] == "delta" and first_delta_at is None:
                first_delta_at = time.monotonic()
    connection.close()
    [request] = paced_openai.requests
    assert request.streamed and len(request.chunk_times) > 10
    # The client saw the first words before the model had sent its last chunk.
    assert first_delta_at < request.chunk_times[-1]
    assert events[0] == "started" and events[-1] == "done" and events.count("delta") > 10
    assert stored_contents(server.home, "assistant") == [ANSWER]


def test_a_client_that_goes_away_mid_stream_does_not_stop_the_turn(served, paced_openai):
    import time

    server, token = served
    paced_openai.reply(paced_openai.text(ANSWER), first_chunk_ms=50, chunk_ms=50)
    connection, response = _stream_request(
        server, token, {"message": "tell me", "model": "gpt-4o", "stream": True}
    )
    for raw in response:
        if raw.startswith(b"event: delta"):
            break  # the first words, then the client is gone
    connection.last_socket.shutdown(socket.SHUT_RDWR)
    connection.last_socket.close()
    response.close()
    deadline = time.monotonic() + 30
    while not stored_contents(server.home, "assistant") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert stored_contents(server.home, "user") == ["tell me"]
    assert stored_contents(server.home, "assistant") == [ANSWER]


def test_a_stream_nobody_reads_still_answers_and_gives_the_session_back(
    api_for, owner, make_session, llm_config
):
    """The response closed before its first event (a client gone at once): the turn runs."""
    session = make_session(owner, "hi", "hello")
    response = api_for(owner).post(
        "/api/chat",
        {"message": "are you there?", "session_id": session.pk, "stream": True},
        format="json",
    )
    # As Django's test client does around a request: the end of a response must not close
    # the test's own database connection (it holds the test's transaction).
    request_finished.disconnect(close_old_connections)
    try:
        response.close()
    finally:
        request_finished.connect(close_old_connections)
    session.refresh_from_db()
    assert session.turn_claim == ""
    assert list(session.messages.order_by("seq").values_list("role", flat=True)) == [
        "user",
        "assistant",
        "user",
        "assistant",
    ]


def test_a_turn_stopped_before_its_first_event_gives_the_session_back(
    owner, make_session, llm_config
):
    from agent_app.turn import turn_plan, turn_start

    session = make_session(owner, "hi", "hello")
    turn = turn_start(turn_plan(owner=owner, session=session, text="stop at once"))
    assert ChatSession.objects.get(pk=session.pk).turn_claim != ""
    turn.close()
    assert ChatSession.objects.get(pk=session.pk).turn_claim == ""
    assert session.messages.count() == 3  # the message is kept
