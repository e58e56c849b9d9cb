"""How every door runs a turn: admitted under the caps, consumed one way, shown by one rule,
refused in one wording.

    turn = turn_open(plan)              # the caps, then turn_start: raises a refusal
    async for event in consumed(turn):  # on an event loop: the turn runs in a task of its own
    for event in turn: …                # in a thread (the console, a Celery task)
    Shown / Drain                       # what a turn showed; a turn drained to one answer
    refusal(exc) / failure(event)       # what a door says, whatever its wire format

A turn on the event loop runs in a task of its own, its events handed over to the reader. A
client that leaves stops reading, not the turn: the reply is still written and stored. The
tasks are counted here, so a shutdown can wait for them (ETHAN_DRAIN_SECONDS) and then stop
those left, storing each reply as far as it was written, marked interrupted.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import DatabaseError, transaction

from agent_app.turn import (
    Delta,
    Done,
    Failed,
    Started,
    ToolCalled,
    ToolResult,
    TurnEvent,
    TurnInputError,
    TurnPlan,
    TurnStream,
    turn_interrupted,
    turn_plan,
    turn_start,
)
from ethan_shared.pooled import pooled_connection
from sessions_app.models import ChatSession
from sessions_app.selectors import question_reply, session_locked
from sessions_app.services import SessionBusy

log = logging.getLogger(__name__)

# Retry-After, in seconds, of a turn refused at a cap: a reply takes seconds, a restart a few.
PROCESS_FULL_RETRY_SECONDS = 5
PERSON_FULL_RETRY_SECONDS = 2
DRAINING_RETRY_SECONDS = 5


class TurnsFull(Exception):
    """A turn refused before anything was written: the process or the person is at a cap, or
    the server is shutting down."""

    def __init__(self, *, status: int, code: str, detail: str, retry_after: int):
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.retry_after = retry_after


# Everything turn_open raises with nothing written: a door answers each with refusal(exc).
TURN_REFUSALS = (TurnInputError, SessionBusy, DatabaseError, TurnsFull)


# --- one wording ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Refusal:
    """A turn that did not answer, as every door says it: the HTTP status a web door answers
    with, a code (OpenAI's `error.code`), the words for the person, whether sending it again
    may work, the session holding the message (None when nothing was stored), the input at
    fault, and when to retry."""

    status: int
    code: str
    detail: str
    retryable: bool
    session_id: str | None = None
    field: str | None = None
    retry_after: int | None = None


def refusal(exc: Exception) -> Refusal:
    """A turn refused before its message was stored (one of TURN_REFUSALS)."""
    if isinstance(exc, TurnInputError):
        return Refusal(400, "invalid_request", str(exc), retryable=False, field=exc.field)
    if isinstance(exc, SessionBusy):
        return Refusal(
            409,
            "session_busy",
            "another reply in this conversation is still being written; nothing was stored: retry",
            retryable=True,
            session_id=exc.session_id,
        )
    if isinstance(exc, TurnsFull):
        return Refusal(
            exc.status, exc.code, exc.detail, retryable=True, retry_after=exc.retry_after
        )
    if isinstance(exc, DatabaseError):
        log.error("database error before a turn: %s", type(exc).__name__)
        return Refusal(
            503,
            "database_unavailable",
            "the database is unavailable; nothing was stored: retry later",
            retryable=True,
        )
    raise TypeError(f"not a turn's refusal: {exc!r}")


def failure(failed: Failed) -> Refusal:
    """A turn that stopped after its message was stored."""
    if failed.kind == "database":
        return Refusal(
            503,
            "database_unavailable",
            "a database error interrupted the reply; your message is stored and the step it "
            "interrupted was not kept: retry on this session",
            retryable=True,
            session_id=failed.session_id,
        )
    if failed.retryable:
        return Refusal(
            503,
            failed.kind,
            f"the model is unavailable right now ({failed.detail}); your message is stored: "
            "retry on this session",
            retryable=True,
            session_id=failed.session_id,
        )
    return Refusal(
        502,
        failed.kind,
        f"the model could not answer ({failed.detail}); your message is stored",
        retryable=False,
        session_id=failed.session_id,
    )


# --- the caps --------------------------------------------------------------------------------


class Turns:
    """The turns this process is answering, for its caps and its shutdown. Counted under a
    lock: doors admit turns from pool threads, the event loop ends them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.total = 0
        self.of_person: Counter[int] = Counter()
        self.draining = False
        self.deadline: float | None = None
        self.tasks: set[asyncio.Task] = set()

    def admit(self, person: int) -> Admission:
        with self._lock:
            if self.draining:
                raise TurnsFull(
                    status=503,
                    code="server_restarting",
                    detail="the server is restarting; nothing was stored: retry in a few seconds",
                    retry_after=DRAINING_RETRY_SECONDS,
                )
            cap = settings.ETHAN_TURNS_PER_PROCESS
            if self.total >= cap:
                raise TurnsFull(
                    status=503,
                    code="server_busy",
                    detail=f"the server is writing as many replies as it can ({cap}); nothing "
                    f"was stored: retry in {PROCESS_FULL_RETRY_SECONDS} s",
                    retry_after=PROCESS_FULL_RETRY_SECONDS,
                )
            cap = settings.ETHAN_TURNS_PER_PERSON
            if self.of_person[person] >= cap:
                raise TurnsFull(
                    status=429,
                    code="too_many_turns",
                    detail=f"{cap} replies of yours are being written at once (the most "
                    "ETHAN_TURNS_PER_PERSON allows); nothing was stored: retry when one "
                    "has finished",
                    retry_after=PERSON_FULL_RETRY_SECONDS,
                )
            self.total += 1
            self.of_person[person] += 1
        return Admission(self, person)

    def _leave(self, person: int) -> None:
        with self._lock:
            self.total -= 1
            self.of_person[person] -= 1
            if self.of_person[person] <= 0:
                del self.of_person[person]

    def admitting(self) -> None:
        """The server has started (its lifespan): it takes turns until it is told to stop."""
        self.draining = False
        self.deadline = None

    def stop_admitting(self, deadline: float) -> None:
        """The server is stopping: no new turn from now on; those running may go on until
        `deadline` (time.monotonic()), the first one set."""
        self.draining = True
        if self.deadline is None:
            self.deadline = deadline

    async def drain(self) -> int:
        """Wait until the deadline for the turns running on this loop, then stop those left
        (each stores its reply as far as it was written). Returns how many were stopped."""
        running = set(self.tasks)
        left: set[asyncio.Task] = set()
        if running:
            wait = max(0.0, (self.deadline or time.monotonic()) - time.monotonic())
            _, left = await asyncio.wait(running, timeout=wait)
        for task in left:
            task.cancel()
        if left:
            log.warning("shutdown: %d replies stopped mid-way, stored as interrupted", len(left))
            await asyncio.wait(left)
        return len(left)


class Admission:
    """One admitted turn's place under the caps, given back once."""

    def __init__(self, turns: Turns, person: int):
        self.turns = turns
        self.person = person
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self.turns._leave(self.person)


# The process's turns: one per process, as the caps are.
TURNS = Turns()


def turn_open(plan: TurnPlan) -> TurnStream:
    """Admit the turn under the caps, then start it (its message stored). Raises one of
    TURN_REFUSALS with nothing written; the place under the caps is given back when the turn
    ends, however it is read."""
    admission = TURNS.admit(plan.owner.pk)
    try:
        turn = turn_start(plan)
    except BaseException:
        admission.release()
        raise
    turn.on_end(admission.release)
    return turn


# --- what a turn showed, and the one drain -------------------------------------------------------

# Between the words a model wrote before a tool step and those of the step after it.
STEP_BREAK = "\n\n"


class Shown:
    """What a turn has shown, by one rule for every door: the words of each model step as they
    come, STEP_BREAK between a tool step's words and the next step's (a model may say "Let me
    look." before memory_search). `text` is all of it: what a door shows or sends, streamed or
    whole. `reply` is the words after the last tool step: what is stored as the reply (or, when
    the turn is stopped, as the interrupted reply)."""

    def __init__(self) -> None:
        self.text = ""
        self.reply = ""
        self._new_step = False

    def add(self, event: TurnEvent) -> str:
        """The words to show now for `event` ("" for none)."""
        if isinstance(event, Delta):
            words = STEP_BREAK + event.text if self._new_step and self.text else event.text
            self._new_step = False
            self.text += words
            self.reply += event.text
            return words
        if isinstance(event, ToolCalled):
            self._new_step = True
            self.reply = ""
        elif isinstance(event, Done) and event.reply and not self.reply:
            return self.add(Delta(text=event.reply))  # a last step that streamed nothing: whole
        return ""


@dataclass(frozen=True)
class Answer:
    """A turn drained to its end: Done or Failed, what it showed, and its Started."""

    end: Done | Failed
    shown: Shown
    started: Started | None


class Drain:
    """The one consumer that drains a turn into one answer, for a door in a thread (`for`) or
    on an event loop (`async for`): each event goes to take(), which gives the Answer at the
    turn's end; `show` gets the words to show as they come (a console, a Lark card)."""

    def __init__(self, show: Callable[[str], object] | None = None) -> None:
        self.shown = Shown()
        self.started: Started | None = None
        self.answer: Answer | None = None
        self._show = show

    def take(self, event: TurnEvent) -> Answer | None:
        if isinstance(event, Started):
            self.started = event
        words = self.shown.add(event)
        if words and self._show is not None:
            self._show(words)
        if isinstance(event, Done | Failed):
            self.answer = Answer(end=event, shown=self.shown, started=self.started)
            return self.answer
        return None

    def ended(self) -> Answer:
        """The answer of a turn read to its end."""
        if self.answer is None:
            raise RuntimeError("a turn ended without done or error")  # a bug, never input
        return self.answer


# Both read the turn to its very end, past Done: what the turn does after its last event (its
# place under the caps given back) has run when they return.
def drained(events) -> Answer:
    drain = Drain()
    for event in events:
        drain.take(event)
    return drain.ended()


async def drained_async(events: AsyncIterator[TurnEvent]) -> Answer:
    drain = Drain()
    async for event in events:
        drain.take(event)
    return drain.ended()


class TurnFailed(Exception):
    """A turn that did not finish, for the callers that want one answer (turn_run): the
    Failed event, and the session its user message is stored in."""

    def __init__(self, failed: Failed, session: ChatSession):
        super().__init__(failed.detail)
        self.failed = failed
        self.session = session


@dataclass(frozen=True)
class TurnResult:
    session: ChatSession
    reply: str  # what the turn showed (Shown.text)
    path: str
    model: str
    input_tokens: int
    output_tokens: int
    model_calls: int
    tool_calls: int
    offline: bool


def turn_run(
    *,
    owner,
    session,
    text: str,
    mode: str | None = None,
    path: str | None = None,
    model: str | None = None,
    channel: str = "api",
) -> TurnResult:
    """One whole turn in the caller's thread, admitted under the caps and drained (scripts, the
    benchmarks, tests). Raises one of TURN_REFUSALS (nothing written), or TurnFailed (the
    message is stored in `.session`)."""
    plan = turn_plan(
        owner=owner, session=session, text=text, mode=mode, path=path, model=model, channel=channel
    )
    turn = turn_open(plan)
    answer = drained(turn)
    if isinstance(answer.end, Failed):
        raise TurnFailed(answer.end, turn.session)
    done = answer.end
    return TurnResult(
        session=turn.session,
        reply=answer.shown.text,
        path=done.path,
        model=done.model,
        input_tokens=done.input_tokens,
        output_tokens=done.output_tokens,
        model_calls=done.model_calls,
        tool_calls=done.tool_calls,
        offline=done.offline,
    )


def event_payload(event: TurnEvent) -> dict[str, Any]:
    """An event as the JSON a web door sends (POST /api/chat's Server-Sent Events' data)."""
    if isinstance(event, Delta):  # most of a stream's events: without asdict's copy, half the cost
        return {"text": event.text}
    payload = asdict(event)
    if isinstance(event, ToolCalled | ToolResult):
        payload["name"] = payload.pop("tool")
    if isinstance(event, Done):
        payload["usage"] = {
            "input_tokens": payload.pop("input_tokens"),
            "output_tokens": payload.pop("output_tokens"),
        }
        del payload["offline"]
        del payload["client_tool_calls"]  # only /v1 has them, in its own wire format
    if isinstance(event, Failed) and event.kind == "database":
        # A database's own words may name hosts or tables: a web client gets these instead.
        payload["detail"] = (
            "a database error interrupted the reply; your message is stored and the step it "
            "interrupted was not kept: retry on this session"
        )
    return payload


# --- the consumer on an event loop ---------------------------------------------------------------

_END = object()


def consumed(
    turn: TurnStream,
    through: Callable[[AsyncIterator[TurnEvent]], AsyncIterator[TurnEvent]] | None = None,
) -> AsyncIterator[TurnEvent]:
    """The turn's events on the running event loop. The turn starts now, in a task of its own
    (counted for the shutdown): whoever reads the events may stop at any time, or never start,
    and the turn still runs to its end and is stored. `through` is a door's own step over the
    events that must run whether or not anyone reads (what /v1 records of a conversation): it
    runs in the task too."""
    handed = _Handed()
    # A context of its own: the request's (its thread-sensitive executor, ethan_site.asgi) ends
    # with the request, and the turn may outlive it.
    task = asyncio.get_running_loop().create_task(
        _run(turn, handed, through), context=contextvars.Context()
    )
    TURNS.tasks.add(task)
    task.add_done_callback(TURNS.tasks.discard)
    return handed.read()


class _Handed:
    """The turn's events, handed from its task to the reader. Deltas the reader has not taken
    yet are joined into one: a reader that falls behind (a loaded server, a slow client) gets
    what was written since in one event, rather than a backlog of small ones."""

    def __init__(self) -> None:
        self.events: deque = deque()
        self.ready = asyncio.Event()

    def put(self, event: object) -> None:
        waiting = self.events[-1] if self.events else None
        if isinstance(event, Delta) and isinstance(waiting, Delta):
            self.events[-1] = Delta(text=waiting.text + event.text)
        else:
            self.events.append(event)
        self.ready.set()

    async def read(self) -> AsyncIterator[TurnEvent]:
        while True:
            while not self.events:
                self.ready.clear()
                await self.ready.wait()
            event = self.events.popleft()
            if event is _END:
                return
            yield event


async def _run(
    turn: TurnStream,
    handed: _Handed,
    through: Callable[[AsyncIterator[TurnEvent]], AsyncIterator[TurnEvent]] | None,
) -> None:
    shown = Shown()
    events = through(aiter(turn)) if through is not None else aiter(turn)
    try:
        async for event in events:
            shown.add(event)
            handed.put(event)
    except asyncio.CancelledError:
        # The shutdown's limit: what was written so far is the reply, marked interrupted.
        await sync_to_async(_interrupted_store, thread_sensitive=False)(turn, shown.reply)
        raise
    except Exception:
        log.exception("turn in %s stopped", turn.session.pk)
    finally:
        handed.put(_END)


def _interrupted_store(turn: TurnStream, shown: str) -> None:
    """Store a stopped reply as interrupted, unless its reply was stored in the meantime (a
    database step is never cut in half: the one under way when the turn was stopped ran to its
    end, and may have been the reply)."""
    if not turn.session.is_persisted:  # a turn that stores nothing (TurnPlan.plain)
        return
    with pooled_connection(), transaction.atomic():
        session = session_locked(session_id=turn.session.pk)
        question_seq = turn.question.seq if turn.question is not None else 0
        if question_reply(session_id=session.pk, seq=question_seq) is None:
            turn_interrupted(session=session, shown=shown)
