"""Lark events through the webhook as deployed (PostgreSQL, a Redis broker and cache, a real
worker): a burst wakes the dispatcher once, and each event is answered exactly once."""

from __future__ import annotations

import json
import time

import pytest
from django.core.cache import cache
from django.test import Client

from channels_app.models import LarkEvent
from ethan_shared import queue
from tests.fakes.lark_fake import FakeLark
from tests.lark_helpers import KEY, TOKEN, deliver, message_event
from tests.services.conftest import all_at_once, wait_for

EVENTS = 12


@pytest.mark.django_db(transaction=True)
def test_a_burst_wakes_the_dispatcher_once_and_every_event_is_answered_once(
    workers, settings, monkeypatch
):
    lark = FakeLark()
    try:
        settings.ETHAN_EMBEDDED = False  # this process is the web process: it only publishes
        settings.ETHAN_CACHE_SHARED = True  # the services suite's cache is Redis
        settings.LARK_VERIFICATION_TOKEN, settings.LARK_ENCRYPT_KEY = TOKEN, KEY
        cache.clear()
        published: list[str] = []
        real_publish = queue.publish

        def publish(task, *args):
            published.append(task.name)
            real_publish(task, *args)

        monkeypatch.setattr(queue, "publish", publish)
        client = Client()
        ids = [f"ev-burst-{n:02d}" for n in range(EVENTS)]
        for n, event_id in enumerate(ids):
            sender = f"ou_burst_{n % 3}"
            payload = message_event(
                event_id, f"第 {n} 条消息", open_id=sender, chat_id=f"oc_{sender}"
            )
            assert deliver(client, payload).status_code == 200
        # The burst came before any worker ran: one dispatch was published for all of it.
        assert published == ["channels.lark_dispatch"]
        assert set(LarkEvent.objects.values_list("status", flat=True)) == {"received"}

        worker = workers.start(
            "lark",
            LARK_BASE_URL=lark.url,
            LARK_APP_ID=FakeLark.APP_ID,
            LARK_APP_SECRET=FakeLark.APP_SECRET,
            LARK_VERIFICATION_TOKEN=TOKEN,
        )
        assert wait_for(lambda: len(lark.replies) >= EVENTS, timeout=90), (
            worker.log_path.read_text()[-3000:]
        )
        time.sleep(1)  # nothing more comes
        assert sorted(reply["uuid"] for reply in lark.replies) == ids
        assert all(json.loads(reply["content"])["text"] for reply in lark.replies)
        assert set(LarkEvent.objects.values_list("status", flat=True)) == {"done"}
        assert LarkEvent.objects.filter(queued_at=None).count() == 0

        # The dispatch cleared its wake-up: the next event publishes a dispatch of its own.
        deliver(client, message_event("ev-after", "and one more"))
        assert published[-1] == "channels.lark_dispatch"
        assert wait_for(lambda: len(lark.replies) == EVENTS + 1, timeout=60)
    finally:
        cache.clear()
        lark.close()


@pytest.mark.django_db(transaction=True)
def test_two_dispatchers_racing_queue_each_event_once(services_ready, monkeypatch):
    """Two dispatch runs at once (a burst woke a second before the first finished), on
    PostgreSQL: the conditional update on queued_at lets exactly one queue each event."""
    from channels_app.lark import tasks

    pks = [
        LarkEvent.objects.create(
            event_id=f"ev-race-{n:03d}",
            event_type="im.message.receive_v1",
            message_id=f"om_race_{n:03d}",
            payload=message_event(f"ev-race-{n:03d}", "hi"),
        ).pk
        for n in range(60)
    ]
    queued: list[int] = []
    monkeypatch.setattr(tasks, "enqueue", lambda task, *args: queued.append(args[0]))
    counts = all_at_once(tasks.lark_events_dispatch, 2)
    assert sorted(queued) == pks and sum(counts) == len(pks)
    assert not LarkEvent.objects.filter(queued_at=None).exists()
