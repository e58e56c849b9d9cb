"""Handling one stored Lark event: who said what, in which session, and the reply; and taking
back the events whose worker died while answering them (lark_events_reclaim).

The webhook stores an event and wakes the dispatcher (channels_app.lark.tasks.lark_events_dispatch),
which queues a handling task per event. No message is left unanswered and none is answered
twice: a worker claims an event with a conditional update (status received -> processing,
claimed_at); the turn records the user
message it stored on the event; the reply carries the event id as Lark's idempotency uuid, so
Lark shows a second identical reply once only. An event still processing long after its claim
(ETHAN_LARK_RECLAIM_SECONDS) is taken back by the periodic sweep, again with a conditional
update (two sweepers never take the same event), and answered from where it stopped: the reply
already stored is sent again (same uuid), or the stored question is answered again without
being stored twice, or, if nothing was stored, the event is handled from the start.

Each claim (the worker's, the sweep's) sets a new token on the event, its fence: the question,
each tool step and the reply are stored, and the reply sent, only while the event still holds
the worker's token, checked in the same transaction as the write (and renewing claimed_at).
A worker whose event was taken back while it was still answering (slow, not dead) stops at
its next write with nothing written or sent, so the person gets one answer.

The reply is shown as it is written when it takes a while: a card updated in place, throttled,
falling back to one text message (channels_app.lark.streaming). Its sends and updates are fenced
the same way: a worker that lost its claim never touches the card again.
"""

from __future__ import annotations

import logging
import secrets
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from agent_app.lifecycle import session_finish
from agent_app.turn import (
    Failed,
    TurnInputError,
    TurnSuperseded,
    turn_plan,
)
from channels_app.lark.client import LarkClient, LarkError
from channels_app.lark.messages import mentions_bot, message_text
from channels_app.lark.streaming import CardLost, CardReply
from channels_app.models import ChannelChat, ChannelIdentity, LarkEvent
from channels_app.turns import Drain, Refusal, TurnsFull, failure, refusal, turn_open
from ethan_shared.queue import WAKE_SECONDS
from sessions_app.models import ChatSession
from sessions_app.selectors import message_with_session, question_latest, question_reply
from sessions_app.services import SessionBusy, session_turn_release

log = logging.getLogger(__name__)
LARK = "lark"
ONLY_TEXT = "目前我只能理解文字消息。/ For now I can only read text messages."
# A refusal in a chat: its Chinese words, then channels_app.turns' one wording (by its code).
_CHINESE = {
    "session_busy": "我还在回复你的上一条消息，这条没有保存，请稍后再发一次。",
    "invalid_request": "无法处理这条消息。",
    "model_unavailable": "抱歉，模型暂时不可用，你的消息已保存，请稍后再发一次。",
    "model_failed": "抱歉，模型无法回答，你的消息已保存。",
    "database_unavailable": "抱歉，数据库暂时不可用，请稍后再发一次。",
    "server_busy": "服务器正忙，这条消息没有保存，请稍后再发一次。",
    "too_many_turns": "你同时有太多条回复正在生成，这条消息没有保存，请稍后再发一次。",
    "server_restarting": "服务器正在重启，这条消息没有保存，请稍后再发一次。",
}


def lark_says(said: Refusal) -> str:
    return f"{_CHINESE.get(said.code, '抱歉，出错了。')} / {said.detail}"


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


def _finish(event: LarkEvent, token: str, status: str, note: str = "") -> str:
    """The event's outcome, written only by the worker still holding it (its claim's token)."""
    LarkEvent.objects.filter(pk=event.pk, claim_token=token).update(
        status=status, note=note[:2000], processed_at=timezone.now()
    )
    return status


TAKEN_OVER = "taken over"


def _holds(event: LarkEvent, token: str, *, session=None, question=None) -> bool:
    """The fence: whether this worker still holds the event (the sweep has not taken it back),
    checked by a conditional UPDATE that renews its claim time, so a live worker is not taken
    for a dead one; with a turn's session and question, records them too. Run inside the
    transaction of the write it guards (the turn's), it keeps the event row locked until that
    write commits: a sweep taking the event back meanwhile waits, then finds the claim time
    renewed and leaves the event to this worker."""
    fields = {"claimed_at": timezone.now()}
    if session is not None:
        fields["session_claim"] = session.turn_claim
    if question is not None:
        fields["question"] = question
    held = LarkEvent.objects.filter(
        pk=event.pk, status=LarkEvent.Status.PROCESSING, claim_token=token
    ).update(**fields)
    if not held:
        log.warning("lark event %s: taken back while this worker answered it", event.event_id)
    return held == 1


