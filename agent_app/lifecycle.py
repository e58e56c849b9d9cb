"""A session's life after its first message, in one place: how it is finished (console exit,
/new, a Lark chat gone idle), how idle API and Lark sessions are closed (they have no exit),
how its episode is written together with its last facts, and how sessions left empty are
removed. The services, and the
Celery tasks that run them in the background.

A session is started lazily by the turn (sessions_app.services.session_start, with its first
message). It crosses the layers (sessions, the rolling summary of memory_app, episodes), so it
lives here, in agent_app.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db.models import F

from episodes_app import services as episode_services
from ethan_site.queue import enqueue, ethan_task
from memory_app.consolidator import consolidation_finish, consolidation_run
from memory_app.models import WorkingState
from memory_app.working import sessions_consolidation_due
from sessions_app import services as session_services
from sessions_app.models import ChatSession

log = logging.getLogger(__name__)


def session_finish(*, session: ChatSession) -> None:
    """A session is over for now (console exit, /new, a chat gone idle): mark it ended and,
    after the commit, write its episode and extract the facts of its rounds not extracted yet
    (sessions under two rounds get no episode, but their facts)."""
    session_services.session_end(session=session)
    if session.is_persisted:
        enqueue(session_episode_write_task, session.pk)


def sessions_finish_idle() -> list[str]:
    """End the API and Lark sessions idle past ETHAN_SESSION_IDLE_MINUTES (a console session
    ends when the console does) and, after the commit, write their episodes and last facts
    (session_episode_write). Returns their ids;
    a second run, or a racing one, ends none of them again."""
    closed = session_services.sessions_close_idle(idle_minutes=settings.ETHAN_SESSION_IDLE_MINUTES)
    for session_id in closed:
        enqueue(session_episode_write_task, session_id)
    return closed


def session_episode_write(*, session_id: str) -> bool:
    """The end of a session's memory work, in one call to the compression model: its episode
    (reading its rolling summary too for a long one) and the facts of the rounds not extracted
    yet, the hot zone (memory_app.consolidator.consolidation_finish). False when the session is
    gone or has no episode (under two rounds: its facts are still extracted). Safe to run twice
    and to be killed: the facts are stored with the claim of their rounds, exactly once, and
    the episode is updated in place, by session."""
    session = ChatSession.objects.select_related("owner").filter(pk=session_id).first()
    if session is None:
        return False
    rolling = (
        WorkingState.objects.filter(session=session)
        .values_list("rolling_summary", flat=True)
        .first()
        or ""
    )
    summary = consolidation_finish(
        session=session,
        episode_first=episode_services.episode_first_round(session=session),
        earlier_summary=rolling,
    )
    episode = episode_services.episode_write(
        session=session, earlier_summary=rolling, summary=summary
    )
    return episode is not None


def session_learn(*, session_id: str) -> bool:
    """An ended session that was never lived here (an import) consolidated whole, as if it had
    been: its compress batches (summaries with their facts) and folds, then its end, the episode
    and the last facts in one call. Safe to repeat and to resume after a stop: every step claims
    its rounds. True when an episode was written."""
    consolidation_run(session_id=session_id, finish=False)
    return session_episode_write(session_id=session_id)


def sessions_finish_pending(*, owner) -> int:
    """The owner's ended sessions whose end-of-session work did not run (a console that
    exited while the model was down, an embedded process stopped before its deferred work)
    get it now: their episode and last facts. Returns how many. The embedded console runs it
    at start, where no worker or periodic sweep does."""
    ended = ChatSession.objects.filter(owner=owner, ended_at__isnull=False)
    pending = sessions_consolidation_due(ended).filter(round_count__gt=F("due_extracted_through"))
    count = 0
    for session_id in pending.values_list("pk", flat=True):
        try:
            session_episode_write(session_id=session_id)
        except Exception:  # the model still down: it stays pending, the console starts
            log.exception("end-of-session work of %s failed again", session_id)
            continue
        count += 1
    return count


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
