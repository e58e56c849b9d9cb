"""A turn on a session another turn is still answering: refused with nothing written, and a
clear answer on every channel (API 409, a Lark reply, one console line)."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

import llm
from agent_app.lark.handling import SESSION_BUSY
from agent_app.turn import TurnFailed, turn_run
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
    real = llm.stream

    def stream(**kwargs):
        seen.append(claim_of(session))  # while the model thinks, the session is claimed
        yield from real(**kwargs)

    monkeypatch.setattr(llm, "stream", stream)
    result = turn_run(owner=owner, session=session, text="more", model="offline")
    assert result.reply == "(offline mode) Noted: more"
    assert seen and all(len(token) == 32 for token in seen)
    assert claim_of(session) == ""


def test_a_failed_model_gives_the_session_back(owner, make_session, llm_config, monkeypatch):
    session = make_session(owner, "hi", "hello")

    def down(**kwargs):
        raise llm.ModelUnavailable("overloaded")
        yield  # a generator, as llm.stream is

    monkeypatch.setattr(llm, "stream", down)
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


def test_a_new_session_needs_no_claim(owner, llm_config, no_wait):
    result = turn_run(owner=owner, session=None, text="hello there", model="offline")
    assert claim_of(result.session) == ""


def test_api_answers_409_and_stores_nothing(api_for, owner, make_session, llm_config, no_wait):
    session = make_session(owner, "hi", "hello", channel=ChatSession.Channel.API)
    hold(session)
    response = api_for(owner).post(
        "/api/chat", {"message": "more", "session_id": session.pk}, format="json"
    )
    assert response.status_code == 409
    assert response.json() == {
        "detail": "another reply on this session is still being written; nothing was stored: retry",
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
        "Error: another reply on this session is still being written; your message was not "
        "saved: send it again"
    ) in out.getvalue().splitlines()
    assert session.messages.count() == 2


@pytest.mark.django_db(transaction=True)
def test_lark_asks_to_send_again(client, lark, no_wait):
    deliver(client, message_event("ev1", "第一句"))
    session = ChatSession.objects.get()
    hold(session)
    deliver(client, message_event("ev2", "第二句"))
    assert json.loads(lark.replies[-1]["content"]) == {"text": SESSION_BUSY}
    assert session.messages.filter(role="user").count() == 1
    assert ChatSession.objects.count() == 1  # the chat keeps its session
