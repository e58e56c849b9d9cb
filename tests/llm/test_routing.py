from __future__ import annotations

import pytest

from ethan_llm import (
    ModelConfigError,
    compression_model,
    default_model,
    estimate_tokens,
    provider_for,
)
from ethan_llm.config import LLMSettings
from ethan_llm.routing import compression_model_for, parse_routes, wire_model_name
from tests.conftest import run_manage


@pytest.mark.parametrize(
    ("model", "provider"),
    [
        ("claude-sonnet-4-6", "anthropic"),
        ("claude-haiku-4-5", "anthropic"),
        ("gemini-2.5-flash", "gemini"),
        ("gemini-3-pro-preview", "gemini"),
        ("gpt-4o", "openai"),
        ("gpt-5.1", "openai"),
        ("o3-mini", "openai"),
        ("o4", "openai"),
        ("openai:llama3.1", "openai"),
        ("openai:qwen2.5:7b", "openai"),
        ("offline", "offline"),
    ],
)
def test_provider_by_model_id(model, provider):
    assert provider_for(model) == provider


@pytest.mark.parametrize("model", ["llama3", "mistral-large", "omni", ""])
def test_unknown_model_is_a_clear_error(model):
    with pytest.raises(ModelConfigError, match="unknown model"):
        provider_for(model)


def test_wire_name_drops_the_openai_prefix():
    assert wire_model_name("openai:qwen2.5:7b") == "qwen2.5:7b"
    assert wire_model_name("gpt-4o") == "gpt-4o"


@pytest.mark.parametrize(
    ("model", "compressor"),
    [
        ("claude-opus-4-1", "claude-haiku-4-5"),
        ("claude-sonnet-4-6", "claude-haiku-4-5"),
        ("claude-haiku-4-5", "claude-haiku-4-5"),
        ("gemini-2.5-pro", "gemini-2.5-flash-lite"),
        ("gemini-2.5-flash", "gemini-2.5-flash-lite"),
        ("gemini-3-pro", "gemini-3-flash-lite"),
        ("gemini-2.5-flash-lite", "gemini-2.5-flash-lite"),
        ("gpt-4o", "gpt-4o-mini"),
        ("gpt-5", "gpt-4o-mini"),
        ("gpt-5.1-mini", "gpt-4o-mini"),
        ("openai:llama3.1", "openai:llama3.1"),
        ("offline", "offline"),
        ("o3", "o3"),
    ],
)
def test_compression_routing_follows_the_design(model, compressor):
    assert compression_model_for(model) == compressor


def test_compression_override_and_custom_routes():
    assert compression_model_for("claude-opus-4-1", override="offline") == "offline"
    routes = parse_routes("claude-*=claude-haiku-4-5, gemini-*-pro = gemini-*-flash")
    assert compression_model_for("gemini-2.5-pro", routes=routes) == "gemini-2.5-flash"
    assert compression_model_for("gpt-5", routes=routes) == "gpt-5"
    settings = LLMSettings(compression_routes=routes, compression_model="")
    assert compression_model("claude-sonnet-4-6", settings) == "claude-haiku-4-5"
    with pytest.raises(ValueError, match="not pattern=model"):
        parse_routes("claude-*")


def test_default_model_is_the_first_provider_with_a_key():
    assert default_model(LLMSettings(env={})) == "offline"
    assert default_model(LLMSettings(env={"GEMINI_API_KEY": "k"})) == "gemini-2.5-flash"
    assert default_model(LLMSettings(env={"OPENAI_API_KEY": "k", "GEMINI_API_KEY": "k"})) == "gpt-5"
    both = {"OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k"}
    assert default_model(LLMSettings(env=both)) == "claude-sonnet-4-6"
    assert default_model(LLMSettings(env=both, model="offline")) == "offline"


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", 0),
        ("abcd", 1),
        ("abcde", 2),
        ("你好世界", 4),
        ("我喜欢 coffee", 3 + 2),
        ("Hello, world! 这是测试。", 4 + 5),
    ],
)
def test_token_estimate(text, tokens):
    assert estimate_tokens(text) == tokens


def test_django_settings_reach_the_llm_layer(tmp_path):
    (tmp_path / "config.yaml").write_text(
        "openai_api_key: from-file\nmodel_timeout: 12.5\nmodel_retries: 1\n"
        "compression_routes: 'gpt-*=gpt-4o-mini'\n"
    )
    probe = (
        "import ethan_llm.config as c; s = c.current(); "
        "print(sorted(s.env), s.timeout, s.retries, c.default_model(), "
        "c.compression_model('gpt-5'), c.compression_model('claude-opus-4-1'), sep='|')"
    )
    result = run_manage(
        ["shell", "-v", "0", "-c", probe], tmp_path, ANTHROPIC_BASE_URL="http://127.0.0.1:9"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().split("|") == [
        "['ANTHROPIC_BASE_URL', 'OPENAI_API_KEY']",
        "12.5",
        "1",
        "gpt-5",
        "gpt-4o-mini",
        "claude-opus-4-1",
    ]
    broken = run_manage(["check"], tmp_path, ETHAN_COMPRESSION_ROUTES="nonsense")
    assert broken.returncode == 1
    assert "ETHAN_COMPRESSION_ROUTES from environment variable" in broken.stderr
