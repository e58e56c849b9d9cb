"""Learning from an imported export on a real Celery worker: the page's upload task imports
it, then a chain of tasks on the memory queue learns one conversation at a time, oldest first."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from agent_app.history_import import import_upload_task, sessions_to_learn
from episodes_app.models import Episode
from ethan_shared import queue
from memory_app.models import Fact
from sessions_app.models import ChatSession, ImportRun
from tests.imports.exports import START, ChatGPT
from tests.services.conftest import wait_for


def export_bytes(count: int = 6) -> bytes:
    chats = [
        ChatGPT(f"c-{n}", f"Chat {n}", start=START + timedelta(days=n)).exchange(
            (f"I like tea number {n}", "Noted."), ("Thanks", "Any time.")
        )
        for n in range(count)
    ]
    chats.append(
        ChatGPT("c-home", "Home", start=START + timedelta(days=count)).exchange(
            ("I live in Lisbon", "Lovely city.")
        )
    )
    return json.dumps([chat.export() for chat in chats]).encode()


@pytest.mark.django_db(transaction=True)
def test_an_upload_is_imported_and_learnt_on_the_memory_queue(workers, owner):
    workers.start("memory", ETHAN_MODEL="offline")
    run = ImportRun.objects.create(
        owner=owner, source="chatgpt", file_name="conversations.json", upload=export_bytes()
    )
    queue.enqueue(import_upload_task, run.pk)  # autocommit: sent at once

    def done() -> bool:
        run.refresh_from_db()
        return run.status in ("done", "failed")

    assert wait_for(done, timeout=90), run.status
    assert (run.status, run.error) == ("done", "")
    assert (run.conversations_done, run.sessions_created, run.learn_done) == (7, 7, 7)
    assert run.upload is None
    assert not sessions_to_learn(owner=owner).exists()
    assert Episode.objects.filter(owner=owner).count() == 6  # the one-round chat has none
    lisbon = Fact.objects.get(owner=owner, content__icontains="Lisbon")
    assert list(lisbon.sources.values_list("content", flat=True)) == ["I live in Lisbon"]
    # Learnt in order: each session's end is its conversation's last activity, and the
    # sessions' learning (their episodes' rows) came oldest first.
    learnt = list(
        Episode.objects.filter(owner=owner).order_by("pk").values_list("session_ref", flat=True)
    )
    by_age = list(
        ChatSession.objects.filter(owner=owner, round_count__gte=2)
        .order_by("created_at")
        .values_list("pk", flat=True)
    )
    assert learnt == by_age


@pytest.mark.django_db(transaction=True)
def test_an_upload_refused_for_its_input_is_acknowledged_and_never_delivered_again(workers, owner):
    import redis

    from ethan_site.celery import app

    workers.start("memory", pool="prefork", ETHAN_MODEL="offline")
    conversation = json.loads(export_bytes(0))[0]
    text = json.dumps([conversation])
    deep = (text[:-2] + ', "junk": ' + "[" * 40_000 + "]" * 40_000 + "}]").encode()
    refused = ImportRun.objects.create(
        owner=owner, source="chatgpt", file_name="deep.json", learn=False, upload=deep
    )
    # A delivery again of a run whose first delivery died while reading it (its worker
    # killed): the run says reading, its upload is still there.
    died = ImportRun.objects.create(
        owner=owner,
        source="chatgpt",
        file_name="conversations.json",
        learn=False,
        status="reading",
        upload=export_bytes(),
    )
    good = ImportRun.objects.create(
        owner=owner, source="chatgpt", file_name="good.json", learn=False, upload=text.encode()
    )
    for run in (refused, died, good):
        queue.enqueue(import_upload_task, run.pk)  # autocommit: sent at once

    def finished() -> bool:
        return not ImportRun.objects.exclude(status__in=("done", "failed")).exists()

    assert wait_for(finished, timeout=90)
    refused.refresh_from_db()
    assert (refused.status, refused.error, refused.upload) == (
        "failed",
        "deep.json: refused: nested deeper than 64 levels (no real export has one)",
        None,
    )
    died.refresh_from_db()
    assert died.status == "failed"
    assert died.error.startswith("conversations.json: the import stopped while reading")
    good.refresh_from_db()
    assert (good.status, good.sessions_created) == ("done", 1)
    # Only the good one was imported, and nothing is left for the broker to deliver again.
    assert ChatSession.objects.filter(owner=owner).count() == 1
    broker = redis.Redis.from_url(app.conf.broker_url)
    assert broker.llen("memory") == 0
    assert broker.hlen("unacked") == 0
