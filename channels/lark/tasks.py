"""The Lark channel's tasks: the webhook stores an event and wakes the dispatcher, which queues
one handling task per event; a worker answers it."""

from ethan_site.queue import ethan_task

# The coalesced wake-up of the dispatcher (ethan_site.queue.enqueue_coalesced).
DISPATCH_WAKE = "lark-dispatch"


@ethan_task(name="channels.lark_event")
def lark_event_handle_task(event_pk: int) -> str:
    """Answer one Lark event (claimed once: a redelivered task finds it handled)."""
    # Imported here: the webhook imports this module, and the handling imports the turn.
    from channels.lark.handling import lark_event_handle

    return lark_event_handle(event_pk=event_pk)


@ethan_task(name="channels.lark_dispatch")
def lark_events_dispatch_task() -> int:
    """Queue the stored events that have no task yet (woken by the webhook, once per burst)."""
    from channels.lark.handling import lark_events_dispatch

    return lark_events_dispatch()


@ethan_task(name="channels.lark_reclaim")
def lark_events_reclaim_task() -> int:
    """Periodic (ethan_site.schedule): events whose worker died mid-answer are answered, and
    those whose wake-up or task was lost are queued again."""
    from channels.lark.handling import lark_events_reclaim, lark_events_requeue

    return len(lark_events_reclaim()) + lark_events_requeue()
