"""One turn at a time per session: the claim on the session row (services.session_turn_claim)."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from sessions_app import services
from sessions_app.models import ChatSession, Message
from sessions_app.services import SessionBusy

pytestmark = pytest.mark.django_db


def claim(session: ChatSession, wait: float = 0, stale: float = 900) -> str:
    return services.session_turn_claim(session=session, wait_seconds=wait, stale_seconds=stale)


def row(session: ChatSession) -> tuple[str, object]:
    return ChatSession.objects.values_list("turn_claim", "turn_claimed_at").get(pk=session.pk)


def test_claim_then_release_frees_the_session(owner, make_session):
    session = make_session(owner, "hi", "hello")
    token = claim(session)
    held, claimed_at = row(session)
    assert held == token and len(token) == 32 and claimed_at is not None
    assert services.session_turn_release(session=session, token=token) is True
    assert row(session) == ("", None)
    assert claim(session) != token  # free again, with a fresh token


def test_a_second_claim_waits_then_is_refused(owner, make_session):
    session = make_session(owner, "hi", "hello")
    token = claim(session)
    started = time.monotonic()
    with pytest.raises(SessionBusy) as refused:
        claim(ChatSession.objects.get(pk=session.pk), wait=0.3)
    assert time.monotonic() - started >= 0.3  # it waited before giving up
    assert refused.value.session_id == session.pk
    assert "still answering" in str(refused.value)
    assert row(session)[0] == token  # the first claim is untouched


def test_a_stale_claim_is_taken_over(owner, make_session):
    session = make_session(owner, "hi", "hello")
    dead = claim(session)  # a process that died mid-turn
    ChatSession.objects.filter(pk=session.pk).update(
        turn_claimed_at=timezone.now() - timedelta(seconds=901)
    )
    token = claim(ChatSession.objects.get(pk=session.pk), stale=900)
    assert token != dead and row(session)[0] == token
    # The dead turn's late release gives back nothing of the new one.
    assert services.session_turn_release(session=session, token=dead) is False
    assert row(session)[0] == token


def test_release_with_a_wrong_token_does_nothing(owner, make_session):
    session = make_session(owner, "hi", "hello")
    token = claim(session)
    assert services.session_turn_release(session=session, token="not-the-token") is False
    assert row(session)[0] == token
    with pytest.raises(SessionBusy):
        claim(ChatSession.objects.get(pk=session.pk))


def test_claim_and_release_change_no_other_field(owner, make_session):
    session = make_session(owner, "first title", "hello")
    before = ChatSession.objects.values().get(pk=session.pk)
    token = claim(session)
    # message_append's own update of the row still works while the claim is held.
    services.message_append(session=session, role=Message.Role.USER, content="more")
    services.session_turn_release(session=session, token=token)
    after = ChatSession.objects.values().get(pk=session.pk)
    assert (after["last_seq"], after["round_count"]) == (3, 2)
    assert after["title"] == before["title"] and after["model"] == before["model"]
    assert after["updated_at"] >= before["updated_at"]
    assert (after["turn_claim"], after["turn_claimed_at"]) == ("", None)


def test_claiming_a_deleted_session_says_so_at_once(owner, make_session):
    session = make_session(owner, "hi", "hello")
    ChatSession.objects.filter(pk=session.pk).delete()
    with pytest.raises(ChatSession.DoesNotExist):
        claim(session, wait=5)
