"""The turn: planned once, then a stream of events that every channel consumes.

    plan = turn_plan(owner=…, session=…, text=…, channel=…)   # validates; writes nothing
    events = turn_start(plan)      # claims the session, stores the user message
    for event in events: …         # Started, Delta…, ToolCalled/ToolResult…, Done | Failed

The doors (channels_app.turns) consume the events: one rule for what a turn showed
(channels_app.turns.Shown) and one drain into a whole answer (Drain, turn_run).

What is stored, and when:
- the user message before the model is called (a failing model loses nothing);
- each tool step whole or not at all (the assistant message with its calls, what the tools
  wrote, their results), in one transaction, outside which the model thinks;
- the reply once the model has finished it: a stream that fails half-way stores no half reply
  (the `Failed` event says so; the user message stays, and a retry on the session works);
- a reply the person interrupted (Ctrl-C in the console) as far as it was shown, marked
  `interrupted` (turn_interrupted), so the next turn's context holds what they saw.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import DatabaseError, connection, transaction

import ethan_llm
from agent_app import turn_io
from agent_app.modes import mode_parse
from agent_app.paths import SETTINGS, choose_path
from agent_app.prompts import SystemPrompt, build_system
from agent_app.tools import TOOL_SPECS, run_tool
from agent_app.vectors import vectors_after_turn
from ethan_llm.types import AUTO, NO_SAMPLING, Attachment, Sampling, ToolCall, ToolChoice
from ethan_shared.limits import UnstorableText, storable_text
from ethan_shared.queue import enqueue
from memory_app import services as memory_services
from memory_app.tasks import consolidation_run_task
from memory_app.working import consolidation_due, context_assemble, context_parts
from sessions_app import services as session_services
from sessions_app.models import ChatSession, Message
from sessions_app.selectors import question_earlier, round_tool_messages

log = logging.getLogger(__name__)


class TurnInputError(ValueError):
    """The request itself is wrong (empty or too long message, unknown mode, path or model,
    a model whose provider has no key). Nothing has been written. `field` names the input
    at fault (message, mode, path, model, history, instructions, session), so a door can say
    which of its own fields it was."""

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message)
        self.field = field


# --- the plan --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClientStep:
    """The results of a chat app's own tools that its request brings back: the assistant
    message whose calls they answer (`text`, `calls`, as the app holds it) and each result
    (call id, tool name, text)."""

    text: str
    calls: tuple[ToolCall, ...]
    results: tuple[tuple[str, str, str], ...]


@dataclass(frozen=True)
class ClientPart:
    """A chat app's own part of a turn (/v1; docs/openai.md): its tools, offered to the model
    beside Ethan's memory tools (a call to one of them ends the turn: the app runs it and
    sends the result back, `step`), its tool choice and sampling, its length limit, and what
    its question brings beside the text (images, sound, files: never stored)."""

    tools: tuple[ethan_llm.ToolSpec, ...] = ()
    tool_choice: ToolChoice = AUTO
    parallel_tool_calls: bool | None = None
    sampling: Sampling = NO_SAMPLING
    max_tokens: int | None = None
    attachments: tuple[Attachment, ...] = ()
    step: ClientStep | None = None
    # A request that only serves the app (a title, tags, follow-ups: channels_app.openai.
    # housekeeping) or asks for no memory (`ethan-plain`): the model answers these messages
    # as they are, with no memory injected, no memory tools, and nothing stored.
    transcript: tuple[ethan_llm.Message, ...] | None = None


# Ethan's own tool, offered under this prefix when a chat app brings a tool of the same name:
# the model tells them apart, and a call runs the one it named (docs/openai.md).
ETHAN_TOOL_PREFIX = "ethan_"


@dataclass(frozen=True)
class TurnPlan:
    """Everything a turn decides before it writes anything, decided once for every channel."""

    owner: AbstractBaseUser
    session: ChatSession | None
    text: str
    mode: str
    path: str
    model: str
    channel: str
    # Answer the session's latest user message again (a chat app's "regenerate", or a retry
    # after a failure): `text` is that message, already stored; nothing new is stored for it.
    again: bool = False
    # A conversation the client brings along (one started elsewhere, or edited earlier in its
    # history): (role, content) pairs stored in the new session before `text`.
    history: tuple[tuple[str, str], ...] = ()
    # The client's own instructions (a chat app's system message): put after Ethan's system
    # prompt, never in place of it.
    instructions: str = ""
    # For a channel whose right to answer can be taken over mid-turn (a Lark event the sweep
    # took back): called inside the transaction of each of the turn's writes (its question,
    # each tool step, its reply) with the session and the question just stored (else None).
    # False: the turn's right has gone to another; that write is undone and the turn stops
    # (TurnSuperseded), so only the holder stores an answer.
    fence: Callable[[ChatSession, Message | None], bool] | None = None
    # A chat app's own tools, choices and attachments (ClientPart); None at every other door.
    # With a `step`, the turn goes on from the app's tool results: `text` is the question
    # already stored, and nothing new is stored for it.
    client: ClientPart | None = None

    @property
    def continuing(self) -> bool:
        return self.client is not None and self.client.step is not None

    @property
    def plain(self) -> bool:
        """The turn leaves nothing behind (ClientPart.transcript)."""
        return self.client is not None and self.client.transcript is not None


class TurnSuperseded(Exception):
    """The turn's fence said another took over its right to answer: the write it guarded was
    undone and the turn stopped; its claim on the session is given back."""


def owner_model(owner: AbstractBaseUser) -> str | None:
    """The `model` of the person's own settings (their imported config.yaml), if any."""
    from agent_app.models import OwnerSettings

    # Every turn reads it: SQL, as the turn's other reads (memory_app.selectors.procedures_active).
    found = OwnerSettings.objects.raw(
        f"SELECT id, {connection.ops.quote_name('values')} FROM {OwnerSettings._meta.db_table}"
        " WHERE owner_id = %s",
        [owner.pk],
    )
    row = next(iter(found), None)
    model = ((row.values if row is not None else None) or {}).get("model")
    return model if isinstance(model, str) and model else None


