"""The server's Django handler (ethan_site.asgi.DjangoHandler) runs a request's middleware and
view as one call on a thread, not a hop to a thread and back for each middleware's hooks."""

from __future__ import annotations

import asyncio
import json

import pytest
from asgiref import sync

from ethan_site.asgi import django_application


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
    asyncio.run(django_application(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], dict(start["headers"]), body


@pytest.mark.django_db(transaction=True)
def test_a_request_goes_to_a_thread_three_times_not_once_per_middleware(monkeypatch, owner):
    """request_started's receivers, the middleware with the view, and the response's close:
    three calls into a thread. Django's own ASGI handler makes about twenty for the same
    request (each middleware's process_request and process_response)."""
    from rest_framework.authtoken.models import Token

    token = Token.objects.create(user=owner).key
    calls: list[str] = []
    original = sync.SyncToAsync.__call__

    async def counted(self, *args, **kwargs):
        calls.append(getattr(self.func, "__qualname__", repr(self.func)))
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(sync.SyncToAsync, "__call__", counted)
    status, headers, body = _call("/api/facts", {"Authorization": f"Token {token}"})
    assert status == 200, body
    assert isinstance(json.loads(body), dict | list)
    # The middleware ran: their headers are on the answer.
    assert headers[b"X-Frame-Options"] == b"DENY"
    assert len(calls) <= 3, calls


def _post(path: str, body: dict, headers: dict[str, str]) -> tuple[int, dict[bytes, bytes], bytes]:
    content = json.dumps(body).encode()
    headers = {**headers, "Content-Length": str(len(content))}
    return _call(path, headers, method="POST", body=content)


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


def test_a_request_goes_to_the_least_busy_thread():
    """A slow view holds up its own thread only: while one of the handler's threads is busy,
    every new request goes to another, not to each thread in turn."""
    import threading

    handler = django_application
    assert len(handler.threads) >= 2
    busy, release = handler.threads[0], threading.Event()
    busy.submit(release.wait, 10)
    try:
        chosen = {id(handler.thread()) for _ in range(6)}
        assert id(busy) not in chosen
        assert len(chosen) == len(handler.threads) - 1
    finally:
        release.set()
    # Once it is free again, it takes its turn.
    deadline = 50
    while busy.pending and deadline:
        threading.Event().wait(0.1)
        deadline -= 1
    assert id(busy) in {id(handler.thread()) for _ in range(len(handler.threads))}
