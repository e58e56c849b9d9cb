"""The product's URLs plus two bench-only endpoints, the yardsticks the chat benchmark measures
POST /api/chat against. Served only under bench.settings, never by the product.

- POST /bench/bare: what a request costs before a turn does any work.
- POST /bench/minimal-turn: what a turn cannot avoid, by hand, in as few statements as the
  database allows (minimal_turn below). Same input and answer as /api/chat (a JSON reply).

Both are authenticated and throttled like every product endpoint (DRF's defaults: token or
session authentication, the per-user throttle).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Subquery
from django.urls import path
from django.utils import timezone
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from agent_app.paths import SETTINGS, choose_path
from agent_app.prompts import PERSONA_COMPANION, PERSONA_WORK, fact_line, stored_text
from ethan_llm.tokens import estimate_tokens
from ethan_llm.types import Message as LLMMessage
from ethan_site.urls import urlpatterns as product_urlpatterns
from memory_app.models import Procedure, Summary, WorkingState
from memory_app.selectors import facts_for_injection
from memory_app.working import ACKNOWLEDGE, SUMMARY_LABEL, memory_config, verbatim_from
from profile_app.markdown import render as render_profile
from profile_app.models import ProfileSection
from profile_app.sections import SECTIONS
from profile_app.selectors import profile_is_empty
from sessions_app.ids import new_session_id
from sessions_app.models import ChatSession, Message
from sessions_app.rounds import conversation
from sessions_app.search import message_search_tokens
from sessions_app.services import title_from

# What the offline model answers, give or take: the minimal turn has no model.
ID_ATTEMPTS = 10
MINIMAL_REPLY = "好的，我记下了。Noted, tell me if anything changes."


class BareApi(APIView):
    """Authenticated, throttled and rendered like every product endpoint, and nothing else:
    what a request costs before the turn does any work."""

    def post(self, request):
        return Response({"ok": True})


# --- the minimal turn ------------------------------------------------------------------------


class SessionGone(Exception):
    """No such session for this owner (404)."""


class SessionTaken(Exception):
    """Another turn holds the session (409)."""


@dataclass(frozen=True)
class MinimalTurn:
    session_id: str
    reply: str
    path: str
    system: str  # the system prompt as assembled (what a model would be sent)
    context: list  # the context's messages (ethan_llm.Message), the current input last


def _table(model) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def _when(value):
    """A datetime as the backend stores it (raw SQL bypasses the ORM's adaptation)."""
    return connection.ops.adapt_datetimefield_value(value)


def _claim_question(*, owner, session_id: str, now, token: str) -> tuple[int, int, str]:
    """Statement 1: claim the session for this turn and the question's seq, reopen it, all in
    one UPDATE … RETURNING (SQLite >= 3.35, PostgreSQL). Returns (seq, round_count, mode)."""
    stale = now - timedelta(seconds=settings.ETHAN_TURN_CLAIM_SECONDS)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {_table(ChatSession)} SET last_seq = last_seq + 1, "
            "round_count = round_count + 1, updated_at = %s, ended_at = NULL, "
            "turn_claim = %s, turn_claimed_at = %s "
            "WHERE id = %s AND owner_id = %s "
            "AND (turn_claim = '' OR turn_claimed_at < %s) "
            "RETURNING last_seq, round_count, mode",
            [_when(now), token, _when(now), session_id, owner.pk, _when(stale)],
        )
        row = cursor.fetchone()
    if row is None:
        # Only on the refusal path: which refusal.
        if ChatSession.objects.filter(pk=session_id, owner=owner).exists():
            raise SessionTaken(session_id)
        raise SessionGone(session_id)
    return row


def _new_session(*, owner, text: str, now, token: str) -> str:
    """Statement 1 of a first turn: the session row, already claimed, holding the question's
    seq. The id is drawn at random (as the product's): a collision fails the transaction,
    which minimal_turn then runs again with a new id."""
    session = ChatSession(
        id=new_session_id(now),
        owner=owner,
        title=title_from(text),
        model="offline",
        channel=ChatSession.Channel.API,
        last_seq=1,
        round_count=1,
        turn_claim=token,
        turn_claimed_at=now,
        created_at=now,
        updated_at=now,
    )
    session.save(force_insert=True)
    return session.pk


def _release(session_id: str, token: str) -> None:
    """Give the claim back after a failure (the success path gives it back with the reply)."""
    ChatSession.objects.filter(pk=session_id, turn_claim=token).update(
        turn_claim="", turn_claimed_at=None
    )


