"""Anthropic Messages: a top-level system prompt, tool_use and tool_result content blocks."""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anthropic
import httpx2

from ethan_llm import config
from ethan_llm.errors import ModelError, ModelUnavailable
from ethan_llm.loop_clients import aiohttp_client
from ethan_llm.provider import Request, parse_arguments, retry_after_seconds, status_error
from ethan_llm.routing import ANTHROPIC
from ethan_llm.types import (
    CANNOT_SEE,
    Attachment,
    Completion,
    Message,
    StreamEnd,
    StreamEvent,
    TextDelta,
    ToolCall,
    Usage,
)


@functools.lru_cache(maxsize=16)
def _client(api_key: str, base_url: str | None, timeout: float) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout)


def _async_client(api_key: str, base_url: str | None, timeout: float) -> anthropic.AsyncAnthropic:
    return aiohttp_client(
        anthropic, "AsyncAnthropic", api_key=api_key, base_url=base_url, timeout=timeout
    )


def _blocks(message: Message) -> list[dict[str, Any]]:
    if message.role == "tool":
        return [
            {"type": "tool_result", "tool_use_id": message.tool_call_id, "content": message.content}
        ]
    # Anthropic refuses empty text blocks.
    blocks: list[dict[str, Any]] = (
        [{"type": "text", "text": message.content}] if message.content else []
    )
    for attachment in message.attachments:
        blocks.append(_attachment_block(attachment))
    for call in message.tool_calls:
        blocks.append(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
        )
    return blocks


def _attachment_block(attachment: Attachment) -> dict[str, Any]:
    """An image as an image block, a PDF (or any other file) as a document block; sound,
    which Messages does not take, as its placeholder, which the model then says it cannot
    hear."""
    if attachment.kind == "audio":
        return {"type": "text", "text": f"{attachment.placeholder} ({CANNOT_SEE})"}
    if attachment.url and not attachment.url.startswith("data:"):
        source: dict[str, Any] = {"type": "url", "url": attachment.url}
    else:
        source = {"type": "base64", "media_type": attachment.mime, "data": attachment.data}
    if attachment.kind == "image":
        return {"type": "image", "source": source}
    block: dict[str, Any] = {"type": "document", "source": source}
    if attachment.name:
        block["title"] = attachment.name
    return block


def to_wire_messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """Tool results travel in a user message; consecutive same-role turns are merged into one
    message (several tool results answer one assistant turn together)."""
    wire: list[dict[str, Any]] = []
    for message in messages:
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message)
        if not blocks:
            continue
        if wire and wire[-1]["role"] == role:
            wire[-1]["content"].extend(blocks)
        else:
            wire.append({"role": role, "content": blocks})
    return wire


def _request_kwargs(request: Request) -> dict[str, Any]:
    """The messages.create arguments of a request (the same for both clients)."""
    kwargs: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "messages": to_wire_messages(request.messages),
        "stream": True,
    }
    if request.system:
        kwargs["system"] = request.system
    if request.tools:
        kwargs["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in request.tools
        ]
    kwargs.update(_choices_kwargs(request))
    if request.json_schema is not None:
        # Structured output (JSON outputs): the answer's text is decoded to match the schema.
        kwargs["output_config"] = {
            "format": {"type": "json_schema", "schema": request.json_schema.schema}
        }
    return kwargs


def _choices_kwargs(request: Request) -> dict[str, Any]:
    """A caller's tool choice and sampling, in the Messages API's words: tool_choice any/tool
    for required/a named function, parallel calls off through disable_parallel_tool_use;
    stop_sequences; the caller's end user as metadata.user_id. The SDK takes no temperature,
    top_p, seed or response_format: those are left out (docs/openai.md)."""
    kwargs: dict[str, Any] = {}
    choice = request.tool_choice
    if request.tools and (choice.mode != "auto" or request.parallel_tool_calls is False):
        wire = {"auto": {"type": "auto"}, "none": {"type": "none"}, "required": {"type": "any"}}
        tool_choice = wire.get(choice.mode) or {"type": "tool", "name": choice.name}
        if request.parallel_tool_calls is False and tool_choice["type"] != "none":
            tool_choice["disable_parallel_tool_use"] = True
        kwargs["tool_choice"] = tool_choice
    sampling = request.sampling
    # No temperature or top_p: the SDK's Messages.create (2.x) takes neither any more.
    if sampling.stop:
        kwargs["stop_sequences"] = list(sampling.stop)
    if sampling.user:
        kwargs["metadata"] = {"user_id": sampling.user}
    return kwargs


