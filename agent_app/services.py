"""The agent turn: one service that the console, the REST API and the Lark bot all call."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import DatabaseError, transaction

import llm
from agent_app.modes import mode_parse
from agent_app.paths import SETTINGS, choose_path
from agent_app.prompts import build_system
from agent_app.tools import TOOL_SPECS, run_tool
from ethan_site.queue import enqueue
from llm.types import ToolCall
from memory_app.tasks import consolidate_session
from memory_app.working import build_context
from sessions_app import services as session_services
from sessions_app.models import ChatSession, Message

log = logging.getLogger(__name__)


class TurnInputError(ValueError):
    """The request itself is wrong (empty or too long message, unknown mode, path or model).
    Nothing has been written."""


@dataclass(frozen=True)
class TurnResult:
    session: ChatSession
    reply: str
    path: str
    model: str
    input_tokens: int
    output_tokens: int
    model_calls: int
    tool_calls: int
    offline: bool


def session_finish(*, session: ChatSession) -> None:
    """A session is over for now (console exit, /new, a chat gone idle): mark it ended and,
    after the commit, write its episode (sessions under two rounds get none)."""
    from agent_app.tasks import write_episode

    session_services.session_end(session=session)
    if session.is_persisted:
        enqueue(write_episode, session.pk)


def last_user_message(session: ChatSession, skip: int = 0) -> str:
    """The session's latest user message (`skip` = 1: the one before it)."""
    if not session.is_persisted:
        return ""
    earlier = (
        Message.objects.filter(session=session, role=Message.Role.USER)
        .order_by("-seq")
        .values_list("content", flat=True)[skip : skip + 1]
    )
    return next(iter(earlier), "")


def previous_user_turn(session: ChatSession) -> str:
    """The user's message before the current one (stored already): relevance looks at both."""
    return last_user_message(session, skip=1)


def owner_model(owner: AbstractBaseUser) -> str | None:
    """The `model` of the person's own settings, if they have one."""
    from agent_app.models import OwnerSettings

    values = OwnerSettings.objects.filter(owner=owner).values_list("values", flat=True).first()
    model = (values or {}).get("model")
    return model if isinstance(model, str) and model else None


def turn_prepare(
    *,
    session: ChatSession | None,
    text: str,
    mode: str | None,
    path: str | None,
    model: str | None,
) -> tuple[str, str, str, str]:
    """Validate a turn before anything is written: (text, mode, path, model)."""
    text = (text or "").strip()
    if not text:
        raise TurnInputError("the message is empty")
    if len(text) > settings.ETHAN_MESSAGE_MAX_CHARS:
        raise TurnInputError(
            f"the message is {len(text)} characters long; the limit is "
            f"{settings.ETHAN_MESSAGE_MAX_CHARS}"
        )
    try:
        mode = mode_parse(mode) if mode else (session.mode if session else mode_parse(None))
        path = choose_path(text=text, mode=mode, explicit=path)
        model = (
            model or (session.model if session and session.model else "") or (llm.default_model())
        )
        # An unknown model, or one whose provider has no key, is the request's fault: refused
        # here, before the session or the message is written.
        llm.check_model(model)
    except (ValueError, llm.ModelConfigError) as exc:
        raise TurnInputError(str(exc)) from None
    return text, mode, path, model


def turn_run(
    *,
    owner: AbstractBaseUser,
    session: ChatSession | None,
    text: str,
    mode: str | None = None,
    path: str | None = None,
    model: str | None = None,
    channel: str = ChatSession.Channel.API,
) -> TurnResult:
    """One turn. The user message is stored (and committed) before the model is called, so a
    failing model (llm.ModelError, raised as it is) loses nothing and the caller can retry.
    What the model answers is stored step by step as it happens, each step whole or not at
    all; a database error (raised as it is) leaves the message and every finished step, and
    nothing of the step it interrupted. Either error carries the session in `.session`.
    Turns on one session run one at a time: a turn waits up to ETHAN_TURN_WAIT_SECONDS for
    the one before it, then raises sessions_app's SessionBusy with nothing written."""
    if not model and not (session and session.model):
        model = owner_model(owner)  # the person's own default (their imported config.yaml)
    text, mode, path, model = turn_prepare(
        session=session, text=text, mode=mode, path=path, model=model
    )
    token = ""
    if session is None:
        session = session_services.session_start(
            owner=owner, model=model, mode=mode, channel=channel
        )
    elif session.is_persisted:
        # One turn at a time per session, claimed before anything is written: a turn that
        # cannot get the session (SessionBusy) stores nothing. A new session needs no claim:
        # nobody else knows its id until this turn answers.
        token = session_services.session_turn_claim(
            session=session,
            wait_seconds=settings.ETHAN_TURN_WAIT_SECONDS,
            stale_seconds=settings.ETHAN_TURN_CLAIM_SECONDS,
        )
    try:
        if token and session.model != model:
            session_services.session_set_model(session=session, model=model)
        session_services.message_append(session=session, role=Message.Role.USER, content=text)
        try:
            return _turn_answer(
                owner=owner, session=session, text=text, mode=mode, path=path, model=model
            )
        except DatabaseError as exc:
            exc.session = session  # the message is committed: the caller can say where it is
            raise
    finally:
        if token:
            _turn_release(session=session, token=token)