def _working_memory(session_id: str) -> tuple[int, str]:
    """Statement: the working state and the warm summaries in one SELECT (a LEFT JOIN: the
    state's row repeated beside each summary). Returns (compressed_through, summary block)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT w.compressed_through, w.rolling_summary, s.text "
            f"FROM {_table(WorkingState)} w LEFT JOIN {_table(Summary)} s "
            "ON s.session_id = w.session_id AND s.first_round > w.extracted_through "
            "AND s.folded = %s WHERE w.session_id = %s ORDER BY s.first_round",
            [False, session_id],
        )
        rows = cursor.fetchall()
    if not rows:
        return 0, ""
    compressed, rolling = rows[0][0], rows[0][1] or ""
    parts = [rolling.strip()] if rolling.strip() else []
    parts += [text.strip() for *_, text in rows if text is not None]
    return compressed, "\n".join(parts)


def _hot_rounds(session_id: str, *, round_count: int, compressed: int) -> list:
    """Statement: the verbatim rounds (the question just stored included), counted back from
    the newest user message so the cost does not grow with the history."""
    first = verbatim_from(
        round_count=round_count, compressed_through=compressed, config=memory_config()
    )
    count = round_count - first + 1
    if count < 1:
        return []
    start = (
        Message.objects.filter(session_id=session_id, role=Message.Role.USER)
        .order_by("-seq")
        .values("seq")[count - 1 : count]
    )
    rows = Message.objects.filter(session_id=session_id, seq__gte=Subquery(start)).order_by("seq")
    return conversation(rows.values_list("role", "content", "tool_calls"))


def _system_prompt(*, owner, mode: str, path: str, text: str, previous: str) -> str:
    """Statements: the rules, the injected facts and (not on the fast path) the profile, one
    SELECT each, assembled as the product's prompt is."""
    path_settings = SETTINGS[path]
    parts = [PERSONA_COMPANION if mode == ChatSession.Mode.COMPANION else PERSONA_WORK]
    rules = (
        Procedure.objects.filter(owner=owner, active=True)
        .order_by("created_at", "id")
        .values_list("rule", flat=True)[: settings.ETHAN_PROCEDURE_CAPACITY]
    )
    if rules := list(rules):
        lines = "\n".join(f"- {stored_text(rule)}" for rule in rules)
        parts.append(f"<behavioral_guidelines>\n{lines}\n</behavioral_guidelines>")
    # The product's selector: its relevance ranking is one statement, and not worth
    # writing twice.
    facts = facts_for_injection(
        owner=owner, limit=path_settings.fact_limit, text=f"{text}\n{previous}".strip()
    )
    if facts:
        lines = "\n".join(fact_line(fact) for fact in facts)
        parts.append(f"<memory_context>\n{lines}\n</memory_context>")
    if path_settings.profile:
        stored = dict(ProfileSection.objects.filter(owner=owner).values_list("key", "content"))
        contents = {section.key: stored.get(section.key, "") for section in SECTIONS}
        if not profile_is_empty(contents):
            markdown = stored_text(render_profile(contents).strip(), one_line=False)
            parts.append(f"<user_profile>\n{markdown}\n</user_profile>")
    return "\n\n".join(parts)


def _store_reply(*, session_id: str, token: str, reply: str, question: str) -> None:
    """Statements: the reply's seq, the claim given back (one UPDATE … RETURNING), the reply."""
    now = timezone.now()
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {_table(ChatSession)} SET last_seq = last_seq + 1, updated_at = %s, "
                "turn_claim = '', turn_claimed_at = NULL WHERE id = %s AND turn_claim = %s "
                "RETURNING last_seq",
                [_when(now), session_id, token],
            )
            row = cursor.fetchone()
        if row is None:
            raise SessionTaken(session_id)  # the claim went stale and another turn took it
        tokens, _ = message_search_tokens(
            role=Message.Role.ASSISTANT, content=reply, previous=question
        )
        Message.objects.create(
            session_id=session_id,
            seq=row[0],
            role=Message.Role.ASSISTANT,
            content=reply,
            search_tokens=tokens,
            created_at=now,
        )


