"""The limits `ethan serve` sets on a request's head, as a reverse proxy would (ethan_site.serve,
docs/operations.md "The server's HTTP limits"), over real sockets: a head that does not arrive
in time, one too big, too many headers, too many cookies."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

import pytest

from ethan_site.serve import COOKIE_BYTES, HEAD_BYTES, HEADER_LINE_BYTES, HEADER_LINES
from tests.web_server import Server, migrated_home, web_server

# Short, so that the test waits little; the default is 10 s.
HEADER_TIMEOUT = "3"
# How long a socket waits for the server before the test gives up: a guard, not a measure.
HANG_GUARD_SECONDS = 60


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    home = migrated_home(tmp_path_factory.mktemp("limits") / "home")
    with web_server(home, ETHAN_HEADER_TIMEOUT=HEADER_TIMEOUT) as running:
        yield running


def connect(server: Server) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=HANG_GUARD_SECONDS)


def answer(connection: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    received = b""
    with connection:
        while True:
            try:
                chunk = connection.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                return received
            received += chunk
    return received


def one_response(connection: socket.socket) -> bytes:
    """One response on a connection kept open: its head, and a body of its Content-Length."""
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = connection.recv(65536)
        assert chunk, received
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    [length] = [
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    ]
    while len(body) < length:
        chunk = connection.recv(65536)
        assert chunk, received
        body += chunk
    return head + b"\r\n\r\n" + body


def status_of(received: bytes) -> int | None:
    return int(received.split(b" ", 2)[1]) if received.startswith(b"HTTP/1.1 ") else None


def head(*headers: bytes, path: bytes = b"/nothing-here") -> bytes:
    lines = [b"GET " + path + b" HTTP/1.1", b"Host: localhost", *headers, b"Connection: close"]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def test_a_head_that_does_not_arrive_in_time_is_answered_408_and_closed(server):
    half_sent = connect(server)
    half_sent.sendall(b"GET /nothing-here HTTP/1.1\r\nHost: localhost\r\nX-Slow: a")
    silent = connect(server)  # connected, never a byte
    kept_alive = connect(server)
    kept_alive.sendall(b"GET /nothing-here HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert status_of(one_response(kept_alive)) == 404
    kept_alive.sendall(b"GET /nothing-here HTTP/1.1\r\nHost: loc")  # the next request, half

    for connection in (half_sent, kept_alive):
        received = answer(connection)
        assert status_of(received) == 408, received
        assert b"connection: close" in received.lower()
    assert answer(silent) == b""  # closed without a word: no request had begun


def test_a_head_within_every_limit_is_served(server):
    cookies = "a=" + "x" * (COOKIE_BYTES - 200)
    headers = {f"X-Extra-{index}": "v" * 100 for index in range(HEADER_LINES - 10)}
    answered = server.request("GET", "/nothing-here", headers={"Cookie": cookies, **headers})
    assert answered.status == 404  # Django's answer: the request got through


@pytest.mark.parametrize(
    ("sent", "status"),
    [
        # One header line too long.
        (head(b"X-Big: " + b"v" * HEADER_LINE_BYTES), 431),
        # A 1 MB cookie.
        (head(b"Cookie: a=" + b"x" * 1_000_000), 431),
        # Too many headers.
        (head(*[b"X-H%d: v" % index for index in range(HEADER_LINES + 1)]), 431),
        # The cookies in two headers, each within a line's limit, too much together.
        (
            head(
                *[
                    b"Cookie: %s=%s" % (name, b"x" * (COOKIE_BYTES // 2 + 10))
                    for name in (b"a", b"b")
                ]
            ),
            431,
        ),
        # Lines each within the limit, too much in all.
        (
            head(*[b"X-H%d: %s" % (index, b"v" * 4000) for index in range(HEAD_BYTES // 4000 + 1)]),
            431,
        ),
        # The request line.
        (head(path=b"/" + b"a" * HEADER_LINE_BYTES), 414),
    ],
    ids=["long line", "1 MB cookie", "too many", "cookies together", "head", "request line"],
)
def test_a_head_past_a_limit_is_refused(server, sent, status):
    connection = connect(server)
    # Refused before all was sent: the answer is waiting all the same.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        connection.sendall(sent)
    received = answer(connection)
    assert status_of(received) == status, received[:200]


def test_a_header_that_never_ends_is_refused_once_too_long(server):
    # 100 KB of one header's value, its end never sent: refused for its size, not kept until
    # the deadline (which would answer 408).
    connection = connect(server)
    connection.sendall(b"GET /nothing-here HTTP/1.1\r\nHost: localhost\r\nX-Endless: ")
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        for _ in range(100):
            connection.sendall(b"v" * 1024)
    received = answer(connection)
    assert status_of(received) == 431, received[:200]
