"""A turn on a session another turn is still answering: refused with nothing written, and a
clear answer on every channel (API 409, a Lark reply, one console line)."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

import ethan_llm
from channels_app.lark.handling import lark_says
from channels_app.turns import TurnFailed, refusal, turn_run
from sessions_app.models import ChatSession
from sessions_app.services import SessionBusy
from tests.lark_helpers import deliver, message_event

pytestmark = pytest.mark.django_db


@pytest.fixture
def no_wait(settings):
    settings.ETHAN_TURN_WAIT_SECONDS = 0


def hold(session: ChatSession, token: str = "another-turn") -> None:
    """Another process is mid-turn on the session."""
    ChatSession.objects.filter(pk=session.pk).update(
        turn_claim=token, turn_claimed_at=timezone.now()
    )


def claim_of(session: ChatSession) -> str:
    return ChatSession.objects.values_list("turn_claim", flat=True).get(pk=session.pk)


def test_a_turn_holds_the_session_and_gives_it_back(owner, make_session, llm_config, monkeypatch):
    session = make_session(owner, "hi", "hello")
    seen = []
    real = ethan_llm.stream

    def stream(**kwargs):
        seen.append(claim_of(session))  # while the model thinks, the session is claimed
        yield from real(**kwargs)

    monkeypatch.setattr(ethan_llm, "stream", stream)
    result = turn_run(owner=owner, session=session, text="more", model="offline")
    assert result.reply == "(offline mode) Noted: more"
    assert seen and all(len(token) == 32 for token in seen)
    assert claim_of(session) == ""


def test_a_failed_model_gives_the_session_back(owner, make_session, llm_config, monkeypatch):
    session = make_session(owner, "hi", "hello")

    def down(**kwargs):
        raise ethan_llm.ModelUnavailable("overloaded")
        yield  # a generator, as ethan_llm.stream is

    monkeypatch.setattr(ethan_llm, "stream", down)
    with pytest.raises(TurnFailed):
        turn_run(owner=owner, session=session, text="more", model="offline")
    assert claim_of(session) == ""
    assert session.messages.count() == 3  # the message is kept for the retry


def test_a_busy_session_refuses_the_turn_and_writes_nothing(
    owner, make_session, llm_config, no_wait
):
    session = make_session(owner, "hi", "hello")
    hold(session)
    before = ChatSession.objects.values().get(pk=session.pk)
    with pytest.raises(SessionBusy):
        turn_run(owner=owner, session=session, text="more", model="offline")
    assert session.messages.count() == 2
    assert ChatSession.objects.values().get(pk=session.pk) == before  # claim still theirs


def test_a_new_sessions_first_turn_holds_it_against_a_second_turn(
    owner, llm_config, monkeypatch, no_wait
):
    """The new id is seen (GET /api/sessions lists it) while its first turn is answered: a
    second turn sent to it is refused with nothing written, not interleaved."""
    real = ethan_llm.stream
    seen = []

    def stream(**kwargs):
        if not seen:
            [new] = ChatSession.objects.all()
            seen.append(claim_of(new))
            with pytest.raises(SessionBusy):
                turn_run(owner=owner, session=new, text="second", model="offline")
        yield from real(**kwargs)

    monkeypatch.setattr(ethan_llm, "stream", stream)
    result = turn_run(owner=owner, session=None, text="first", model="offline")
    assert len(seen[0]) == 32  # claimed from the moment the session row exists
    assert list(result.session.messages.order_by("seq").values_list("role", "content")) == [
        ("user", "first"),
        ("assistant", "(offline mode) Noted: first"),
    ]
    assert claim_of(result.session) == ""  # given back with the reply
    again = turn_run(owner=owner, session=result.session, text="second", model="offline")
    assert again.reply == "(offline mode) Noted: second"


def test_a_new_session_with_a_history_is_claimed_by_its_insert(owner, llm_config, no_wait):
    from agent_app.turn import turn_plan, turn_start

    plan = turn_plan(
        owner=owner,
        session=None,
        text="and now?",
        model="offline",
        history=(("user", "earlier"), ("assistant", "noted")),
    )
    stream = turn_start(plan)
    assert len(stream.token) == 32 and claim_of(stream.session) == stream.token
    with pytest.raises(SessionBusy):
        turn_run(
            owner=owner,
            session=ChatSession.objects.get(pk=stream.session.pk),
            text="meanwhile",
            model="offline",
        )
    stream.finish()
    assert claim_of(stream.session) == ""
    assert list(stream.session.messages.values_list("role", flat=True)) == [
        "user",
        "assistant",
        "user",
        "assistant",
    ]


def test_api_answers_409_and_stores_nothing(api_for, owner, make_session, llm_config, no_wait):
    session = make_session(owner, "hi", "hello", channel=ChatSession.Channel.API)
    hold(session)
    response = api_for(owner).post(
        "/api/chat", {"message": "more", "session_id": session.pk}, format="json"
    )
    assert response.status_code == 409
    assert response.json() == {
        "detail": "another reply in this conversation is still being written; nothing was stored: "
        "retry",
        "session_id": session.pk,
        "retryable": True,
    }
    assert session.messages.count() == 2
    ChatSession.objects.filter(pk=session.pk).update(turn_claim="", turn_claimed_at=None)
    again = api_for(owner).post(
        "/api/chat", {"message": "more", "session_id": session.pk}, format="json"
    )
    assert again.status_code == 200 and session.messages.count() == 4


def test_console_says_so_in_one_line(owner, make_session, llm_config, no_wait):
    session = make_session(owner, "first topic", "first answer")
    hold(session)
    out = StringIO()
    call_command(
        "ethan_chat", "--user", "ada", "-r", session.pk, stdout=out, stdin=StringIO("more\n")
    )
    assert (
        "Error: another reply in this conversation is still being written; nothing was stored: "
        "retry"
    ) in out.getvalue().splitlines()
    assert session.messages.count() == 2


@pytest.mark.django_db(transaction=True)
def test_lark_a_second_message_while_a_new_chats_first_is_answered(
    client, lark, no_wait, monkeypatch
):
    """A person's second message a second after their first, in a new chat: the first turn
    holds the chat's new session, so the second is refused (the person is asked to send it
    again) and the session stays one question, one reply."""
    real = ethan_llm.stream
    seconds = []

    def stream(**kwargs):
        if not seconds:
            seconds.append(deliver(client, message_event("ev-second", "第二句")))
        yield from real(**kwargs)

    monkeypatch.setattr(ethan_llm, "stream", stream)
    deliver(client, message_event("ev-first", "第一句"))
    replies = {reply["uuid"]: json.loads(reply["content"])["text"] for reply in lark.replies}
    assert replies["ev-second"] == lark_says(refusal(SessionBusy(session_id="any")))
    session = ChatSession.objects.get()
    assert list(session.messages.order_by("seq").values_list("role", "content")) == [
        ("user", "第一句"),
        ("assistant", replies["ev-first"]),
    ]
    assert claim_of(session) == ""


@pytest.mark.django_db(transaction=True)
def test_lark_asks_to_send_again(client, lark, no_wait):
    deliver(client, message_event("ev1", "第一句"))
    session = ChatSession.objects.get()
    hold(session)
    deliver(client, message_event("ev2", "第二句"))
    said = lark_says(refusal(SessionBusy(session_id=session.pk)))
    assert said.startswith("我还在回复你的上一条消息") and "nothing was stored" in said
    assert json.loads(lark.replies[-1]["content"]) == {"text": said}
    assert session.messages.filter(role="user").count() == 1
    assert ChatSession.objects.count() == 1  # the chat keeps its session
