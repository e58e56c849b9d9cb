"""The LLM layer's settings: timeouts, retries, credentials and routing.

Plain Python: Django's settings hand their values over once at start-up (`configure(...)` in
ethan_site's AppConfig), so keys from config.yaml work as well as from the environment, and tests
can point a provider at a loopback fake by changing `env`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from ethan_llm.errors import ModelConfigError
from ethan_llm.routing import (
    ANTHROPIC,
    DEFAULT_COMPRESSION_ROUTES,
    GEMINI,
    OFFLINE,
    OPENAI,
    compression_model_for,
)

# The SDKs' own variable names.
KEY_VARS: dict[str, tuple[str, ...]] = {
    OPENAI: ("OPENAI_API_KEY",),
    ANTHROPIC: ("ANTHROPIC_API_KEY",),
    GEMINI: ("GOOGLE_API_KEY", "GEMINI_API_KEY"),
}
BASE_URL_VARS: dict[str, str] = {
    OPENAI: "OPENAI_BASE_URL",
    ANTHROPIC: "ANTHROPIC_BASE_URL",
    GEMINI: "GOOGLE_GEMINI_BASE_URL",
}
PROVIDER_VARS = tuple(v for names in KEY_VARS.values() for v in names) + tuple(
    BASE_URL_VARS.values()
)

# The model chosen when ETHAN_MODEL is unset: the first provider (in this order) with a key.
DEFAULT_MODELS: tuple[tuple[str, str], ...] = (
    (ANTHROPIC, "claude-sonnet-4-6"),
    (OPENAI, "gpt-5"),
    (GEMINI, "gemini-2.5-flash"),
)


@dataclass(frozen=True)
class LLMSettings:
    timeout: float = 60.0  # seconds, per attempt
    retries: int = 3  # extra attempts after the first, for transient failures only
    backoff_base: float = 0.5  # seconds before the first retry; doubles each time
    backoff_cap: float = 8.0  # no single wait is longer than this
    env: Mapping[str, str] = field(default_factory=lambda: os.environ)
    model: str = ""  # ETHAN_MODEL
    compression_model: str = ""  # ETHAN_COMPRESSION_MODEL
    compression_routes: tuple[tuple[str, str], ...] = DEFAULT_COMPRESSION_ROUTES


_settings = LLMSettings()


def configure(**changes) -> LLMSettings:
    global _settings
    _settings = replace(_settings, **changes)
    return _settings


def current() -> LLMSettings:
    return _settings


def api_key(provider: str, model: str, env: Mapping[str, str]) -> str:
    names = KEY_VARS[provider]
    for name in names:
        if env.get(name):
            return env[name]
    # An OpenAI-compatible local server (Ollama, vLLM, llama.cpp) usually needs no key.
    if provider == OPENAI and model.startswith("openai:") and env.get(BASE_URL_VARS[OPENAI]):
        return "not-needed"
    wanted = " or ".join(names)
    raise ModelConfigError(
        f"model {model!r} needs {wanted}: set it in the environment or in "
        "$ETHAN_HOME/config.yaml (or choose ETHAN_MODEL=offline)"
    )


def base_url(provider: str, env: Mapping[str, str]) -> str | None:
    return env.get(BASE_URL_VARS[provider]) or None


def default_model(settings: LLMSettings | None = None) -> str:
    """ETHAN_MODEL, else the first provider with a key, else the offline model."""
    settings = settings or current()
    if settings.model:
        return settings.model
    for provider, model in DEFAULT_MODELS:
        if any(settings.env.get(name) for name in KEY_VARS[provider]):
            return model
    return OFFLINE


def compression_model(model: str, settings: LLMSettings | None = None) -> str:
    """The compression model for `model` under the current settings (override, then routes)."""
    settings = settings or current()
    return compression_model_for(
        model, override=settings.compression_model, routes=settings.compression_routes
    )


def check_model(model: str, settings: LLMSettings | None = None) -> None:
    """Raise ModelConfigError now if `model` is unknown or its provider has no key, so a
    console can say so at start rather than at the first message."""
    from ethan_llm.routing import provider_for

    settings = settings or current()
    provider = provider_for(model)
    if provider != OFFLINE:
        api_key(provider, model, settings.env)
