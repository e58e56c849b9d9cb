"""The Lark webhook against a loopback fake Lark, with real encryption and signatures."""

from __future__ import annotations

import json
import time

import pytest
from django.utils import timezone

from channels_app.lark.handling import ONLY_TEXT
from channels_app.models import ChannelIdentity, LarkEvent
from memory_app.models import Fact
from sessions_app.models import ChatSession
from tests.lark_helpers import TOKEN, deliver, message_event

pytestmark = pytest.mark.django_db(transaction=True)


def test_url_verification_plain_and_encrypted(client, lark, settings):
    challenge = {"challenge": "c-42", "token": TOKEN, "type": "url_verification"}
    answer = deliver(client, challenge)
    assert (answer.status_code, answer.json()) == (200, {"challenge": "c-42"})
    settings.LARK_ENCRYPT_KEY = ""
    plain = client.post("/lark/webhook", challenge, content_type="application/json")
    assert plain.json() == {"challenge": "c-42"}
    wrong = client.post(
        "/lark/webhook", {**challenge, "token": "nope"}, content_type="application/json"
    )
    assert wrong.status_code == 401


def test_a_p2p_message_is_answered_in_the_background(client, lark):
    answer = deliver(client, message_event("ev1", "记住我喜欢喝美式咖啡"))
    assert (answer.status_code, answer.json()) == (200, {"msg": "success"})
    # The response was sent first; the task ran when Django closed it (embedded mode).
    [reply] = lark.replies
    assert reply["message_id"] == "om_ev1" and reply["uuid"] == "ev1"
    assert json.loads(reply["content"]) == {"text": "好的，我记住了：你喜欢喝美式咖啡"}
    identity = ChannelIdentity.objects.get(channel="lark", external_id="ou_ada")
    session = ChatSession.objects.get()
    assert (session.owner, session.channel) == (identity.user, "lark")
    assert Fact.objects.get().owner == identity.user
    assert LarkEvent.objects.get().status == "done"


@pytest.mark.parametrize(
    ("change", "status"),
    [
        ({"bad_signature": True}, 401),
        ({"stamp": int(time.time()) - 3600}, 401),
    ],
)
def test_bad_signature_and_stale_timestamp_are_refused(client, lark, change, status):
    assert deliver(client, message_event("ev2", "hi"), **change).status_code == status
    assert not LarkEvent.objects.exists() and lark.replies == []


def test_wrong_token_and_garbage_are_refused(client, lark):
    event = message_event("ev3", "hi")
    event["header"]["token"] = "stolen"
    assert deliver(client, event).status_code == 401
    # Unsigned: only a URL verification may be, so garbage is refused before it is parsed.
    garbage = client.post("/lark/webhook", "{nope", content_type="application/json")
    assert (garbage.status_code, garbage.json()) == (401, {"detail": "refused"})
    undecryptable = client.post(
        "/lark/webhook", {"encrypt": "AAAA"}, content_type="application/json"
    )
    assert (undecryptable.status_code, undecryptable.json()) == (401, {"detail": "refused"})
    assert not LarkEvent.objects.exists()


def test_a_redelivered_event_is_acknowledged_once_processed_once(client, lark):
    event = message_event("ev4", "你好")
    assert deliver(client, event).status_code == 200
    assert deliver(client, event).status_code == 200
    assert LarkEvent.objects.count() == 1 and len(lark.replies) == 1
    assert ChatSession.objects.get().messages.count() == 2


def test_groups_need_a_mention_of_the_bot(client, lark):
    silent = message_event("ev5", "大家好", chat_type="group", chat_id="oc_group")
    assert deliver(client, silent).status_code == 200
    assert lark.replies == [] and LarkEvent.objects.get().status == "ignored"
    mention = [
        {"key": "@_user_1", "id": {"open_id": "ou_bot"}, "name": "Ethan"},
        {"key": "@_user_2", "id": {"open_id": "ou_grace"}, "name": "Grace"},
    ]
    asked = message_event(
        "ev6",
        "@_user_1 和 @_user_2 说你好",
        chat_type="group",
        chat_id="oc_group",
        mentions=mention,
    )
    deliver(client, asked)
    assert len(lark.replies) == 1
    assert ChatSession.objects.get().messages.first().content == "和 @Grace 说你好"
    assert any(r.path == "/open-apis/bot/v3/info" for r in lark.requests)  # the bot's id
    everyone = message_event(
        "ev7",
        "@_all 开会了",
        chat_type="group",
        chat_id="oc_group",
        mentions=[{"key": "@_all", "id": {}, "name": "所有人"}],
    )
    deliver(client, everyone)
    assert len(lark.replies) == 1


