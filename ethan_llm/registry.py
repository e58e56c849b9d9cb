"""Which code serves each provider: one table, name → how to build its chat adapter
(ethan_llm.memory
chooses a provider's memory model from the same names).

Every entry imports its module when it is first used, never at import time: a laptop on the
offline model never loads the openai, anthropic or google-genai SDKs. A new provider is one
entry here (and a rule in ethan_llm.routing.provider_for that names it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ethan_llm.errors import ModelConfigError
from ethan_llm.routing import ANTHROPIC, GEMINI, OFFLINE, OPENAI

if TYPE_CHECKING:
    from ethan_llm.provider import Provider


@dataclass(frozen=True)
class ProviderEntry:
    # Builds the adapter that streams completions (imports its SDK).
    chat: Callable[[], Provider]


def _openai() -> Provider:
    from ethan_llm.openai_adapter import OpenAIProvider

    return OpenAIProvider()


def _anthropic() -> Provider:
    from ethan_llm.anthropic_adapter import AnthropicProvider

    return AnthropicProvider()


def _gemini() -> Provider:
    from ethan_llm.gemini_adapter import GeminiProvider

    return GeminiProvider()


def _offline() -> Provider:
    from ethan_llm.offline import OfflineProvider

    return OfflineProvider()


PROVIDERS: dict[str, ProviderEntry] = {
    OPENAI: ProviderEntry(chat=_openai),
    ANTHROPIC: ProviderEntry(chat=_anthropic),
    GEMINI: ProviderEntry(chat=_gemini),
    OFFLINE: ProviderEntry(chat=_offline),
}


def provider_entry(name: str) -> ProviderEntry:
    """The registered entry for a provider name; ModelConfigError for a name nobody registered."""
    try:
        return PROVIDERS[name]
    except KeyError:
        known = ", ".join(sorted(PROVIDERS))
        raise ModelConfigError(f"no provider named {name!r} (known: {known})") from None