# Events queued per dispatch run; a full batch queues the next run.
DISPATCH_BATCH = 500
# An event still unanswered after this long is given up (marked failed), not answered: a reply
# that late would be to a conversation the person has left.
GIVE_UP_AFTER = timedelta(days=1)


def lark_events_mark_queued() -> tuple[list[int], bool]:
    """Mark the stored events that have no task yet as queued, DISPATCH_BATCH at most: (the
    events marked, whether more may be waiting). Each is marked by a conditional update, so two
    dispatch runs never mark, and so queue, the same event twice. The dispatch task
    (channels_app.lark.tasks) queues a handling task for each."""
    waiting = list(
        LarkEvent.objects.filter(status=LarkEvent.Status.RECEIVED, queued_at=None)
        .order_by("pk")
        .values_list("pk", flat=True)[:DISPATCH_BATCH]
    )
    marked = [
        pk
        for pk in waiting
        if LarkEvent.objects.filter(pk=pk, queued_at=None).update(queued_at=timezone.now())
    ]
    return marked, len(waiting) == DISPATCH_BATCH


def lark_events_unqueue_lost() -> bool:
    """For the sweep: events whose wake-up was lost (received, never queued, for longer than a
    wake-up is remembered) or whose task was (queued longer ago than ETHAN_LARK_RECLAIM_SECONDS
    and never claimed) are marked unqueued, for the dispatch to queue again; those older than
    GIVE_UP_AFTER are marked failed. Whether a dispatch is needed."""
    now = timezone.now()
    received = LarkEvent.objects.filter(status=LarkEvent.Status.RECEIVED)
    given_up = received.filter(received_at__lt=now - GIVE_UP_AFTER).update(
        status=LarkEvent.Status.FAILED, note="not answered within a day: given up"
    )
    if given_up:
        log.error("%d lark events were never answered and are given up", given_up)
    lost_task = received.filter(
        queued_at__lt=now - timedelta(seconds=settings.ETHAN_LARK_RECLAIM_SECONDS)
    ).update(queued_at=None)
    lost_wake = received.filter(
        queued_at=None, received_at__lt=now - timedelta(seconds=WAKE_SECONDS)
    ).exists()
    if lost_task or lost_wake:
        log.warning("lark events left waiting (%d lost their task): queued again", lost_task)
    return bool(lost_task or lost_wake)


def lark_event_handle(*, event_pk: int) -> str:
    """Claim the event (only one worker ever handles it), then answer it."""
    token = secrets.token_hex(16)
    claimed = LarkEvent.objects.filter(pk=event_pk, status=LarkEvent.Status.RECEIVED).update(
        status=LarkEvent.Status.PROCESSING, claimed_at=timezone.now(), claim_token=token
    )
    if claimed != 1:
        return "already handled"
    return _handle(LarkEvent.objects.get(pk=event_pk), token)


def lark_events_reclaim(*, older_than_seconds: float | None = None) -> list[str]:
    """Take back the events left processing past ETHAN_LARK_RECLAIM_SECONDS (their worker died)
    and answer them; returns what became of each. Each is claimed again by a conditional update
    on the claim time it was read with, so of two sweepers only one takes it; its new token
    fences off the worker it was taken from, should that one still be running."""
    if older_than_seconds is None:
        older_than_seconds = settings.ETHAN_LARK_RECLAIM_SECONDS
    cutoff = timezone.now() - timedelta(seconds=older_than_seconds)
    stale = LarkEvent.objects.filter(status=LarkEvent.Status.PROCESSING).filter(
        Q(claimed_at__lt=cutoff) | Q(claimed_at=None, received_at__lt=cutoff)
    )
    outcomes = []
    for pk, claimed_at in list(stale.values_list("pk", "claimed_at")):
        token = secrets.token_hex(16)
        taken = LarkEvent.objects.filter(
            pk=pk, status=LarkEvent.Status.PROCESSING, claimed_at=claimed_at
        ).update(claimed_at=timezone.now(), claim_token=token)
        if taken == 1:
            event = LarkEvent.objects.get(pk=pk)
            log.warning("lark event %s: taken back from a worker that stopped", event.event_id)
            outcomes.append(_handle(event, token))
    return outcomes