def test_bots_and_other_event_types_are_ignored(client, lark):
    deliver(client, message_event("ev8", "beep", sender_type="app"))
    other = message_event("ev9", "x")
    other["header"]["event_type"] = "im.chat.member.bot.added_v1"
    deliver(client, other)
    assert lark.replies == []
    assert list(LarkEvent.objects.order_by("id").values_list("status", flat=True)) == [
        "ignored",
        "ignored",
    ]


def test_unsupported_types_get_a_note_and_posts_are_read(client, lark):
    deliver(client, message_event("ev10", message_type="image", content={"image_key": "k"}))
    assert json.loads(lark.replies[0]["content"]) == {"text": ONLY_TEXT}
    post = {
        "zh_cn": {
            "title": "周报",
            "content": [
                [
                    {"tag": "text", "text": "本周完成了"},
                    {"tag": "a", "text": "登录页", "href": "http://x"},
                ]
            ],
        }
    }
    deliver(client, message_event("ev11", message_type="post", content=post))
    assert ChatSession.objects.get().messages.first().content == "周报 本周完成了登录页"


def test_an_expired_tenant_token_is_refreshed(client, lark):
    deliver(client, message_event("ev12", "第一条"))
    lark.revoke_tokens()
    deliver(client, message_event("ev13", "第二条"))
    assert len(lark.replies) == 2
    token_calls = [r for r in lark.requests if "tenant_access_token" in r.path]
    assert len(token_calls) == 2


def test_lark_errors_are_retried_then_logged(client, lark):
    lark.fail_replies = 2
    deliver(client, message_event("ev14", "hello"))
    assert len(lark.replies) == 1
    lark.fail_replies = 10
    deliver(client, message_event("ev15", "again"))
    event = LarkEvent.objects.get(event_id="ev15")
    assert event.status == "failed" and "code 230020" in event.note
    # The turn itself was stored: the person's message is not lost.
    assert ChatSession.objects.get().messages.filter(content="again").exists()


def test_a_chat_keeps_its_session_until_idle(client, lark, settings):
    settings.ETHAN_MEMORY_END_BATCH_ROUNDS = 1  # its end does not wait for more ended rounds
    deliver(client, message_event("ev16", "第一句"))
    deliver(client, message_event("ev17", "第二句"))
    first = ChatSession.objects.get()
    assert first.messages.filter(role="user").count() == 2
    ChatSession.objects.filter(pk=first.pk).update(
        updated_at=timezone.now()
        - timezone.timedelta(minutes=settings.ETHAN_SESSION_IDLE_MINUTES + 1)
    )
    deliver(client, message_event("ev18", "过了很久"))
    assert ChatSession.objects.count() == 2
    first.refresh_from_db()
    assert first.ended_at is not None
    from episodes_app.models import Episode

    assert Episode.objects.get().session_id == first.pk  # written when it went idle
    deliver(client, message_event("ev19", "你好", open_id="ou_grace"))
    assert ChatSession.objects.values("owner").distinct().count() == 2  # one owner each


def test_unconfigured_lark_is_503(client, settings):
    settings.LARK_VERIFICATION_TOKEN = ""
    assert client.post("/lark/webhook", {}, content_type="application/json").status_code == 503


# --- events whose worker died: taken back by the sweep ---------------------------------------


def _stranded(event_id: str, text: str, *, minutes_ago: int = 30) -> LarkEvent:
    """An event a worker claimed and then died on, `minutes_ago`."""
    from datetime import timedelta

    return LarkEvent.objects.create(
        event_id=event_id,
        event_type="im.message.receive_v1",
        message_id=f"om_{event_id}",
        payload=message_event(event_id, text),
        status=LarkEvent.Status.PROCESSING,
        claimed_at=timezone.now() - timedelta(minutes=minutes_ago),
    )


def test_an_event_stranded_before_its_turn_is_answered_by_the_sweep(lark, settings):
    from channels_app.lark.handling import lark_events_reclaim

    fresh = _stranded("ev-fresh", "still being answered", minutes_ago=1)
    stranded = _stranded("ev-dead", "记住我喜欢喝美式咖啡")
    assert lark_events_reclaim() == ["done"]  # the fresh one is left to its worker
    [reply] = lark.replies
    assert (reply["uuid"], reply["message_id"]) == ("ev-dead", "om_ev-dead")
    stranded.refresh_from_db()
    assert stranded.status == "done" and stranded.question.content == "记住我喜欢喝美式咖啡"
    fresh.refresh_from_db()
    assert fresh.status == "processing"
    assert lark_events_reclaim() == []  # nothing left: never answered twice