def model_choose(
    *, owner: AbstractBaseUser, session: ChatSession | None, explicit: str | None = None
) -> str:
    """The one rule for which model answers, in every channel: the one asked for, else the
    session's, else the person's own setting, else ETHAN_MODEL, else the first provider with
    a key, else the offline model."""
    return (
        explicit
        or (session.model if session is not None and session.model else "")
        or owner_model(owner)
        or ethan_llm.default_model()
    )


def turn_plan(
    *,
    owner: AbstractBaseUser,
    session: ChatSession | None,
    text: str,
    mode: str | None = None,
    path: str | None = None,
    model: str | None = None,
    channel: str = ChatSession.Channel.API,
    again: bool = False,
    history: tuple[tuple[str, str], ...] = (),
    instructions: str = "",
    fence: Callable[[ChatSession, Message | None], bool] | None = None,
    client: ClientPart | None = None,
) -> TurnPlan:
    """Validate a turn before anything is written; raises TurnInputError. The one validator of
    a turn's input: every door checks only its own types and wire format, then asks this."""
    text = (text or "").strip()
    if not text:
        raise TurnInputError("the message is empty", field="message")
    # Every text the turn may store or send, whatever door it came through (one rule).
    _storable("message", "the message", text)
    for _, content in history:
        _storable("history", "a message of the conversation's history", content)
    _storable("instructions", "the system text", instructions)
    if len(text) > settings.ETHAN_MESSAGE_MAX_CHARS:
        raise TurnInputError(
            f"the message is {len(text)} characters long; the limit is "
            f"{settings.ETHAN_MESSAGE_MAX_CHARS}",
            field="message",
        )
    with _input("mode"):
        mode = mode_parse(mode) if mode else (session.mode if session else mode_parse(None))
    with _input("path"):
        path = choose_path(text=text, mode=mode, explicit=path)
    with _input("model"):
        model = model_choose(owner=owner, session=session, explicit=model)
        # Unknown, or no key for its provider: the request's fault, refused before any write.
        ethan_llm.check_model(model)
    if again and (session is None or not session.is_persisted):
        raise TurnInputError("only a stored conversation can be answered again", field="session")
    if client is not None and client.step is not None:
        for _, _, result in client.step.results:
            _storable("message", "a tool's result", result)
    if history and session is not None and session.is_persisted:
        # Stored messages are never rewritten: a history goes into a session of its own.
        raise TurnInputError(
            "a conversation's earlier messages can only start a new session", field="history"
        )
    return TurnPlan(
        owner=owner,
        session=session,
        text=text,
        mode=mode,
        path=path,
        model=model,
        channel=channel,
        again=again,
        history=tuple(history),
        instructions=instructions.strip(),
        fence=fence,
        client=client,
    )


