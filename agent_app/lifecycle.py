"""A session's life after its first message, in one place: how it is finished (console exit,
/new, a Lark chat gone idle), how idle API and Lark sessions are closed (they have no exit),
how its episode is written together with its last facts, and how sessions left empty are
removed. The services, and the Celery tasks that run them in the background.

A session is started lazily by the turn (sessions_app.services.session_start, with its first
message). It crosses the layers (sessions, the rolling summary of memory_app, episodes), so it
lives here, in agent_app.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from episodes_app import services as episode_services
from episodes_app.models import Episode
from ethan_shared.queue import enqueue, ethan_task
from memory_app.consolidator import (
    consolidation_finish,
    consolidation_finish_sessions,
    consolidation_run,
)
from memory_app.models import WorkingState
from memory_app.working import MemoryConfig, ends_due, memory_config, sessions_ending
from sessions_app import services as session_services
from sessions_app.models import ChatSession

log = logging.getLogger(__name__)


# At most this many rounds go into one call that finishes several short sessions together:
# the call's transcript stays about the size of one compress batch's.
END_BATCH_MAX_ROUNDS = 20


def session_finish(*, session: ChatSession, now: bool = False) -> None:
    """A session is over for now (console exit, /new, a chat gone idle): mark it ended and,
    after the commit, consolidate its end (its episode and the facts of its rounds not
    extracted yet), together with the person's other ends waiting (sessions_end_write). It
    waits for more ended rounds unless due (memory_app.working.ends_due) or `now` (the console:
    its person is there and expects it remembered)."""
    session_services.session_end(session=session)
    if session.is_persisted:
        enqueue(sessions_end_write_task, session.owner_id, now)


def sessions_finish_idle() -> list[str]:
    """End the API and Lark sessions idle past ETHAN_SESSION_IDLE_MINUTES (a console session
    ends when the console does) and, after the commit, consolidate their ends
    (sessions_end_write). Returns their ids; a second run, or a racing one, ends none of them
    again."""
    closed = session_services.sessions_close_idle(idle_minutes=settings.ETHAN_SESSION_IDLE_MINUTES)
    owners = ChatSession.objects.filter(pk__in=closed).values_list("owner_id", flat=True)
    for owner_id in sorted(set(owners)):
        enqueue(sessions_end_write_task, owner_id, False)
    return closed


def _episode_record(earlier_summary: str, written: list[ChatSession] | None = None):
    """How a session's end records its episode, inside the transaction of its last facts
    (noting the session in `written`, when given)."""

    def record(session: ChatSession, summary: str) -> None:
        episode_services.episode_write(
            session=session, earlier_summary=earlier_summary, summary=summary
        )
        if written is not None:
            written.append(session)

    return record


def session_episode_write(*, session_id: str) -> bool:
    """The end of one session's memory work, now, in one call to the compression model: its
    episode (reading its rolling summary too for a long one) and the facts of the rounds not
    extracted yet, the hot zone (memory_app.consolidator.consolidation_finish), stored
    together. False when the session is gone or has no episode (under two rounds: its facts
    are still extracted). Safe to run twice and to be killed: the facts and the episode are
    stored with the claim of their rounds, exactly once."""
    session = ChatSession.objects.select_related("owner").filter(pk=session_id).first()
    if session is None:
        return False
    rolling = (
        WorkingState.objects.filter(session=session)
        .values_list("rolling_summary", flat=True)
        .first()
        or ""
    )
    written: list[ChatSession] = []
    consolidation_finish(
        session=session,
        episode_first=episode_services.episode_first_round(session=session),
        earlier_summary=rolling,
        record_episode=_episode_record(rolling, written),
    )
    # Not written here: under two rounds, nothing said, its episode already covering every
    # round, or another worker's.
    return (
        bool(written)
        or Episode.objects.filter(owner_id=session.owner_id, session_ref=session.pk).exists()
    )


def session_learn(*, session_id: str) -> bool:
    """An ended session that was never lived here (an import) consolidated whole, as if it had
    been: its compress batches (summaries with their facts) and folds, then its end, the episode
    and the last facts in one call. Safe to repeat and to resume after a stop: every step claims
    its rounds. True when an episode was written."""
    consolidation_run(session_id=session_id)
    return session_episode_write(session_id=session_id)


def learn_batch(pending: list[tuple[str, int]], *, config: MemoryConfig | None = None) -> list[str]:
    """The sessions the next learning step takes, from `pending` ((id, rounds), in the order
    they are to be learnt): the first alone when a compress batch would leave its hot zone (it
    is learnt as lived, session_learn), else it and the short ones right after it, up to
    END_BATCH_MAX_ROUNDS rounds, whose ends share one call as short chats' ends do."""
    config = config or memory_config()
    batch: list[str] = []
    rounds = 0
    for session_id, count in pending:
        short = count < config.hot_size + config.compress_batch
        if not short or rounds + count > END_BATCH_MAX_ROUNDS:
            return batch or [session_id]
        batch.append(session_id)
        rounds += count
    return batch