def test_a_stranded_question_is_answered_once_and_never_stored_twice(lark):
    """The worker died after storing the question, before the reply: the sweep answers the
    stored question; and when it died after the reply was stored (maybe sent), the sweep sends
    that same reply with the same uuid, which Lark shows once."""
    from channels_app.lark.handling import identity_user, lark_events_reclaim
    from sessions_app import services

    user = identity_user("ou_ada")
    session = services.session_start(owner=user, channel="lark")
    asked = services.message_append(session=session, role="user", content="你好")
    stranded = _stranded("ev-asked", "你好")
    LarkEvent.objects.filter(pk=stranded.pk).update(question=asked)
    assert lark_events_reclaim() == ["done"]
    assert list(session.messages.values_list("role", flat=True)) == ["user", "assistant"]
    [reply] = lark.replies
    answered = session.messages.get(role="assistant").content
    assert json.loads(reply["content"]) == {"text": answered} and reply["uuid"] == "ev-asked"

    # Died after its reply was stored and sent: sent again, shown once.
    LarkEvent.objects.filter(pk=stranded.pk).delete()
    again = _stranded("ev-asked-2", "你好")
    LarkEvent.objects.filter(pk=again.pk).update(event_id="ev-asked", question=asked)
    assert lark_events_reclaim() == ["done"]
    assert len(lark.replies) == 1  # the same uuid: Lark drops the second
    assert session.messages.count() == 2


def test_two_sweepers_never_take_the_same_event(lark):
    from channels_app.lark.handling import lark_events_reclaim

    event = _stranded("ev-race", "hello")
    claimed_at = event.claimed_at
    # A second sweeper took it first (its claim moved claimed_at): ours matches nothing.
    LarkEvent.objects.filter(pk=event.pk).update(claimed_at=timezone.now())
    stale = LarkEvent.objects.filter(pk=event.pk, claimed_at=claimed_at)
    assert not stale.exists()
    assert lark_events_reclaim() == []
    assert lark.replies == []


@pytest.mark.parametrize(
    ("text", "roles"),
    [
        # Its next write is the reply.
        ("what should I read next?", ["user", "assistant"]),
        # Its next write is a tool step (the offline model saves the preference first).
        ("记住我喜欢喝美式咖啡", ["user", "assistant", "tool", "assistant"]),
    ],
)
def test_a_worker_whose_event_is_taken_back_mid_turn_stores_and_sends_nothing(
    lark, monkeypatch, text, roles
):
    """The sweep takes an event back while its first worker is still answering (a reclaim time
    shorter than the turn): the sweep's turn answers, and the first worker, at its next write,
    finds its claim gone and stops: one stored answer, one reply sent."""
    import ethan_llm
    from channels_app.lark.handling import lark_event_handle, lark_events_reclaim

    real = ethan_llm.stream
    sweeps = []

    def stream(**kwargs):
        if not sweeps:  # the first worker's model is thinking: the sweep runs now
            sweeps.append("running")  # (its own turn comes through here too)
            sweeps[0] = lark_events_reclaim(older_than_seconds=0)
        yield from real(**kwargs)

    monkeypatch.setattr(ethan_llm, "stream", stream)
    event = _waiting("ev-slow", text)
    assert lark_event_handle(event_pk=event.pk) == "taken over"
    assert sweeps == [["done"]]
    sent = [r for r in lark.requests if r.path == "/open-apis/im/v1/messages/om_ev-slow/reply"]
    assert len(sent) == 1 and len(lark.replies) == 1
    session = ChatSession.objects.get()
    assert list(session.messages.order_by("seq").values_list("role", flat=True)) == roles
    reply = session.messages.order_by("seq").last().content
    assert json.loads(lark.replies[0]["content"]) == {"text": reply}
    event.refresh_from_db()
    assert (event.status, event.question.content) == ("done", text)
    assert ChatSession.objects.values_list("turn_claim", flat=True).get() == ""