def _storable(field: str, what: str, text: str) -> None:
    try:
        storable_text(what, text)
    except UnstorableText as exc:
        raise TurnInputError(str(exc), field=field) from None


@contextmanager
def _input(field: str) -> Iterator[None]:
    """A ValueError or ModelConfigError in the block is the input `field`'s fault."""
    try:
        yield
    except (ValueError, ethan_llm.ModelConfigError) as exc:
        raise TurnInputError(str(exc), field=field) from None


# --- the events ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Started:
    session_id: str
    path: str
    model: str
    name = "started"


@dataclass(frozen=True)
class Delta:
    text: str
    name = "delta"


@dataclass(frozen=True)
class ToolCalled:
    tool: str
    arguments: dict[str, Any]
    name = "tool_call"


@dataclass(frozen=True)
class ToolResult:
    tool: str
    ok: bool
    summary: str
    name = "tool_result"


@dataclass(frozen=True)
class Done:
    session_id: str
    reply: str
    path: str
    model: str
    input_tokens: int
    output_tokens: int
    model_calls: int
    tool_calls: int
    offline: bool
    # The chat app's own tools the model called (ClientPart): the turn ends here, the app
    # runs them and sends their results back. `reply` is the text before the calls.
    client_tool_calls: tuple[ToolCall, ...] = ()
    name = "done"


@dataclass(frozen=True)
class Failed:
    """The turn stopped: `kind` is model_unavailable (retryable), model_failed (a refused key
    or request) or database. The user message is stored (`session_id`)."""

    kind: str
    detail: str
    retryable: bool
    session_id: str
    name = "error"


TurnEvent = Started | Delta | ToolCalled | ToolResult | Done | Failed


# --- the turn --------------------------------------------------------------------------------


class TurnStream:
    """A started turn: its session (the user message is stored in it) and its events, read
    either way: `for event in turn` (the console, Celery, the WSGI views: the turn's steps run
    in the caller's thread) or `async for event in turn` (an ASGI view: the model through its
    SDK's async client, the database steps in a bounded thread pool, the event loop free while
    the model writes). One turn (_events), two drivers (turn_io); a turn is read one way only."""

    def __init__(
        self,
        *,
        plan: TurnPlan,
        session: ChatSession,
        token: str = "",
        question: Message | None = None,
    ):
        self.plan = plan
        self.session = session
        self.token = token  # the session's claim, given back when the turn ends or is stopped
        # The user message this turn stored (None when it answers a stored one again).
        self.question = question
        self._sync: Iterator[TurnEvent] | None = None
        self._async: AsyncIterator[TurnEvent] | None = None
        self._ended: list[Callable[[], None]] = []

    def on_end(self, callback: Callable[[], None]) -> None:
        """Call `callback` once the turn has ended, however it is read or stopped (a door's
        place under its caps, channels_app.turns)."""
        self._ended.append(callback)

    def _generator(self, io: turn_io.TurnIO) -> AsyncIterator[TurnEvent]:
        if self.plan.plain:
            return _plain_events(self.plan, io, self._ended)
        return _events(self.plan, self.session, self.token, io, self._ended)

    @property
    def events(self) -> Iterator[TurnEvent]:
        if self._sync is None:
            assert self._async is None, "a turn is read one way only"
            self._sync = turn_io.driven(self._generator(turn_io.SYNC))
        return self._sync

    def __iter__(self) -> Iterator[TurnEvent]:
        return self.events

    def __aiter__(self) -> AsyncIterator[TurnEvent]:
        if self._async is None:
            assert self._sync is None, "a turn is read one way only"
            self._async = self._generator(turn_io.on_loop())
        return self._async

    def close(self) -> None:
        """Stop here (the console's Ctrl-C): the session's claim is given back, also when no
        event was read yet (closing a generator that never started runs none of its code)."""
        if self._sync is not None:
            self._sync.close()
        _release(self.session, self.token)
        _ended(self._ended)

    def finish(self) -> None:
        """Run the rest of the turn with nobody reading (a web client that left): the reply
        is still written and stored."""
        for _ in self.events:
            pass

    async def afinish(self) -> None:
        """finish, for a turn read with `async for`."""
        async for _ in self:
            pass


