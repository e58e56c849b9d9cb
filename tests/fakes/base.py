from __future__ import annotations

import hashlib
import json
import math
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    # Whether the reply went out as a stream, and when (time.monotonic(), as its write began)
    # each chunk was sent, so a test can order what its consumer saw against what the server
    # had sent.
    streamed: bool = False
    chunk_times: list[float] = field(default_factory=list)


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds to wait before answering (timeouts)
    # When the request asks for a stream, a 2xx body is sent in that protocol's streaming
    # form: the first chunk `first_chunk_ms` after the headers, then one every `chunk_ms`.
    first_chunk_ms: float = 0.0
    chunk_ms: float = 0.0
    # Fail mid-stream after this many chunks: "close" drops the connection (the chunked body
    # stops short, as when a server dies), "error" sends the protocol's error event and ends.
    fail_after: int | None = None
    fail_with: Literal["close", "error"] = "close"


class ProtocolError(Exception):
    """A request the real service would refuse; the fake answers 400."""


def schema_nodes(schema: Any, path: tuple[str, ...] = ()):
    """Every sub-schema of a JSON schema with its path ("properties", "facts", "items", …), the
    schema itself first: what a provider walks to check a schema it is sent."""
    if not isinstance(schema, dict):
        return
    yield path, schema
    for key in ("properties", "$defs", "definitions"):
        for name, sub in (schema.get(key) or {}).items():
            yield from schema_nodes(sub, (*path, key, name))
    if isinstance(schema.get("items"), dict):
        yield from schema_nodes(schema["items"], (*path, "items"))
    for key in ("anyOf", "oneOf", "allOf"):
        for index, sub in enumerate(schema.get(key) or ()):
            yield from schema_nodes(sub, (*path, key, str(index)))


def is_object_schema(node: dict[str, Any]) -> bool:
    kind = node.get("type")
    if kind is None:
        return "properties" in node
    return kind == "object" or (isinstance(kind, list) and "object" in kind)


def hashed_embedding(text: str, dim: int) -> list[float]:
    """A fake embedding: each word of `text` adds ±1 at a place its hash picks, the sum
    L2-normalised. Deterministic, and texts sharing words are near each other, so a test can
    tell which vector belongs to which text."""
    vector = [0.0] * dim
    for word in re.findall(r"\w+", text.lower()):
        digest = hashlib.sha256(word.encode()).digest()
        index = int.from_bytes(digest[:4], "little") % dim
        vector[index] += 1.0 if digest[4] & 1 else -1.0
    norm = math.sqrt(sum(value * value for value in vector))
    if not norm:  # no word at all: a fixed unit vector, as a real model gives something
        return [1.0] + [0.0] * (dim - 1)
    return [value / norm for value in vector]


def sse(data: Any, event: str | None = None, newline: str = "\n") -> bytes:
    """One server-sent event: an optional `event:` line, one `data:` line, a blank line."""
    head = f"event: {event}{newline}" if event else ""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"{head}data: {payload}{newline}{newline}".encode()