def test_a_worker_whose_event_is_taken_back_before_it_sends_stays_silent(lark, monkeypatch):
    """Taken back after the first worker stored its reply, right before it sent it: the sweep
    sends the stored reply (with the event's uuid), the first worker sends nothing."""
    from channels_app.lark import handling

    real_holds = handling._holds
    sweeps = []

    def holds(event, token, **turn):
        if not turn and not sweeps:  # the first worker's fence before its send
            sweeps.append(token)
            sweeps.append(handling.lark_events_reclaim(older_than_seconds=0))
        return real_holds(event, token, **turn)

    monkeypatch.setattr(handling, "_holds", holds)
    event = _waiting("ev-late", "hello there")
    assert handling.lark_event_handle(event_pk=event.pk) == "taken over"
    assert sweeps[1] == ["done"]
    sent = [r for r in lark.requests if r.path == "/open-apis/im/v1/messages/om_ev-late/reply"]
    assert len(sent) == 1
    session = ChatSession.objects.get()
    assert list(session.messages.values_list("role", flat=True)) == ["user", "assistant"]
    reply = session.messages.get(role="assistant").content
    assert json.loads(lark.replies[0]["content"]) == {"text": reply}


# --- the dispatcher: the webhook only stores and wakes it -------------------------------------


def _waiting(event_id: str, text: str, *, seconds_ago: float = 0, queued_seconds_ago=None):
    from datetime import timedelta

    now = timezone.now()
    return LarkEvent.objects.create(
        event_id=event_id,
        event_type="im.message.receive_v1",
        message_id=f"om_{event_id}",
        payload=message_event(event_id, text),
        received_at=now - timedelta(seconds=seconds_ago),
        queued_at=None
        if queued_seconds_ago is None
        else now - timedelta(seconds=queued_seconds_ago),
    )


def test_a_burst_of_events_wakes_the_dispatcher_once_and_each_gets_its_task(
    client, lark, settings, monkeypatch
):
    """A broker process with a shared cache: the webhook publishes one dispatch for the burst,
    and the dispatch queues one handling task per event."""
    from django.core.cache import cache

    from ethan_shared import queue

    settings.ETHAN_EMBEDDED = False
    settings.ETHAN_CACHE_SHARED = True
    cache.clear()
    published: list[tuple] = []
    monkeypatch.setattr(queue, "publish", lambda task, *args: published.append((task.name, args)))
    for n in range(3):
        assert deliver(client, message_event(f"ev-burst-{n}", f"消息 {n}")).status_code == 200
    assert published == [("channels.lark_dispatch", ())]
    assert lark.replies == []  # stored, not answered: that is the workers' part

    from channels_app.lark.tasks import lark_events_dispatch

    assert lark_events_dispatch() == 3
    pks = sorted(LarkEvent.objects.values_list("pk", flat=True))
    assert published[1:] == [("channels.lark_event", (pk,)) for pk in pks]
    assert lark_events_dispatch() == 0  # each is queued once
    # The run cleared its wake-up: the next event publishes a dispatch again.
    deliver(client, message_event("ev-after", "later"))
    assert published[-1] == ("channels.lark_dispatch", ())
    cache.clear()


def test_the_sweep_queues_events_whose_wake_up_or_task_was_lost(lark, settings):
    from channels_app.lark.tasks import lark_events_requeue

    settings.ETHAN_LARK_RECLAIM_SECONDS = 600
    fresh = _waiting("ev-fresh", "just arrived")  # its dispatch may be on its way
    no_wake = _waiting("ev-nowake", "你好", seconds_ago=120)
    lost_task = _waiting("ev-lost", "hello", seconds_ago=900, queued_seconds_ago=900)
    recent = _waiting("ev-queued", "queued", seconds_ago=60, queued_seconds_ago=60)
    ancient = _waiting("ev-old", "last week", seconds_ago=8 * 86400, queued_seconds_ago=0)
    # Embedded mode: the tasks the sweep queues run in this process afterwards.
    from ethan_shared.queue import run_deferred

    assert lark_events_requeue() == 3  # the two left behind, and the fresh one with them
    run_deferred()
    answered = {reply["uuid"] for reply in lark.replies}
    assert answered == {"ev-fresh", "ev-nowake", "ev-lost"}
    for event, status in (
        (fresh, "done"),
        (no_wake, "done"),
        (lost_task, "done"),
        (recent, "received"),  # its task is still due
        (ancient, "failed"),  # given up, not answered a week late
    ):
        event.refresh_from_db()
        assert event.status == status, event.event_id
    assert lark_events_requeue() == 0
