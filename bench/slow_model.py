"""A slow model on loopback that speaks OpenAI's Chat Completions wire protocol and holds
thousands of streams at once, for bench.concurrent_streams.

tests/fakes' FakeOpenAI serves each connection on a thread of its own and sleeps between
chunks; that is right for tests, but a thousand 11-second streams would be a thousand threads
in the bench's process, and the model must never be what a concurrency benchmark measures. This
one is a single asyncio loop in a process of its own:

    python -m bench.slow_model --first-chunk-ms 1000 --chunk-ms 250 --stream-seconds 10

prints `port N` once it listens on 127.0.0.1:N, then serves until it is stopped.

- POST /v1/chat/completions with `"stream": true`: the headers at once, then REPLY in
  `chat.completion.chunk` events, the first (the role and the first piece of text) 1 s after
  the request arrived, then one piece every 250 ms for 10 s, then the finish reason, the usage
  (if asked for) and `data: [DONE]`. Each chunk is due at a fixed time from the request's
  arrival, so one late chunk does not push the others back.
- The same without `stream`: the memory work's calls (summaries, facts), answered at once as
  tests' MiniModel answers them.
- A request whose last user message holds "[warm-up]" is streamed at once, unpaced.
- GET /_records: what the streams did since the last call, keyed by the marker `(#n)` of the
  request's last user message: when it arrived and when its first and last chunks were
  written (time.monotonic(), which on Linux is one clock for every process of the machine, so
  the bench compares them with its clients' own times), and how late the chunks were.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import sys
import time
from typing import Any

from bench.common import raise_open_files

MARKER = re.compile(r"\(#(\d+)\)")
# The reply in pieces of 4 characters, as many as the pace asks for (reply_pieces).
PIECE = "w{:03d}"
WARM_UP = "[warm-up]"


def reply_pieces(*, chunk_ms: float, stream_seconds: float) -> list[str]:
    """The first piece, then one every `chunk_ms` for `stream_seconds`: "w000", "w001", …"""
    return [PIECE.format(n) for n in range(1 + round(stream_seconds * 1000 / chunk_ms))]


def reply_text(*, chunk_ms: float, stream_seconds: float) -> str:
    return "".join(reply_pieces(chunk_ms=chunk_ms, stream_seconds=stream_seconds))


def sse(data: Any) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {payload}\n\n".encode()


def chunk_event(model: str, delta: dict, finish: str | None = None) -> bytes:
    return sse(
        {
            "id": "chatcmpl-slow",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
    )


def http_chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class SlowModel:
    """The server's state: the pace, the records of the streams, how many are open."""

    def __init__(self, *, first_chunk_ms: float, chunk_ms: float, stream_seconds: float):
        self.first_chunk = first_chunk_ms / 1000
        self.chunk = chunk_ms / 1000
        self.pieces = reply_pieces(chunk_ms=chunk_ms, stream_seconds=stream_seconds)
        self.records: dict[str, dict[str, Any]] = {}
        self.open = 0
        self.peak_open = 0
        self.memory_calls = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = dict(
                (name.strip().lower(), value.strip())
                for name, _, value in (line.partition(":") for line in lines[1:] if line)
            )
            length = int(headers.get("content-length") or 0)
            raw = await reader.readexactly(length) if length else b""
            arrived = time.monotonic()
            if method == "GET" and path == "/_records":
                records, self.records = self.records, {}
                body = {"records": records, "peak_open": self.peak_open, "open": self.open}
                self.peak_open = self.open
                await self.send_json(writer, 200, body)
            elif method == "POST" and path.endswith("/chat/completions"):
                if not headers.get("authorization", "").startswith("Bearer "):
                    await self.send_json(writer, 401, {"error": {"message": "no key"}})
                    return
                body = json.loads(raw)
                if body.get("stream"):
                    await self.stream(writer, body, arrived)
                else:
                    await self.send_json(writer, 200, self.memory_answer(body))
            else:
                await self.send_json(writer, 404, {"error": {"message": f"no {path}"}})
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass  # the client went away, or sent what no client here sends
        finally:
            writer.close()

    async def send_json(self, writer: asyncio.StreamWriter, status: int, body: Any) -> None:
        payload = json.dumps(body, ensure_ascii=False).encode()
        writer.write(
            f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n"
            f"content-length: {len(payload)}\r\nconnection: close\r\n\r\n".encode()
            + payload
        )
        await writer.drain()

    def memory_answer(self, body: dict) -> dict:
        """The memory work's answer, as tests' MiniModel gives it (any short text for a call it
        does not know)."""
        from tests.fakes.base import Recorded
        from tests.fakes.openai_fake import FakeOpenAI, MiniModel

        self.memory_calls += 1
        try:
            reply = MiniModel()(Recorded("POST", "/v1/chat/completions", {}, body))
            answer = reply.body
        except (AssertionError, KeyError, IndexError, TypeError):
            answer = FakeOpenAI.text("好的")
        return {**answer, "model": body.get("model", "fake")}

    async def stream(self, writer: asyncio.StreamWriter, body: dict, arrived: float) -> None:
        model = body.get("model", "fake")
        last_user = next(
            (m for m in reversed(body.get("messages") or []) if m.get("role") == "user"), {}
        )
        said = str(last_user.get("content", ""))
        found = MARKER.search(said)
        # A warm-up turn (each web worker's first, before anything is measured): no pace.
        pace = 0.0 if WARM_UP in said else 1.0
        record = {"arrived": arrived, "first": None, "last": None, "late_max": 0.0}
        if found:
            self.records[found.group(1)] = record
        self.open += 1
        self.peak_open = max(self.peak_open, self.open)
        try:
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\ncache-control: no-cache\r\n"
                b"connection: close\r\n\r\n"
            )
            await writer.drain()
            usage = (body.get("stream_options") or {}).get("include_usage")
            for index, piece in enumerate(self.pieces):
                due = arrived + (self.first_chunk + index * self.chunk) * pace
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                now = time.monotonic()
                record["late_max"] = max(record["late_max"], now - due)
                delta = {"content": piece}
                if index == 0:
                    delta = {"role": "assistant", **delta}
                    record["first"] = now
                frames = chunk_event(model, delta)
                if index == len(self.pieces) - 1:
                    frames += chunk_event(model, {}, "stop")
                    if usage:
                        tokens = {"prompt_tokens": 10, "completion_tokens": len(self.pieces)}
                        tokens["total_tokens"] = sum(tokens.values())
                        frames += sse({"id": "chatcmpl-slow", "choices": [], "usage": tokens})
                    frames += sse("[DONE]")
                    record["last"] = now
                writer.write(http_chunk(frames))
                await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        finally:
            self.open -= 1


async def serve(model: SlowModel, port: int = 0) -> None:
    server = await asyncio.start_server(model.handle, "127.0.0.1", port, backlog=4096)
    print(f"port {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--first-chunk-ms", type=float, default=1000.0)
    parser.add_argument("--chunk-ms", type=float, default=250.0)
    parser.add_argument("--stream-seconds", type=float, default=10.0)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)

    raise_open_files()
    model = SlowModel(
        first_chunk_ms=args.first_chunk_ms,
        chunk_ms=args.chunk_ms,
        stream_seconds=args.stream_seconds,
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(model, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
