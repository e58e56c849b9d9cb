"""A session's life after its first message, in one place: how it is finished (console exit,
/new, a Lark chat gone idle), how idle API and Lark sessions are closed (they have no exit),
how its episode is written, and how sessions left empty are removed. The services, and the
Celery tasks that run them in the background.

A session is started lazily by the turn (sessions_app.services.session_start, with its first
message). It crosses the layers (sessions, the rolling summary of memory_app, episodes), so it
lives here, in agent_app.
"""

from __future__ import annotations

from django.conf import settings

from episodes_app import services as episode_services
from ethan_site.queue import enqueue, ethan_task
from memory_app.models import WorkingState
from sessions_app import services as session_services
from sessions_app.models import ChatSession


def session_finish(*, session: ChatSession) -> None:
    """A session is over for now (console exit, /new, a chat gone idle): mark it ended and,
    after the commit, write its episode (sessions under two rounds get none)."""
    session_services.session_end(session=session)
    if session.is_persisted:
        enqueue(session_episode_write_task, session.pk)


def sessions_finish_idle() -> list[str]:
    """End the API and Lark sessions idle past ETHAN_SESSION_IDLE_MINUTES (a console session
    ends when the console does) and, after the commit, write their episodes. Returns their ids;
    a second run, or a racing one, ends none of them again."""
    closed = session_services.sessions_close_idle(idle_minutes=settings.ETHAN_SESSION_IDLE_MINUTES)
    for session_id in closed:
        enqueue(session_episode_write_task, session_id)
    return closed


def session_episode_write(*, session_id: str) -> bool:
    """Write the episode of an ended session, reading its rolling summary too for a long one.
    False when the session is gone or has no episode (under two rounds). Safe to run twice:
    the episode is updated in place, by session."""
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


@ethan_task(name="episodes.write")
def session_episode_write_task(session_id: str) -> bool:
    return session_episode_write(session_id=session_id)


@ethan_task(name="sessions.close_idle")
def sessions_finish_idle_task() -> int:
    """Periodic (ethan_site.schedule): idle API and Lark sessions are ended."""
    return len(sessions_finish_idle())


@ethan_task(name="sessions.cleanup_empty")
def sessions_cleanup_empty_task() -> int:
    """Periodic: sessions left with no messages (all deleted in the admin, an import) go.
    Deleting what has no messages is safe to repeat: a second run finds nothing."""
    return session_services.sessions_cleanup_empty()
