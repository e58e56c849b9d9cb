"""Enqueueing background work, with or without a broker.

With CELERY_BROKER_URL set, enqueue() sends the task to the broker once the current transaction
commits, so a worker never looks for rows that are not there yet.

Without one (embedded mode), the task is kept in this process and run by run_deferred(), which the
console calls after printing a reply and Django's request_finished signal calls after the
response has been sent: the person never waits for memory work, and a laptop needs no Redis.
A failing deferred task is logged and does not take the process down; the work it would have
done is picked up again the next time its trigger fires (tasks are idempotent by design, and
Celery's retry loop is not used in-process).

Every task is declared with `@ethan_task(name=...)`, which gives it the one retry policy below.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from celery import Task, shared_task
from django.conf import settings
from django.db import transaction

from ethan_llm.errors import ModelUnavailable

log = logging.getLogger(__name__)

# The options every task shares: one policy, so a task cannot drift from the others.
TASK_POLICY: dict[str, Any] = {
    # Acknowledged when it finishes, not when it arrives: a worker killed mid-task has it
    # redelivered, which is safe because every task claims its work with a conditional update
    # or writes with update_or_create. (Also the global CELERY_TASK_ACKS_LATE; said here too so
    # the whole policy reads in one place.)
    "acks_late": True,
    # Only a provider that is down or rate-limiting is retried (after ethan_llm's own quick
    # retries): it comes back by itself. Anything else (a bug, a bad row) fails the same way
    # every time, so it is logged once instead; the periodic sweeps pick up what that left
    # undone.
    "autoretry_for": (ModelUnavailable,),
    # Exponential backoff, 1 s doubling per attempt: a short outage is ridden out in seconds.
    "retry_backoff": True,
    # The ceiling of one countdown. settings.CELERY_BROKER_TRANSPORT_OPTIONS sets Redis's
    # visibility_timeout above the task time limit plus this, so a task waiting to retry is
    # never handed to a second worker.
    "retry_backoff_max": 600,
    # A random countdown up to the backoff: the tasks an outage failed together do not all
    # come back in the same second and knock the provider over again.
    "retry_jitter": True,
    # Five retries (countdowns of at most 1, 2, 4, 8 and 16 s): an outage longer than that
    # fails the task, logged, rather than holding its message for minutes; consolidation left
    # undone is picked up by the memory.catch_up sweep and the session's next turn.
    "max_retries": 5,
}


def ethan_task(*, name: str) -> Callable[[Callable[..., Any]], Task]:
    """Declare a Celery task with the shared policy. `name` is its stable name: the beat
    schedule (ethan_site.schedule), the queue routes and messages already queued use it."""
    return shared_task(name=name, **TASK_POLICY)


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
        transaction.on_commit(lambda: publish(task, *args))


# How long a wake-up is remembered when the run it published never starts (the broker lost
# it): afterwards the next trigger publishes again, and the periodic sweeps find the rest.
WAKE_SECONDS = 30


def enqueue_coalesced(task: Task, *, key: str) -> None:
    """Run `task()` in the background after the current transaction commits, like enqueue,
    unless a run queued under `key` has not started yet: a burst of triggers then publishes
    once (the Lark webhook: one publish per burst of events rather than one per event, which
    was the largest part of an acknowledgement's CPU).

    The task must call coalesced_started(key) first and then take all the work there is: a
    trigger that found the flag set left its work to it. No wake-up is lost: a trigger's work
    is committed before it looks at the flag, and the run clears the flag before it reads the
    work, so either the trigger sees no flag and publishes, or the run reads its work.

    The flag lives in the cache, which must be one for every process (Redis: settings'
    ETHAN_CACHE_SHARED); without one, and in embedded mode (publishing costs nothing there),
    every trigger queues its own run."""
    if settings.ETHAN_EMBEDDED or not settings.ETHAN_CACHE_SHARED:
        enqueue(task)
        return
    transaction.on_commit(lambda: _wake(task, key))


def _wake(task: Task, key: str) -> None:
    from django.core.cache import cache

    try:
        first = cache.add(f"wake:{key}", 1, timeout=WAKE_SECONDS)
    except Exception:  # a cache that is down: publish, as if nothing were coalesced
        first = True
    if first:
        publish(task)


def coalesced_started(key: str) -> None:
    """A coalesced run has started: from now on a trigger publishes a new run (its work may
    come after this run has read what there is)."""
    from django.core.cache import cache

    try:
        cache.delete(f"wake:{key}")
    except Exception as exc:  # the flag then expires by itself after WAKE_SECONDS
        log.warning("could not clear the wake-up %s: %s", key, type(exc).__name__)


def publish(task: Task, *args: Any) -> None:
    """Publish `task(*args)` to the broker now, with no transaction to wait for (enqueue waits
    for the current one, then calls this). With the broker down, the person still gets their
    reply: the failure is logged and the work is picked up later (the next turn of that
    session enqueues its consolidation again, and the `memory.catch_up` sweep finds sessions
    left behind)."""
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
        ran += deferred_run([pending.pop(0)])
    return ran


def deferred_take() -> list[tuple[Task, tuple[Any, ...]]]:
    """Take the tasks deferred in this thread, to run elsewhere (deferred_run): a thread of a
    pool, which no request's end empties (agent_app.turn_io)."""
    pending = _pending()
    taken = list(pending)
    pending.clear()
    return taken


def deferred_run(tasks: list[tuple[Task, tuple[Any, ...]]]) -> int:
    """Run deferred tasks in this thread; returns how many ran."""
    ran = 0
    for task, args in tasks:
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