def turn_start(plan: TurnPlan) -> TurnStream:
    """Claim the session and store the user message now, then return the turn's events.

    Raised here, before any event and with nothing written: sessions_app's SessionBusy (another
    turn on this session did not finish within ETHAN_TURN_WAIT_SECONDS) and a DatabaseError
    that kept the message from being stored. Turns on one session run one at a time, a new
    session's first one too: its session row is inserted already claimed, so a second turn
    sent to the new id while the first is answered waits like on any busy session."""
    session = plan.session
    if session is None:
        session = session_services.session_start(
            owner=plan.owner, model=plan.model, mode=plan.mode, channel=plan.channel
        )
    if plan.plain:  # nothing to store, no session to claim: a session never written
        return TurnStream(plan=plan, session=session)
    if not session.is_persisted:
        session.model = plan.model
    try:
        # Durable: the message is committed before the model is called, so this is never part
        # of a caller's transaction. A free session (the usual case): claimed by the statement
        # that stores the message (message_append; for a new session, the INSERT of its row),
        # one commit before the model is called. A concurrent claimer waits on the row lock
        # for that commit, then finds the session claimed. A history brought along is stored
        # whole with its question.
        with transaction.atomic(durable=True):
            question = _store_question(plan, session, claim=True)
            _fenced(plan, session, question)
    except session_services.SessionBusy:
        # Another turn is on it: wait for it outside any transaction (the claim must be seen
        # by other connections as soon as it is made), then store.
        _claim(session, wait_seconds=settings.ETHAN_TURN_WAIT_SECONDS)
        try:
            with transaction.atomic(durable=True):
                question = _store_question(plan, session, claim=False)
                _fenced(plan, session, question)
        except BaseException:
            _release(session, session.turn_claim)
            raise
    return TurnStream(plan=plan, session=session, token=session.turn_claim, question=question)


def _claim(session: ChatSession, *, wait_seconds: float) -> str:
    return session_services.session_turn_claim(
        session=session,
        wait_seconds=wait_seconds,
        stale_seconds=settings.ETHAN_TURN_CLAIM_SECONDS,
    )


def _store_question(plan: TurnPlan, session: ChatSession, *, claim: bool) -> Message | None:
    """Store what the turn brings (inside the caller's transaction); with `claim`, claim the
    session too, or raise SessionBusy (the claim's token is then `session.turn_claim`)."""
    if session.is_persisted and session.model != plan.model:
        session_services.session_set_model(session=session, model=plan.model)
    session_services.session_reopen(session=session)
    claim_seconds = settings.ETHAN_TURN_CLAIM_SECONDS if claim else None
    for role, content in plan.history:
        # A history only ever starts a new session: its first message inserts the session
        # row, and the claim rides on that INSERT.
        session_services.message_append(
            session=session, role=role, content=content, claim_stale_seconds=claim_seconds
        )
        claim_seconds = None
    if plan.continuing:
        return _store_client_step(plan, session, claim_seconds=claim_seconds, claim=claim)
    if plan.again:
        if claim:
            _claim(session, wait_seconds=0)
        return None
    return session_services.message_append(
        session=session,
        role=Message.Role.USER,
        content=plan.text,
        claim_stale_seconds=claim_seconds,
    )


def _store_client_step(
    plan: TurnPlan, session: ChatSession, *, claim_seconds: float | None, claim: bool
) -> None:
    """Store the chat app's tool results (after the calls they answer, when the session does
    not hold them: a conversation brought along). A result already stored (the same request
    sent again) is not stored twice. The session is claimed by the first append, or apart
    when there is none."""
    step = plan.client.step
    stored = round_tool_messages(session=session) if session.is_persisted else []
    called = {call["id"] for row in stored for call in row.tool_calls or ()}
    answered = {row.tool_call_id for row in stored if row.role == Message.Role.TOOL}
    if not {call.id for call in step.calls} <= called:
        session_services.message_append(
            session=session,
            role=Message.Role.ASSISTANT,
            content=step.text,
            tool_calls=[_client_call_json(call) for call in step.calls],
            claim_stale_seconds=claim_seconds,
        )
        claim_seconds = None
    for call_id, _, result in step.results:
        if call_id in answered:
            continue
        session_services.message_append(
            session=session,
            role=Message.Role.TOOL,
            content=result,
            tool_call_id=call_id,
            claim_stale_seconds=claim_seconds,
        )
        claim_seconds = None
    if claim and claim_seconds is not None:  # nothing stored: claimed apart
        _claim(session, wait_seconds=0)
    return None