def sessions_learn(*, session_ids: list[str]) -> None:
    """Sessions never lived here (an import), learnt as one step of learn_batch: one session
    consolidated whole (session_learn), or several short ones ended together in one call (a
    summary each for its episode, and their facts). Safe to repeat: every end is claimed."""
    if len(session_ids) == 1:
        session_learn(session_id=session_ids[0])
        return
    by_id = ChatSession.objects.select_related("owner").in_bulk(session_ids)
    sessions = [by_id[session_id] for session_id in session_ids if session_id in by_id]
    if sessions:
        consolidation_finish_sessions(sessions=sessions, record_episode=_episode_record(""))


def sessions_end_write(*, owner_id: int, now: bool = False) -> int:
    """The owner's ended sessions whose end is still to be consolidated
    (memory_app.working.sessions_ending), when due (ends_due) or `now`. A session that was
    never consolidated (no batch left its hot zone: a short chat) is finished together with
    the others like it, END_BATCH_MAX_ROUNDS rounds to a call, in the order they were had; a
    longer one in a call of its own (session_episode_write), which reads its rolling summary.
    Returns how many sessions were finished. Safe to repeat and to race: every session's end
    is claimed."""
    waiting = list(
        sessions_ending(ChatSession.objects.filter(owner_id=owner_id))
        .select_related("owner")
        # In the order they were had, so that newer news supersedes older: an idle sweep
        # ends many at the same instant, and ids drawn in the same minute sort at random.
        .order_by("updated_at", "created_at", "pk")
    )
    if not (now and waiting) and not ends_due(waiting):
        return 0
    finished = 0
    short: list[ChatSession] = []
    for session in waiting:
        if session.end_extracted or session.end_compressed:
            session_episode_write(session_id=session.pk)
            finished += 1
            continue
        rounds = sum(other.round_count for other in short)
        if short and (
            rounds + session.round_count > END_BATCH_MAX_ROUNDS or session.mode != short[0].mode
        ):
            finished += _sessions_end_together(short)
            short = []
        short.append(session)
    if short:
        finished += _sessions_end_together(short)
    return finished


def _sessions_end_together(sessions: list[ChatSession]) -> int:
    if len(sessions) == 1:
        session_episode_write(session_id=sessions[0].pk)
        return 1
    return len(consolidation_finish_sessions(sessions=sessions, record_episode=_episode_record("")))


def sessions_end_sweep() -> int:
    """Ends left waiting, found by the periodic sweep: the person's short chats that waited
    end_wait_minutes for more, and ends whose task was lost (the broker down, a worker killed
    before it stored them). Those due (ends_due, per person) are queued; returns how many
    people. Sessions that ended over a week ago are left as they are."""
    recent = ChatSession.objects.filter(ended_at__gte=timezone.now() - timedelta(days=7))
    by_owner: dict[int, list[ChatSession]] = defaultdict(list)
    for session in sessions_ending(recent).only("owner_id", "round_count", "ended_at"):
        by_owner[session.owner_id].append(session)
    due = [owner_id for owner_id, waiting in by_owner.items() if ends_due(waiting)]
    for owner_id in due:
        enqueue(sessions_end_write_task, owner_id, False)
    return len(due)


def sessions_finish_pending(*, owner) -> int:
    """The owner's ended sessions whose end-of-session work did not run (a console that
    exited while the model was down, an embedded process stopped before its deferred work,
    short chats of other channels still waiting for more) get it now: their episodes and last
    facts. Returns how many. The embedded console runs it at start, where no worker or
    periodic sweep does."""
    try:
        return sessions_end_write(owner_id=owner.pk, now=True)
    except Exception:  # the model still down: they stay pending, the console starts
        log.exception("end-of-session work of %s's sessions failed again", owner.pk)
        return 0


@ethan_task(name="sessions.end_write")
def sessions_end_write_task(owner_id: int, now: bool = False) -> int:
    return sessions_end_write(owner_id=owner_id, now=now)


@ethan_task(name="episodes.write")
def session_episode_write_task(session_id: str) -> bool:
    return session_episode_write(session_id=session_id)


@ethan_task(name="sessions.close_idle")
def sessions_finish_idle_task() -> int:
    """Periodic (ethan_site.schedule): idle API and Lark sessions are ended, and ends left
    waiting are consolidated (sessions_end_sweep)."""
    closed = len(sessions_finish_idle())
    sessions_end_sweep()
    return closed


@ethan_task(name="sessions.cleanup_empty")
def sessions_cleanup_empty_task() -> int:
    """Periodic: sessions left with no messages (all deleted in the admin, an import) go.
    Deleting what has no messages is safe to repeat: a second run finds nothing."""
    return session_services.sessions_cleanup_empty()
