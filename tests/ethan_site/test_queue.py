from __future__ import annotations

import pytest
from celery import shared_task
from django.core.signals import request_finished
from django.db import transaction

from ethan_site import queue

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
    "channels.lark_event",
    "channels.lark_reclaim",
    "episodes.write",
    "memory.catch_up",
    "memory.consolidate_session",
    "memory.evict_sweep",
    "sessions.cleanup_empty",
    "sessions.close_idle",
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
