"""The Lark channel's task: the webhook stores an event and enqueues it; a worker answers it."""

from ethan_site.queue import ethan_task


@ethan_task(name="channels.lark_event")
def handle_lark_event(event_pk: int) -> str:
    """Answer one Lark event (claimed once: a redelivered task finds it handled)."""
    # Imported here: the webhook imports this module, and the handling imports the turn.
    from agent_app.lark.handling import lark_event_handle

    return lark_event_handle(event_pk=event_pk)


@ethan_task(name="channels.lark_reclaim")
def reclaim_lark_events() -> int:
    """Periodic (ethan_site.schedule): events whose worker died mid-answer are answered."""
    from agent_app.lark.handling import lark_events_reclaim

    return len(lark_events_reclaim())
