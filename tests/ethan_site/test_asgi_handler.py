"""The server's Django application is Django's own ASGI handler, and the turn doors are async
views on it (channels_app.web): a request's answer through it, as an ASGI server calls it."""

from __future__ import annotations

import asyncio
import json

import pytest
from django.core.handlers.asgi import ASGIHandler

from ethan_site.asgi import django_application


async def _served(scope: dict, receive, send) -> None:
    """The request, then the turns it started: they go on after the answer (a broken answer
    does not stop them), as they would on a server's loop. Waited for here, so that the test
    reads what they stored, not while they write."""
    from channels_app.turns import TURNS

    await django_application(scope, receive, send)
    loop = asyncio.get_running_loop()
    running = [task for task in TURNS.tasks if task.get_loop() is loop]
    if running:
        await asyncio.wait(running, timeout=30)


def _call(
    path: str, headers: dict[str, str], method: str = "GET", body: bytes = b""
) -> tuple[int, dict[bytes, bytes], bytes]:
    """One request through the handler, as an ASGI server calls it."""
    sent: list[dict] = []
    asked = False

    async def receive() -> dict:
        nonlocal asked
        if not asked:
            asked = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # the client stays: no disconnect
        raise AssertionError

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    asyncio.run(_served(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], dict(start["headers"]), body


@pytest.mark.django_db(transaction=True)
def test_the_pages_and_apis_are_served_by_djangos_own_handler(owner):
    """No subclass of Django's handler: a REST request goes through it and the middleware."""
    from rest_framework.authtoken.models import Token

    assert type(django_application) is ASGIHandler
    token = Token.objects.create(user=owner).key
    status, headers, body = _call("/api/facts", {"Authorization": f"Token {token}"})
    assert status == 200, body
    assert isinstance(json.loads(body), dict | list)
    assert headers[b"X-Frame-Options"] == b"DENY"


def _post(path: str, body: dict, headers: dict[str, str]) -> tuple[int, dict[bytes, bytes], bytes]:
    content = json.dumps(body).encode()
    headers = {**headers, "Content-Length": str(len(content))}
    return _call(path, headers, method="POST", body=content)


@pytest.mark.django_db(transaction=True)
def test_djangos_middleware_run_in_one_hop_to_the_requests_thread(monkeypatch, owner):
    """ethan_site.serving.middleware_in_one_hop: a request goes to a thread for
    request_started, the middleware (every hook, the view with them), request_finished and the
    response's close, not once more for each hook of each middleware (about sixteen)."""
    from concurrent.futures import ThreadPoolExecutor

    from rest_framework.authtoken.models import Token

    token = Token.objects.create(user=owner).key
    submitted: list[str] = []
    submit = ThreadPoolExecutor.submit

    def counted(self, fn, /, *args, **kwargs):
        submitted.append(getattr(fn, "__qualname__", repr(fn)))
        return submit(self, fn, *args, **kwargs)

    monkeypatch.setattr(ThreadPoolExecutor, "submit", counted)
    status, _, body = _call("/api/facts", {"Authorization": f"Token {token}"})
    assert status == 200, body
    assert len(submitted) <= 5, submitted


@pytest.mark.django_db(transaction=True)
def test_a_turns_answer_that_fails_on_the_loop_is_answered_as_the_middleware_would(
    monkeypatch, owner
):
    """The answer of a started turn is written after the middleware, on the loop: an exception
    there still gets the JSON 500 of a machine-facing URL, and the question stays stored."""
    from rest_framework.authtoken.models import Token

    from sessions_app.models import Message

    async def broken(events):
        raise RuntimeError("a door's bug")

    monkeypatch.setattr("channels_app.rest._json_answer", broken)
    token = Token.objects.create(user=owner).key
    status, headers, body = _post(
        "/api/chat",
        {"message": "Is my question kept?"},
        {"Authorization": f"Token {token}", "Content-Type": "application/json"},
    )
    assert status == 500, body
    assert headers[b"Content-Type"] == b"application/json"
    assert json.loads(body)["detail"].startswith("internal error")
    assert Message.objects.filter(content="Is my question kept?").exists()


@pytest.mark.django_db(transaction=True)
def test_a_turn_streamed_through_the_handler_runs_its_steps_on_the_turn_threads(monkeypatch, owner):
    """A door on an ASGI server's loop: the turn's events as Server-Sent Events, written as they
    come, each database step on one of the turns' own threads (agent_app.turn_io.ASYNC), the
    admission in Django's thread for the request."""
    import threading

    from rest_framework.authtoken.models import Token

    from agent_app import turn_io
    from sessions_app.models import Message

    threads: dict[str, set[str]] = {}
    in_pool = turn_io._in_pool

    def noted(step, *args, **kwargs):
        threads.setdefault(step.__name__, set()).add(threading.current_thread().name)
        return in_pool(step, *args, **kwargs)

    monkeypatch.setattr(turn_io, "_in_pool", noted)
    token = Token.objects.create(user=owner).key
    status, headers, body = _post(
        "/api/chat",
        {"message": "Stream me a hello", "stream": True},
        {"Authorization": f"Token {token}", "Content-Type": "application/json"},
    )
    assert status == 200, body
    assert headers[b"Content-Type"] == b"text/event-stream"
    names = [line.split(": ", 1)[1] for line in body.decode().splitlines() if line[:6] == "event:"]
    assert names[0] == "started" and names[-1] == "done", names
    # The admission (which may wait for another turn on the session) in Django's thread for
    # the request; every step of the turn on the turns' threads.
    admission = threads.pop("_admission")
    assert not any(name.startswith("turn-db") for name in admission), admission
    assert threads and all(
        name.startswith("turn-db") for names in threads.values() for name in names
    ), threads
    assert Message.objects.filter(content="Stream me a hello").exists()


@pytest.mark.django_db(transaction=True)
def test_the_json_errors_middleware_answers_on_the_loop_too(settings):
    """Under ASGI the middleware runs as async code: a body over the limit is refused by its
    declared length, and an API URL's 404 is JSON, not Django's page."""
    settings.ETHAN_MAX_BODY_BYTES = 100
    status, headers, body = _call(
        "/api/chat", {"Content-Length": "5000", "Content-Type": "application/json"}, "POST"
    )
    assert status == 413, body
    assert "ETHAN_MAX_BODY_BYTES" in json.loads(body)["detail"]
    status, headers, body = _call("/api/no-such-thing", {})
    assert status == 404
    assert headers[b"Content-Type"] == b"application/json"
    assert json.loads(body) == {"detail": "not found"}
