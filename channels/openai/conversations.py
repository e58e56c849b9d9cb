"""Which Ethan session a chat app's conversation is: the one rule (docs/openai.md).

An OpenAI client sends the whole conversation with every request and no id of it. Ethan keeps
the conversation itself, so all it needs is where a request's conversation stands:

- A request's messages, its system messages aside, are `history + [question]`.
- A digest of messages is the SHA-256 of their roles and texts, whitespace collapsed.
- After each turn the session records `asked` = digest(history + [question]) and `shown` =
  digest(history + [question, the reply as the client got it]); `shown` = `asked` when the
  turn failed (the client holds the question and no reply).

A request then goes, among its owner's sessions:
1. pinned with the X-Ethan-Session header: to that session (asked again if the header's
   session recorded the same `asked`), whatever its history says;
2. to the session whose `asked` is digest(history + [question]): answered again, the question
   not stored twice (a "regenerate", or a retry after a failure). For a first message (no
   history) only while that session is still open: the same greeting a day later is a new
   conversation;
3. to the session whose `shown` is digest(history): continued, the question stored;
4. with no history: to a new session;
5. otherwise (edited earlier in its history, or started elsewhere and pasted in): to a new
   session that first stores the client's history. Stored messages are never rewritten.
Of several sessions that match, the most recently active wins.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import DatabaseError
from django.db.models import Q
from django.utils import timezone

from agent_app.models import ClientConversation
from sessions_app.models import ChatSession, Message
from sessions_app.selectors import session_questions

log = logging.getLogger(__name__)

USER, ASSISTANT = Message.Role.USER, Message.Role.ASSISTANT
INSTRUCTION_ROLES = ("system", "developer")


class ConversationError(ValueError):
    """The request's messages cannot be a conversation (a 400); `param` names the field."""

    def __init__(self, message: str, *, param: str = "messages", code: str | None = None):
        super().__init__(message)
        self.param = param
        self.code = code


@dataclass(frozen=True)
class ClientChat:
    """A request's messages, read: the client's instructions, the history and the question."""

    instructions: str
    history: tuple[tuple[str, str], ...]  # (role, text), user and assistant only
    question: str


def _text(content: object, where: str) -> str:
    """A message's text: a string, or a list of text parts (images and audio are refused)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for index, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text":
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise ConversationError(
                    f"{where}.content[{index}] is {kind!r}: Ethan reads text parts only",
                    param=f"{where}.content",
                )
            if not isinstance(part.get("text"), str):
                raise ConversationError(
                    f"{where}.content[{index}].text must be a string", param=f"{where}.content"
                )
            texts.append(part["text"])
        return "\n".join(texts)
    raise ConversationError(
        f"{where}.content must be a string or a list of text parts", param=f"{where}.content"
    )


def chat_read(messages: Sequence[object]) -> ClientChat:
    """Read a request's `messages`; ConversationError for anything that is not a conversation
    Ethan can continue (a client's own tool traffic included) or that is over a limit
    (_check_limits)."""
    if not isinstance(messages, list) or not messages:
        raise ConversationError("messages must be a non-empty list")
    # Counted first: a request of 20,000 messages is refused before any is read.
    if len(messages) > settings.ETHAN_V1_MAX_MESSAGES:
        raise ConversationError(
            f"messages holds {len(messages)} messages; at most {settings.ETHAN_V1_MAX_MESSAGES} "
            "are taken in one request (ETHAN_V1_MAX_MESSAGES)",
            code="array_above_max_length",
        )
    instructions: list[str] = []
    turns: list[tuple[str, str]] = []
    places: list[str] = []  # where each of `turns` is in the request, for the errors
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ConversationError(f"{where} must be an object with a role")
        role = message["role"]
        if (
            role in ("tool", "function")
            or message.get("tool_calls")
            or message.get("function_call")
        ):
            raise ConversationError(
                f"{where} is a tool call or its result: Ethan runs its own memory tools and "
                "does not take a client's tools",
                code="tools_not_supported",
            )
        text = _text(message.get("content"), where)
        if role in INSTRUCTION_ROLES:
            if text.strip():
                instructions.append(text.strip())
        elif role in (USER, ASSISTANT):
            turns.append((role, text))
            places.append(where)
        else:
            raise ConversationError(f"{where} has an unknown role {role!r}")
    if not turns or turns[-1][0] != USER or messages[-1].get("role") != USER:
        raise ConversationError("the last message must be the user's")
    chat = ClientChat(
        instructions="\n\n".join(instructions),
        history=tuple(turns[:-1]),
        question=turns[-1][1].strip(),
    )
    _check_limits(chat, places)
    return chat


def _check_limits(chat: ClientChat, places: list[str]) -> None:
    """Each message and the system text within ETHAN_MESSAGE_MAX_CHARS, as a message sent to
    /api/chat is; the history within ETHAN_V1_MAX_HISTORY_CHARS. Checked on every request,
    also one whose history is already stored: the bound is on what a request may bring."""
    limit = settings.ETHAN_MESSAGE_MAX_CHARS
    for (_, text), where in zip((*chat.history, (USER, chat.question)), places, strict=True):
        if len(text.strip()) > limit:
            raise ConversationError(
                f"{where}.content is {len(text.strip())} characters long; the limit is {limit}",
                param=f"{where}.content",
                code="string_above_max_length",
            )
    if len(chat.instructions) > limit:
        raise ConversationError(
            f"the system messages are {len(chat.instructions)} characters long; the limit is "
            f"{limit}",
            code="string_above_max_length",
        )
    total = sum(len(text) for _, text in chat.history)
    if total > settings.ETHAN_V1_MAX_HISTORY_CHARS:
        raise ConversationError(
            f"the messages before the last one are {total} characters long; at most "
            f"{settings.ETHAN_V1_MAX_HISTORY_CHARS} are taken (ETHAN_V1_MAX_HISTORY_CHARS): "
            "start a new conversation",
            code="context_length_exceeded",
        )


def digest(turns: Sequence[tuple[str, str]]) -> str:
    """The conversation's fingerprint: roles and texts, whitespace collapsed (a client that
    trims or re-wraps a reply still matches)."""
    canonical = [[role, " ".join(text.split())] for role, text in turns]
    # surrogatepass: a lone surrogate (turn_plan refuses it, after this) is no UnicodeEncodeError;
    # valid text encodes as before, so digests already stored still match.
    data = json.dumps(canonical, ensure_ascii=False).encode("utf-8", "surrogatepass")
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Placement:
    """Where a request's question goes: `session` None is a new one (holding `history`
    first); `again` answers the session's last question again without storing it."""

    session: ChatSession | None
    again: bool = False
    history: tuple[tuple[str, str], ...] = ()