def _client_call_json(call: ToolCall) -> dict[str, Any]:
    """A call to one of the chat app's tools, as stored: marked, so a later turn knows it ran
    in the app, not here."""
    return {**call.to_json(), "client": True}


def _round_tool_context(session: ChatSession) -> list[ethan_llm.Message]:
    """The latest round's tool traffic as the model must see it to go on from a chat app's
    tool results: each step's calls, then their results. The rounds of the context leave
    tool traffic out (sessions_app.rounds); a turn that goes on in the middle of one needs it."""
    names: dict[str, str] = {}
    context: list[ethan_llm.Message] = []
    for row in round_tool_messages(session=session):
        if row.role == Message.Role.TOOL:
            name = names.get(row.tool_call_id, "")
            context.append(ethan_llm.Message.tool(row.tool_call_id, row.content, name=name))
            continue
        calls = tuple(
            ToolCall(id=c["id"], name=c["name"], arguments=c["arguments"], meta=c.get("meta"))
            for c in row.tool_calls or ()
        )
        names.update((call.id, call.name) for call in calls)
        context.append(ethan_llm.Message.assistant(row.content, calls))
    return context


def _fenced(plan: TurnPlan, session: ChatSession, question: Message | None = None) -> None:
    """Inside one of the turn's write transactions: stop the turn, undoing that write, when
    the plan's fence says its right to answer has gone to another."""
    if plan.fence is not None and not plan.fence(session, question):
        raise TurnSuperseded(f"session {session.pk}: the turn's right to answer was taken over")


def _holds(session: ChatSession | None, token: str) -> bool:
    """The turn holding `token` still has the session's claim (as this process last wrote it)."""
    return bool(token) and session is not None and session.turn_claim == token


def _release(session: ChatSession | None, token: str) -> None:
    """Give the session back, whatever happened (the reply's append gives it back itself). A
    database that fails here is logged, not raised: it must not hide the turn's own result,
    and the claim goes stale on its own."""
    if not _holds(session, token):
        return
    try:
        session_services.session_turn_release(session=session, token=token)
    except DatabaseError as exc:
        log.error("session %s: could not release the turn's claim: %s", session.pk, exc)


@dataclass(frozen=True)
class TurnPrompt:
    system: SystemPrompt
    context: list[ethan_llm.Message]
    # The consolidator has work on this session (decided from what the prompt read).
    consolidation_due: bool = False


def turn_prompt(*, plan: TurnPlan, session: ChatSession, stored: bool) -> TurnPrompt:
    """The system prompt and the context of a turn: the same code for the turn (its message
    `stored` already) and for GET /api/context (not stored: a preview that marks nothing)."""
    parts = context_parts(session=session, current_input=None if stored else plan.text)
    system = build_system(
        owner=plan.owner,
        mode=plan.mode,
        path=plan.path,
        text=plan.text,
        session_id=session.pk if session.is_persisted else None,
        # Relevance looks at the person's previous message too.
        previous=_previous_question(session, parts.rounds),
        instructions=plan.instructions,
    )
    # Facts already in <memory_context> are not repeated in the long-term block.
    context = context_assemble(
        session=session, parts=parts, exclude_fact_ids=[fact.pk for fact in system.facts]
    )
    due = stored and consolidation_due(session=session, state=parts.state)
    return TurnPrompt(system=system, context=context, consolidation_due=due)


def _previous_question(session: ChatSession, rounds: list[ethan_llm.Message]) -> str:
    """The person's message before the current one: from the verbatim rounds already read when
    it is among them (it is, unless the hot zone is a single round), else from the database."""
    questions = [m.content for m in rounds if m.role == Message.Role.USER]
    if len(questions) >= 2:
        return questions[-2]
    if not session.is_persisted or session.round_count < 2:
        return ""
    return question_earlier(session=session)


@dataclass
class _Progress:
    """What the turn learnt on its way that its end needs: whether to queue consolidation
    (unknown until the prompt is read: then queued, as a failing database may hide it)."""

    consolidation_due: bool = True


