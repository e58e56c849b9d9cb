"""OpenAI Chat Completions, which every OpenAI-compatible server also speaks (Ollama, vLLM,
llama.cpp: `openai:<model>` with OPENAI_BASE_URL)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import ssl
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import httpx2
import openai

from ethan_llm import config
from ethan_llm.errors import ModelError, ModelRequestError, ModelUnavailable
from ethan_llm.loop_clients import aiohttp_client
from ethan_llm.provider import Request, parse_arguments, retry_after_seconds, status_error
from ethan_llm.routing import OPENAI, wire_model_name
from ethan_llm.types import Completion, Message, StreamEnd, StreamEvent, TextDelta, ToolCall, Usage


@functools.lru_cache(maxsize=16)
def _client(api_key: str, base_url: str | None, timeout: float) -> openai.OpenAI:
    # Retries are ours (ethan_llm.retry), the same for every provider: the SDK's are switched off.
    return openai.OpenAI(api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout)


def _async_client(api_key: str, base_url: str | None, timeout: float) -> openai.AsyncOpenAI:
    return aiohttp_client(
        openai, "AsyncOpenAI", api_key=api_key, base_url=base_url, timeout=timeout
    )


def to_wire_messages(system: str, messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    wire: list[dict[str, Any]] = []
    if system:
        wire.append({"role": "system", "content": system})
    for message in messages:
        if message.role == "tool":
            wire.append(
                {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
            )
        elif message.role == "assistant" and message.tool_calls:
            wire.append(
                {
                    "role": "assistant",
                    "content": message.content or None,
                    "tool_calls": [
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {
                                "name": call.name,
                                "arguments": json.dumps(call.arguments, ensure_ascii=False),
                            },
                        }
                        for call in message.tool_calls
                    ],
                }
            )
        elif message.attachments:
            wire.append({"role": message.role, "content": _parts(message)})
        else:
            wire.append({"role": message.role, "content": message.content})
    return wire


def _parts(message: Message) -> list[dict[str, Any]]:
    """A user message with attachments as Chat Completions content parts."""
    parts: list[dict[str, Any]] = [{"type": "text", "text": message.content}]
    for attachment in message.attachments:
        url = attachment.url or f"data:{attachment.mime};base64,{attachment.data}"
        if attachment.kind == "image":
            parts.append({"type": "image_url", "image_url": {"url": url}})
        elif attachment.kind == "audio":
            # input_audio takes base64 only, and names the format (wav, mp3), not a MIME type.
            audio_format = attachment.mime.rpartition("/")[2].replace("mpeg", "mp3") or "wav"
            parts.append(
                {
                    "type": "input_audio",
                    "input_audio": {"data": attachment.data, "format": audio_format},
                }
            )
        else:
            parts.append(
                {"type": "file", "file": {"filename": attachment.name or "file", "file_data": url}}
            )
    return parts


def _choices_kwargs(request: Request) -> dict[str, Any]:
    """A caller's tool choice and sampling, in Chat Completions' own words."""
    kwargs: dict[str, Any] = {}
    choice = request.tool_choice
    if request.tools and choice.mode != "auto":
        kwargs["tool_choice"] = (
            {"type": "function", "function": {"name": choice.name}}
            if choice.mode == "function"
            else choice.mode
        )
    if request.tools and request.parallel_tool_calls is not None:
        kwargs["parallel_tool_calls"] = request.parallel_tool_calls
    sampling = request.sampling
    for key in ("temperature", "top_p", "seed"):
        if getattr(sampling, key) is not None:
            kwargs[key] = getattr(sampling, key)
    if sampling.stop:
        kwargs["stop"] = list(sampling.stop)
    if sampling.user:
        kwargs["user"] = sampling.user
    if sampling.response_format is not None and request.json_schema is None:
        kwargs["response_format"] = sampling.response_format
    return kwargs


def _request_kwargs(request: Request) -> dict[str, Any]:
    """The body of a chat completion request (the same for both clients)."""
    native = not request.model.startswith("openai:")
    kwargs: dict[str, Any] = {
        "model": wire_model_name(request.model),
        "messages": to_wire_messages(request.system, request.messages),
        "stream": True,
        # Without this the stream carries no token counts; with it, one last chunk does
        # (no choices, only usage) before `data: [DONE]`.
        "stream_options": {"include_usage": True},
    }
    # OpenAI's own reasoning models take max_completion_tokens only; compatible servers
    # (Ollama, vLLM) know max_tokens.
    kwargs["max_completion_tokens" if native else "max_tokens"] = request.max_tokens
    if request.tools:
        kwargs["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                },
            }
            for tool in request.tools
        ]
    kwargs.update(_choices_kwargs(request))
    if request.json_schema is not None:
        # Structured output, strict: the answer is decoded to match the schema. OpenAI-
        # compatible servers (Ollama, vLLM) honour json_schema too.
        kwargs["response_format"] = {
            "type": "json_schema",
            "json_schema": {
                "name": request.json_schema.name,
                "schema": request.json_schema.schema,
                "strict": True,
            },
        }
    return kwargs


# What the SDK's own stream counts as a connection broken mid-body (openai/_streaming.py): it
# raises them as APITimeoutError and APIConnectionError, and so does _ServerSentEvents.reading.
_BROKEN = (httpx2.RequestError, ssl.SSLError, anyio.EndOfStream)
# How long an async stream waits, after `data: [DONE]`, for the end of an HTTP/1.1 body (its
# last chunk, usually already here): read to its end, the connection goes back to the pool.
_DRAIN_SECONDS = 0.1


class _ServerSentEvents:
    """The JSON payloads of a Chat Completions stream's server-sent events, from the body's bytes
    as they arrive (the same for the sync and the async client).

    Under many streams at once the CPU a chunk costs is the server's limit: every chunk of every
    stream is read on the one event loop, thousands a second. The SDK's own stream builds a
    pydantic object of each, after decoding its event through a few layers of generators, most
    of the loop's time in the profile of 300 streams (bench.concurrent_streams), and about 0.1 ms
    of CPU a chunk in bench.chunk_reading, for fields nobody reads. Here a chunk is a plain dict
    from json.loads, the bytes read in one pass: about 5 µs a chunk over what httpx and the loop
    take to deliver the bytes. The events mean what they mean to the SDK: `data: [DONE]` ends the
    stream, a payload with an "error" raises openai.APIError as the SDK would (whatever the
    `event:` line said, as there), and comments (keep-alives), `event:`, `id:` and `retry:`
    carry nothing for a chat completion. An event without data is none, as the SSE standard
    has it (the SDK would fail to decode its empty JSON)."""

    def __init__(self) -> None:
        self.request: httpx2.Request | None = None  # the response's, once it came
        self.partial: list[bytes] = []  # a line whose end has not come yet
        self.data: list[bytes] = []  # the `data:` lines of the event being read
        self.skip_lf = False  # the last piece ended in CR: the LF of a CRLF may start the next
        self.done = False  # `data: [DONE]` was read

    def feed(self, piece: bytes) -> Iterator[Any]:
        """The payloads of the events `piece` (the next bytes of the body) completes, one by
        one: an error payload raises only once those before it were taken (one read may bring
        the text and the error after it); after `data: [DONE]`, none."""
        if self.done:
            return
        if self.skip_lf:
            self.skip_lf = False
            if piece.startswith(b"\n"):
                piece = piece[1:]
        if b"\r" in piece:
            # CRLF and a lone CR end a line as LF does.
            self.skip_lf = piece.endswith(b"\r")
            piece = piece.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if b"\n" not in piece:
            if piece:
                self.partial.append(piece)
            return
        if self.partial:
            self.partial.append(piece)
            piece = b"".join(self.partial)
            self.partial = []
        *lines, rest = piece.split(b"\n")
        if rest:
            self.partial.append(rest)
        for line in lines:
            if not line:  # the end of an event
                if self.data:
                    data = self.data[0] if len(self.data) == 1 else b"\n".join(self.data)
                    self.data = []
                    if data.startswith(b"[DONE]"):
                        self.done = True
                        break
                    yield self.payload(data)
            elif line.startswith(b"data:"):
                self.data.append(line[6:] if line.startswith(b"data: ") else line[5:])
            elif line == b"data":
                self.data.append(b"")

    def payload(self, data: bytes) -> Any:
        # Decoded first: json.loads takes longer to find the encoding of bytes itself.
        payload = json.loads(data.decode())
        if isinstance(payload, dict) and payload.get("error"):
            # An error after the stream began with HTTP 200, as the SDK raises it.
            error = payload["error"]
            message = error.get("message") if isinstance(error, dict) else None
            if not message or not isinstance(message, str):
                message = "An error occurred during streaming"
            assert self.request is not None
            raise openai.APIError(message=message, request=self.request, body=error)
        return payload

    @contextlib.contextmanager
    def reading(self, response: httpx2.Response) -> Iterator[None]:
        """While `response`'s body is read: transport errors raised as the SDK's stream raises
        them (translate maps those)."""
        self.request = response.request
        try:
            yield
        except httpx2.TimeoutException as exc:
            raise openai.APITimeoutError(request=response.request) from exc
        except _BROKEN as exc:
            raise openai.APIConnectionError(request=response.request) from exc


class _Chunks:
    """What a stream's chunks add up to, read one by one (from the sync or the async client):
    the text as it comes, then the whole Completion."""

    def __init__(self, request: Request):
        self.request = request
        self.events = _ServerSentEvents()
        self.started = time.perf_counter()
        self.texts: list[str] = []
        # Tool calls arrive in pieces keyed by their index: the first piece has the id and the
        # name, the later ones more of the arguments' JSON string.
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage: dict[str, Any] | None = None
        self.finish_reason: str | None = None
        self.answered = False

    def feed(self, piece: bytes) -> Iterator[TextDelta]:
        """The text of the chunks the body's next bytes complete, one by one."""
        for chunk in self.events.feed(piece):
            text = self.read(chunk)
            if text:
                yield TextDelta(text)

    def read(self, chunk: dict[str, Any]) -> str | None:
        """One chunk's text (of choice 0, the only one asked for), its other parts kept."""
        text = None
        if chunk.get("usage") is not None:
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if choice.get("index") != 0:
                continue
            self.answered = True
            delta = choice.get("delta")
            if delta is not None:
                text = delta.get("content")
                if text:
                    self.texts.append(text)
                for piece in delta.get("tool_calls") or ():
                    self.read_call(piece)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        return text

    def read_call(self, piece: dict[str, Any]) -> None:
        call = self.calls.setdefault(piece.get("index"), {"id": "", "name": "", "args": []})
        if piece.get("id"):
            call["id"] = piece["id"]
        function = piece.get("function")
        if function is not None:
            call["name"] += function.get("name") or ""
            call["args"].append(function.get("arguments") or "")

    def end(self) -> StreamEnd:
        model = self.request.model
        latency = (time.perf_counter() - self.started) * 1000
        if not self.answered:
            raise ModelUnavailable(f"openai {model!r}: the answer had no choices")
        if self.finish_reason is None:
            # A server that closes the stream early without a transport error.
            raise ModelUnavailable(f"openai {model!r}: the stream ended unfinished")
        tool_calls = tuple(
            ToolCall(
                id=call["id"] or f"call_{uuid.uuid4().hex[:12]}",
                name=call["name"],
                arguments=parse_arguments("".join(call["args"])),
            )
            for _index, call in sorted(self.calls.items())
            if call["name"]
        )
        usage = self.usage or {}
        return StreamEnd(
            Completion(
                text="".join(self.texts),
                tool_calls=tool_calls,
                usage=Usage(
                    input_tokens=usage.get("prompt_tokens") or 0,
                    output_tokens=usage.get("completion_tokens") or 0,
                ),
                model=model,
                provider=OPENAI,
                latency_ms=latency,
                meta={"finish_reason": self.finish_reason},
            )
        )