def _handle(event: LarkEvent, token: str) -> str:
    """Answer an event claimed with `token`; a retaken one from where its first worker
    stopped. A worker whose event is taken back meanwhile stops: TAKEN_OVER."""
    payload = event.payload
    if event.event_type != "im.message.receive_v1":
        return _finish(event, token, LarkEvent.Status.IGNORED, f"event type {event.event_type!r}")
    body = payload.get("event") or {}
    sender, message = body.get("sender") or {}, body.get("message") or {}
    if sender.get("sender_type") != "user":
        return _finish(event, token, LarkEvent.Status.IGNORED, "not sent by a person")
    sender_ids = sender.get("sender_id") or {}
    open_id = sender_ids.get("open_id") or sender_ids.get("union_id") or sender_ids.get("user_id")
    if not open_id or not message.get("message_id"):
        return _finish(event, token, LarkEvent.Status.IGNORED, "no sender or message id")
    client = lark_client()
    try:
        bot_id = settings.LARK_BOT_OPEN_ID or (
            client.bot_open_id() if message.get("chat_type") == "group" else ""
        )
        if message.get("chat_type") == "group" and not mentions_bot(message, bot_id):
            return _finish(
                event, token, LarkEvent.Status.IGNORED, "a group message not for the bot"
            )
        text = message_text(message, bot_id)
        card = CardReply(
            client=client,
            message_id=message["message_id"],
            idempotency_key=event.event_id,
            fence=lambda: _holds(event, token),
            interval=settings.ETHAN_LARK_CARD_SECONDS,
        )
        if text is None or not text:
            reply = ONLY_TEXT
        else:
            reply = _answer(
                event=event,
                token=token,
                user=identity_user(open_id),
                chat_id=message.get("chat_id", open_id),
                text=text,
                card=card,
            )
        if reply is None:
            return _finish(
                event, token, LarkEvent.Status.DONE, "a newer message was answered instead"
            )
        if card.finish(reply):  # the card shows the whole reply: nothing more to send
            return _finish(event, token, LarkEvent.Status.DONE)
        # Sent only by the holder, and its claim renewed first: the sweep can take the event
        # back during the send only if the send outlasts ETHAN_LARK_RECLAIM_SECONDS, and then
        # Lark's idempotency uuid (the event id) still shows one reply.
        if not _holds(event, token):
            return TAKEN_OVER
        client.reply(message_id=message["message_id"], text=reply, idempotency_key=event.event_id)
    except (TurnSuperseded, CardLost):
        return TAKEN_OVER
    except LarkError as exc:
        log.error("lark event %s: the reply failed: %s", event.event_id, exc)
        return _finish(event, token, LarkEvent.Status.FAILED, str(exc))
    return _finish(event, token, LarkEvent.Status.DONE)


def _answer(
    *, event: LarkEvent, token: str, user, chat_id: str, text: str, card: CardReply
) -> str | None:
    """The reply to the event's text, written into `card` as the turn writes it. For a
    retaken event whose question is stored: the reply stored after it, or the question
    answered again; None when the person has written since (their newer message is what gets
    answered). TurnSuperseded when the event is taken back before the reply is stored,
    CardLost when it is taken back before a card update."""
    again = False
    if event.question_id is not None:
        question = message_with_session(message_id=event.question_id)
        stored = question_reply(session_id=question.session_id, seq=question.seq)
        if stored is not None:
            return stored.content or "…"
        if question_latest(session=question.session, field="pk") != question.pk:
            return None
        session, again, text = question.session, True, question.content
        if event.session_claim and session.turn_claim == event.session_claim:
            # The turn this event was taken from holds the session; its fence lets it write
            # nothing more, so its claim is given back for the turn that answers instead.
            session_turn_release(session=session, token=event.session_claim)
    else:
        session = chat_session(user=user, chat_id=chat_id)
    try:
        plan = turn_plan(
            owner=user,
            session=session,
            text=text,
            channel=ChatSession.Channel.LARK,
            again=again,
            fence=lambda turn_session, question: _holds(
                event, token, session=turn_session, question=question
            ),
        )
        turn = turn_open(plan)
    except (TurnInputError, SessionBusy, TurnsFull) as exc:
        # A message refused, the turn before it on this chat's session still being answered,
        # or this worker at its caps: nothing was stored, so the person sends it again (the
        # chat keeps its session). A database that fails is the task's to retry.
        log.warning("lark chat %s: the message was not stored: %s", chat_id, exc)
        return lark_says(refusal(exc))
    # The question is recorded on the event by the fence, in the transaction that stored it:
    # if this worker dies now, the sweep finds it stored and never stores it twice.
    ChannelChat.objects.filter(channel=LARK, chat_id=chat_id, user=user).update(
        session=turn.session, updated_at=timezone.now()
    )
    drain = Drain(show=card.write)  # the card shows the words as the turn shows them
    try:
        for turn_event in turn:  # to its end: the session's claim is given back there
            drain.take(turn_event)
    except CardLost:
        turn.close()  # stop the model; the session's claim is given back
        raise
    answer = drain.ended()
    if isinstance(answer.end, Failed):
        # The message is stored; the person is told to send it again (no automatic re-run,
        # which would answer a message they may have given up on).
        log.error("lark turn failed: %s", answer.end.detail)
        return lark_says(failure(answer.end))
    return answer.shown.text or "…"
