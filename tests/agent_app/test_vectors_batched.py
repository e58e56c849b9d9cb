"""The vectors of turns that ended together, written together (agent_app.vectors.TurnsWaiting,
sessions_app.services.messages_embed_sessions): one embedding call for all their texts, the
same vectors as one session at a time, and no session left behind by a thread that found
another one writing."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import embedder
from agent_app import vectors
from agent_app.vectors import TurnsWaiting, Written, vectors_write_sessions
from embedder import embedder_name
from sessions_app import meaning, services
from sessions_app.models import Message

pytestmark = pytest.mark.django_db


def _vectors(session) -> dict[str, np.ndarray]:
    rows = Message.objects.filter(session=session).exclude(embedding=None).order_by("seq")
    return {row.content: embedder.from_blob(row.embedding, 512) for row in rows}


def test_sessions_of_two_owners_are_embedded_in_one_call_with_the_vectors_of_one_at_a_time(
    embedder_on, make_session, owner, other_owner, monkeypatch
):
    mine = make_session(owner, "I keep bees on my balcony.", "Lovely!")
    theirs = make_session(other_owner, "My sister lives in Porto.", "Noted.", "She has a cat.")
    alone = make_session(owner, "I keep bees on my balcony.", "Lovely!")
    services.messages_embed(session_id=alone.pk)  # the yardstick: one session, one call
    calls = []
    vectors_of = meaning.vectors_of
    monkeypatch.setattr(
        meaning, "vectors_of", lambda texts: calls.append(texts) or vectors_of(texts)
    )

    written = vectors_write_sessions({mine.pk: owner.pk, theirs.pk: other_owner.pk})

    assert written == Written(messages=5)
    assert len(calls) == 1 and len(calls[0]) == 5
    assert set(_vectors(theirs)) == {"My sister lives in Porto.", "Noted.", "She has a cat."}
    for text, vector in _vectors(alone).items():
        np.testing.assert_allclose(_vectors(mine)[text], vector, atol=1e-3)
    assert not vectors_write_sessions({mine.pk: owner.pk, theirs.pk: other_owner.pk}).messages


def test_a_pass_that_stops_at_its_limit_gives_the_last_message_its_next_neighbour(
    embedder_on, make_session, owner
):
    """The last message a pass writes carries the one after it, the first of the next pass."""
    session = make_session(owner, "I keep bees.", "Nice.", "And two hens.", "Great.")
    assert services.messages_embed(session_id=session.pk, limit=2) == 2
    name, own = meaning.vectors_of(["I keep bees.", "Nice.", "And two hens.", "Great."])
    stored = _vectors(session)["Nice."]
    right = embedder.cosine(stored, meaning.combined(own[1], [own[0], own[2]]))
    wrong = embedder.cosine(stored, meaning.combined(own[1], [own[0], own[3]]))
    assert right > 0.999 and wrong < right - 0.001, (right, wrong)
    assert name == embedder_name()


def test_a_session_added_while_another_thread_writes_is_written_by_that_thread(monkeypatch):
    """The thread that finds the writer busy leaves its session and returns at once; the
    writer looks again after its batch and writes it: nothing waits for the next turn."""
    batches = []
    writing = threading.Event()
    go_on = threading.Event()

    def write(sessions):
        batches.append(dict(sessions))
        if len(batches) == 1:
            writing.set()
            assert go_on.wait(10)
        return Written(messages=len(sessions))

    monkeypatch.setattr(vectors, "vectors_write_sessions", write)
    waiting = TurnsWaiting()
    first = {}
    writer = threading.Thread(
        target=lambda: first.update(w=waiting.write(owner_id=1, session_id="a"))
    )
    writer.start()
    try:
        assert writing.wait(10)
        assert waiting.write(owner_id=2, session_id="b") == Written()
        assert waiting.write(owner_id=2, session_id="c") == Written()
    finally:
        go_on.set()
        writer.join(10)
    assert batches == [{"a": 1}, {"b": 2, "c": 2}]
    assert first["w"] == Written(messages=3)


def test_a_failed_batch_leaves_no_session_behind_and_is_raised_after(monkeypatch):
    batches = []
    writing = threading.Event()
    go_on = threading.Event()

    def write(sessions):
        batches.append(dict(sessions))
        if len(batches) == 1:
            writing.set()
            assert go_on.wait(10)
            raise RuntimeError("the embedder failed")
        return Written(messages=len(sessions))

    monkeypatch.setattr(vectors, "vectors_write_sessions", write)
    waiting = TurnsWaiting()
    raised = []

    def first():
        try:
            waiting.write(owner_id=1, session_id="a")
        except RuntimeError as exc:
            raised.append(exc)

    writer = threading.Thread(target=first)
    writer.start()
    try:
        assert writing.wait(10)
        waiting.write(owner_id=2, session_id="b")
    finally:
        go_on.set()
        writer.join(10)
    assert batches == [{"a": 1}, {"b": 2}]
    assert [str(exc) for exc in raised] == ["the embedder failed"]


def test_a_batch_takes_at_most_batch_sessions(monkeypatch):
    batches = []
    monkeypatch.setattr(vectors, "BATCH_SESSIONS", 2)
    monkeypatch.setattr(
        vectors, "vectors_write_sessions", lambda s: batches.append(list(s)) or Written()
    )
    waiting = TurnsWaiting()
    waiting._waiting.update({"a": 1, "b": 1, "c": 1, "d": 1})  # four left by busy threads
    waiting.write(owner_id=1, session_id="e")
    assert batches == [["a", "b"], ["c", "d"], ["e"]]