async def _events(
    plan: TurnPlan,
    session: ChatSession,
    token: str,
    io: turn_io.TurnIO,
    ended: list[Callable[[], None]],
) -> AsyncIterator[TurnEvent]:
    """The turn, written once: every database step through `io.db`, the model through
    `io.model` (turn_io: run in the caller's thread, or on an event loop). `ended` is called
    when it ends, whatever stopped it."""
    released = False
    progress = _Progress()
    try:
        yield Started(session_id=session.pk, path=plan.path, model=plan.model)
        last: Done | Failed | None = None
        try:
            async for event in _answer(plan, session, token, progress, io):
                if isinstance(event, Done):
                    last = event
                else:
                    yield event
        except ethan_llm.ModelError as exc:
            unavailable = isinstance(exc, ethan_llm.ModelUnavailable)
            last = Failed(
                kind="model_unavailable" if unavailable else "model_failed",
                detail=str(exc),
                retryable=unavailable,
                session_id=session.pk,
            )
        except DatabaseError as exc:
            log.error("database error during a turn in %s: %s", session.pk, type(exc).__name__)
            first = next(iter(str(exc).strip().splitlines()), "") or type(exc).__name__
            last = Failed(
                kind="database",
                detail=f"the database failed: {first}",
                retryable=True,
                session_id=session.pk,
            )
        # All of the turn's work is done before its last event, which a consumer may stop at:
        # the vectors of what it stored are queued, and consolidation when it has work (after
        # the reply or the failure: the stored message still counts as a round, and if the
        # compression model is down too the task's retries catch up), on a worker once this
        # commits, or in-process after the reply
        # (embedded mode); and the session is given back for the next turn (by the reply's
        # own append when there is one: then _release has nothing left to do).
        await io.db(_memory_work_queue, session, progress.consolidation_due)
        if _holds(session, token):  # no hop to the database for a claim already given back
            await io.db(_release, session, token)
        released = True
        yield last
    finally:
        try:
            if not released:  # stopped early (Ctrl-C, an error): the claim is given back too
                await io.db(_release, session, token)
        finally:
            _ended(ended)


async def _plain_events(
    plan: TurnPlan, io: turn_io.TurnIO, ended: list[Callable[[], None]]
) -> AsyncIterator[TurnEvent]:
    """A turn that leaves nothing behind (ClientPart.transcript): the model answers the chat
    app's messages as they are, with the app's own instructions, tools and sampling, and no
    memory. The events are a turn's, so the door answers it as any other."""
    client = plan.client
    try:
        yield Started(session_id="", path=plan.path, model=plan.model)
        completion = None
        try:
            async for event in io.model(
                model=plan.model,
                system=plan.instructions,
                messages=client.transcript,
                tools=client.tools if client.tool_choice.mode != "none" else (),
                tool_choice=client.tool_choice if client.tool_choice.mode != "none" else AUTO,
                parallel_tool_calls=client.parallel_tool_calls,
                sampling=client.sampling,
                max_tokens=client.max_tokens or SETTINGS[plan.path].max_tokens,
            ):
                if isinstance(event, ethan_llm.TextDelta):
                    if event.text:
                        yield Delta(text=event.text)
                else:
                    completion = event.completion
        except ethan_llm.ModelError as exc:
            unavailable = isinstance(exc, ethan_llm.ModelUnavailable)
            yield Failed(
                kind="model_unavailable" if unavailable else "model_failed",
                detail=str(exc),
                retryable=unavailable,
                session_id="",
            )
            return
        yield Done(
            session_id="",
            reply=completion.text,
            path=plan.path,
            model=plan.model,
            input_tokens=completion.usage.input_tokens,
            output_tokens=completion.usage.output_tokens,
            model_calls=1,
            tool_calls=0,
            offline=bool(completion.meta.get("offline")),
            client_tool_calls=completion.tool_calls,
        )
    finally:
        _ended(ended)


def _ended(callbacks: list[Callable[[], None]]) -> None:
    while callbacks:
        callbacks.pop(0)()


