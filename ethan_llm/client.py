"""The entry points: stream(...) yields the answer as it is written; complete(...) is the same
stream drained to its final Completion. One path for both, so they cannot drift."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import AsyncIterator, Iterator, Sequence

from ethan_llm import config, text
from ethan_llm.errors import ModelRequestError, ModelUnavailable
from ethan_llm.provider import Provider, Request
from ethan_llm.registry import provider_entry
from ethan_llm.retry import astream_with_retries, stream_with_retries
from ethan_llm.routing import provider_for
from ethan_llm.types import (
    AUTO,
    CANNOT_SEE,
    NO_SAMPLING,
    Completion,
    JsonSchema,
    Message,
    Sampling,
    StreamEnd,
    StreamEvent,
    ToolChoice,
    ToolSpec,
)


@functools.cache
def get_provider(name: str) -> Provider:
    """The adapter registered for `name` (ethan_llm.registry), built once; its SDK is imported now,
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
    tool_choice: ToolChoice = AUTO,
    parallel_tool_calls: bool | None = None,
    sampling: Sampling = NO_SAMPLING,
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

    A model that refuses the request's attachments (an image to a text-only model) is asked
    once more with each one replaced by its placeholder, and says it cannot see it.
    """
    provider, request, policy = _prepared(
        model,
        system,
        messages,
        tools,
        max_tokens,
        timeout,
        json_schema,
        tool_choice,
        parallel_tool_calls,
        sampling,
    )
    return _stream_attachments_or_not(provider, request, policy)


def _stream_attachments_or_not(
    provider: Provider, request: Request, policy: dict
) -> Iterator[StreamEvent]:
    """stream's events; asked once more without attachments when the model refuses them."""
    delivered = False
    try:
        for event in stream_with_retries(lambda: provider.stream(request), **policy):
            delivered = True
            yield event
        return
    except ModelRequestError:
        plain = _without_attachments(request)
        if plain is None or delivered:
            raise
    yield from stream_with_retries(lambda: provider.stream(plain), **policy)


def astream(
    *,
    model: str | None = None,
    system: str = "",
    messages: Sequence[Message],
    tools: Sequence[ToolSpec] = (),
    max_tokens: int = 1024,
    timeout: float | None = None,
    json_schema: JsonSchema | None = None,
    tool_choice: ToolChoice = AUTO,
    parallel_tool_calls: bool | None = None,
    sampling: Sampling = NO_SAMPLING,
) -> AsyncIterator[StreamEvent]:
    """stream through the providers' async clients (AsyncOpenAI, AsyncAnthropic, google-genai's
    `aio`): the same events, retries and errors, and the event loop is free while the model
    writes. ModelConfigError is raised here, before any request; the rest while iterating."""
    provider, request, policy = _prepared(
        model,
        system,
        messages,
        tools,
        max_tokens,
        timeout,
        json_schema,
        tool_choice,
        parallel_tool_calls,
        sampling,
    )
    return _astream_attachments_or_not(provider, request, policy)


async def _astream_attachments_or_not(
    provider: Provider, request: Request, policy: dict
) -> AsyncIterator[StreamEvent]:
    """astream's events; asked once more without attachments when the model refuses them."""
    delivered = False
    try:
        async for event in astream_with_retries(lambda: provider.astream(request), **policy):
            delivered = True
            yield event
        return
    except ModelRequestError:
        plain = _without_attachments(request)
        if plain is None or delivered:
            raise
    async for event in astream_with_retries(lambda: provider.astream(plain), **policy):
        yield event


def _without_attachments(request: Request) -> Request | None:
    """The request with its attachments as placeholders, or None when it has none (then a
    refusal was about something else and stands). A refusal comes before any delta, so
    nothing was shown twice."""
    if not any(message.attachments for message in request.messages):
        return None
    messages = tuple(message.without_attachments(CANNOT_SEE) for message in request.messages)
    return dataclasses.replace(request, messages=messages)


def _prepared(
    model,
    system,
    messages,
    tools,
    max_tokens,
    timeout,
    json_schema,
    tool_choice=AUTO,
    parallel_tool_calls=None,
    sampling=NO_SAMPLING,
):
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
        tool_choice=tool_choice,
        parallel_tool_calls=parallel_tool_calls,
        sampling=sampling,
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
    tool_choice: ToolChoice = AUTO,
    parallel_tool_calls: bool | None = None,
    sampling: Sampling = NO_SAMPLING,
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
        tool_choice=tool_choice,
        parallel_tool_calls=parallel_tool_calls,
        sampling=sampling,
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
