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


# --- a turn's first and last appends carry the claim (message_append) -------------------------


def append(session: ChatSession, role: str, content: str, **turn) -> Message:
    return services.message_append(session=session, role=role, content=content, **turn)


def test_the_question_claims_and_the_reply_releases_in_their_own_statements(
    owner, make_session, django_assert_num_queries
):
    session = make_session(owner, "hi", "hello")
    # The seq, the claim and the previous turn in one UPDATE … RETURNING; the previous turn's
    # tokens; the INSERT.
    with django_assert_num_queries(3):
        question = append(session, "user", "plan the launch", claim_stale_seconds=900)
    token = session.turn_claim
    assert len(token) == 32 and row(session)[0] == token
    with pytest.raises(SessionBusy):  # the claim is a real one
        claim(ChatSession.objects.get(pk=session.pk))
    with django_assert_num_queries(3):
        reply = append(session, "assistant", "first the date", release_token=token)
    assert row(session) == ("", None) and session.turn_claim == ""
    assert (question.seq, reply.seq) == (3, 4)
    assert ChatSession.objects.values_list("last_seq", "round_count").get(pk=session.pk) == (4, 2)
    # The neighbours' words, as they were before claims rode on the append.
    question.refresh_from_db()
    assert "date" in question.search_tokens and "hello" in question.search_tokens
    assert "launch" in reply.search_tokens


def test_a_question_on_a_claimed_session_is_refused_and_writes_nothing(owner, make_session):
    session = make_session(owner, "hi", "hello")
    held = claim(session)
    before = ChatSession.objects.values().get(pk=session.pk)
    with pytest.raises(SessionBusy):
        append(ChatSession.objects.get(pk=session.pk), "user", "again?", claim_stale_seconds=900)
    assert ChatSession.objects.values().get(pk=session.pk) == before
    assert session.messages.count() == 2 and row(session)[0] == held


def test_a_question_takes_over_a_stale_claim(owner, make_session):
    session = make_session(owner, "hi", "hello")
    dead = claim(session)
    ChatSession.objects.filter(pk=session.pk).update(
        turn_claimed_at=timezone.now() - timedelta(seconds=901)
    )
    fresh = ChatSession.objects.get(pk=session.pk)
    append(fresh, "user", "anyone there?", claim_stale_seconds=900)
    assert fresh.turn_claim not in ("", dead) and row(session)[0] == fresh.turn_claim


def test_a_reply_whose_claim_was_taken_over_leaves_the_new_one(owner, make_session, caplog):
    session = make_session(owner, "hi", "hello")
    append(session, "user", "slow one", claim_stale_seconds=900)
    mine = session.turn_claim
    ChatSession.objects.filter(pk=session.pk).update(turn_claim="someone-else")
    append(session, "assistant", "late answer", release_token=mine)
    assert row(session)[0] == "someone-else"
    assert "no longer held" in caplog.text


def test_a_question_on_a_deleted_session_says_so(owner, make_session):
    session = make_session(owner, "hi", "hello")
    ChatSession.objects.filter(pk=session.pk).delete()
    with pytest.raises(ChatSession.DoesNotExist):
        append(session, "user", "hello?", claim_stale_seconds=900)


def test_the_previous_turn_is_found_past_tool_traffic(owner, make_session):
    session = make_session(owner, "book a table", "")
    Message.objects.filter(session=session, role="assistant").update(
        tool_calls=[{"id": "c1", "name": "memory_search", "arguments": {}}]
    )
    append(session, "tool", "no results", tool_call_id="c1")
    reply = append(session, "assistant", "which restaurant")
    assert "book" in reply.search_tokens.split("|")[1]  # the question's words, past the tools


@pytest.mark.django_db(transaction=True)
def test_a_reply_that_fails_to_store_leaves_the_claim_for_the_turn_to_give_back(
    owner, make_session, monkeypatch
):
    from django.db import DatabaseError

    session = make_session(owner, "hi", "hello")
    append(session, "user", "plan the launch", claim_stale_seconds=900)
    token = session.turn_claim

    def disk_full(*args, **kwargs):
        raise DatabaseError("disk full")

    monkeypatch.setattr(services, "_row_insert", disk_full)  # the message's INSERT
    with pytest.raises(DatabaseError):
        append(session, "assistant", "first the date", release_token=token)
    monkeypatch.undo()
    # Rolled back with the reply: the claim is held, and this turn still knows it holds it.
    assert row(session)[0] == token and session.turn_claim == token
    assert session.messages.count() == 3
    assert services.session_turn_release(session=session, token=token) is True
