"""What every adapter implements: one attempt at a completion as a stream of events, and a
translation of its SDK's exceptions into the typed errors (the retry loop lives in ethan_llm.retry,
once for all)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from ethan_llm.errors import ModelError
from ethan_llm.types import (
    AUTO,
    NO_SAMPLING,
    JsonSchema,
    Message,
    Sampling,
    StreamEvent,
    ToolChoice,
    ToolSpec,
)


@dataclass(frozen=True)
class Request:
    model: str
    system: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...]
    max_tokens: int
    timeout: float
    # Ask for a JSON answer of this shape (structured output for memory work); None: free text.
    json_schema: JsonSchema | None = None
    # A chat app's own choices (/v1): which tools the model may call, whether it may call
    # several at once (None: the provider's default), and its sampling settings.
    tool_choice: ToolChoice = AUTO
    parallel_tool_calls: bool | None = None
    sampling: Sampling = NO_SAMPLING


class Provider(Protocol):
    name: str

    def stream(self, request: Request) -> Iterator[StreamEvent]:
        """One attempt: TextDelta events as the text arrives, then one StreamEnd with the whole
        Completion. SDK exceptions (before or during the stream) propagate untranslated."""
        ...

    def astream(self, request: Request) -> AsyncIterator[StreamEvent]:
        """stream, through the SDK's async client: the event loop is free while the model
        writes (an async generator)."""
        ...

    def translate(self, exc: Exception, model: str) -> tuple[ModelError, float | None]:
        """The typed error for an SDK exception, and the server's Retry-After in seconds.
        Exceptions it does not know (bugs) are re-raised as they are."""
        ...


def parse_arguments(raw: str | None) -> dict[str, Any]:
    """Tool-call arguments arrive as a JSON string from OpenAI-style APIs. A model that writes
    broken JSON gets it back as {"_invalid_json": raw}, so the tool loop can tell it so."""
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return {"_invalid_json": raw}
    return value if isinstance(value, dict) else {"_value": value}


def retry_after_seconds(headers: Any) -> float | None:
    """Retry-After (seconds form) from a response's headers, if any."""
    if headers is None:
        return None
    value = headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def status_error(provider: str, model: str, status: int, detail: str, key_vars: str):
    """The typed error for an HTTP status from a provider."""
    from ethan_llm.errors import ModelAuthError, ModelRequestError, ModelUnavailable

    detail = detail[:300]
    if status in (401, 403):
        return ModelAuthError(
            f"{provider} refused the credentials for {model!r} (HTTP {status}): check {key_vars}"
        )
    if status in (408, 409, 429) or status >= 500:
        return ModelUnavailable(f"{provider} {model!r}: HTTP {status} {detail}".strip())
    return ModelRequestError(
        f"{provider} rejected the request for {model!r}: HTTP {status} {detail}"
    )