def _asked(chat: ClientChat) -> str:
    return digest((*chat.history, (USER, chat.question)))


def _latest_question(session: ChatSession) -> str:
    latest = session_questions(session=session).values_list("content", flat=True).first()
    return (latest or "").strip()


def _asking_again(session: ChatSession, chat: ClientChat) -> bool:
    # The digest says the client is asking its last question again; the session must still
    # end with that question (another door, the console or a pinned request, may have gone on
    # since), or the question is stored as a new one.
    return _latest_question(session) == chat.question


def conversation_place(
    *, owner: AbstractBaseUser, chat: ClientChat, pinned: ChatSession | None = None
) -> Placement:
    """Apply the rule above to one request. Reads only."""
    asked = _asked(chat)
    if pinned is not None:
        again = ClientConversation.objects.filter(
            session=pinned, asked=asked
        ).exists() and _asking_again(pinned, chat)
        return Placement(session=pinned, again=again)
    match = Q(asked=asked)
    if not chat.history:
        match &= Q(session__ended_at=None)
    else:
        match |= Q(shown=digest(chat.history))
    found = (
        ClientConversation.objects.filter(match, owner=owner)
        .select_related("session")
        .order_by("-updated_at")
        .first()
    )
    if found is None:
        return Placement(session=None, history=chat.history)
    again = found.asked == asked and _asking_again(found.session, chat)
    return Placement(session=found.session, again=again)


def conversation_record(
    *, owner: AbstractBaseUser, session: ChatSession, chat: ClientChat, shown: str | None
) -> None:
    """After a turn: where the client's conversation stands now. `shown` is the reply as the
    client got it, None when the turn failed. A failure to record is logged, never raised:
    the reply is stored and sent, and the next request at worst starts a new session."""
    asked = _asked(chat)
    after = (
        asked
        if shown is None
        else digest((*chat.history, (USER, chat.question), (ASSISTANT, shown)))
    )
    record = ClientConversation(
        session=session, owner=owner, asked=asked, shown=after, updated_at=timezone.now()
    )
    try:
        # One upsert (INSERT ... ON CONFLICT DO UPDATE), where update_or_create took a
        # transaction, a locking read and a savepoint: seven round trips to PostgreSQL.
        ClientConversation.objects.bulk_create(
            [record],
            update_conflicts=True,
            unique_fields=["session"],
            update_fields=["owner", "asked", "shown", "updated_at"],
        )
    except DatabaseError as exc:
        log.error("session %s: could not record the chat app's conversation: %s", session.pk, exc)
