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
import mimetypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import DatabaseError, connections
from django.db.models import Q
from django.utils import timezone

from agent_app.turn import ClientStep
from channels_app.models import ClientConversation
from ethan_llm.provider import parse_arguments
from ethan_llm.types import Attachment, ToolCall
from ethan_llm.types import Message as LLMMessage
from ethan_shared.compiled import ID_MARKER, Compiled, Marker
from sessions_app.models import ChatSession, Message
from sessions_app.selectors import question_latest

log = logging.getLogger(__name__)

USER, ASSISTANT, TOOL = Message.Role.USER, Message.Role.ASSISTANT, Message.Role.TOOL
INSTRUCTION_ROLES = ("system", "developer")


class ConversationError(ValueError):
    """The request's messages cannot be a conversation (a 400); `param` names the field."""

    def __init__(self, message: str, *, param: str = "messages", code: str | None = None):
        super().__init__(message)
        self.param = param
        self.code = code


@dataclass(frozen=True)
class ClientChat:
    """A request's messages, read: the client's instructions, the history and the question.

    `said` is every message but the instructions as the digest reads it (a tool call and a
    tool result included, as text); `history` is what a new session stores of the messages
    before the question (the texts of the person and the replies). A request that brings
    back the results of the chat app's own tools (`step`) asks no new question: `question`
    is its last one, already asked."""

    instructions: str
    history: tuple[tuple[str, str], ...]  # (role, text), user and assistant only
    question: str
    said: tuple[tuple[str, str], ...] = ()
    step: ClientStep | None = None
    attachments: tuple[Attachment, ...] = ()

    @property
    def before(self) -> tuple[tuple[str, str], ...]:
        """What the conversation held before this request's new part (its question, or the
        tool results it brings)."""
        new = len(self.step.results) if self.step else 1
        return self.said[:-new]


def _attachment(part: dict, kind: str, where: str) -> Attachment:
    """An image_url, input_audio or file part as an Attachment, within the size limit."""
    if kind == "image_url":
        spec = part.get("image_url")
        url = spec.get("url") if isinstance(spec, dict) else spec
        if not isinstance(url, str) or not url.startswith(("https://", "http://", "data:")):
            raise ConversationError(
                f"{where}.image_url.url must be an http(s) or data: URL", param=where
            )
        mime, data = _data_url(url, where) if url.startswith("data:") else ("", "")
        return Attachment(kind="image", mime=mime, data=data, url="" if data else url)
    if kind == "input_audio":
        spec = part.get("input_audio") or {}
        data, audio_format = spec.get("data"), spec.get("format") or "wav"
        if not isinstance(data, str) or not data:
            raise ConversationError(f"{where}.input_audio.data must be base64", param=where)
        return Attachment(kind="audio", mime=f"audio/{audio_format}", data=_sized(data, where))
    spec = part.get("file") or {}
    name = str(spec.get("filename") or "")[:200]
    file_data = spec.get("file_data")
    if isinstance(file_data, str) and file_data:
        if file_data.startswith("data:"):
            mime, data = _data_url(file_data, where)
        else:  # the SDK's own form: base64 alone
            mime, data = (
                mimetypes.guess_type(name)[0] or "application/pdf",
                _sized(file_data, where),
            )
        return Attachment(kind="file", mime=mime, data=data, name=name)
    # An uploaded file's id (file_id) is OpenAI's storage, not Ethan's: named, not sent.
    return Attachment(kind="file", name=name or str(spec.get("file_id") or "file"))


def _data_url(url: str, where: str) -> tuple[str, str]:
    head, comma, data = url.partition(",")
    if not comma or not head.endswith(";base64"):
        raise ConversationError(
            f"{where}: a data: URL must be base64 (data:<type>;base64,…)", param=where
        )
    return head[5:-7], _sized(data, where)


def _sized(data: str, where: str) -> str:
    limit = settings.ETHAN_V1_MAX_ATTACHMENT_BYTES
    size = len(data) * 3 // 4  # base64's decoded size, near enough for a limit
    if size > limit:
        raise ConversationError(
            f"{where} is about {size} bytes; an attachment may be at most {limit} "
            "(ETHAN_V1_MAX_ATTACHMENT_BYTES)",
            param=where,
            code="attachment_too_large",
        )
    return data


