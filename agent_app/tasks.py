"""Tasks that cross the layers: closing sessions and writing their episodes."""

from celery import shared_task
from django.conf import settings

from episodes_app import services as episode_services
from llm.errors import ModelUnavailable
from memory_app.models import WorkingState
from sessions_app import services as session_services
from sessions_app.models import ChatSession


@shared_task(
    name="episodes.write",
    acks_late=True,
    autoretry_for=(ModelUnavailable,),
    retry_backoff=True,
    retry_backoff_max=600,
    max_retries=5,
)
def write_episode(session_id: str) -> bool:
    """The episode of an ended session (update_or_create by session: safe to run twice)."""
    session = ChatSession.objects.filter(pk=session_id).first()
    if session is None:
        return False
    rolling = (
        WorkingState.objects.filter(session=session)
        .values_list("rolling_summary", flat=True)
        .first()
        or ""
    )
    return episode_services.episode_write(session=session, earlier_summary=rolling) is not None


@shared_task(name="sessions.close_idle", acks_late=True)
def close_idle() -> int:
    """API and Lark sessions have no exit: idle ones are ended and get their episode."""
    from ethan_site.queue import enqueue

    closed = session_services.sessions_close_idle(idle_minutes=settings.ETHAN_SESSION_IDLE_MINUTES)
    for session_id in closed:
        enqueue(write_episode, session_id)
    return len(closed)


@shared_task(name="channels.lark_event", acks_late=True)
def handle_lark_event(event_pk: int) -> str:
    """Answer one Lark event (claimed once: a redelivered task finds it handled)."""
    from agent_app.lark.handling import lark_event_handle

    return lark_event_handle(event_pk=event_pk)
