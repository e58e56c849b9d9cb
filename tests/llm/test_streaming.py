"""ethan_llm.stream(): each real SDK streaming from its fake, the retries before and after the first
delta, and the offline model's pieces."""

from __future__ import annotations

import base64
import json
import time
from dataclasses import replace

import anthropic
import openai
import pytest
from google import genai
from google.genai import types as genai_types

import ethan_llm
from ethan_llm import ModelConfigError, ModelUnavailable, StreamEnd, TextDelta
from ethan_llm.types import Message
from tests.llm.test_providers import MEMORY_WRITE

LONG = "你好，我是 Ethan。Streaming arrives piece by piece, never all at once."
# How many events each protocol sends before the first piece of text: OpenAI the role chunk;
# Anthropic message_start, ping and content_block_start; Gemini none.
BEFORE_TEXT = {"openai": 1, "anthropic": 3, "gemini": 0}


def collect(events) -> tuple[list[str], StreamEnd]:
    """The deltas' texts and the final event; nothing may follow StreamEnd."""
    events = list(events)
    *deltas, end = events
    assert all(isinstance(event, TextDelta) for event in deltas)
    assert isinstance(end, StreamEnd)
    return [delta.text for delta in deltas], end


def test_streamed_text_arrives_in_several_deltas(provider):
    provider.fake.reply(provider.text(LONG))
    deltas, end = collect(
        ethan_llm.stream(
            model=provider.model, system="You are Ethan.", messages=[Message.user("hi")]
        )
    )
    assert len(deltas) > 1
    assert "".join(deltas) == end.completion.text == LONG
    assert (end.completion.provider, end.completion.model) == (provider.name, provider.model)
    assert end.completion.usage.input_tokens > 0 and end.completion.usage.output_tokens > 0
    [request] = provider.fake.requests
    assert request.streamed


def unstreamed(case, body) -> tuple:
    """`body` served unstreamed by the fake and parsed by the SDK's own non-streaming call:
    (text, ((id, name, arguments, signature), …), (input tokens, output tokens))."""
    case.fake.reply(body)
    fake = case.fake
    if case.name == "openai":
        client = openai.OpenAI(api_key="k", base_url=f"{fake.url}/v1", max_retries=0)
        response = client.chat.completions.create(
            model=case.model, messages=[{"role": "user", "content": "hi"}]
        )
        message = response.choices[0].message
        calls = tuple(
            (c.id, c.function.name, json.loads(c.function.arguments), None)
            for c in message.tool_calls or []
        )
        usage = (response.usage.prompt_tokens, response.usage.completion_tokens)
        return message.content or "", calls, usage
    if case.name == "anthropic":
        client = anthropic.Anthropic(api_key="k", base_url=fake.url, max_retries=0)
        response = client.messages.create(
            model=case.model, max_tokens=64, messages=[{"role": "user", "content": "hi"}]
        )
        text = "".join(b.text for b in response.content if b.type == "text")
        calls = tuple(
            (b.id, b.name, b.input, None) for b in response.content if b.type == "tool_use"
        )
        return text, calls, (response.usage.input_tokens, response.usage.output_tokens)
    client = genai.Client(api_key="k", http_options=genai_types.HttpOptions(base_url=fake.url))
    response = client.models.generate_content(
        model=case.model,
        contents="hi",
        config=genai_types.GenerateContentConfig(
            automatic_function_calling=genai_types.AutomaticFunctionCallingConfig(disable=True)
        ),
    )
    parts = response.candidates[0].content.parts
    text = "".join(p.text for p in parts if p.text)
    calls = tuple(
        (
            p.function_call.id,
            p.function_call.name,
            p.function_call.args,
            base64.b64encode(p.thought_signature).decode(),
        )
        for p in parts
        if p.function_call
    )
    usage = response.usage_metadata
    return text, calls, (usage.prompt_token_count, usage.candidates_token_count)


def tool_reply(case, text: str = "") -> dict:
    args = {"content": "用户喜欢喝美式咖啡", "category": "preference"}
    if case.name == "anthropic":
        return case.fake.tool_use("toolu_7", "memory_write", args, text=text)
    if case.name == "openai":
        body = case.fake.tool_calls(("call_7", "memory_write", args))
        body["choices"][0]["message"]["content"] = text or None
        return body
    body = case.fake.function_call("memory_write", args, signature=b"sig-7", call_id="fc_7")
    if text:
        body["candidates"][0]["content"]["parts"].insert(0, {"text": text})
    return body


