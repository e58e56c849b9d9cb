"""The entry points: stream(...) yields the answer as it is written; complete(...) is the same
stream drained to its final Completion. One path for both, so they cannot drift."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Iterator, Sequence

from llm import config, text
from llm.errors import ModelUnavailable
from llm.provider import Provider, Request
from llm.registry import provider_entry
from llm.retry import astream_with_retries, stream_with_retries
from llm.routing import provider_for
from llm.types import Completion, JsonSchema, Message, StreamEnd, StreamEvent, ToolSpec


@functools.cache
def get_provider(name: str) -> Provider:
    """The adapter registered for `name` (llm.registry), built once; its SDK is imported now,
    on first use. ModelConfigError for a provider nobody registered."""
    return provider_entry(name).chat()


def preload(model: str | None = None) -> str:
    """Load now what a process's first model call and first Chinese message would: the SDK of
    `model`'s provider (default: config.default_model(); importing openai takes about 0.5 s)
    and jieba's dictionary (about 0.6 s), and name that provider. A server calls it before it
    takes requests, so that no person's turn waits for them."""
    name = provider_for(model or config.default_model(config.current()))
    get_provider(name)
    text.segmenter_load()
    return name


def stream(
    *,
    model: str | None = None,
    system: str = "",
    messages: Sequence[Message],
    tools: Sequence[ToolSpec] = (),
    max_tokens: int = 1024,
    timeout: float | None = None,
    json_schema: JsonSchema | None = None,
) -> Iterator[StreamEvent]:
    """The answer of `model` (default: config.default_model()) as it is written: TextDelta
    events, then one StreamEnd carrying the whole Completion (tool calls arrive only there).
    With `json_schema`, the provider is asked to hold the answer to that schema (its structured
    output); the answer's text is then the JSON document.

    An unknown model or a missing key raises ModelConfigError here, before any request. The
    other failures come while iterating: ModelAuthError, ModelRequestError, or ModelUnavailable
    once rate limits, 5xx answers or timeouts before the first delta outlast the retries. A
    failure after the first delta is raised at once (typed, never retried): the consumer may
    already have shown the text.
    """
    provider, request, policy = _prepared(
        model, system, messages, tools, max_tokens, timeout, json_schema
    )
    return stream_with_retries(lambda: provider.stream(request), **policy)


def astream(
    *,
    model: str | None = None,
    system: str = "",
    messages: Sequence[Message],
    tools: Sequence[ToolSpec] = (),
    max_tokens: int = 1024,
    timeout: float | None = None,
    json_schema: JsonSchema | None = None,
) -> AsyncIterator[StreamEvent]:
    """stream through the providers' async clients (AsyncOpenAI, AsyncAnthropic, google-genai's
    `aio`): the same events, retries and errors, and the event loop is free while the model
    writes. ModelConfigError is raised here, before any request; the rest while iterating."""
    provider, request, policy = _prepared(
        model, system, messages, tools, max_tokens, timeout, json_schema
    )
    return astream_with_retries(lambda: provider.astream(request), **policy)


def _prepared(model, system, messages, tools, max_tokens, timeout, json_schema):
    """The provider, the request and the retry policy of a call (stream and astream alike)."""
    settings = config.current()
    model = model or config.default_model(settings)
    provider = get_provider(provider_for(model))
    config.check_model(model, settings)
    request = Request(
        model=model,
        system=system,
        messages=tuple(messages),
        tools=tuple(tools),
        max_tokens=max_tokens,
        timeout=timeout if timeout is not None else settings.timeout,
        json_schema=json_schema,
    )
    policy = {
        "translate": lambda exc: provider.translate(exc, model),
        "retries": settings.retries,
        "base": settings.backoff_base,
        "cap": settings.backoff_cap,
        "label": f"{provider.name} {model}",
    }
    return provider, request, policy


def complete(
    *,
    model: str | None = None,
    system: str = "",
    messages: Sequence[Message],
    tools: Sequence[ToolSpec] = (),
    max_tokens: int = 1024,
    timeout: float | None = None,
    json_schema: JsonSchema | None = None,
) -> Completion:
    """One completion from `model`: `stream(...)` drained, with the same retries and errors.

    Raises ModelConfigError (no key, unknown model), ModelAuthError, ModelRequestError, or
    ModelUnavailable once rate limits, 5xx answers or timeouts outlast the retries.
    """
    events = stream(
        model=model,
        system=system,
        messages=messages,
        tools=tools,
        max_tokens=max_tokens,
        timeout=timeout,
        json_schema=json_schema,
    )
    return drain(events)


def drain(events: Iterator[StreamEvent]) -> Completion:
    """The Completion at the end of a stream (the deltas are in its text already)."""
    try:
        for event in events:
            if isinstance(event, StreamEnd):
                return event.completion
    finally:
        close = getattr(events, "close", None)
        if close is not None:
            close()
    raise ModelUnavailable("the model's stream ended without its final completion")
