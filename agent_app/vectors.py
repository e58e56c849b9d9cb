"""Writing the vectors memory search compares (sessions_app.meaning), in the background.

Each layer app embeds its own rows (sessions_app.services.messages_embed, memory_app's
facts_embed, episodes_app's episodes_embed); this module says when, for all three:

- after every turn, on the memory queue (in-process when embedded, after the reply): the
  session's new messages, and the owner's facts and episodes that have no vector yet (the
  facts the turn's tools or the consolidation before it wrote, an episode a closed session
  left). The turns a process has finished meanwhile are written with it, in one embedding
  call and one transaction: under load that is most of what they cost. Embedded, the serving
  process writes them itself (TurnsWaiting); under a broker it sends them to a worker as one
  task (TurnsSent);
- after an import, and when a pass found more than one batch: the owner's whole pending
  history, a batch per task, each task queueing the next;
- periodically (memory.vectors_catch_up): what a failed task or a broker outage left behind in
  recently active sessions;
- on demand, for existing data or a changed embedder: `ethan embed` (management command
  ethan_embed, resumable, with a progress bar).

A vector is never written on a turn's path: the only embedding a turn does is its query's.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from embedder import embedder_name
from episodes_app.models import Episode
from episodes_app.services import episodes_embed
from ethan_shared.queue import enqueue, ethan_task, publish
from memory_app.models import Fact
from memory_app.services import facts_embed
from sessions_app import meaning
from sessions_app.models import ChatSession, Message
from sessions_app.search import SPOKEN
from sessions_app.services import EMBED_BATCH, messages_embed, messages_embed_sessions

log = logging.getLogger(__name__)

# Messages one background task embeds at most before it queues the next (about a second with
# the default embedder): a long import never holds a worker for minutes in one task.
TASK_BUDGET = 2048
# The sessions memory.vectors_catch_up looks at: those active in this window.
CATCH_UP_WINDOW = timedelta(days=2)


@dataclass(frozen=True)
class Written:
    messages: int = 0
    facts: int = 0
    episodes: int = 0
    # More pending than one pass takes: the task has queued the next.
    more: bool = False

    def __add__(self, other: Written) -> Written:
        return Written(
            messages=self.messages + other.messages,
            facts=self.facts + other.facts,
            episodes=self.episodes + other.episodes,
            more=self.more or other.more,
        )

    def as_dict(self) -> dict:
        """What a task returns (its result in the broker's backend, or the log)."""
        return {"messages": self.messages, "facts": self.facts, "episodes": self.episodes}


@ethan_task(name="memory.vectors_write")
def vectors_write_task(owner_id: int, session_id: str | None = None) -> dict:
    if session_id is None:
        written = vectors_write(owner_id=owner_id)
    else:
        written = TURNS_WAITING.write(owner_id=owner_id, session_id=session_id)
    return written.as_dict()


@ethan_task(name="memory.vectors_write_turns")
def vectors_write_turns_task(sessions: list[list]) -> dict:
    """The vectors of the turns a serving process finished within one linger (TurnsSent), as
    [session id, owner id] pairs: one embedding call and one transaction for all of them."""
    return vectors_write_sessions(dict(sessions)).as_dict()


@ethan_task(name="memory.vectors_catch_up")
def vectors_catch_up_task() -> int:
    """Periodic (ethan_site.schedule): vectors left unwritten in recently active sessions."""
    return vectors_catch_up()


def vectors_after_turn(*, owner_id: int, session_id: str) -> None:
    """Queue the vectors of a turn (after it commits), unless the embedder is off: with the
    turns that end meanwhile when a serving process sends them to a worker (TurnsSent), else
    on their own (a serving process that writes them itself batches them as it runs them)."""
    if embedder_name() is None:
        return
    if TURNS_SENT.linger:
        transaction.on_commit(lambda: TURNS_SENT.add(owner_id=owner_id, session_id=session_id))
    else:
        enqueue(vectors_write_task, owner_id, session_id)


def vectors_for_owner(*, owner_id: int) -> None:
    """Queue the vectors of the owner's whole pending history (after an import)."""
    if embedder_name() is not None:
        enqueue(vectors_write_task, owner_id, None)


def vectors_write(*, owner_id: int, session_id: str | None = None) -> Written:
    """One pass: the session's pending messages (or, with no session, the owner's pending
    history, TASK_BUDGET messages at most), then the owner's pending facts and episodes. When
    more is pending than a pass takes, the next pass is queued."""
    if session_id is not None:
        return vectors_write_sessions({session_id: owner_id})
    if embedder_name() is None:
        return Written()
    messages = 0
    more = False
    for pending in _sessions_pending(owner_id=owner_id):
        while messages < TASK_BUDGET:
            step = messages_embed(session_id=pending)
            messages += step
            if step < EMBED_BATCH:
                break
        if messages >= TASK_BUDGET:
            more = True
            break
    facts = facts_embed(owner_ids=[owner_id])
    episodes = episodes_embed(owner_ids=[owner_id])
    more = more or facts >= EMBED_BATCH or episodes >= EMBED_BATCH
    if more:
        enqueue(vectors_write_task, owner_id, None)
    return Written(messages=messages, facts=facts, episodes=episodes, more=more)


def vectors_write_sessions(sessions: dict[str, int]) -> Written:
    """One pass over these sessions (session id -> owner id): their pending messages, then
    their owners' pending facts and episodes, each kind in one embedding call. A session or
    owner with more pending than a pass takes has its next pass queued."""
    if embedder_name() is None or not sessions:
        return Written()
    written = messages_embed_sessions(session_ids=list(sessions))
    owners = sorted(set(sessions.values()))
    facts = facts_embed(owner_ids=owners)
    episodes = episodes_embed(owner_ids=owners)
    again = {session_id for session_id, count in written.items() if count >= EMBED_BATCH}
    if facts >= EMBED_BATCH or episodes >= EMBED_BATCH:
        again = set(sessions)
    for session_id in sorted(again):
        enqueue(vectors_write_task, sessions[session_id], session_id)
    return Written(messages=sum(written.values()), facts=facts, episodes=episodes, more=bool(again))


# Sessions one batch of TurnsWaiting writes at most: a few hundred texts in one call.
BATCH_SESSIONS = 64


class _Turns:
    """The sessions of finished turns gathered for one batch (session id -> owner id, oldest
    first, a session once however many of its turns ended), and how long a serving process
    lets them gather (`linger` seconds, ETHAN_VECTORS_LINGER_MS: turns_batched)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards _waiting, and what a subclass says
        self._waiting: dict[str, int] = {}
        self.linger = 0.0

    def _take(self) -> dict[str, int]:
        """The oldest BATCH_SESSIONS sessions, gone from here (a lost batch's rows stay pending
        in the database: the session's next turn and the catch-up sweep find them)."""
        with self._lock:
            batch = dict(itertools.islice(self._waiting.items(), BATCH_SESSIONS))
            for session_id in batch:
                del self._waiting[session_id]
        return batch


class TurnsWaiting(_Turns):
    """The sessions whose turns this process has finished and whose vectors are not written
    yet, written a batch at a time by one thread.

    Every turn's task (vectors_write_task) adds its session and then writes, unless another
    thread is writing: that thread looks again once its batch is written, and takes it. So a
    quiet process writes each turn alone, as soon as it ends, and a busy one writes the turns
    that ended during the last batch in the next: one embedding call for all their texts
    (about 1 ms a text in a batch, 2 ms in a call of two) and a few statements for all of
    them instead of eleven each. In a Celery worker, which runs one task at a time, every
    batch is one turn's.

    A serving process also lingers (`linger` seconds, ETHAN_VECTORS_LINGER_MS, set by
    ethan_site.serving) before it takes a batch that is not full: turns end one at a time, so
    without it a process under a steady stream of turns writes each alone, the last batch done
    before the next turn ends. No one waits for this: the turns have answered. The console and
    a test write at once.

    What a batch takes is gone from here even if writing it fails: the rows stay pending in
    the database, where the session's next turn and the catch-up sweep find them."""

    def __init__(self) -> None:
        super().__init__()
        self._writing = threading.Lock()  # held by the one thread writing

    def write(self, *, owner_id: int, session_id: str) -> Written:
        """Add this session, and write what is waiting unless another thread is; what this
        thread wrote."""
        with self._lock:
            self._waiting[session_id] = owner_id
        written = Written()
        failed = None
        while self._writing.acquire(blocking=False):
            try:
                with self._lock:
                    full = len(self._waiting) >= BATCH_SESSIONS
                if self.linger and not full:
                    time.sleep(self.linger)  # the turns ending meanwhile join this batch
                written += vectors_write_sessions(self._take())
            except Exception as exc:  # raised below, once the others waiting are written
                failed = failed or exc
            finally:
                self._writing.release()
            # A session added while the batch was being written, by a thread that found the
            # lock held and left it to this one: this look is the one it counted on.
            with self._lock:
                if not self._waiting:
                    break
        if failed is not None:
            raise failed  # the task's policy: logged, or retried if the embedder is down
        return written


TURNS_WAITING = TurnsWaiting()


class TurnsSent(_Turns):
    """Under a broker, the sessions whose turns a serving process finished, sent to the workers
    together: one task (memory.vectors_write_turns) for the turns that ended within `linger`
    seconds of the first (ETHAN_VECTORS_LINGER_MS, set by ethan_site.serving), sent at once
    when BATCH_SESSIONS have. A worker runs one task at a time, so with a task a turn every
    turn was written alone (eleven statements and an embedding call each), and the serving
    process paid a publish a turn.

    A timer thread sends the batch: the turns have answered by then, and no database thread
    waits. What is still waiting when serving stops is sent then (flush); a batch lost with
    its process leaves its rows pending in the database, where the session's next turn and
    the catch-up sweep find them."""

    def __init__(self) -> None:
        super().__init__()
        self._timer: threading.Timer | None = None  # guarded by _lock

    def add(self, *, owner_id: int, session_id: str) -> None:
        with self._lock:
            self._waiting[session_id] = owner_id
            if self.linger and len(self._waiting) < BATCH_SESSIONS:
                if self._timer is None:
                    self._timer = threading.Timer(self.linger, self.flush)
                    self._timer.start()
                return
        self.flush()

    def flush(self) -> None:
        """Send what is waiting, now: a task a BATCH_SESSIONS."""
        with self._lock:
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()  # nothing to cancel when the timer itself is sending
        while batch := self._take():
            publish(vectors_write_turns_task, [[s, o] for s, o in batch.items()])


TURNS_SENT = TurnsSent()


def turns_batched(linger: float) -> None:
    """A serving process (ethan_site.serving) waits `linger` seconds before it writes the
    vectors of the turns that ended (embedded: TurnsWaiting) or sends them to a worker (under a
    broker: TurnsSent), so that those ending meanwhile go in the same batch: one embedding call
    and a few statements for all of them (bench.concurrent_streams, 300 spread streams:
    docs/benchmarks/streams.md). 0 when it stops serving: each turn on its own again, and
    what was waiting to be sent goes now. Elsewhere (the console, a Celery worker's one task
    at a time) nothing would join."""
    if settings.ETHAN_EMBEDDED:
        TURNS_WAITING.linger = linger
        return
    TURNS_SENT.linger = linger
    if not linger:
        TURNS_SENT.flush()


def _messages_pending(*, owner_id: int):
    """The owner's spoken messages with no vector of the configured embedder."""
    rows = Message.objects.filter(session__owner_id=owner_id, role__in=SPOKEN).exclude(content="")
    return meaning.pending(rows, embedder_name())


def _sessions_pending(*, owner_id: int) -> Iterator[str]:
    """The owner's sessions with a spoken message that has no vector of the configured
    embedder, oldest first."""
    ids = _messages_pending(owner_id=owner_id).values_list("session_id", flat=True).distinct()
    yield from sorted(set(ids))


def vectors_catch_up() -> int:
    """Write what is pending in the sessions active within CATCH_UP_WINDOW, and their owners'
    facts and episodes; returns how many rows were written."""
    name = embedder_name()
    if name is None:
        return 0
    since = timezone.now() - CATCH_UP_WINDOW
    recent = ChatSession.objects.filter(updated_at__gte=since)
    sessions = (
        meaning.pending(Message.objects.filter(session__in=recent, role__in=SPOKEN), name)
        .exclude(content="")
        .values_list("session_id", "session__owner_id")
        .distinct()
    )
    pending = list(sessions)
    done = Written()
    for start in range(0, len(pending), BATCH_SESSIONS):
        done += vectors_write_sessions(dict(pending[start : start + BATCH_SESSIONS]))
    # Facts and episodes of owners with no recent session: an edit in the admin, an undo.
    owners = set()
    for model in (Fact, Episode):
        owners |= set(
            meaning.pending(model.objects.all(), name)
            .values_list("owner_id", flat=True)
            .distinct()[:100]
        )
    owners = sorted(owners)
    for start in range(0, len(owners), BATCH_SESSIONS):
        chunk = owners[start : start + BATCH_SESSIONS]
        done += Written(
            facts=facts_embed(owner_ids=chunk), episodes=episodes_embed(owner_ids=chunk)
        )
    written = done.messages + done.facts + done.episodes
    if written:
        log.info("vectors catch-up wrote %d vectors", written)
    return written


def vectors_write_all(
    *, owner_id: int, progress: Callable[[int, int], None] | None = None
) -> Written:
    """Every pending vector of the owner written now, in this thread (`ethan import` when
    embedded, an evaluation, a test): what the background's passes reach one batch at a time.
    `progress(done, total)` follows the messages."""
    total = Written()
    while True:
        messages = 0
        count = _messages_pending(owner_id=owner_id).count() if progress else 0
        for pending in _sessions_pending(owner_id=owner_id):
            while step := messages_embed(session_id=pending):
                messages += step
                if progress:
                    progress(min(messages, count), count)
        facts = episodes = 0
        while step := facts_embed(owner_ids=[owner_id]):
            facts += step
        while step := episodes_embed(owner_ids=[owner_id]):
            episodes += step
        total = Written(
            messages=total.messages + messages,
            facts=total.facts + facts,
            episodes=total.episodes + episodes,
        )
        if not (messages or facts or episodes):
            return total
