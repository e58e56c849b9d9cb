"""One scripted conversation with one tool call, through openai, anthropic, gemini and offline,
streamed (ethan_llm.stream) and not (ethan_llm.complete).

The fakes are scripted with what the offline model says, so all four must come out the same in
neutral terms, and each fake checks that the history (tool call, tool result) went back in its
own wire form.
"""

from __future__ import annotations

import base64

import ethan_llm
from ethan_llm.types import Completion, Message, ToolCall
from tests.llm.test_providers import MEMORY_WRITE

SYSTEM = "You are Ethan.\n<memory_context>\n- 用户住在上海\n</memory_context>"
USER = "记住我喜欢喝美式咖啡"


def ask(model: str, history: list[Message], streamed: bool) -> Completion:
    """One call, drained by complete() or consumed event by event from stream()."""
    if not streamed:
        return ethan_llm.complete(
            model=model, system=SYSTEM, messages=history, tools=[MEMORY_WRITE]
        )
    deltas: list[str] = []
    for event in ethan_llm.stream(
        model=model, system=SYSTEM, messages=history, tools=[MEMORY_WRITE]
    ):
        if isinstance(event, ethan_llm.TextDelta):
            deltas.append(event.text)
        else:
            assert "".join(deltas) == event.completion.text
            return event.completion
    raise AssertionError("the stream ended without its completion")


def run_loop(
    model: str, store: list[dict], streamed: bool = False, completions: list | None = None
) -> tuple[str, list[Message]]:
    """A bounded tool loop, as the agent turn runs it."""
    history = [Message.user(USER)]
    for _ in range(4):
        completion = ask(model, history, streamed)
        if completions is not None:
            completions.append(
                (completion.text, tuple((c.name, c.arguments) for c in completion.tool_calls))
            )
        history.append(completion.as_message())
        if not completion.tool_calls:
            return completion.text, history
        for call in completion.tool_calls:
            store.append({"tool": call.name, **call.arguments})
            history.append(Message.tool(call.id, "ok: saved", name=call.name))
    raise AssertionError("the tool loop did not finish")


def neutral(history: list[Message]) -> list[tuple]:
    """The history without provider-specific ids and signatures."""
    return [
        (
            m.role,
            m.content,
            tuple((c.name, tuple(sorted(c.arguments.items()))) for c in m.tool_calls),
            bool(m.tool_call_id),
        )
        for m in history
    ]


def test_one_conversation_round_trips_identically(fakes):
    offline_store: list[dict] = []
    offline_text, offline_history = run_loop("offline", offline_store)
    [call] = offline_history[1].tool_calls
    assert offline_store == [
        {"tool": "memory_write", "content": "用户喜欢喝美式咖啡", "category": "preference"}
    ]
    assert offline_text == "好的，我记住了：你喜欢喝美式咖啡"

    results = {}
    for name, case in fakes.items():
        case.fake.reply(case.tool_call("call_1", call.name, call.arguments))
        case.fake.reply(case.text(offline_text))
        store: list[dict] = []
        text, history = run_loop(case.model, store)
        results[name] = (text, store, neutral(history))
    expected = (offline_text, offline_store, neutral(offline_history))
    assert results == {"openai": expected, "anthropic": expected, "gemini": expected}

    # openai: the assistant's tool_calls and a role "tool" answer, after the system message.
    second = fakes["openai"].fake.requests[1].body
    assert second["messages"] == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": USER},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {
                        "name": "memory_write",
                        "arguments": '{"content": "用户喜欢喝美式咖啡", "category": "preference"}',
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "ok: saved"},
    ]

    # anthropic: top-level system; tool_use answered by a tool_result block in a user turn.
    second = fakes["anthropic"].fake.requests[1].body
    assert second["system"] == SYSTEM
    assert second["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": USER}]},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "call_1",
                    "name": "memory_write",
                    "input": call.arguments,
                }
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "ok: saved"}],
        },
    ]

    # gemini: system_instruction; the function_call part comes back with its thought_signature,
    # answered by a function_response part.
    second = fakes["gemini"].fake.requests[1].body
    assert second["systemInstruction"]["parts"] == [{"text": SYSTEM}]
    signature = base64.b64encode(b"sig-call_1").decode()
    assert second["contents"] == [
        {"role": "user", "parts": [{"text": USER}]},
        {
            "role": "model",
            "parts": [
                {
                    "functionCall": {"name": "memory_write", "args": call.arguments},
                    "thoughtSignature": signature,
                }
            ],
        },
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "memory_write", "response": {"result": "ok: saved"}}}
            ],
        },
    ]


def test_the_conversation_streamed_and_not_gives_the_same_completions(fakes):
    expected: list[tuple] = []
    run_loop("offline", [], completions=expected)
    [(_, [(name, arguments)]), (final_text, ())] = expected
    runs = {}
    for model in ["offline", *(case.model for case in fakes.values())]:
        for streamed in (False, True):
            for case in fakes.values():
                if case.model == model:
                    case.fake.reply(case.tool_call("call_1", name, arguments))
                    case.fake.reply(case.text(final_text))
            completions: list[tuple] = []
            run_loop(model, [], streamed=streamed, completions=completions)
            runs[(model, streamed)] = completions
    assert runs == {key: expected for key in runs}
    assert len(runs) == 8


def test_gemini_refuses_a_history_that_drops_the_signature(fakes):
    """The fake enforces Gemini 3's rule, so the test above would catch a lost signature."""
    gemini = fakes["gemini"]
    gemini.fake.function_call(
        "memory_write", {"content": "x", "category": "knowledge"}, signature=b"sig"
    )
    unsigned = ToolCall(
        id="c1", name="memory_write", arguments={"content": "x", "category": "knowledge"}
    )
    history = [
        Message.user("hi"),
        Message.assistant("", (unsigned,)),
        Message.tool("c1", "ok", name="memory_write"),
    ]
    try:
        ethan_llm.complete(model=gemini.model, messages=history, tools=[MEMORY_WRITE])
    except ethan_llm.ModelRequestError as exc:
        assert "thought_signature" in str(exc)
    else:
        raise AssertionError("the fake accepted a function call without its signature")


def test_tool_calls_survive_json_storage(fakes):
    """Tool calls are stored as JSON on Message rows; the signature must survive that trip."""
    gemini = fakes["gemini"]
    gemini.fake.reply(
        gemini.tool_call("call_9", "memory_write", {"content": "y", "category": "knowledge"})
    )
    completion = ethan_llm.complete(
        model=gemini.model, messages=[Message.user("hi")], tools=[MEMORY_WRITE]
    )
    stored = [call.to_json() for call in completion.tool_calls]
    assert stored[0]["meta"]["thought_signature"] == base64.b64encode(b"sig-call_9").decode()
    assert [call.to_json() for call in completion.tool_calls] == stored
