"""The real SDKs against the fakes: replies, tool calls, retries, timeouts and auth (through
`complete()`, which drains the same stream `stream()` yields)."""

from __future__ import annotations

import pytest

import ethan_llm
from ethan_llm import ModelAuthError, ModelConfigError, ModelRequestError, ModelUnavailable
from ethan_llm.types import Message, ToolSpec

MEMORY_WRITE = ToolSpec(
    name="memory_write",
    description="Store one fact about the user in long-term memory.",
    parameters={
        "type": "object",
        "properties": {
            "content": {"type": "string"},
            "category": {"enum": ["preference", "decision", "knowledge", "correction"]},
        },
        "required": ["content", "category"],
    },
)


def test_text_reply(provider):
    provider.fake.reply(provider.text("你好，我是 Ethan。"))
    completion = ethan_llm.complete(
        model=provider.model,
        system="You are Ethan.",
        messages=[Message.user("你好")],
        max_tokens=256,
    )
    assert completion.text == "你好，我是 Ethan。"
    assert completion.tool_calls == ()
    assert (completion.provider, completion.model) == (provider.name, provider.model)
    assert completion.usage.input_tokens > 0 and completion.usage.output_tokens > 0
    assert not completion.usage.estimated
    assert completion.latency_ms > 0
    [request] = provider.fake.requests
    body = request.body
    if provider.name == "openai":
        assert body["model"] == "gpt-4o"
        assert body["messages"] == [
            {"role": "system", "content": "You are Ethan."},
            {"role": "user", "content": "你好"},
        ]
        assert body["max_completion_tokens"] == 256
        assert request.headers["authorization"] == "Bearer test-openai-key"
    elif provider.name == "anthropic":
        assert body["system"] == "You are Ethan."
        assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "你好"}]}]
        assert body["max_tokens"] == 256
        assert body["stream"] is True
    else:
        assert request.path.endswith(f"/models/{provider.model}:streamGenerateContent?alt=sse")
        assert body["systemInstruction"]["parts"] == [{"text": "You are Ethan."}]
        assert body["contents"] == [{"role": "user", "parts": [{"text": "你好"}]}]
        assert body["generationConfig"]["maxOutputTokens"] == 256
        assert request.headers["x-goog-api-key"] == "test-gemini-key"


def test_tool_schema_on_the_wire(provider):
    provider.fake.reply(provider.text("ok"))
    ethan_llm.complete(model=provider.model, messages=[Message.user("hi")], tools=[MEMORY_WRITE])
    body = provider.fake.requests[0].body
    if provider.name == "openai":
        assert body["tools"] == [
            {
                "type": "function",
                "function": {
                    "name": "memory_write",
                    "description": MEMORY_WRITE.description,
                    "parameters": MEMORY_WRITE.parameters,
                },
            }
        ]
    elif provider.name == "anthropic":
        assert body["tools"] == [
            {
                "name": "memory_write",
                "description": MEMORY_WRITE.description,
                "input_schema": MEMORY_WRITE.parameters,
            }
        ]
    else:
        [declaration] = body["tools"][0]["functionDeclarations"]
        # google-genai sends this one field in its proto name; Google's JSON parsing accepts
        # both spellings, so the fake does too.
        schema = declaration.pop("parametersJsonSchema", None) or declaration.pop(
            "parameters_json_schema"
        )
        assert schema == MEMORY_WRITE.parameters
        assert declaration == {"name": "memory_write", "description": MEMORY_WRITE.description}


def test_rate_limit_then_success(provider):
    provider.fake.reply(provider.error(429, "slow down"), status=429, headers={"retry-after": "0"})
    provider.fake.reply(provider.text("finally"))
    completion = ethan_llm.complete(model=provider.model, messages=[Message.user("hi")])
    assert completion.text == "finally"
    assert len(provider.fake.requests) == 2


def test_server_errors_until_retries_run_out(provider, llm_config):
    for _ in range(5):
        provider.fake.reply(provider.error(500, "internal"), status=500)
    with pytest.raises(ModelUnavailable, match=r"HTTP 500.*gave up after 3 attempts"):
        ethan_llm.complete(model=provider.model, messages=[Message.user("hi")])
    assert len(provider.fake.requests) == 3  # the first try and llm_config's 2 retries


def test_timeout_is_retried_then_unavailable(provider, llm_config):
    llm_config.configure(timeout=0.3, retries=1)
    provider.fake.reply(provider.text("too late"), delay=1.5)
    provider.fake.reply(provider.text("too late"), delay=1.5)
    with pytest.raises(ModelUnavailable, match=r"timed out.*gave up after 2 attempts"):
        ethan_llm.complete(model=provider.model, messages=[Message.user("hi")])
    assert len(provider.fake.requests) == 2


def test_refused_credentials_name_the_variable(provider):
    provider.fake.reply(provider.error(401, "invalid key"), status=401)
    with pytest.raises(ModelAuthError, match=provider.key_var):
        ethan_llm.complete(model=provider.model, messages=[Message.user("hi")])
    assert len(provider.fake.requests) == 1  # never retried


def test_a_refused_request_is_not_retried(provider):
    provider.fake.reply(provider.error(404, "no such model"), status=404)
    with pytest.raises(ModelRequestError, match="HTTP 404"):
        ethan_llm.complete(model=provider.model, messages=[Message.user("hi")])
    assert len(provider.fake.requests) == 1


def test_missing_key_names_the_variable(provider, llm_config):
    llm_config.configure(env={})
    with pytest.raises(ModelConfigError, match=f"needs {provider.key_var}"):
        ethan_llm.complete(model=provider.model, messages=[Message.user("hi")])
    assert provider.fake.requests == []


def test_openai_compatible_server_by_prefix(llm_config):
    from tests.fakes.openai_fake import FakeOpenAI

    fake = FakeOpenAI()
    try:
        # Ollama and friends need no key: the base URL is enough.
        llm_config.configure(env={"OPENAI_BASE_URL": f"{fake.url}/v1"})
        fake.reply(FakeOpenAI.text("hello from llama"))
        completion = ethan_llm.complete(
            model="openai:llama3.1", messages=[Message.user("hi")], max_tokens=64
        )
        assert (completion.text, completion.provider, completion.model) == (
            "hello from llama",
            "openai",
            "openai:llama3.1",
        )
        body = fake.requests[0].body
        assert (body["model"], body["max_tokens"]) == ("llama3.1", 64)
        assert "max_completion_tokens" not in body
    finally:
        fake.close()


def test_gemini_bad_key_is_an_auth_error(fakes):
    gemini = fakes["gemini"]
    gemini.fake.reply(
        gemini.error(400, "API key not valid. Please pass a valid API key."), status=400
    )
    with pytest.raises(ModelAuthError, match="GOOGLE_API_KEY"):
        ethan_llm.complete(model=gemini.model, messages=[Message.user("hi")])
