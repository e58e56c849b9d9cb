"""Providers come from one registry; memory work goes through MemoryModel, chosen by the
compression model's provider; the offline model never loads an SDK."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import ethan_llm
from ethan_llm import memory, registry
from ethan_llm.client import get_provider
from ethan_llm.memory import Turn
from ethan_llm.offline import OfflineMemory, OfflineProvider
from ethan_llm.provider import Request
from ethan_llm.types import Message

ROOT = Path(__file__).resolve().parents[2]


def test_every_routed_provider_is_registered():
    assert set(registry.PROVIDERS) == {"openai", "anthropic", "gemini", "offline"}
    assert isinstance(get_provider("offline"), OfflineProvider)
    assert get_provider("offline") is get_provider("offline")  # built once


def test_an_unregistered_provider_is_a_config_error():
    with pytest.raises(ethan_llm.ModelConfigError, match="no provider named 'mistral'"):
        get_provider("mistral")


def test_the_memory_model_follows_the_provider():
    assert isinstance(memory.memory_model("offline"), OfflineMemory)
    for model in ("gpt-4o-mini", "claude-haiku-4-5", "gemini-2.5-flash-lite", "openai:llama3"):
        prompted = memory.memory_model(model)
        assert isinstance(prompted, memory.PromptedMemory)
        assert prompted.model == model
    with pytest.raises(ethan_llm.ModelConfigError, match="unknown model"):
        memory.memory_model("mistral-large")


def test_a_request_says_nothing_about_its_purpose():
    assert "task" not in {field.name for field in dataclasses.fields(Request)}
    with pytest.raises(TypeError):
        ethan_llm.complete(model="offline", messages=[Message.user("hi")], task="summarize")


def test_the_offline_memory_model_works_on_the_turns():
    turns = [
        Turn("user", "我更喜欢简短的回答。最近压力很大。"),
        Turn("assistant", "我喜欢长篇大论。"),  # the assistant's words are not the user's facts
        Turn("user", "记住：周五前要交季度报告。"),
    ]
    offline = OfflineMemory()
    assert offline.summarize(turns) == "用户提到：我更喜欢简短的回答；记住：周五前要交季度报告。"
    extraction = offline.extract(turns, known=["用户喜欢咖啡"], psych=True)
    assert [(f.content, f.category, f.importance, f.action) for f in extraction.facts] == [
        ("用户更喜欢简短的回答", "preference", 0.9, "ADD"),
        ("用户周五前要交季度报告", "knowledge", 0.95, "ADD"),
    ]
    assert extraction.psych == ("最近压力很大",)
    assert extraction.judged is False  # the consolidator's rules decide against known facts
    assert offline.fold(rolling="用户提到：甲；乙。", summaries=["用户提到：乙；丙。"]) == (
        "用户提到：甲；乙；丙。"
    )


def test_the_offline_chat_model_does_not_read_memory_prompts():
    """A summary prompt sent to the offline model as a chat is just a chat message now."""
    transcript = memory.render_transcript([Turn("user", "我更喜欢简短的回答。")])
    reply = ethan_llm.complete(
        model="offline", system=memory.SUMMARY_SYSTEM, messages=[Message.user(transcript)]
    )
    assert reply.text == f"（离线模式）收到：{transcript}"


def test_offline_work_never_imports_an_sdk():
    probe = textwrap.dedent(
        """
        import sys
        import ethan_llm
        from ethan_llm import memory
        from ethan_llm.types import Message, ToolSpec

        rounds = [Message.user("记住我喜欢喝美式咖啡。"), Message.assistant("好的。")]
        ethan_llm.complete(model="offline", messages=rounds[:1],
                     tools=[ToolSpec("memory_write", "d", {"type": "object"})])
        list(ethan_llm.stream(model="offline", messages=rounds[:1]))
        memory.summarize(model="offline", rounds=rounds)
        memory.extract(model="offline", rounds=rounds, psych=True)
        memory.fold(model="offline", rolling="", summaries=["用户提到：甲。"])
        loaded = [name for name in ("openai", "anthropic", "google.genai") if name in sys.modules]
        print(",".join(loaded) or "none")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "none"


@pytest.mark.parametrize(
    ("model", "sdk"), [("gpt-4o", "openai"), ("claude-sonnet-4-6", "anthropic"), ("offline", None)]
)
def test_preload_loads_the_models_sdk_and_jieba_before_any_call(model, sdk):
    """What a server does before its first request (ethan_site.asgi): the SDK of the model's
    provider and jieba's dictionary are loaded, and nothing is asked of any model."""
    probe = textwrap.dedent(
        f"""
        import sys
        import ethan_llm

        before = [name for name in ("openai", "anthropic") if name in sys.modules]
        print(ethan_llm.preload({model!r}))
        import jieba
        loaded = [name for name in ("openai", "anthropic") if name in sys.modules]
        print(before, loaded, jieba.dt.initialized)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    provider, loaded = result.stdout.strip().splitlines()
    assert provider == (sdk or "offline")
    assert loaded == f"[] {[sdk] if sdk else []} True"