def _turn_release(*, session: ChatSession, token: str) -> None:
    """Give the session back after the turn, whatever happened. A database that fails here is
    logged, not raised: it must not hide the turn's own result or error, and the claim goes
    stale after ETHAN_TURN_CLAIM_SECONDS."""
    try:
        session_services.session_turn_release(session=session, token=token)
    except DatabaseError as exc:
        log.error("session %s: could not release the turn's claim: %s", session.pk, exc)


def _turn_answer(
    *, owner: AbstractBaseUser, session: ChatSession, text: str, mode: str, path: str, model: str
) -> TurnResult:
    """The model's side of a turn whose user message is stored: prompt, context, tool loop."""
    path_settings = SETTINGS[path]
    system = build_system(
        owner=owner,
        mode=mode,
        path=path,
        text=text,
        session_id=session.pk,
        previous=previous_user_turn(session),
    )
    # Facts already in <memory_context> are not repeated in the long-term block.
    context = build_context(session=session, exclude_fact_ids=[fact.pk for fact in system.facts])
    tools = TOOL_SPECS if path_settings.tools else ()
    max_calls = settings.ETHAN_TURN_MAX_MODEL_CALLS
    input_tokens = output_tokens = tool_count = 0
    offline = False
    reply = ""
    for step in range(1, max_calls + 1):
        # The last allowed call offers no tools: the model has to answer in words.
        try:
            completion = llm.complete(
                model=model,
                system=system.text,
                messages=context,
                tools=tools if step < max_calls else (),
                max_tokens=path_settings.max_tokens,
            )
        except llm.ModelError as exc:
            exc.session = session  # the stored message's session, for the caller's retry
            # The stored message still counts as a round: consolidation may be due, and if the
            # compression model is down too, the task's retries catch up once it is back.
            enqueue(consolidate_session, session.pk)
            raise
        input_tokens += completion.usage.input_tokens
        output_tokens += completion.usage.output_tokens
        offline = offline or bool(completion.meta.get("offline"))
        if not completion.tool_calls:
            reply = completion.text
            session_services.message_append(
                session=session, role=Message.Role.ASSISTANT, content=reply
            )
            break
        results = _tool_step_write(owner=owner, session=session, completion=completion)
        context.append(completion.as_message())
        for call, result in zip(completion.tool_calls, results, strict=True):
            context.append(llm.Message.tool(call.id, result, name=call.name))
        tool_count += len(results)
    # Consolidation runs after the reply: on a worker once this commits, or in-process after
    # the reply has been delivered (embedded mode).
    enqueue(consolidate_session, session.pk)
    return TurnResult(
        session=session,
        reply=reply,
        path=path,
        model=model,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        model_calls=step,
        tool_calls=tool_count,
        offline=offline,
    )


@transaction.atomic
def _tool_step_write(
    *, owner: AbstractBaseUser, session: ChatSession, completion: llm.Completion
) -> list[str]:
    """Store one tool step whole or not at all: the assistant message with its tool calls,
    what the tools wrote (facts, procedures, profile) and their results. A database error
    half-way leaves no call without its result (which no provider would accept back) and no
    fact pointing at a message that is not there. The model call stays outside: no
    transaction is held open while a model thinks."""
    assistant = session_services.message_append(
        session=session,
        role=Message.Role.ASSISTANT,
        content=completion.text,
        tool_calls=[call.to_json() for call in completion.tool_calls],
    )
    results = []
    for call in completion.tool_calls:
        result = _run_tool_logged(owner=owner, session=session, message=assistant, call=call)
        session_services.message_append(
            session=session, role=Message.Role.TOOL, content=result, tool_call_id=call.id
        )
        results.append(result)
    return results


def _run_tool_logged(*, owner, session: ChatSession, message: Message, call: ToolCall) -> str:
    result = run_tool(owner=owner, session=session, message=message, call=call)
    if result.startswith("error:"):
        log.info("tool %s in %s refused: %s", call.name, session.id, result)
    return result