def _client_args(request: Request) -> tuple[str, str | None, float]:
    settings = config.current()
    return (
        config.api_key(OPENAI, request.model, settings.env),
        config.base_url(OPENAI, settings.env),
        request.timeout,
    )


# Where a chat completion is asked for, under the client's base URL. The request goes through
# the SDK's generic `post` (its README: "undocumented endpoints"), with the client's auth, base
# URL, retries, timeouts and errors for an HTTP status as `chat.completions.create` has them,
# but not its transform of the body: that walks every message and every tool's JSON schema
# through the parameters' type hints, about 3 ms for a turn with 20 messages of history and the
# memory tools, on the event loop, for a body _request_kwargs already made plain JSON.
CHAT_COMPLETIONS = "/chat/completions"


class OpenAIProvider:
    name = OPENAI

    # The SDK makes the request (its auth, base URL, timeouts, and its errors for an HTTP
    # status), but the body is read here, not by its Stream (see _ServerSentEvents).

    def stream(self, request: Request) -> Iterator[StreamEvent]:
        client = _client(*_client_args(request))
        chunks = _Chunks(request)
        # The response itself, its body not read yet (cast_to, stream=True): closed here.
        body = client.post(
            CHAT_COMPLETIONS, body=_request_kwargs(request), cast_to=httpx2.Response, stream=True
        )
        with contextlib.closing(body), chunks.events.reading(body):
            for piece in body.iter_bytes():
                yield from chunks.feed(piece)
                if chunks.events.done:
                    break
        yield chunks.end()

    async def astream(self, request: Request) -> AsyncIterator[StreamEvent]:
        client = _async_client(*_client_args(request))
        chunks = _Chunks(request)
        body = await client.post(
            CHAT_COMPLETIONS, body=_request_kwargs(request), cast_to=httpx2.Response, stream=True
        )
        async with contextlib.aclosing(body):
            with chunks.events.reading(body):
                pieces = body.aiter_bytes()
                async for piece in pieces:
                    for delta in chunks.feed(piece):
                        yield delta
                    if chunks.events.done:
                        if body.http_version == "HTTP/1.1":
                            await _drain(pieces)
                        break
        yield chunks.end()

    def translate(self, exc: Exception, model: str) -> tuple[ModelError, float | None]:
        if isinstance(exc, openai.APIStatusError):
            detail = _detail(exc.body) or exc.message
            error = status_error("openai", model, exc.status_code, detail, "OPENAI_API_KEY")
            return error, retry_after_seconds(exc.response.headers)
        if isinstance(exc, openai.APITimeoutError | httpx2.TimeoutException):
            return ModelUnavailable(f"openai {model!r}: the request timed out"), None
        if isinstance(exc, openai.APIConnectionError | httpx2.TransportError):
            # Mid-stream, the SDK wraps the transport error (a dropped connection) it met.
            cause = exc.__cause__ if isinstance(exc, openai.APIConnectionError) else exc
            return ModelUnavailable(
                f"openai {model!r}: connection failed ({type(cause or exc).__name__})"
            ), None
        if isinstance(exc, openai.APIError):
            # An error event inside a stream that began with HTTP 200: `data: {"error": …}`.
            body = exc.body if isinstance(exc.body, dict) else {}
            if body.get("type") == "invalid_request_error":
                return ModelRequestError(
                    f"openai rejected the request for {model!r}: {exc.message}"
                ), None
            return ModelUnavailable(f"openai {model!r}: error in the stream: {exc.message}"), None
        raise exc


def _detail(body: object) -> str:
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            return str(error.get("message", ""))
    return ""


async def _drain(pieces: AsyncIterator[bytes]) -> None:
    """The rest of a body after `data: [DONE]` read and dropped, for a while at most, as the
    SDK's stream does: its connection then goes back to the client's pool."""
    with contextlib.suppress(TimeoutError, *_BROKEN):
        async with asyncio.timeout(_DRAIN_SECONDS):
            async for _piece in pieces:
                pass
