"""A chat app's own tools, images and sampling through /v1, with the official openai SDK (and
LangChain's ChatOpenAI with bind_tools, as agents use it) over a real loopback socket; the
turn's model the OpenAI fake (which checks the wire: every tool call answered, every result
answering a call) or the offline model."""

from __future__ import annotations

import base64
import json

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from rest_framework.authtoken.models import Token

from memory_app.models import Fact
from sessions_app.models import ChatSession, Message
from tests.fakes.openai_fake import FakeOpenAI

pytestmark = pytest.mark.django_db(transaction=True)

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city now.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
CLOCK = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The time in a city now.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
QUESTION = {"role": "user", "content": "What's the weather in Lisbon?"}


def _call_message(completion_message) -> dict:
    """The assistant message as a client appends it to its conversation."""
    return completion_message.model_dump(exclude_none=True)


def _rows(session: ChatSession) -> list[tuple]:
    return [
        (m.role, m.content, [c["name"] for c in m.tool_calls or ()], m.tool_call_id)
        for m in session.messages.order_by("seq")
    ]


def _sent_roles(request) -> list[str]:
    return [m["role"] for m in request.body["messages"]]


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_tool_call_goes_back_to_the_app_and_its_result_is_answered_in_one_session(
    client_for, owner, fakes, stream
):
    openai_fake = fakes["openai"]
    openai_fake.fake.reply(FakeOpenAI.tool_calls(("call_w1", "get_weather", {"city": "Lisbon"})))
    openai_fake.fake.reply(openai_fake.text("It is 21 °C and sunny in Lisbon."))
    client = client_for(owner)

    first = client.chat.completions.create(
        model="ethan/gpt-4o", messages=[QUESTION], tools=[WEATHER], stream=stream
    )
    if stream:
        chunks = list(first)
        calls = [c for chunk in chunks for c in chunk.choices[0].delta.tool_calls or ()]
        assert [c.index for c in calls] == [0]
        assert (calls[0].id, calls[0].function.name) == ("call_w1", "get_weather")
        assert json.loads(calls[0].function.arguments) == {"city": "Lisbon"}
        assert chunks[-1].choices[0].finish_reason == "tool_calls"
        called = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_w1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": calls[0].function.arguments},
                }
            ],
        }
    else:
        choice = first.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.content is None
        [call] = choice.message.tool_calls
        assert (call.id, call.function.name, json.loads(call.function.arguments)) == (
            "call_w1",
            "get_weather",
            {"city": "Lisbon"},
        )
        called = _call_message(choice.message)
    # The app's tool and Ethan's memory tools were offered together.
    offered = [t["function"]["name"] for t in openai_fake.fake.requests[0].body["tools"]]
    assert "get_weather" in offered and "memory_write" in offered

    result = {"role": "tool", "tool_call_id": "call_w1", "content": "21 °C, sunny"}
    second = client.chat.completions.create(
        model="ethan/gpt-4o", messages=[QUESTION, called, result], tools=[WEATHER], stream=stream
    )
    text = (
        "".join(c.choices[0].delta.content or "" for c in second)
        if stream
        else second.choices[0].message.content
    )
    assert text == "It is 21 °C and sunny in Lisbon."

    # One session: the question once, the app's call, its result, the reply.
    session = ChatSession.objects.get(owner=owner)
    assert _rows(session) == [
        ("user", "What's the weather in Lisbon?", [], ""),
        ("assistant", "", ["get_weather"], ""),
        ("tool", "21 °C, sunny", [], "call_w1"),
        ("assistant", "It is 21 °C and sunny in Lisbon.", [], ""),
    ]
    # The model answered from the result: the call and its result were in its context.
    answered = openai_fake.fake.requests[1].body["messages"]
    assert _sent_roles(openai_fake.fake.requests[1])[-3:] == ["user", "assistant", "tool"]
    assert answered[-1] == {"role": "tool", "tool_call_id": "call_w1", "content": "21 °C, sunny"}


