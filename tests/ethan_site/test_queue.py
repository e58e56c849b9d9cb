from __future__ import annotations

import pytest
from celery import shared_task
from django.core.signals import request_finished
from django.db import transaction

from ethan_shared import queue

ran: list[str] = []


@shared_task(name="tests.record")
def record(value: str) -> None:
    if value == "boom":
        raise RuntimeError("task failed")
    ran.append(value)


@pytest.fixture(autouse=True)
def embedded(settings):
    settings.ETHAN_EMBEDDED = True
    ran.clear()
    queue.run_deferred()  # nothing left over from another test
    yield
    ran.clear()


@pytest.mark.django_db(transaction=True)
def test_embedded_task_waits_for_commit_then_for_the_reply():
    with transaction.atomic():
        queue.enqueue(record, "a")
        assert queue._pending() == []  # not even queued before the commit
    assert ran == []  # queued, but the reply has not been delivered yet
    assert queue.run_deferred() == 1
    assert ran == ["a"]
    assert queue.run_deferred() == 0


@pytest.mark.django_db(transaction=True)
def test_rolled_back_work_is_never_run():
    with pytest.raises(RuntimeError), transaction.atomic():
        queue.enqueue(record, "lost")
        raise RuntimeError("the turn failed")
    queue.run_deferred()
    assert ran == []


@pytest.mark.django_db(transaction=True)
def test_request_finished_runs_deferred_tasks_and_failures_do_not_escape(caplog):
    queue.enqueue(record, "boom")
    queue.enqueue(record, "b")
    request_finished.send(sender=None)
    assert ran == ["b"]
    assert "embedded task tests.record('boom',) failed" in caplog.text


@pytest.mark.django_db(transaction=True)
def test_response_is_sent_before_deferred_work(client):
    """Through a real request: the task runs when Django closes the response."""
    queue.enqueue(record, "after-response")
    response = client.get("/healthz")
    assert response.status_code == 200
    assert ran == ["after-response"]


# Every task of the project, by the names the beat schedule, the routes and queued messages use.
TASK_NAMES = {
    "channels.lark_dispatch",
    "channels.lark_event",
    "channels.lark_reclaim",
    "episodes.write",
    "memory.catch_up",
    "memory.consolidate_session",
    "memory.evict_sweep",
    "memory.import_learn_next",
    "memory.import_upload",
    "memory.vectors_catch_up",
    "memory.vectors_write",
    "memory.vectors_write_turns",
    "sessions.cleanup_empty",
    "sessions.close_idle",
    "sessions.end_write",
}


def project_tasks() -> dict:
    from ethan_site.celery import app

    app.loader.import_default_modules()  # autodiscover the apps' tasks, as a worker does
    return {
        name: task
        for name, task in app.tasks.items()
        if name.split(".")[0] in {"channels", "episodes", "memory", "sessions"}
    }


def test_every_task_is_found_and_has_the_one_retry_policy():
    tasks = project_tasks()
    assert set(tasks) == TASK_NAMES
    for name, task in tasks.items():
        for option, value in queue.TASK_POLICY.items():
            assert getattr(task, option) == value, (name, option)


# --- coalesced wake-ups ----------------------------------------------------------------------


@pytest.fixture
def published(settings, monkeypatch):
    """A broker process's enqueue with a shared cache (here the test's local one): what would
    be published is recorded instead."""
    from django.core.cache import cache

    settings.ETHAN_EMBEDDED = False
    settings.ETHAN_CACHE_SHARED = True
    cache.clear()
    sent: list[str] = []
    monkeypatch.setattr(queue, "publish", lambda task, *args: sent.append(task.name))
    yield sent
    cache.clear()


@pytest.mark.django_db
def test_a_burst_of_triggers_publishes_once_until_the_run_starts(
    published, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        for _ in range(3):
            queue.enqueue_coalesced(record, key="k")
    assert published == [record.name]
    queue.coalesced_started("k")  # the run began: the next trigger's work may come after it
    with django_capture_on_commit_callbacks(execute=True):
        queue.enqueue_coalesced(record, key="k")
        queue.enqueue_coalesced(record, key="other")  # another key is its own
    assert published == [record.name] * 3


@pytest.mark.django_db
def test_nothing_is_coalesced_without_a_shared_cache_or_when_it_fails(
    published, settings, monkeypatch, django_capture_on_commit_callbacks
):
    settings.ETHAN_CACHE_SHARED = False  # one machine's flag would not be cleared by another's
    with django_capture_on_commit_callbacks(execute=True):
        queue.enqueue_coalesced(record, key="k")
        queue.enqueue_coalesced(record, key="k")
    assert len(published) == 2
    settings.ETHAN_CACHE_SHARED = True

    def down(*args, **kwargs):
        raise ConnectionError("cache down")

    from django.core.cache import cache

    monkeypatch.setattr(cache, "add", down)
    monkeypatch.setattr(cache, "delete", down)
    with django_capture_on_commit_callbacks(execute=True):
        queue.enqueue_coalesced(record, key="k")
        queue.enqueue_coalesced(record, key="k")
    assert len(published) == 4  # a cache that is down: published every time
    queue.coalesced_started("k")  # logged, not raised


@pytest.mark.django_db
def test_a_rolled_back_trigger_publishes_nothing(published):
    from django.db import transaction

    with pytest.raises(RuntimeError), transaction.atomic():
        queue.enqueue_coalesced(record, key="k")
        raise RuntimeError("the event was not stored")
    assert published == []
