"""The one entry point: complete(model=, system=, messages=, tools=, max_tokens=)."""

from __future__ import annotations

import functools
from collections.abc import Sequence

from llm import config
from llm.provider import Provider, Request
from llm.retry import call_with_retries
from llm.routing import ANTHROPIC, GEMINI, OFFLINE, OPENAI, provider_for
from llm.types import Completion, Message, ToolSpec


@functools.cache
def get_provider(name: str) -> Provider:
    # Imported on first use: a laptop on the offline model never loads the three SDKs.
    if name == OPENAI:
        from llm.openai_adapter import OpenAIProvider

        return OpenAIProvider()
    if name == ANTHROPIC:
        from llm.anthropic_adapter import AnthropicProvider

        return AnthropicProvider()
    if name == GEMINI:
        from llm.gemini_adapter import GeminiProvider

        return GeminiProvider()
    if name == OFFLINE:
        from llm.offline import OfflineProvider

        return OfflineProvider()
    raise KeyError(name)


def complete(
    *,
    model: str | None = None,
    system: str = "",
    messages: Sequence[Message],
    tools: Sequence[ToolSpec] = (),
    max_tokens: int = 1024,
    timeout: float | None = None,
    json_mode: bool = False,
    task: str = "chat",
) -> Completion:
    """One completion from `model` (default: config.default_model()), with bounded retries.

    Raises ModelConfigError (no key, unknown model), ModelAuthError, ModelRequestError, or
    ModelUnavailable once rate limits, 5xx answers or timeouts outlast the retries.
    """
    settings = config.current()
    model = model or config.default_model(settings)
    provider = get_provider(provider_for(model))
    request = Request(
        model=model,
        system=system,
        messages=tuple(messages),
        tools=tuple(tools),
        max_tokens=max_tokens,
        timeout=timeout if timeout is not None else settings.timeout,
        json_mode=json_mode,
        task=task,
    )
    return call_with_retries(
        lambda: provider.complete(request),
        translate=lambda exc: provider.translate(exc, model),
        retries=settings.retries,
        base=settings.backoff_base,
        cap=settings.backoff_cap,
        label=f"{provider.name} {model}",
    )
