"""One tool-call turn through the whole pipeline (plan, stream, tool step, reply) on each of
openai, anthropic and gemini (real SDKs, streaming, against their fakes) and the offline
model: all four store the same messages. The fakes are scripted with what the offline model
does, so the stored conversation cannot differ by provider."""

from __future__ import annotations

import re

import pytest

from channels_app.turns import turn_run
from sessions_app.models import Message

pytestmark = pytest.mark.django_db

USER = "记住我喜欢喝美式咖啡"
FACT = {"content": "用户喜欢喝美式咖啡", "category": "preference"}
REPLY = "好的，我记住了：你喜欢喝美式咖啡"


def stored(session) -> list[tuple]:
    """The session's messages without ids (tool-call ids, signatures, fact rows)."""
    rows = []
    for message in Message.objects.filter(session=session).order_by("seq"):
        calls = [(c["name"], c["arguments"]) for c in message.tool_calls or []]
        content = re.sub(r"fact \d+", "fact N", message.content)  # row ids differ
        rows.append((message.role, content, calls, bool(message.tool_call_id)))
    return rows


def test_a_tool_call_turn_stores_the_same_messages_on_every_provider(owner, other_owner, provider):
    # Two people, so that each turn stores its fact anew (the same owner would reinforce).
    offline = turn_run(owner=other_owner, session=None, text=USER, model="offline", path="full")
    provider.fake.reply(provider.tool_call("call_1", "memory_write", FACT))
    provider.fake.reply(provider.text(REPLY))
    streamed = turn_run(owner=owner, session=None, text=USER, model=provider.model, path="full")
    assert stored(streamed.session) == stored(offline.session)
    assert stored(offline.session)[0] == ("user", USER, [], False)
    assert stored(offline.session)[1][2] == [("memory_write", FACT)]
    assert (streamed.reply, offline.reply) == (REPLY, REPLY)
    assert all(request.streamed for request in provider.fake.requests)