async def _answer(
    plan: TurnPlan, session: ChatSession, token: str, progress: _Progress, io: turn_io.TurnIO
) -> AsyncIterator[TurnEvent]:
    """The model's side: prompt, context, and the tool loop, streamed; its last event is Done
    (the reply is stored by then, and the session's claim `token` given back with it)."""
    path_settings = SETTINGS[plan.path]
    prompt = await io.db(turn_prompt, plan=plan, session=session, stored=True)
    system, context = prompt.system, prompt.context
    progress.consolidation_due = prompt.consolidation_due
    if plan.again:
        # The question is the last round's; its earlier reply is not part of the new answer's
        # context (it stays stored; the new reply supersedes it, sessions_app.rounds).
        while context and context[-1].role == Message.Role.ASSISTANT:
            context.pop()
    client = plan.client or ClientPart()
    if plan.continuing:
        # Going on from the chat app's tool results: the round's steps, then its results.
        context += await io.db(_round_tool_context, session)
    elif client.attachments and context and context[-1].role == Message.Role.USER:
        # The question as stored holds the attachments' placeholders; the model gets them.
        context[-1] = replace(context[-1], attachments=client.attachments)
    unmarked = system.facts  # injected facts count as used: marked once the model answers
    offered = _OfferedTools(ethan=TOOL_SPECS if path_settings.tools else (), client=client)
    max_calls = settings.ETHAN_TURN_MAX_MODEL_CALLS
    input_tokens = output_tokens = tool_count = 0
    offline = False
    step = 0
    while True:
        step += 1
        completion = None
        # The last allowed call offers no tools: the model has to answer in words.
        async for event in io.model(
            model=plan.model,
            system=system.text,
            messages=context,
            max_tokens=client.max_tokens or path_settings.max_tokens,
            sampling=client.sampling,
            parallel_tool_calls=client.parallel_tool_calls,
            **offered.for_step(first=step == 1, last=step == max_calls),
        ):
            if unmarked:
                # Off the path to the first words: the UPDATE (a commit of its own) runs once
                # the model has begun to answer, not before the request goes out.
                await io.db(memory_services.facts_mark_injected, facts=unmarked)
                unmarked = []
            if isinstance(event, ethan_llm.TextDelta):
                if event.text:
                    yield Delta(text=event.text)
            else:
                completion = event.completion
        input_tokens += completion.usage.input_tokens
        output_tokens += completion.usage.output_tokens
        offline = offline or bool(completion.meta.get("offline"))
        # On the last allowed call tools were not offered: calls a model sends anyway are
        # not run, and what it wrote is the reply.
        if step == max_calls:
            completion = replace(completion, tool_calls=())
        calls = offered.resolved(completion.tool_calls)
        client_calls = tuple(call for call, ours in calls if not ours)
        if calls:
            # A tool step: Ethan's calls run here, stored with the step (the chat app's calls
            # beside them too, for the app to run).
            for call, ours in calls:
                if ours:
                    yield ToolCalled(tool=call.name, arguments=call.arguments)
            results = await io.db(
                _tool_step_write, plan=plan, session=session, completion=completion, calls=calls
            )
            for call, result in zip([c for c, ours in calls if ours], results, strict=True):
                ok = not result.startswith("error:")
                yield ToolResult(tool=call.name, ok=ok, summary=result[:200])
            tool_count += len(results)
        else:
            await io.db(_reply_write, plan=plan, session=session, text=completion.text, token=token)
        if client_calls or not calls:
            # The reply is stored; or the chat app runs its calls, their results coming back
            # with its next request (plan.continuing): the turn ends either way.
            yield Done(
                session_id=session.pk,
                reply=completion.text,
                path=plan.path,
                model=plan.model,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                model_calls=step,
                tool_calls=tool_count,
                offline=offline,
                client_tool_calls=client_calls,
            )
            return
        # Ethan's calls only: their results go back to the model (named as it called them).
        context.append(completion.as_message())
        for call, result in zip(completion.tool_calls, results, strict=True):
            context.append(ethan_llm.Message.tool(call.id, result, name=call.name))