def _content(content: object, where: str) -> tuple[str, list[Attachment]]:
    """A message's text and its attachments: a string, or a list of parts (text, refusal,
    image_url, input_audio, file). Each attachment's placeholder is part of the text, which
    is what is stored."""
    if content is None:
        return "", []
    if isinstance(content, str):
        return content, []
    if not isinstance(content, list):
        raise ConversationError(
            f"{where}.content must be a string or a list of content parts",
            param=f"{where}.content",
        )
    texts: list[str] = []
    attachments: list[Attachment] = []
    for index, part in enumerate(content):
        at = f"{where}.content[{index}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("text", "refusal"):
            if not isinstance(part.get(kind), str):
                raise ConversationError(f"{at}.{kind} must be a string", param=f"{where}.content")
            texts.append(part[kind])
        elif kind in ("image_url", "input_audio", "file"):
            attachment = _attachment(part, kind, at)
            attachments.append(attachment)
            texts.append(attachment.placeholder)
        else:
            shown = kind if kind is not None else type(part).__name__
            raise ConversationError(
                f"{at} is {shown!r}: Ethan reads text, image_url, input_audio and file parts",
                param=f"{where}.content",
            )
    if len(attachments) > settings.ETHAN_V1_MAX_ATTACHMENTS:
        raise ConversationError(
            f"{where} brings {len(attachments)} attachments; at most "
            f"{settings.ETHAN_V1_MAX_ATTACHMENTS} (ETHAN_V1_MAX_ATTACHMENTS)",
            param=f"{where}.content",
            code="array_above_max_length",
        )
    return "\n".join(texts), attachments


def _calls(message: dict, where: str) -> tuple[ToolCall, ...]:
    """An assistant message's tool calls (and the older function_call) as ToolCalls."""
    raw = message.get("tool_calls") or []
    if message.get("function_call"):
        raw = [{"id": "", "type": "function", "function": message["function_call"]}]
    if not isinstance(raw, list):
        raise ConversationError(f"{where}.tool_calls must be a list", param=f"{where}.tool_calls")
    calls = []
    for index, call in enumerate(raw):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ConversationError(
                f"{where}.tool_calls[{index}] must have a function with a name",
                param=f"{where}.tool_calls",
            )
        arguments = function.get("arguments") or "{}"
        parsed = parse_arguments(arguments) if isinstance(arguments, str) else arguments
        # The older function_call has no id: its result (role function) names the function.
        call_id = call.get("id") or f"call_{function['name']}"
        calls.append(ToolCall(id=str(call_id), name=function["name"], arguments=parsed))
    return tuple(calls)


def _said_calls(text: str, calls: tuple[ToolCall, ...]) -> str:
    """A tool-call step as the digest reads it: its text and each call, arguments in one
    canonical form (a client that re-serialises them still matches)."""
    canonical = [[call.id, call.name, json.dumps(call.arguments, sort_keys=True)] for call in calls]
    return f"{text}\n{json.dumps(canonical, ensure_ascii=False)}" if calls else text


def chat_read(messages: Sequence[object]) -> ClientChat:
    """Read a request's `messages`; ConversationError for anything that is not a conversation
    Ethan can continue or that is over a limit. A conversation ends with the person's
    question, or with the results of the chat app's own tools after the assistant message
    that called them."""
    _check_count(messages)
    instructions: list[str] = []
    said: list[tuple[str, str]] = []
    history: list[tuple[str, str]] = []
    last: dict = {}  # of the latest message: its role, text, calls, attachments, place
    results: list[tuple[str, str, str]] = []
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ConversationError(f"{where} must be an object with a role")
        role = message["role"]
        text, attachments = _content(message.get("content"), where)
        _check_length(text, where)
        if role in INSTRUCTION_ROLES:
            if text.strip():
                instructions.append(text.strip())
            continue
        if role in ("tool", "function"):
            call_id = message.get("tool_call_id") or f"call_{message.get('name') or ''}"
            results.append((str(call_id), str(message.get("name") or ""), text))
            said.append((TOOL, f"{call_id}\n{text}"))
            continue
        if role not in (USER, ASSISTANT):
            raise ConversationError(f"{where} has an unknown role {role!r}")
        if results:  # tool results answered, and the conversation went on: kept as history
            results = []
        calls = _calls(message, where) if role == ASSISTANT else ()
        if last and last["role"] == USER:
            history.append((USER, last["text"]))
        elif last and last["text"].strip():
            history.append((ASSISTANT, last["text"]))
        last = {"role": role, "text": text, "calls": calls, "attachments": attachments}
        said.append((role, _said_calls(text, calls)))
    if results and last.get("calls"):
        step = ClientStep(text=last["text"], calls=last["calls"], results=tuple(results))
        questions = [text for role, text in history if role == USER]
        chat = ClientChat(
            instructions="\n\n".join(instructions),
            history=tuple(history),
            question=(questions[-1] if questions else results[-1][2]).strip(),
            said=tuple(said),
            step=step,
        )
    elif not last or last["role"] != USER or messages[-1].get("role") != USER:
        raise ConversationError(
            "the last message must be the user's, or the results of the tool calls of the "
            "assistant message before them"
        )
    else:
        chat = ClientChat(
            instructions="\n\n".join(instructions),
            history=tuple(history),
            question=last["text"].strip(),
            said=tuple(said),
            attachments=tuple(last["attachments"]),
        )
    _check_limits(chat)
    return chat


