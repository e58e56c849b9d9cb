from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds to wait before answering (timeouts)


class ProtocolError(Exception):
    """A request the real service would refuse; the fake answers 400."""


class FakeServer:
    """A threaded HTTP server on 127.0.0.1 with a port of its own."""

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
    ) -> None:
        self.script.append(Reply(status=status, body=body, headers=headers or {}, delay=delay))

    # Protocol-specific subclasses override these.
    def check(self, recorded: Recorded) -> None:
        """Raise ProtocolError for a request the real service would refuse."""

    def error_body(self, status: int, message: str) -> Any:
        return {"error": {"message": message}}

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
                elif self.responder is not None:
                    reply = self.responder(recorded)
                else:
                    reply = Reply(500, self.error_body(500, "fake: no reply scripted"))
            except ProtocolError as exc:
                reply = Reply(400, self.error_body(400, str(exc)))
        if reply.delay:
            time.sleep(reply.delay)
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
