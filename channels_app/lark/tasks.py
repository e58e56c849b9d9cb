"""The Lark channel's tasks: the webhook stores an event and wakes the dispatcher, which queues
one handling task per event; a worker answers it. The queueing is here, the handling in
channels_app.lark.handling (which imports nothing of this module)."""

from channels_app.lark.handling import (
    lark_event_handle,
    lark_events_mark_queued,
    lark_events_reclaim,
    lark_events_unqueue_lost,
)
from ethan_shared.queue import coalesced_started, enqueue, ethan_task

# The coalesced wake-up of the dispatcher (ethan_shared.queue.enqueue_coalesced).
DISPATCH_WAKE = "lark-dispatch"


@ethan_task(name="channels.lark_event")
def lark_event_handle_task(event_pk: int) -> str:
    """Answer one Lark event (claimed once: a redelivered task finds it handled)."""
    return lark_event_handle(event_pk=event_pk)


@ethan_task(name="channels.lark_dispatch")
def lark_events_dispatch_task() -> int:
    """Queue the stored events that have no task yet (woken by the webhook, once per burst)."""
    return lark_events_dispatch()


@ethan_task(name="channels.lark_reclaim")
def lark_events_reclaim_task() -> int:
    """Periodic (ethan_site.schedule): events whose worker died mid-answer are answered, and
    those whose wake-up or task was lost are queued again."""
    return len(lark_events_reclaim()) + lark_events_requeue()


def lark_events_dispatch() -> int:
    """Queue one handling task for each stored event that has none yet; returns how many.

    The webhook only stores an event and wakes this (once per burst: enqueue_coalesced), so
    that publishing, the costliest part of an acknowledgement, happens here on a worker. Each
    event still gets a task of its own, so the workers answer a burst side by side."""
    coalesced_started(DISPATCH_WAKE)
    marked, more = lark_events_mark_queued()
    for pk in marked:
        enqueue(lark_event_handle_task, pk)
    if more:
        enqueue(lark_events_dispatch_task)
    return len(marked)


def lark_events_requeue() -> int:
    """For the sweep: the events whose wake-up or task was lost, queued again (handling.
    lark_events_unqueue_lost says which); returns how many were queued."""
    return lark_events_dispatch() if lark_events_unqueue_lost() else 0
