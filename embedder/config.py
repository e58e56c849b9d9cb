"""Which embedder is configured, and how its name is read.

Plain Python, like ethan_llm.config: Django's settings hand ETHAN_EMBEDDER over once at start-up
(ethan_site's AppConfig), so `embedder: openai:text-embedding-3-small` in config.yaml works as
well as the environment variable. Keys, base URLs, timeouts and retries are ethan_llm's own settings
(ethan_llm.config.current()): one place to set a provider's key.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from embedder import local
from ethan_llm.errors import ModelConfigError
from ethan_llm.routing import GEMINI, OPENAI

LOCAL = "local"  # the default model, in this process
DEFAULT = "default"
OFF = "off"


@dataclass(frozen=True)
class EmbedderSettings:
    embedder: str = DEFAULT  # ETHAN_EMBEDDER: default, off, openai:<model>, gemini:<model>
    # The most texts in one request to a provider. OpenAI takes up to 2048 inputs (and 300,000
    # tokens) a request, Gemini's batchEmbedContents 100.
    openai_batch: int = 256
    gemini_batch: int = 100


@dataclass(frozen=True)
class Choice:
    """A configured embedder: who computes it and the name stored with its vectors."""

    provider: str  # LOCAL, OPENAI or GEMINI
    name: str  # stable: "use-multilingual-v3", "openai:text-embedding-3-small"
    wire_model: str  # the model's name in the provider's API ("" for the local one)


_settings = EmbedderSettings()


def configure(**changes) -> EmbedderSettings:
    global _settings
    _settings = replace(_settings, **changes)
    return _settings


def current() -> EmbedderSettings:
    return _settings


def parse(value: str) -> Choice | None:
    """The embedder a setting names; None when it is off. ModelConfigError for a value that
    names none: default (or empty), off, openai:<model>, gemini:<model>."""
    text = value.strip()
    if text.lower() in ("", DEFAULT, local.NAME):
        return Choice(LOCAL, local.NAME, "")
    if text.lower() == OFF:
        return None
    prefix, sep, model = text.partition(":")
    prefix = prefix.strip().lower()
    model = model.strip()
    if sep and model and prefix in (OPENAI, GEMINI):
        return Choice(prefix, f"{prefix}:{model}", model)
    raise ModelConfigError(
        f"unknown embedder {value!r}: use default (offline, {local.NAME}), off (keyword search "
        "alone), openai:<model> (OpenAI or any OpenAI-compatible /embeddings server at "
        "OPENAI_BASE_URL) or gemini:<model>"
    )


def configured(settings: EmbedderSettings | None = None) -> Choice | None:
    """The current embedder, or None when it is off."""
    return parse((settings or current()).embedder)
