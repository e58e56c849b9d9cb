"""Lark deliveries racing on PostgreSQL: two of one event (one row, one turn, one reply), and
two messages of a new chat (answered one after the other)."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from channels_app.models import LarkEvent
from sessions_app.models import Message
from tests.lark_helpers import deliver, message_event
from tests.services.conftest import all_at_once, wait_for


@pytest.mark.django_db(transaction=True)
def test_concurrent_duplicates_are_processed_once(services_ready, lark, settings):
    settings.ETHAN_EMBEDDED = True  # the handling runs in each request's thread, after it
    event = message_event("ev-race", "你好")
    statuses = all_at_once(lambda: deliver(Client(), event).status_code, 4)
    assert statuses == [200, 200, 200, 200]
    assert LarkEvent.objects.count() == 1
    assert len(lark.replies) == 1
    assert Message.objects.filter(role="user").count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_second_message_in_a_new_chat_waits_for_the_first_reply(
    services_ready, lark, settings, monkeypatch
):
    """A person's second message a second after their first, in a new chat: its turn finds the
    chat's new session claimed by the first and waits for its reply, so the session reads
    question, reply, question, reply."""
    import time

    import ethan_llm
    from channels_app.models import ChannelChat

    settings.ETHAN_EMBEDDED = True  # the handling runs in each request's thread, after it
    real = ethan_llm.stream

    def slow_stream(**kwargs):
        time.sleep(1.0)  # the first reply is still being written when the second arrives
        yield from real(**kwargs)

    monkeypatch.setattr(ethan_llm, "stream", slow_stream)

    def first():
        return deliver(Client(), message_event("ev-first", "第一句")).status_code

    def second():
        assert wait_for(lambda: ChannelChat.objects.exclude(session=None).exists())
        return deliver(Client(), message_event("ev-second", "第二句")).status_code

    messages = iter([first, second])
    assert all_at_once(lambda: next(messages)(), 2) == [200, 200]
    replies = {reply["uuid"]: json.loads(reply["content"])["text"] for reply in lark.replies}
    assert list(Message.objects.order_by("seq").values_list("role", "content")) == [
        ("user", "第一句"),
        ("assistant", replies["ev-first"]),
        ("user", "第二句"),
        ("assistant", replies["ev-second"]),
    ]