def minimal_turn(*, owner, text: str, session_id: str | None = None) -> MinimalTurn:
    """What a turn cannot avoid, by hand, on the product's tables. Continuing a session, nine
    statements whatever the history size:

    1. UPDATE chatsession … RETURNING: the turn's claim and the question's seq (and reopen);
    2. INSERT the question (1 and 2 commit together);
    3. SELECT the working state with the warm summaries (one LEFT JOIN);
    4. SELECT the verbatim rounds;
    5-7. SELECT the rules, the injected facts (the product's selector), the profile;
    8. UPDATE chatsession … RETURNING: the reply's seq, the claim given back;
    9. INSERT the reply (8 and 9 commit together).

    A first turn is seven: its session row is inserted already claimed and holding the
    question's seq, and there is no state or earlier round to read. Counted as
    bench.turn_overhead counts a turn (CaptureQueriesContext), that is 13 and 11: Django logs
    each of the two transactions' BEGIN and COMMIT too, on SQLite and PostgreSQL alike.

    Left out, and done by the product's turn: the long-term block (facts this session
    promoted), the recall of past episodes (full path), marking the injected facts used,
    a message gaining the next turn's words in its search tokens (here a reply carries its
    question's words, the question only its own), and queueing consolidation."""
    now = timezone.now()
    token = secrets.token_hex(16)
    tokens, _ = message_search_tokens(role=Message.Role.USER, content=text, previous="")
    new = session_id is None
    for attempt in range(ID_ATTEMPTS):
        try:
            with transaction.atomic():
                if new:
                    session_id = _new_session(owner=owner, text=text, now=now, token=token)
                    seq, rounds, mode = 1, 1, ChatSession.Mode.WORK
                else:
                    seq, rounds, mode = _claim_question(
                        owner=owner, session_id=session_id, now=now, token=token
                    )
                Message.objects.create(
                    session_id=session_id,
                    seq=seq,
                    role=Message.Role.USER,
                    content=text,
                    search_tokens=tokens,
                    created_at=now,
                )
            break
        except IntegrityError:
            if not new or attempt == ID_ATTEMPTS - 1:
                raise  # not a new session's id collision
    try:
        path = choose_path(text=text, mode=mode)
        if rounds > 1:
            compressed, summary = _working_memory(session_id)
            context = _hot_rounds(session_id, round_count=rounds, compressed=compressed)
        else:
            summary, context = "", [LLMMessage.user(text)]
        # The person's message before this one, for the facts' relevance (as the product).
        questions = [m.content for m in context if m.role == Message.Role.USER]
        previous = questions[-2] if len(questions) >= 2 else ""
        if summary:
            context = [
                LLMMessage.user(f"{SUMMARY_LABEL}\n{summary}"),
                LLMMessage.assistant(ACKNOWLEDGE),
                *context,
            ]
        system = _system_prompt(owner=owner, mode=mode, path=path, text=text, previous=previous)
        _store_reply(session_id=session_id, token=token, reply=MINIMAL_REPLY, question=text)
    except BaseException:
        _release(session_id, token)
        raise
    return MinimalTurn(
        session_id=session_id, reply=MINIMAL_REPLY, path=path, system=system, context=context
    )


class MinimalTurnApi(APIView):
    """POST {"message", "session_id"?} → {"session_id", "reply", "path", "model", "usage"},
    as POST /api/chat answers."""

    class Input(serializers.Serializer):
        message = serializers.CharField(trim_whitespace=True)
        session_id = serializers.CharField(required=False, max_length=32)

        def validate_message(self, value: str) -> str:
            if len(value) > settings.ETHAN_MESSAGE_MAX_CHARS:
                raise serializers.ValidationError("the message is too long")
            return value

    def post(self, request):
        data = self.Input(data=request.data)
        data.is_valid(raise_exception=True)
        params = data.validated_data
        try:
            turn = minimal_turn(
                owner=request.user, text=params["message"], session_id=params.get("session_id")
            )
        except SessionGone:
            return Response({"detail": "no such session"}, status=status.HTTP_404_NOT_FOUND)
        except SessionTaken as exc:
            return Response(
                {"detail": "busy", "session_id": str(exc), "retryable": True},
                status=status.HTTP_409_CONFLICT,
            )
        prompt = turn.system + "".join(m.content for m in turn.context)
        return Response(
            {
                "session_id": turn.session_id,
                "reply": turn.reply,
                "path": turn.path,
                "model": "offline",
                "usage": {
                    "input_tokens": estimate_tokens(prompt),
                    "output_tokens": estimate_tokens(turn.reply),
                },
            }
        )


urlpatterns = [
    *product_urlpatterns,
    path("bench/bare", BareApi.as_view(), name="bench-bare"),
    path("bench/minimal-turn", MinimalTurnApi.as_view(), name="bench-minimal-turn"),
]