class FakeServer:
    """A threaded HTTP server on 127.0.0.1 with a port of its own.

    Every reply is scripted in its non-streamed form; when the request asks for a stream
    (`wants_stream`), the subclass cuts the same reply into its protocol's events
    (`stream_events`), so one script serves both kinds of request.
    """

    # The most characters of text (or of tool arguments' JSON) in one streamed chunk.
    piece_chars = 4

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.script: deque[Reply] = deque()
        # Answers requests when the script is empty: a function of the request, for tests
        # where many calls of different kinds interleave.
        self.responder: Callable[[Recorded], Reply] | None = None
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                fake._handle(self)

            def do_GET(self) -> None:
                fake._handle(self)

            def do_PATCH(self) -> None:
                fake._handle(self)

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def reply(
        self,
        body: Any,
        status: int = 200,
        headers: dict[str, str] | None = None,
        delay: float = 0.0,
        *,
        first_chunk_ms: float = 0.0,
        chunk_ms: float = 0.0,
        fail_after: int | None = None,
        fail_with: Literal["close", "error"] = "close",
    ) -> None:
        """Queue one reply (see Reply for the streaming options)."""
        self.script.append(
            Reply(
                status=status,
                body=body,
                headers=headers or {},
                delay=delay,
                first_chunk_ms=first_chunk_ms,
                chunk_ms=chunk_ms,
                fail_after=fail_after,
                fail_with=fail_with,
            )
        )

    # Protocol-specific subclasses override these.
    def answer(self, recorded: Recorded) -> Reply | None:
        """A reply the fake computes from the request alone (embeddings), used when nothing is
        scripted, before the responder: a test's responder for chats never sees them."""
        return None

    def check(self, recorded: Recorded) -> None:
        """Raise ProtocolError for a request the real service would refuse."""

    def error_body(self, status: int, message: str) -> Any:
        return {"error": {"message": message}}

    def wants_stream(self, recorded: Recorded) -> bool:
        """Whether the request asks for a streamed answer."""
        return False

    def stream_events(self, body: Any, recorded: Recorded) -> list[bytes]:
        """The non-streamed reply `body` as this protocol's stream: one SSE event per chunk."""
        raise NotImplementedError

    def stream_error_event(self) -> bytes:
        """The event this protocol sends when it fails after the stream has begun."""
        raise NotImplementedError

    def split(self, text: str) -> list[str]:
        """Text in streamed pieces of at most piece_chars characters (none for "")."""
        size = self.piece_chars
        return [text[i : i + size] for i in range(0, len(text), size)]

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("content-length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            body = raw.decode("utf-8", "replace")
        recorded = Recorded(
            method=handler.command,
            path=handler.path,
            headers={k.lower(): v for k, v in handler.headers.items()},
            body=body,
        )
        with self._lock:
            self.requests.append(recorded)
            try:
                self.check(recorded)
                if self.script:
                    reply = self.script.popleft()
                elif (computed := self.answer(recorded)) is not None:
                    reply = computed
                elif self.responder is not None:
                    reply = self.responder(recorded)
                else:
                    reply = Reply(500, self.error_body(500, "fake: no reply scripted"))
            except ProtocolError as exc:
                reply = Reply(400, self.error_body(400, str(exc)))
        if reply.delay:
            time.sleep(reply.delay)
        if reply.status < 400 and self.wants_stream(recorded):
            self._send_stream(handler, recorded, reply)
            return
        payload = json.dumps(reply.body).encode()
        try:
            handler.send_response(reply.status)
            handler.send_header("content-type", "application/json")
            handler.send_header("content-length", str(len(payload)))
            for name, value in reply.headers.items():
                handler.send_header(name, value)
            handler.end_headers()
            handler.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test): nothing to answer

    def _send_stream(
        self, handler: BaseHTTPRequestHandler, recorded: Recorded, reply: Reply
    ) -> None:
        """Send the reply as server-sent events in a chunked HTTP/1.1 body, as the real APIs
        do: a connection dropped mid-body is then an error to the client, not a short body."""
        recorded.streamed = True
        frames = self.stream_events(reply.body, recorded)
        handler.protocol_version = "HTTP/1.1"
        try:
            handler.send_response(reply.status)
            handler.send_header("content-type", "text/event-stream")
            handler.send_header("transfer-encoding", "chunked")
            handler.send_header("cache-control", "no-cache")
            handler.send_header("connection", "close")  # one request per connection, as before
            for name, value in reply.headers.items():
                handler.send_header(name, value)
            handler.end_headers()
            for index, frame in enumerate(frames):
                if index == reply.fail_after:
                    if reply.fail_with == "error":
                        self._write_chunk(handler, self.stream_error_event())
                        handler.wfile.write(b"0\r\n\r\n")
                    # "close": return without the last chunk; the server closes the socket.
                    return
                pause = reply.first_chunk_ms if index == 0 else reply.chunk_ms
                if pause:
                    time.sleep(pause / 1000)
                # Stamped as the write starts: no client can have the chunk before this time.
                recorded.chunk_times.append(time.monotonic())
                self._write_chunk(handler, frame)
            handler.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped reading

    @staticmethod
    def _write_chunk(handler: BaseHTTPRequestHandler, data: bytes) -> None:
        handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        handler.wfile.flush()