class _OfferedTools:
    """Which tools a turn offers the model at each step, and whose a call is.

    Ethan's memory tools (on the paths that have them) and a chat app's own. An app's tool of
    the same name as one of Ethan's keeps its name; Ethan's is offered as `ethan_<name>`, so a
    call runs the tool the model named and never the other. The app's tool choice: `none`
    offers only Ethan's; `required` or a named function offers only the app's on the first
    step (Ethan's memory is in the prompt already), as the app asked."""

    def __init__(self, *, ethan: tuple[ethan_llm.ToolSpec, ...], client: ClientPart):
        self.client = client
        names = {tool.name for tool in client.tools}
        self.client_names = names if client.tool_choice.mode != "none" else set()
        self.ethan = {
            (ETHAN_TOOL_PREFIX + tool.name if tool.name in names else tool.name): tool
            for tool in ethan
        }

    def for_step(self, *, first: bool, last: bool) -> dict[str, Any]:
        """The tools and tool choice of one model call (none on the last allowed one)."""
        if last:
            return {"tools": (), "tool_choice": AUTO}
        choice = self.client.tool_choice
        ours = tuple(replace(tool, name=name) for name, tool in self.ethan.items())
        if choice.mode == "none":
            return {"tools": ours, "tool_choice": AUTO}
        if first and choice.mode in ("required", "function"):
            return {"tools": self.client.tools, "tool_choice": choice}
        return {"tools": ours + self.client.tools, "tool_choice": AUTO}

    def resolved(self, calls: tuple[ToolCall, ...]) -> list[tuple[ToolCall, bool]]:
        """Each call as it runs, and whether it is Ethan's (True) or the app's (False). A name
        that is neither is Ethan's to refuse (run_tool's unknown-tool error)."""
        resolved = []
        for call in calls:
            if call.name in self.ethan:
                resolved.append((replace(call, name=self.ethan[call.name].name), True))
            else:
                resolved.append((call, call.name not in self.client_names))
        return resolved


def _reply_write(*, plan: TurnPlan, session: ChatSession, text: str, token: str) -> None:
    """Store the reply and give the session back with it. Fenced, the reply and its fence are
    one transaction; unfenced, the append is one of its own (no statement added to every
    turn)."""
    with transaction.atomic(durable=True) if plan.fence else nullcontext():
        _fenced(plan, session)
        session_services.message_append(
            session=session, role=Message.Role.ASSISTANT, content=text, release_token=token
        )


@transaction.atomic(durable=True)  # never inside a caller's: no transaction spans a model call
def _tool_step_write(
    *,
    plan: TurnPlan,
    session: ChatSession,
    completion: ethan_llm.Completion,
    calls: list[tuple[ToolCall, bool]],
) -> list[str]:
    """Store one tool step whole or not at all: the assistant message with its tool calls,
    what the tools wrote (facts, procedures, profile) and their results. A database error
    half-way leaves no call without its result (which no provider would accept back) and no
    fact pointing at a message that is not there. The model call stays outside: no
    transaction is held open while a model thinks."""
    _fenced(plan, session)
    assistant = session_services.message_append(
        session=session,
        role=Message.Role.ASSISTANT,
        content=completion.text,
        # As the model wrote them (the names it was offered), the chat app's marked.
        tool_calls=[
            raw.to_json() if ours else _client_call_json(raw)
            for raw, (_, ours) in zip(completion.tool_calls, calls, strict=True)
        ],
    )
    results = []
    for raw, (call, ours) in zip(completion.tool_calls, calls, strict=True):
        if not ours:
            continue  # the chat app's: it runs it, and its result comes back with its next request
        result = _run_tool_logged(owner=plan.owner, session=session, message=assistant, call=call)
        session_services.message_append(
            session=session, role=Message.Role.TOOL, content=result, tool_call_id=raw.id
        )
        results.append(result)
    return results


def _run_tool_logged(*, owner, session: ChatSession, message: Message, call: ToolCall) -> str:
    result = run_tool(owner=owner, session=session, message=message, call=call)
    if result.startswith("error:"):
        log.info("tool %s in %s refused: %s", call.name, session.id, result)
    return result


def turn_interrupted(*, session: ChatSession, shown: str) -> None:
    """The person stopped the reply (Ctrl-C): what they saw is stored as the reply, marked
    interrupted, so the next turn's context holds it. Nothing shown, nothing stored."""
    if shown.strip() and session.is_persisted:
        session_services.message_append(
            session=session, role=Message.Role.ASSISTANT, content=shown, interrupted=True
        )


def _memory_work_queue(session: ChatSession, consolidation_due: bool) -> None:
    """A turn's background memory work, in one hop to the database thread: consolidation when
    it is due, then the vectors of what the turn stored (after the consolidation, so that in
    embedded mode the facts it extracts are embedded in the same pass)."""
    if consolidation_due:
        enqueue(consolidation_run_task, session.pk)
    vectors_after_turn(owner_id=session.owner_id, session_id=session.pk)
