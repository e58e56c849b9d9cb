"""The console, the REST API and Lark share one turn and one MemoryConfig: the same
conversation builds the same context on all three (the design's 三路接口对齐)."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from tests.fakes.base import Reply
from tests.fakes.openai_fake import FakeOpenAI
from tests.lark_helpers import deliver, message_event

pytestmark = pytest.mark.django_db(transaction=True)

CONVERSATION = [
    "我叫张三，是后端工程师。",
    "帮我想想周末去哪里玩",
    "杭州怎么样？",
    "好的谢谢",
    "记住我不吃辣",
    "那推荐几家餐厅",
]


def test_three_channels_build_identical_context(fakes, lark, settings, api_for, owner):
    settings.ETHAN_MEMORY_HOT_SIZE = 2  # so the hot zone really slides over six rounds
    settings.ETHAN_MEMORY_COMPRESS_BATCH = 1
    openai = fakes["openai"]
    from ethan_llm import config

    # Every channel on the same main model (the fake), summaries by the offline model.
    config.configure(model="gpt-4o", compression_model="offline")

    def answer(recorded):
        last = recorded.body["messages"][-1]["content"]
        return Reply(body=FakeOpenAI.text(f"回复：{last[:6]}"))

    openai.fake.responder = answer

    # The console (a pipe), as owner "console-user".
    call_command(
        "ethan_chat",
        "--user",
        "console-user",
        stdout=StringIO(),
        stdin=StringIO("\n".join(CONVERSATION) + "\n"),
    )
    console_requests = list(openai.fake.requests)
    openai.fake.requests.clear()

    # The REST API, as `owner`.
    api = api_for(owner)
    session_id = None
    for text in CONVERSATION:
        body = {"message": text, **({"session_id": session_id} if session_id else {})}
        session_id = api.post("/api/chat", body, format="json").json()["session_id"]
    api_requests = list(openai.fake.requests)
    openai.fake.requests.clear()

    # Lark, as the sender ou_lark.
    from django.test import Client

    for n, text in enumerate(CONVERSATION):
        deliver(Client(), message_event(f"align-{n}", text, open_id="ou_lark"))
    lark_requests = list(openai.fake.requests)

    def contexts(requests):
        return [request.body["messages"][1:] for request in requests]  # after the system

    assert len(console_requests) == len(api_requests) == len(lark_requests) == len(CONVERSATION)
    assert contexts(console_requests) == contexts(api_requests) == contexts(lark_requests)
    # The summary block appears once rounds leave the two-round hot zone: real sliding.
    assert contexts(api_requests)[-1][0]["content"].startswith("[对话摘要]")
    systems = [
        [r.body["messages"][0]["content"] for r in requests]
        for requests in (console_requests, api_requests, lark_requests)
    ]
    assert systems[0] == systems[1] == systems[2]
