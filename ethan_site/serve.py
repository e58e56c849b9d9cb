"""`ethan serve` (and `make serve`): the ASGI application (ethan_site.asgi) under uvicorn, one
event loop holding every open conversation.

One process by default: one process on an event loop holds many streaming replies, since none
holds a thread while the model writes. More processes (--workers, WEB_CONCURRENCY) use more
cores: they share the listening socket and the kernel gives each connection to any of them, so
the server tells them how many they are (ETHAN_SERVE_PROCESSES) and /mcp is then stateless, each
request served whole by the process that gets it (an MCP session kept in one process's memory
would be unknown to the next request). The turn caps (ETHAN_TURNS_PER_PROCESS,
ETHAN_TURNS_PER_PERSON) are then per process; the throttles stay shared, in the cache
(docs/operations.md, "More than one process").

On SIGTERM (or Ctrl-C) the server stops listening, takes no new turn (503 with Retry-After on a
connection still open), ends MCP event streams, and lets the replies being written finish for up
to ETHAN_DRAIN_SECONDS; those still running then are stored as far as they were written, marked
interrupted. With several processes, uvicorn's supervisor passes the SIGTERM on to each, which
stops listening, lets its open requests finish (up to the same limit), then drains its turns.

The server also sets the limits a reverse proxy in front would set on a request's head (its
request line and headers), which uvicorn does not: a deadline for the head to arrive, and caps
on its size, its number of headers and the cookies (HttpLimitsProtocol; docs/operations.md,
"The server's HTTP limits").
"""

from __future__ import annotations

import asyncio
import os
from types import FrameType

import uvicorn
from django.conf import settings
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

# A request's head, as nginx and Apache cap it by default: the request line at 8 KiB (414 past
# it), each header line at 8 KiB, 100 headers, the cookies at 8 KiB and the head at 32 KiB (431
# past any of them). Ethan's own headers are far below: a token, a session cookie, a CSRF one.
REQUEST_LINE_BYTES = 8 * 1024
HEADER_LINE_BYTES = 8 * 1024
HEADER_LINES = 100
COOKIE_BYTES = 8 * 1024
HEAD_BYTES = 32 * 1024


