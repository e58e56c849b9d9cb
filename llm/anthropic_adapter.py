"""Anthropic Messages: a top-level system prompt, tool_use and tool_result content blocks."""

from __future__ import annotations

import functools
import time
from typing import Any

import anthropic
import httpx2

from llm import config
from llm.errors import ModelError, ModelUnavailable
from llm.provider import Request, retry_after_seconds, status_error
from llm.routing import ANTHROPIC
from llm.types import Completion, Message, ToolCall, Usage


@functools.lru_cache(maxsize=16)
def _client(api_key: str, base_url: str | None, timeout: float) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout)


def _blocks(message: Message) -> list[dict[str, Any]]:
    if message.role == "tool":
        return [
            {"type": "tool_result", "tool_use_id": message.tool_call_id, "content": message.content}
        ]
    # Anthropic refuses empty text blocks.
    blocks: list[dict[str, Any]] = (
        [{"type": "text", "text": message.content}] if message.content else []
    )
    for call in message.tool_calls:
        blocks.append(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
        )
    return blocks


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


class AnthropicProvider:
    name = ANTHROPIC

    def complete(self, request: Request) -> Completion:
        settings = config.current()
        client = _client(
            config.api_key(ANTHROPIC, request.model, settings.env),
            config.base_url(ANTHROPIC, settings.env),
            request.timeout,
        )
        kwargs: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_tokens,
            "messages": to_wire_messages(request.messages),
        }
        if request.system:
            kwargs["system"] = request.system
        if request.tools:
            kwargs["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in request.tools
            ]
        started = time.perf_counter()
        response = client.messages.create(**kwargs)
        latency = (time.perf_counter() - started) * 1000
        texts, calls = [], []
        for block in response.content:
            if block.type == "text":
                texts.append(block.text)
            elif block.type == "tool_use":
                calls.append(ToolCall(id=block.id, name=block.name, arguments=dict(block.input)))
        return Completion(
            text="".join(texts),
            tool_calls=tuple(calls),
            usage=Usage(
                input_tokens=response.usage.input_tokens, output_tokens=response.usage.output_tokens
            ),
            model=request.model,
            provider=ANTHROPIC,
            latency_ms=latency,
            meta={"stop_reason": response.stop_reason},
        )

    def translate(self, exc: Exception, model: str) -> tuple[ModelError, float | None]:
        if isinstance(exc, anthropic.APIStatusError):
            body = exc.body if isinstance(exc.body, dict) else {}
            error = body.get("error", {}) if isinstance(body.get("error"), dict) else {}
            detail = str(error.get("message", "")) or exc.message
            typed = status_error("anthropic", model, exc.status_code, detail, "ANTHROPIC_API_KEY")
            return typed, retry_after_seconds(exc.response.headers)
        if isinstance(exc, anthropic.APITimeoutError | httpx2.TimeoutException):
            return ModelUnavailable(f"anthropic {model!r}: the request timed out"), None
        if isinstance(exc, anthropic.APIConnectionError | httpx2.TransportError):
            return ModelUnavailable(
                f"anthropic {model!r}: cannot connect ({type(exc).__name__})"
            ), None
        raise exc
