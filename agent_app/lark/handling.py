"""Handling one stored Lark event: who said what, in which session, and the reply."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.utils import timezone

from agent_app.lark.client import LarkClient, LarkError
from agent_app.lark.messages import mentions_bot, message_text
from agent_app.lifecycle import session_finish
from agent_app.models import ChannelChat, ChannelIdentity, LarkEvent
from agent_app.turn import TurnFailed, TurnInputError, turn_run
from sessions_app.models import ChatSession
from sessions_app.services import SessionBusy

log = logging.getLogger(__name__)
LARK = "lark"
ONLY_TEXT = "目前我只能理解文字消息。/ For now I can only read text messages."
MODEL_DOWN = (
    "抱歉，模型暂时不可用，请稍后再发一次。/ Sorry, the model is unavailable right now; "
    "please send that again in a moment."
)
SESSION_BUSY = (
    "我还在回复你的上一条消息，这条没有保存，请稍后再发一次。/ I am still answering your "
    "previous message; this one was not kept: please send it again in a moment."
)


def lark_client() -> LarkClient:
    return LarkClient(
        base_url=settings.LARK_BASE_URL,
        app_id=settings.LARK_APP_ID,
        app_secret=settings.LARK_APP_SECRET,
    )


def identity_user(open_id: str):
    """The Ethan owner of a Lark sender, made on their first message."""
    found = (
        ChannelIdentity.objects.filter(channel=LARK, external_id=open_id)
        .select_related("user")
        .first()
    )
    if found:
        return found.user
    user_model = get_user_model()
    try:
        with transaction.atomic():
            user, _ = user_model.objects.get_or_create(
                **{user_model.USERNAME_FIELD: f"lark:{open_id}"[:150]}
            )
            user.set_unusable_password()
            user.save(update_fields=["password"])
            ChannelIdentity.objects.create(channel=LARK, external_id=open_id, user=user)
            return user
    except IntegrityError:  # a second event of a new sender raced us: use theirs
        return ChannelIdentity.objects.get(channel=LARK, external_id=open_id).user


def chat_session(*, user, chat_id: str) -> ChatSession | None:
    """The session this chat continues, or None for a new one: a chat keeps its session until
    it has been idle for ETHAN_SESSION_IDLE_MINUTES; the old one is then ended (its episode
    written) and the next message starts afresh."""
    link, _ = ChannelChat.objects.get_or_create(channel=LARK, chat_id=chat_id, user=user)
    session = link.session
    if session is None:
        return None
    idle = timezone.now() - timedelta(minutes=settings.ETHAN_SESSION_IDLE_MINUTES)
    if session.ended_at is None and session.updated_at >= idle:
        return session
    session_finish(session=session)
    return None


def _finish(event: LarkEvent, status: str, note: str = "") -> str:
    LarkEvent.objects.filter(pk=event.pk).update(
        status=status, note=note[:2000], processed_at=timezone.now()
    )
    return status


def lark_event_handle(*, event_pk: int) -> str:
    """Claim the event (only one worker ever handles it), then answer it."""
    claimed = LarkEvent.objects.filter(pk=event_pk, status=LarkEvent.Status.RECEIVED).update(
        status=LarkEvent.Status.PROCESSING
    )
    if claimed != 1:
        return "already handled"
    event = LarkEvent.objects.get(pk=event_pk)
    payload = event.payload
    if event.event_type != "im.message.receive_v1":
        return _finish(event, LarkEvent.Status.IGNORED, f"event type {event.event_type!r}")
    body = payload.get("event") or {}
    sender, message = body.get("sender") or {}, body.get("message") or {}
    if sender.get("sender_type") != "user":
        return _finish(event, LarkEvent.Status.IGNORED, "not sent by a person")
    sender_ids = sender.get("sender_id") or {}
    open_id = sender_ids.get("open_id") or sender_ids.get("union_id") or sender_ids.get("user_id")
    if not open_id or not message.get("message_id"):
        return _finish(event, LarkEvent.Status.IGNORED, "no sender or message id")
    client = lark_client()
    try:
        bot_id = settings.LARK_BOT_OPEN_ID or (
            client.bot_open_id() if message.get("chat_type") == "group" else ""
        )
        if message.get("chat_type") == "group" and not mentions_bot(message, bot_id):
            return _finish(event, LarkEvent.Status.IGNORED, "a group message not for the bot")
        text = message_text(message, bot_id)
        if text is None or not text:
            reply = ONLY_TEXT
        else:
            reply = _answer(
                user=identity_user(open_id), chat_id=message.get("chat_id", open_id), text=text
            )
        client.reply(message_id=message["message_id"], text=reply, idempotency_key=event.event_id)
    except LarkError as exc:
        log.error("lark event %s: the reply failed: %s", event.event_id, exc)
        return _finish(event, LarkEvent.Status.FAILED, str(exc))
    return _finish(event, LarkEvent.Status.DONE)


def _answer(*, user, chat_id: str, text: str) -> str:
    session = chat_session(user=user, chat_id=chat_id)
    try:
        result = turn_run(owner=user, session=session, text=text, channel=ChatSession.Channel.LARK)
    except TurnInputError as exc:
        return f"无法处理这条消息 / I cannot take that message: {exc}"
    except SessionBusy:
        # The turn before it on this chat's session is still being answered: nothing was
        # stored, so the person sends it again (the chat keeps its session).
        log.warning("lark chat %s: the session is busy; the message was not stored", chat_id)
        return SESSION_BUSY
    except TurnFailed as exc:
        # The message is stored; the person is told to send it again (no automatic re-run,
        # which would store it twice).
        log.error("lark turn failed: %s", exc)
        ChannelChat.objects.filter(channel=LARK, chat_id=chat_id, user=user).update(
            session=exc.session, updated_at=timezone.now()
        )
        return MODEL_DOWN
    ChannelChat.objects.filter(channel=LARK, chat_id=chat_id, user=user).update(
        session=result.session, updated_at=timezone.now()
    )
    return result.reply or "…"