def transcript_read(messages: Sequence[object]) -> tuple[str, tuple[LLMMessage, ...]]:
    """A request's messages as the model answers them when no memory is involved
    (ethan-plain, a chat app's housekeeping): its instructions, and every other message as it
    is (attachments, tool calls and results included). Within the same limits as a
    conversation; nothing of it is stored."""
    _check_count(messages)
    instructions: list[str] = []
    transcript: list[LLMMessage] = []
    total = 0
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ConversationError(f"{where} must be an object with a role")
        role = message["role"]
        text, attachments = _content(message.get("content"), where)
        _check_length(text, where)
        total += len(text)
        if role in INSTRUCTION_ROLES:
            instructions.append(text.strip())
        elif role in ("tool", "function"):
            call_id = message.get("tool_call_id") or f"call_{message.get('name') or ''}"
            transcript.append(
                LLMMessage.tool(str(call_id), text, name=str(message.get("name") or ""))
            )
        elif role == ASSISTANT:
            transcript.append(LLMMessage.assistant(text, _calls(message, where)))
        elif role == USER:
            transcript.append(LLMMessage(role="user", content=text, attachments=tuple(attachments)))
        else:
            raise ConversationError(f"{where} has an unknown role {role!r}")
    if total > settings.ETHAN_V1_MAX_HISTORY_CHARS:
        raise ConversationError(
            f"the messages are {total} characters long; at most "
            f"{settings.ETHAN_V1_MAX_HISTORY_CHARS} are taken (ETHAN_V1_MAX_HISTORY_CHARS)",
            code="context_length_exceeded",
        )
    if not transcript:
        raise ConversationError("messages holds no message but the instructions")
    return "\n\n".join(i for i in instructions if i), tuple(transcript)


def _check_count(messages: object) -> None:
    """A non-empty list within ETHAN_V1_MAX_MESSAGES, counted before any message is read: a
    request of 20,000 messages is refused at once."""
    if not isinstance(messages, list) or not messages:
        raise ConversationError("messages must be a non-empty list")
    if len(messages) > settings.ETHAN_V1_MAX_MESSAGES:
        raise ConversationError(
            f"messages holds {len(messages)} messages; at most {settings.ETHAN_V1_MAX_MESSAGES} "
            "are taken in one request (ETHAN_V1_MAX_MESSAGES)",
            code="array_above_max_length",
        )


def _check_length(text: str, where: str) -> None:
    """Each message within ETHAN_MESSAGE_MAX_CHARS, as a message sent to /api/chat is."""
    limit = settings.ETHAN_MESSAGE_MAX_CHARS
    if len(text.strip()) > limit:
        raise ConversationError(
            f"{where}.content is {len(text.strip())} characters long; the limit is {limit}",
            param=f"{where}.content",
            code="string_above_max_length",
        )


def _check_limits(chat: ClientChat) -> None:
    """The system text within ETHAN_MESSAGE_MAX_CHARS; the history within
    ETHAN_V1_MAX_HISTORY_CHARS. Checked on every request, also one whose history is already
    stored: the bound is on what a request may bring."""
    limit = settings.ETHAN_MESSAGE_MAX_CHARS
    if len(chat.instructions) > limit:
        raise ConversationError(
            f"the system messages are {len(chat.instructions)} characters long; the limit is "
            f"{limit}",
            code="string_above_max_length",
        )
    total = sum(len(text) for _, text in chat.before)
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
    return digest(chat.said)


def _latest_question(session: ChatSession) -> str:
    return (question_latest(session=session, field="content") or "").strip()


def _asking_again(session: ChatSession, chat: ClientChat) -> bool:
    # The digest says the client is asking its last question again; the session must still
    # end with that question (another door, the console or a pinned request, may have gone on
    # since), or the question is stored as a new one.
    return _latest_question(session) == chat.question


