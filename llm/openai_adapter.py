"""OpenAI Chat Completions, which every OpenAI-compatible server also speaks (Ollama, vLLM,
llama.cpp: `openai:<model>` with OPENAI_BASE_URL)."""

from __future__ import annotations

import asyncio
import functools
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx2
import openai

from llm import config
from llm.errors import ModelError, ModelRequestError, ModelUnavailable
from llm.provider import Request, parse_arguments, retry_after_seconds, status_error
from llm.routing import OPENAI, wire_model_name
from llm.types import Completion, Message, StreamEnd, StreamEvent, TextDelta, ToolCall, Usage


@functools.lru_cache(maxsize=16)
def _client(api_key: str, base_url: str | None, timeout: float) -> openai.OpenAI:
    # Retries are ours (llm.retry), the same for every provider: the SDK's are switched off.
    return openai.OpenAI(api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout)


@functools.lru_cache(maxsize=16)
def _async_client(
    api_key: str, base_url: str | None, timeout: float, loop: asyncio.AbstractEventLoop
) -> openai.AsyncOpenAI:
    # One per event loop: an async client's connections belong to the loop that opened them.
    return openai.AsyncOpenAI(api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout)


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
        else:
            wire.append({"role": message.role, "content": message.content})
    return wire


def _request_kwargs(request: Request) -> dict[str, Any]:
    """The chat.completions.create arguments of a request (the same for both clients)."""
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


class _Chunks:
    """What a stream's chunks add up to, read one by one (from the sync or the async client):
    the text as it comes, then the whole Completion."""

    def __init__(self, request: Request):
        self.request = request
        self.started = time.perf_counter()
        self.texts: list[str] = []
        # Tool calls arrive in pieces keyed by their index: the first piece has the id and the
        # name, the later ones more of the arguments' JSON string.
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage: Any = None
        self.finish_reason: str | None = None
        self.answered = False

    def read(self, chunk: Any) -> Iterator[TextDelta]:
        if chunk.usage is not None:
            self.usage = chunk.usage
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            self.answered = True
            delta = choice.delta
            if delta is not None and delta.content:
                self.texts.append(delta.content)
                yield TextDelta(delta.content)
            for piece in (delta.tool_calls if delta is not None else None) or []:
                call = self.calls.setdefault(piece.index, {"id": "", "name": "", "args": []})
                if piece.id:
                    call["id"] = piece.id
                if piece.function is not None:
                    call["name"] += piece.function.name or ""
                    call["args"].append(piece.function.arguments or "")
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason

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
        return StreamEnd(
            Completion(
                text="".join(self.texts),
                tool_calls=tool_calls,
                usage=Usage(
                    input_tokens=getattr(self.usage, "prompt_tokens", 0) or 0,
                    output_tokens=getattr(self.usage, "completion_tokens", 0) or 0,
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


class OpenAIProvider:
    name = OPENAI

    def stream(self, request: Request) -> Iterator[StreamEvent]:
        client = _client(*_client_args(request))
        chunks = _Chunks(request)
        with client.chat.completions.create(**_request_kwargs(request)) as response:
            for chunk in response:
                yield from chunks.read(chunk)
        yield chunks.end()

    async def astream(self, request: Request) -> AsyncIterator[StreamEvent]:
        client = _async_client(*_client_args(request), asyncio.get_running_loop())
        chunks = _Chunks(request)
        response = await client.chat.completions.create(**_request_kwargs(request))
        async with response:
            async for chunk in response:
                for delta in chunks.read(chunk):
                    yield delta
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