class _Events:
    """What a stream's events add up to, read one by one (from the sync or the async client):
    the text as it comes, then the whole Completion."""

    def __init__(self, request: Request):
        self.request = request
        self.started = time.perf_counter()
        # Content blocks by index: text grows by text_delta, a tool_use's input by
        # input_json_delta (pieces of one JSON object, parsed at the end).
        self.blocks: dict[int, dict[str, Any]] = {}
        self.input_tokens = self.output_tokens = 0
        self.stop_reason: str | None = None

    def read(self, event: Any) -> Iterator[TextDelta]:
        if event.type == "message_start":
            # The prompt's count comes first; output_tokens here is only a start.
            self.input_tokens = event.message.usage.input_tokens
            self.output_tokens = event.message.usage.output_tokens
        elif event.type == "content_block_start":
            block = event.content_block
            if block.type == "text":
                self.blocks[event.index] = {"type": "text", "text": [block.text]}
                if block.text:
                    yield TextDelta(block.text)
            elif block.type == "tool_use":
                self.blocks[event.index] = {
                    "type": "tool_use",
                    "id": block.id,
                    "name": block.name,
                    "input": dict(block.input or {}),
                    "json": [],
                }
        elif event.type == "content_block_delta":
            block = self.blocks.get(event.index)
            if block is None:
                return  # a kind of block Ethan does not use (thinking)
            if event.delta.type == "text_delta" and block["type"] == "text":
                block["text"].append(event.delta.text)
                if event.delta.text:
                    yield TextDelta(event.delta.text)
            elif event.delta.type == "input_json_delta" and block["type"] == "tool_use":
                block["json"].append(event.delta.partial_json)
        elif event.type == "message_delta":
            # Cumulative counts for the whole message.
            self.stop_reason = event.delta.stop_reason or self.stop_reason
            self.output_tokens = event.usage.output_tokens
            if event.usage.input_tokens is not None:
                self.input_tokens = event.usage.input_tokens

    def end(self) -> StreamEnd:
        latency = (time.perf_counter() - self.started) * 1000
        if self.stop_reason is None:
            raise ModelUnavailable(f"anthropic {self.request.model!r}: the stream ended unfinished")
        texts, calls = [], []
        for _index, block in sorted(self.blocks.items()):
            if block["type"] == "text":
                texts.append("".join(block["text"]))
            else:
                raw = "".join(block["json"])
                calls.append(
                    ToolCall(
                        id=block["id"],
                        name=block["name"],
                        arguments=parse_arguments(raw) if raw else block["input"],
                    )
                )
        return StreamEnd(
            Completion(
                text="".join(texts),
                tool_calls=tuple(calls),
                usage=Usage(input_tokens=self.input_tokens, output_tokens=self.output_tokens),
                model=self.request.model,
                provider=ANTHROPIC,
                latency_ms=latency,
                meta={"stop_reason": self.stop_reason},
            )
        )


def _client_args(request: Request) -> tuple[str, str | None, float]:
    settings = config.current()
    return (
        config.api_key(ANTHROPIC, request.model, settings.env),
        config.base_url(ANTHROPIC, settings.env),
        request.timeout,
    )


class AnthropicProvider:
    name = ANTHROPIC

    def stream(self, request: Request) -> Iterator[StreamEvent]:
        client = _client(*_client_args(request))
        events = _Events(request)
        with client.messages.create(**_request_kwargs(request)) as response:
            for event in response:
                yield from events.read(event)
        yield events.end()

    async def astream(self, request: Request) -> AsyncIterator[StreamEvent]:
        client = _async_client(*_client_args(request))
        events = _Events(request)
        response = await client.messages.create(**_request_kwargs(request))
        async with response:
            async for event in response:
                for delta in events.read(event):
                    yield delta
        yield events.end()

    def translate(self, exc: Exception, model: str) -> tuple[ModelError, float | None]:
        if isinstance(exc, anthropic.APIStatusError):
            body = exc.body if isinstance(exc.body, dict) else {}
            error = body.get("error", {}) if isinstance(body.get("error"), dict) else {}
            detail = str(error.get("message", "")) or exc.message
            status = exc.status_code
            if status < 400:
                # An `event: error` inside a stream that began with HTTP 200: the SDK raises it
                # with that 200, so the error's type says what happened.
                status = _STREAM_ERROR_STATUS.get(str(error.get("type", "")), 500)
            typed = status_error("anthropic", model, status, detail, "ANTHROPIC_API_KEY")
            return typed, retry_after_seconds(exc.response.headers)
        if isinstance(exc, anthropic.APITimeoutError | httpx2.TimeoutException):
            return ModelUnavailable(f"anthropic {model!r}: the request timed out"), None
        if isinstance(exc, anthropic.APIConnectionError | httpx2.TransportError):
            return ModelUnavailable(
                f"anthropic {model!r}: connection failed ({type(exc).__name__})"
            ), None
        raise exc


# The HTTP status each error type of Anthropic's error events stands for.
_STREAM_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