def test_parallel_client_calls_and_results_sent_again_are_stored_once(client_for, owner, fakes):
    openai_fake = fakes["openai"]
    openai_fake.fake.reply(
        FakeOpenAI.tool_calls(
            ("call_a", "get_weather", {"city": "Lisbon"}),
            ("call_b", "get_time", {"city": "Lisbon"}),
        )
    )
    openai_fake.fake.reply(openai_fake.text("Sunny, and it is noon."))
    openai_fake.fake.reply(openai_fake.text("Sunny, and it is noon, as I said."))
    client = client_for(owner)
    first = client.chat.completions.create(
        model="ethan/gpt-4o",
        messages=[QUESTION],
        tools=[WEATHER, CLOCK],
        parallel_tool_calls=True,
    )
    assert [c.id for c in first.choices[0].message.tool_calls] == ["call_a", "call_b"]
    assert openai_fake.fake.requests[0].body["parallel_tool_calls"] is True
    conversation = [
        QUESTION,
        _call_message(first.choices[0].message),
        {"role": "tool", "tool_call_id": "call_a", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_b", "content": "12:00"},
    ]
    for _ in range(2):  # the second time: a retry of the same request
        client.chat.completions.create(
            model="ethan/gpt-4o", messages=conversation, tools=[WEATHER, CLOCK]
        )
    session = ChatSession.objects.get(owner=owner)
    assert [(role, call_id) for role, _, _, call_id in _rows(session)] == [
        ("user", ""),
        ("assistant", ""),
        ("tool", "call_a"),
        ("tool", "call_b"),
        ("assistant", ""),
        ("assistant", ""),
    ]


def test_ethans_tool_beside_the_apps_runs_here_and_only_the_apps_goes_back(
    client_for, owner, fakes
):
    openai_fake = fakes["openai"]
    openai_fake.fake.reply(
        FakeOpenAI.tool_calls(
            ("call_m", "memory_write", {"content": "I live in Lisbon", "category": "knowledge"}),
            ("call_w", "get_weather", {"city": "Lisbon"}),
        )
    )
    openai_fake.fake.reply(openai_fake.text("Noted, and it is sunny."))
    client = client_for(owner)
    first = client.chat.completions.create(
        model="ethan/gpt-4o",
        messages=[{"role": "user", "content": "I live in Lisbon. Weather?"}],
        tools=[WEATHER],
    )
    [call] = first.choices[0].message.tool_calls
    assert call.function.name == "get_weather"
    assert Fact.objects.get(owner=owner).content.endswith("Lisbon")
    second = client.chat.completions.create(
        model="ethan/gpt-4o",
        messages=[
            {"role": "user", "content": "I live in Lisbon. Weather?"},
            _call_message(first.choices[0].message),
            {"role": "tool", "tool_call_id": "call_w", "content": "sunny"},
        ],
        tools=[WEATHER],
    )
    assert second.choices[0].message.content == "Noted, and it is sunny."
    # Both calls were answered to the model: Ethan's result from here, the app's from the app.
    answered = openai_fake.fake.requests[1].body["messages"]
    results = {m["tool_call_id"] for m in answered if m["role"] == "tool"}
    assert results == {"call_m", "call_w"}


def test_an_apps_tool_named_like_ethans_is_the_apps_and_ethans_is_renamed(client_for, owner, fakes):
    openai_fake = fakes["openai"]
    theirs = {
        "type": "function",
        "function": {
            "name": "memory_search",
            "description": "Search the app's notes.",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        },
    }
    openai_fake.fake.reply(FakeOpenAI.tool_calls(("call_s", "memory_search", {"query": "x"})))
    completion = client_for(owner).chat.completions.create(
        model="ethan/gpt-4o", messages=[QUESTION], tools=[theirs]
    )
    offered = [t["function"]["name"] for t in openai_fake.fake.requests[0].body["tools"]]
    assert offered.count("memory_search") == 1 and "ethan_memory_search" in offered
    # The model's call of memory_search is the app's: it goes back, Ethan's search never ran.
    assert completion.choices[0].message.tool_calls[0].function.name == "memory_search"
    assert not Message.objects.filter(role="tool").exists()


def test_tool_choice_and_sampling_reach_the_model(client_for, owner, fakes):
    openai_fake = fakes["openai"]
    openai_fake.fake.reply(FakeOpenAI.tool_calls(("call_w", "get_weather", {"city": "Porto"})))
    client_for(owner).chat.completions.create(
        model="ethan/gpt-4o",
        messages=[QUESTION],
        tools=[WEATHER, CLOCK],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        temperature=0.2,
        top_p=0.9,
        max_tokens=77,
        stop=["END"],
        seed=7,
        user="person-1",
        metadata={"app": "test"},
    )
    body = openai_fake.fake.requests[0].body
    assert body["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    # A named function: only the app's tools on that step (Ethan's memory is in the prompt).
    assert [t["function"]["name"] for t in body["tools"]] == ["get_weather", "get_time"]
    assert (body["temperature"], body["top_p"], body["stop"], body["seed"], body["user"]) == (
        0.2,
        0.9,
        ["END"],
        7,
        "person-1",
    )
    assert body["max_completion_tokens"] == 77
    assert "metadata" not in body  # OpenAI keeps metadata only for stored completions


def test_the_offline_model_gets_the_tools_and_answers_in_words(client_for, owner, llm_config):
    completion = client_for(owner).chat.completions.create(
        model="ethan/offline", messages=[QUESTION], tools=[WEATHER], tool_choice="auto"
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "stop" and not choice.message.tool_calls
    assert choice.message.content


def test_langchain_bind_tools_round_trip_in_one_session(live_server, activity, owner, fakes):
    """An agent as LangChain users write one: ChatOpenAI on Ethan's /v1, a tool bound, the
    tool's result sent back as a ToolMessage; streamed and not."""
    openai_fake = fakes["openai"]
    openai_fake.fake.reply(FakeOpenAI.tool_calls(("call_l", "get_weather", {"city": "Lisbon"})))
    openai_fake.fake.reply(openai_fake.text("Sunny in Lisbon."))
    openai_fake.fake.reply(FakeOpenAI.tool_calls(("call_m", "get_weather", {"city": "Madrid"})))
    openai_fake.fake.reply(openai_fake.text("Hot in Madrid."))

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city now."""
        return {"Lisbon": "sunny", "Madrid": "hot"}[city]

    token, _ = Token.objects.get_or_create(user=owner)
    model = ChatOpenAI(
        model="ethan/gpt-4o", base_url=f"{live_server.url}/v1", api_key=token.key, max_retries=0
    ).bind_tools([get_weather])
    for city, streaming in (("Lisbon", False), ("Madrid", True)):
        history = [HumanMessage(f"Weather in {city}?")]
        ai = model.invoke(history) if not streaming else _streamed(model, history)
        [call] = ai.tool_calls
        assert call["name"] == "get_weather" and call["args"] == {"city": city}
        history += [ai, ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"])]
        answer = model.invoke(history) if not streaming else _streamed(model, history)
        assert answer.content == ("Sunny in Lisbon." if city == "Lisbon" else "Hot in Madrid.")
    sessions = ChatSession.objects.filter(owner=owner).order_by("created_at")
    assert sessions.count() == 2
    for session, result in zip(sessions, ("sunny", "hot"), strict=True):
        assert session.messages.filter(role="tool", content=result).count() == 1


def _streamed(model, history):
    merged = None
    for chunk in model.stream(history):
        merged = chunk if merged is None else merged + chunk
    return merged


PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 64).decode()


def test_an_image_goes_to_the_model_and_the_session_keeps_a_placeholder(client_for, owner, fakes):
    openai_fake = fakes["openai"]
    openai_fake.fake.reply(openai_fake.text("A small black square."))
    question = {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is in this picture?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
            {
                "type": "file",
                "file": {
                    "filename": "notes.pdf",
                    "file_data": "data:application/pdf;base64,JVBERi0=",
                },
            },
        ],
    }
    completion = client_for(owner).chat.completions.create(
        model="ethan/gpt-4o", messages=[question]
    )
    assert completion.choices[0].message.content == "A small black square."
    sent = openai_fake.fake.requests[0].body["messages"][-1]["content"]
    assert [part["type"] for part in sent] == ["text", "image_url", "file"]
    assert sent[1]["image_url"]["url"] == f"data:image/png;base64,{PNG}"
    stored = Message.objects.get(role="user").content
    assert stored == "What is in this picture?\n[image]\n[file: notes.pdf]"
    assert PNG not in stored


def test_the_offline_model_says_it_cannot_see_an_image(client_for, owner, llm_config):
    completion = client_for(owner).chat.completions.create(
        model="ethan/offline",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is in this picture?"},
                    {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
                ],
            }
        ],
    )
    assert "can't see [image]" in completion.choices[0].message.content


def test_an_attachment_over_its_limit_is_400_and_stores_nothing(
    client_for, owner, llm_config, settings
):
    import openai

    settings.ETHAN_V1_MAX_ATTACHMENT_BYTES = 30
    with pytest.raises(openai.BadRequestError) as refused:
        client_for(owner).chat.completions.create(
            model="ethan/offline",
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "look"},
                        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                    ],
                }
            ],
        )
    assert refused.value.body["code"] == "attachment_too_large"
    assert "ETHAN_V1_MAX_ATTACHMENT_BYTES" in refused.value.body["message"]
    assert not ChatSession.objects.exists()


def test_ethan_plain_answers_without_memory_and_stores_nothing(client_for, owner, fakes):
    from memory_app.services import fact_write

    fact_write(
        owner=owner, content="用户住在里斯本", category="knowledge", confidence=0.9, source="api"
    )
    openai_fake = fakes["openai"]
    openai_fake.fake.reply(openai_fake.text('{"title": "Lisbon weather"}'))
    client = client_for(owner)
    assert "ethan-plain" in [model.id for model in client.models.list()]
    completion = client.chat.completions.create(
        model="ethan-plain/gpt-4o",
        messages=[{"role": "system", "content": "Answer in JSON."}, QUESTION],
        tools=[WEATHER],
    )
    assert completion.choices[0].message.content == '{"title": "Lisbon weather"}'
    assert completion.model == "ethan-plain/gpt-4o"
    [request] = openai_fake.fake.requests
    # The app's messages as they are: its system text, no memory, none of Ethan's tools.
    assert request.body["messages"] == [
        {"role": "system", "content": "Answer in JSON."},
        {"role": "user", "content": QUESTION["content"]},
    ]
    assert [t["function"]["name"] for t in request.body["tools"]] == ["get_weather"]
    assert not ChatSession.objects.exists() and not Message.objects.exists()


def test_the_openai_agents_sdk_runs_its_tool_through_ethan(live_server, activity, owner, fakes):
    """The OpenAI Agents SDK on chat completions (OpenAIChatCompletionsModel), as its users
    point it at another server: its function tool called through Ethan, run by the SDK, its
    result answered, one session."""
    import asyncio

    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    set_tracing_disabled(True)  # the SDK would send its traces to OpenAI
    openai_fake = fakes["openai"]
    openai_fake.fake.reply(FakeOpenAI.tool_calls(("call_g", "get_weather", {"city": "Lisbon"})))
    openai_fake.fake.reply(openai_fake.text("Sunny in Lisbon."))

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city now."""
        return f"sunny in {city}"

    token, _ = Token.objects.get_or_create(user=owner)

    async def run() -> str:
        client = AsyncOpenAI(base_url=f"{live_server.url}/v1", api_key=token.key, max_retries=0)
        agent = Agent(
            name="Assistant",
            instructions="Answer briefly.",
            tools=[get_weather],
            model=OpenAIChatCompletionsModel(model="ethan/gpt-4o", openai_client=client),
        )
        result = await Runner.run(agent, "What's the weather in Lisbon?")
        await client.close()
        return result.final_output

    assert asyncio.run(run()) == "Sunny in Lisbon."
    session = ChatSession.objects.get(owner=owner)
    assert session.messages.filter(role="tool", content="sunny in Lisbon").count() == 1
    # The agent's instructions went in as the app's, after Ethan's own system prompt.
    system = openai_fake.system_of(openai_fake.fake.requests[0].body)
    assert "Answer briefly." in system and "<client_instructions>" in system
