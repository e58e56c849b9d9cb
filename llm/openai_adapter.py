"""OpenAI Chat Completions, which every OpenAI-compatible server also speaks (Ollama, vLLM,
llama.cpp: `openai:<model>` with OPENAI_BASE_URL)."""

from __future__ import annotations

import functools
import json
import time
from typing import Any

import httpx2
import openai

from llm import config
from llm.errors import ModelError, ModelUnavailable
from llm.provider import Request, parse_arguments, retry_after_seconds, status_error
from llm.routing import OPENAI, wire_model_name
from llm.types import Completion, Message, ToolCall, Usage


@functools.lru_cache(maxsize=16)
def _client(api_key: str, base_url: str | None, timeout: float) -> openai.OpenAI:
    # Retries are ours (llm.retry), the same for every provider: the SDK's are switched off.
    return openai.OpenAI(api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout)


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


class OpenAIProvider:
    name = OPENAI

    def complete(self, request: Request) -> Completion:
        settings = config.current()
        client = _client(
            config.api_key(OPENAI, request.model, settings.env),
            config.base_url(OPENAI, settings.env),
            request.timeout,
        )
        native = not request.model.startswith("openai:")
        kwargs: dict[str, Any] = {
            "model": wire_model_name(request.model),
            "messages": to_wire_messages(request.system, request.messages),
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
        if request.json_mode and native:
            kwargs["response_format"] = {"type": "json_object"}
        started = time.perf_counter()
        response = client.chat.completions.create(**kwargs)
        latency = (time.perf_counter() - started) * 1000
        if not response.choices:
            raise ModelUnavailable(f"openai {request.model!r}: the answer had no choices")
        choice = response.choices[0]
        calls = tuple(
            ToolCall(
                id=call.id,
                name=call.function.name,
                arguments=parse_arguments(call.function.arguments),
            )
            for call in (choice.message.tool_calls or [])
            if getattr(call, "function", None) is not None
        )
        usage = response.usage
        return Completion(
            text=choice.message.content or "",
            tool_calls=calls,
            usage=Usage(
                input_tokens=getattr(usage, "prompt_tokens", 0) or 0,
                output_tokens=getattr(usage, "completion_tokens", 0) or 0,
            ),
            model=request.model,
            provider=OPENAI,
            latency_ms=latency,
            meta={"finish_reason": choice.finish_reason},
        )

    def translate(self, exc: Exception, model: str) -> tuple[ModelError, float | None]:
        if isinstance(exc, openai.APIStatusError):
            detail = _detail(exc.body) or exc.message
            error = status_error("openai", model, exc.status_code, detail, "OPENAI_API_KEY")
            return error, retry_after_seconds(exc.response.headers)
        if isinstance(exc, openai.APITimeoutError | httpx2.TimeoutException):
            return ModelUnavailable(f"openai {model!r}: the request timed out"), None
        if isinstance(exc, openai.APIConnectionError | httpx2.TransportError):
            return ModelUnavailable(
                f"openai {model!r}: cannot connect ({type(exc).__name__})"
            ), None
        raise exc


def _detail(body: object) -> str:
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            return str(error.get("message", ""))
    return ""