@pytest.mark.parametrize("text", ["", "Let me save that for you."])
def test_streamed_tool_call_equals_the_unstreamed_one(provider, text):
    expected = unstreamed(provider, tool_reply(provider, text))
    provider.fake.reply(tool_reply(provider, text))
    deltas, end = collect(
        ethan_llm.stream(model=provider.model, messages=[Message.user("hi")], tools=[MEMORY_WRITE])
    )
    completion = end.completion
    got = (
        completion.text,
        tuple(
            (c.id, c.name, c.arguments, (c.meta or {}).get("thought_signature"))
            for c in completion.tool_calls
        ),
        (completion.usage.input_tokens, completion.usage.output_tokens),
    )
    assert got == expected
    assert "".join(deltas) == text
    assert [r.streamed for r in provider.fake.requests] == [False, True]
    # The signed Gemini call keeps its id and signature, to be echoed on the next request.
    if provider.name == "gemini":
        assert completion.tool_calls[0].meta == {
            "gemini_id": True,
            "thought_signature": base64.b64encode(b"sig-7").decode(),
        }


def test_a_503_before_the_first_delta_is_retried(provider):
    provider.fake.reply(provider.error(503, "overloaded"), status=503)
    provider.fake.reply(provider.text(LONG))
    deltas, end = collect(ethan_llm.stream(model=provider.model, messages=[Message.user("hi")]))
    assert "".join(deltas) == end.completion.text == LONG
    assert len(provider.fake.requests) == 2


@pytest.mark.parametrize("fail_with", ["close", "error"])
def test_a_stream_broken_before_the_first_delta_is_retried(provider, fail_with):
    provider.fake.reply(
        provider.text(LONG), fail_after=BEFORE_TEXT[provider.name], fail_with=fail_with
    )
    provider.fake.reply(provider.text(LONG))
    deltas, _end = collect(ethan_llm.stream(model=provider.model, messages=[Message.user("hi")]))
    assert "".join(deltas) == LONG
    assert len(provider.fake.requests) == 2


@pytest.mark.parametrize("fail_with", ["close", "error"])
def test_a_stream_broken_after_the_first_delta_is_raised_not_retried(provider, fail_with):
    provider.fake.reply(provider.text(LONG), fail_after=5, fail_with=fail_with)
    provider.fake.reply(provider.text("a second answer nobody may see"))
    seen: list[str] = []
    with pytest.raises(ModelUnavailable, match="not retried") as raised:
        for event in ethan_llm.stream(model=provider.model, messages=[Message.user("hi")]):
            assert isinstance(event, TextDelta)
            seen.append(event.text)
    assert seen and LONG.startswith("".join(seen)) and "".join(seen) != LONG
    assert len(provider.fake.requests) == 1
    assert provider.name in str(raised.value)


def test_the_first_delta_arrives_before_the_last_chunk_is_sent(provider):
    provider.fake.reply(provider.text(LONG), first_chunk_ms=40, chunk_ms=25)
    first_delta_at = None
    for event in ethan_llm.stream(model=provider.model, messages=[Message.user("hi")]):
        if isinstance(event, TextDelta) and first_delta_at is None:
            first_delta_at = time.monotonic()
    [request] = provider.fake.requests
    assert len(request.chunk_times) > 5
    assert request.chunk_times[0] <= first_delta_at < request.chunk_times[-1]


def test_a_missing_key_fails_before_the_stream_is_iterated(provider, llm_config):
    llm_config.configure(env={})
    with pytest.raises(ModelConfigError, match=provider.key_var):
        ethan_llm.stream(model=provider.model, messages=[Message.user("hi")])
    assert provider.fake.requests == []


def test_complete_is_the_stream_drained(provider):
    provider.fake.reply(provider.text(LONG))
    provider.fake.reply(provider.text(LONG))
    _deltas, end = collect(ethan_llm.stream(model=provider.model, messages=[Message.user("hi")]))
    completion = ethan_llm.complete(model=provider.model, messages=[Message.user("hi")])
    assert completion == replace(end.completion, latency_ms=completion.latency_ms)


def test_the_offline_model_streams_in_pieces(llm_config):
    messages = [Message.user("Hello there, could you tell me how streaming works offline?")]
    deltas, end = collect(ethan_llm.stream(model="offline", messages=messages))
    assert len(deltas) > 1
    assert "".join(deltas) == end.completion.text
    assert end.completion.meta == {"offline": True}
    completion = ethan_llm.complete(model="offline", messages=messages)
    assert (completion.text, completion.usage) == (end.completion.text, end.completion.usage)


def test_the_offline_model_streams_chinese_in_pieces(llm_config):
    deltas, end = collect(
        ethan_llm.stream(
            model="offline", messages=[Message.user("今天天气怎么样，适合出去散步吗？")]
        )
    )
    assert len(deltas) > 1 and "".join(deltas) == end.completion.text


def test_offline_tool_calls_come_in_the_final_completion(llm_config):
    deltas, end = collect(
        ethan_llm.stream(
            model="offline", messages=[Message.user("记住我喜欢喝美式咖啡")], tools=[MEMORY_WRITE]
        )
    )
    assert deltas == []
    assert [(c.name, c.arguments) for c in end.completion.tool_calls] == [
        ("memory_write", {"content": "用户喜欢喝美式咖啡", "category": "preference"})
    ]