class _Refused(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class HttpLimitsProtocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol (httptools, the one it picks itself) with a proxy's limits
    on a request's head.

    The head must have arrived ETHAN_HEADER_TIMEOUT seconds after the connection opened, or
    after the request's first byte on a kept-alive connection: otherwise 408 and the connection
    is closed (a connection that has sent nothing is closed without a word). uvicorn's own
    keep-alive timeout starts only after a response, and any byte resets it, so without this a
    client sending a header a minute, or nothing, held its connection for ever. The deadline
    covers the head only: a body, and the answer streamed back, take their time.

    The sizes are counted as the head arrives: the parts httptools reports (the URL's pieces,
    each header once whole), and the chunks received while a head is incomplete, so a header
    that never ends, or is sent a byte at a time, is refused once it is too long, not kept
    until it ends.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._head_deadline: asyncio.TimerHandle | None = None
        self._in_head = False  # a request has begun and its headers are not all here
        self._head_reported = 0  # bytes of the head httptools has reported
        self._head_received = 0  # bytes of chunks received wholly inside the head
        self._url_bytes = 0
        self._header_lines = 0
        self._cookie_bytes = 0
        self._refusal: _Refused | None = None
        self._message_ended_in_chunk = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_deadline_arm()  # a connection that never sends a byte is closed too

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_deadline_cancel()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        inside_head = self._in_head
        self._message_ended_in_chunk = False
        super().data_received(data)
        if not (self._in_head and not self.transport.is_closing()):
            return
        # The head is still arriving. The whole chunk is part of it when the head had begun
        # before it, or began with it: when no request before ended in it (a pipelined one's
        # last bytes), the head's first byte was the chunk's.
        if inside_head or not self._message_ended_in_chunk:
            self._head_received += len(data)
        if max(self._head_reported, self._head_received) > HEAD_BYTES:
            self._refuse(_Refused(431, "Request header fields too large."))

    # The parser's callbacks (a limit passed stops the parser: _stop).
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        self._head_reported = self._head_received = 0
        self._url_bytes = self._header_lines = self._cookie_bytes = 0
        self._head_deadline_arm()

    def on_url(self, url: bytes) -> None:
        self._url_bytes += len(url)
        self._head_reported += len(url)
        if self._url_bytes > REQUEST_LINE_BYTES:
            self._stop(_Refused(414, "Request-URI too long."))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        line = len(name) + len(value) + 4  # "name: value\r\n"
        self._head_reported += line
        self._header_lines += 1
        if name.lower() == b"cookie":
            self._cookie_bytes += len(value)
        if (
            line > HEADER_LINE_BYTES
            or self._header_lines > HEADER_LINES
            or self._cookie_bytes > COOKIE_BYTES
            or self._head_reported > HEAD_BYTES
        ):
            self._stop(_Refused(431, "Request header fields too large."))
        super().on_header(name, value)

    def on_message_complete(self) -> None:
        self._message_ended_in_chunk = True
        super().on_message_complete()

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_deadline_cancel()
        super().on_headers_complete()

    def _stop(self, refusal: _Refused) -> None:
        """Stop parsing, from a callback: httptools raises its error for ours, and uvicorn's
        data_received answers through send_400_response, which sends this refusal."""
        self._refusal = refusal
        raise refusal

    def send_400_response(self, msg: str) -> None:
        self._refuse(self._refusal or _Refused(400, msg))

    def _refuse(self, refusal: _Refused) -> None:
        """Answer `refusal` and close the connection, as uvicorn answers a malformed request."""
        self._refusal = refusal
        if self.transport.is_closing():
            return
        body = refusal.reason.encode("ascii")
        head = [STATUS_LINE[refusal.status]]
        for name, value in self.server_state.default_headers:
            head.extend([name, b": ", value, b"\r\n"])
        head.extend(
            [
                b"content-type: text/plain; charset=utf-8\r\n",
                b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
                b"connection: close\r\n\r\n",
            ]
        )
        self.transport.write(b"".join(head) + body)
        self.transport.close()

    def _head_deadline_arm(self) -> None:
        if self._head_deadline is None:
            self._head_deadline = self.loop.call_later(
                settings.ETHAN_HEADER_TIMEOUT, self._head_deadline_passed
            )

    def _head_deadline_cancel(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_deadline_passed(self) -> None:
        self._head_deadline = None
        if self.transport.is_closing():
            return
        if self._in_head:
            self._refuse(_Refused(408, "Request headers not received in time."))
        else:
            self.transport.close()


class EthanServer(uvicorn.Server):
    """uvicorn's server, telling the application as soon as it is asked to stop (uvicorn tells
    it only after the connections have closed or the limit has passed)."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        from ethan_site.asgi import application

        application.stop()
        super().handle_exit(sig, frame)


def serve(*, host: str, port: int, workers: int = 1) -> None:
    config = uvicorn.Config(
        "ethan_site.asgi:application",
        host=host,
        port=port,
        workers=workers,
        lifespan="on",
        # uvicorn's HTTP/1.1 with a proxy's limits on a request's head (above).
        http="ethan_site.serve:HttpLimitsProtocol",
        # The connections still open after a SIGTERM get the drain's limit; the turns whose
        # clients left are waited for in the application's lifespan, to the same deadline.
        timeout_graceful_shutdown=settings.ETHAN_DRAIN_SECONDS,
        # The client address is the socket's, as Django's throttles expect; a proxy in front
        # is counted by ETHAN_NUM_PROXIES (docs/operations.md).
        proxy_headers=False,
        server_header=False,
        # The path without its query string (ethan_site.access_log).
        access_log=True,
        log_level="info",
    )
    if workers > 1:
        from uvicorn.supervisors import Multiprocess

        # Read by the settings of each worker, which uvicorn spawns with this environment (a
        # fresh interpreter: they import the application, and read the settings, anew).
        os.environ["ETHAN_SERVE_PROCESSES"] = str(workers)
        # Each worker runs uvicorn's own server: it hears of the stop when the connections
        # have closed (the application's lifespan then drains its turns to the same limit).
        Multiprocess(config, sockets=[config.bind_socket()]).run()
        return
    EthanServer(config).run()