# The conversation found for a request, with its session's row (as select_related reads it).
# Every request of a chat app that does not pin its session reads one of these, compiled once
# (ethan_shared.compiled): building them cost more than running them.
_SESSION_FIELDS = [f.attname for f in ChatSession._meta.concrete_fields]


def _newest(owner_id: int, match: Q):
    return (
        ClientConversation.objects.filter(match, owner_id=owner_id)
        .order_by("-updated_at")
        .values_list("asked", *(f"session__{name}" for name in _SESSION_FIELDS))[:1]
    )


def _open_asked(asked: str) -> Q:
    """Asked this, in a session still open."""
    return Q(asked=asked, session__ended_at=None)


_DIGEST = Marker("zqx-no-such-digest")
_OPEN_ASKED = Compiled(
    lambda owner_id, asked: _newest(owner_id, _open_asked(asked)),
    owner_id=ID_MARKER,
    asked=_DIGEST,
)
# The fence's check: whether there is one, its key alone.
_ANY_OPEN_ASKED = Compiled(
    lambda owner_id, asked: ClientConversation.objects.filter(
        _open_asked(asked), owner_id=owner_id
    ).values_list("pk")[:1],
    owner_id=ID_MARKER,
    asked=_DIGEST,
)
# Asked this, or shown what the client now sends as the conversation so far.
_ASKED_OR_SHOWN = Compiled(
    lambda owner_id, asked, shown: _newest(owner_id, Q(asked=asked) | Q(shown=shown)),
    owner_id=ID_MARKER,
    asked=_DIGEST,
    shown=Marker("zqx-no-such-shown"),
)


def conversation_place(
    *, owner: AbstractBaseUser, chat: ClientChat, pinned: ChatSession | None = None
) -> Placement:
    """Apply the rule above to one request. Reads only."""
    asked = _asked(chat)
    if pinned is not None:
        again = (
            not chat.step
            and ClientConversation.objects.filter(session=pinned, asked=asked).exists()
            and _asking_again(pinned, chat)
        )
        return Placement(session=pinned, again=again)
    if not chat.before:
        rows = _OPEN_ASKED.rows(owner_id=owner.pk, asked=asked)
    else:
        rows = _ASKED_OR_SHOWN.rows(owner_id=owner.pk, asked=asked, shown=digest(chat.before))
    if not rows:
        return Placement(session=None, history=chat.history)
    found_asked = rows[0][0]
    session = ChatSession.from_db(ClientConversation.objects.db, _SESSION_FIELDS, rows[0][1:])
    # Tool results sent again are not stored twice (agent_app.turn._store_client_step).
    again = not chat.step and found_asked == asked and _asking_again(session, chat)
    return Placement(session=session, again=again)


def conversation_claim(
    *, owner: AbstractBaseUser, chat: ClientChat
) -> Callable[[ChatSession, Message | None], bool]:
    """The fence of a request that starts a new session (agent_app.turn.TurnPlan.fence): in
    the transaction that stores its question, the conversation is recorded as asked, unless
    another request of the same conversation did so first (the same first message sent twice
    at once): then this one gives way (False: its writes are undone) and is placed again,
    into that session. The check is serialised: on PostgreSQL by a transaction lock on the
    person and the digest, on SQLite by its one writer (the question's insert holds it)."""
    asked = _asked(chat)

    def fence(session: ChatSession, question: Message | None) -> bool:
        if question is None:  # the turn's later writes (tool steps, the reply)
            return True
        connection = connections[ClientConversation.objects.db]
        if connection.vendor == "postgresql":
            key = int.from_bytes(
                hashlib.sha256(f"{owner.pk}:{asked}".encode()).digest()[:8], "big", signed=True
            )
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [key])
        if _ANY_OPEN_ASKED.exists(owner_id=owner.pk, asked=asked):
            return False
        # The session is new, made in this very transaction: it has no row yet, so one INSERT
        # (update_or_create took two savepoints and a locking read besides, six statements).
        ClientConversation.objects.create(session=session, owner=owner, asked=asked, shown=asked)
        return True

    return fence


def conversation_record(
    *,
    owner: AbstractBaseUser,
    session: ChatSession,
    chat: ClientChat,
    shown: str | None,
    calls: tuple[ToolCall, ...] = (),
) -> None:
    """After a turn: where the client's conversation stands now. `shown` is the reply as the
    client got it (with the calls of its own tools the model made, `calls`), None when the
    turn failed. A failure to record is logged, never raised: the reply is stored and sent,
    and the next request at worst starts a new session."""
    asked = _asked(chat)
    after = asked if shown is None else digest((*chat.said, (ASSISTANT, _said_calls(shown, calls))))
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
