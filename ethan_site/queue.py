"""Enqueueing background work, with or without a broker.

With CELERY_BROKER_URL set, enqueue() sends the task to the broker once the current transaction
commits, so a worker never looks for rows that are not there yet.

Without one (embedded mode), the task is kept in this process and run by run_deferred(), which the
console calls after printing a reply and Django's request_finished signal calls after the
response has been sent: the person never waits for memory work, and a laptop needs no Redis.
A failing deferred task is logged and does not take the process down; the work it would have
done is picked up again the next time its trigger fires (tasks are idempotent by design, and
Celery's retry loop is not used in-process).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery import Task
from django.conf import settings
from django.db import transaction

log = logging.getLogger(__name__)

_local = threading.local()


def _pending() -> list[tuple[Task, tuple[Any, ...]]]:
    if not hasattr(_local, "pending"):
        _local.pending = []
    return _local.pending


def enqueue(task: Task, *args: Any) -> None:
    """Run `task(*args)` in the background after the current transaction commits."""
    if settings.ETHAN_EMBEDDED:
        transaction.on_commit(lambda: _pending().append((task, args)))
    else:
        transaction.on_commit(lambda: _send(task, args))


def _send(task: Task, args: tuple[Any, ...]) -> None:
    """Publish to the broker. With the broker down, the person still gets their reply: the
    failure is logged and the work is picked up later (the next turn of that session enqueues
    its consolidation again, and the `memory.catch_up` sweep finds sessions left behind)."""
    try:
        task.apply_async(args=args)
    except Exception as exc:  # kombu/redis connection errors vary by transport and version
        log.warning(
            "broker unavailable, %s%r left for the catch-up sweep: %s",
            task.name,
            args,
            type(exc).__name__,
        )


def run_deferred() -> int:
    """Run every task deferred in this thread (embedded mode); returns how many ran."""
    ran = 0
    pending = _pending()
    while pending:
        task, args = pending.pop(0)
        try:
            # The task's own function, without Celery's retry loop: a laptop should not sit
            # through backoff after a reply. Tasks are idempotent and re-triggered (the next
            # turn consolidates again), so a failure here only delays the work.
            task.run(*args)
        except Exception:  # a failing task must not break the console or the web process
            log.exception("embedded task %s%r failed", task.name, args)
        ran += 1
    return ran


def on_request_finished(sender: Any = None, **kwargs: Any) -> None:
    run_deferred()
