"""Each provider's real SDK against its loopback fake, behind one small interface, so every
wire test runs for openai, anthropic and gemini alike."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pytest

from ethan_llm import config
from tests.fakes.anthropic_fake import FakeAnthropic
from tests.fakes.base import FakeServer
from tests.fakes.gemini_fake import FakeGemini
from tests.fakes.openai_fake import FakeOpenAI


@dataclass
class ProviderCase:
    name: str
    model: str
    fake: FakeServer
    key_var: str
    text: Callable[[str], Any]
    tool_call: Callable[[str, str, dict[str, Any]], Any]

    def error(self, status: int, message: str = "boom") -> Any:
        return self.fake.error_body(status, message)

    def system_of(self, body: dict[str, Any]) -> str:
        """Where each protocol carries the system prompt."""
        if self.name == "openai":
            return body["messages"][0]["content"]
        if self.name == "anthropic":
            return body["system"]
        return body["systemInstruction"]["parts"][0]["text"]


def _openai() -> tuple[FakeServer, dict[str, str], ProviderCase]:
    fake = FakeOpenAI()
    env = {"OPENAI_API_KEY": "test-openai-key", "OPENAI_BASE_URL": f"{fake.url}/v1"}
    case = ProviderCase(
        "openai",
        "gpt-4o",
        fake,
        "OPENAI_API_KEY",
        FakeOpenAI.text,
        lambda cid, name, args: FakeOpenAI.tool_calls((cid, name, args)),
    )
    return fake, env, case


def _anthropic() -> tuple[FakeServer, dict[str, str], ProviderCase]:
    fake = FakeAnthropic()
    env = {"ANTHROPIC_API_KEY": "test-anthropic-key", "ANTHROPIC_BASE_URL": fake.url}
    case = ProviderCase(
        "anthropic",
        "claude-sonnet-4-6",
        fake,
        "ANTHROPIC_API_KEY",
        FakeAnthropic.text,
        FakeAnthropic.tool_use,
    )
    return fake, env, case


def _gemini() -> tuple[FakeServer, dict[str, str], ProviderCase]:
    fake = FakeGemini()
    env = {"GOOGLE_API_KEY": "test-gemini-key", "GOOGLE_GEMINI_BASE_URL": fake.url}
    case = ProviderCase(
        "gemini",
        "gemini-3-pro-preview",
        fake,
        "GOOGLE_API_KEY",
        FakeGemini.text,
        lambda cid, name, args: fake.function_call(name, args, signature=b"sig-" + cid.encode()),
    )
    return fake, env, case


FACTORIES = {"openai": _openai, "anthropic": _anthropic, "gemini": _gemini}


@pytest.fixture
def llm_config():
    """Fast, bounded retries for tests; the previous settings come back afterwards."""
    saved = config.current()
    config.configure(
        env={},
        retries=2,
        backoff_base=0.01,
        backoff_cap=0.05,
        timeout=5.0,
        model="",
        compression_model="",
    )
    yield config
    config._settings = saved


@pytest.fixture(params=list(FACTORIES))
def provider(request, llm_config) -> ProviderCase:
    fake, env, case = FACTORIES[request.param]()
    llm_config.configure(env=env)
    yield case
    fake.close()


@pytest.fixture
def fakes(llm_config):
    """All three fakes at once, configured together."""
    made = {name: factory() for name, factory in FACTORIES.items()}
    env: dict[str, str] = {}
    for _fake, part, _case in made.values():
        env.update(part)
    llm_config.configure(env=env)
    yield {name: case for name, (_f, _e, case) in made.items()}
    for fake, _env, _case in made.values():
        fake.close()


def without(settings: config.LLMSettings, *names: str) -> config.LLMSettings:
    return replace(settings, env={k: v for k, v in settings.env.items() if k not in names})
