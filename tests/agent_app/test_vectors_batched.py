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


class _HeldWriter:
    """A TurnsWaiting whose first batch (session "a", written in a thread of its own) is held
    until `release`, and fails with `error` if one is given; the batches it was handed."""

    def __init__(self, monkeypatch, error: Exception | None = None):
        self.batches = []
        self.writing = threading.Event()
        self.go_on = threading.Event()
        self.error = error
        self.first = {}
        monkeypatch.setattr(vectors, "vectors_write_sessions", self._write)
        self.waiting = TurnsWaiting()
        self.thread = threading.Thread(target=self._first)
        self.thread.start()
        assert self.writing.wait(10)

    def _write(self, sessions):
        self.batches.append(dict(sessions))
        if len(self.batches) == 1:
            self.writing.set()
            assert self.go_on.wait(10)
            if self.error is not None:
                raise self.error
        return Written(messages=len(sessions))

    def _first(self):
        try:
            self.first["written"] = self.waiting.write(owner_id=1, session_id="a")
        except Exception as exc:
            self.first["raised"] = exc

    def release(self):
        self.go_on.set()
        self.thread.join(10)


def test_a_session_added_while_another_thread_writes_is_written_by_that_thread(monkeypatch):
    """The thread that finds the writer busy leaves its session and returns at once; the
    writer looks again after its batch and writes it: nothing waits for the next turn."""
    held = _HeldWriter(monkeypatch)
    try:
        assert held.waiting.write(owner_id=2, session_id="b") == Written()
        assert held.waiting.write(owner_id=2, session_id="c") == Written()
    finally:
        held.release()
    assert held.batches == [{"a": 1}, {"b": 2, "c": 2}]
    assert held.first == {"written": Written(messages=3)}


def test_a_failed_batch_leaves_no_session_behind_and_is_raised_after(monkeypatch):
    held = _HeldWriter(monkeypatch, error=RuntimeError("the embedder failed"))
    try:
        held.waiting.write(owner_id=2, session_id="b")
    finally:
        held.release()
    assert held.batches == [{"a": 1}, {"b": 2}]
    assert str(held.first["raised"]) == "the embedder failed"


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


def test_a_serving_process_lingers_so_that_turns_ending_meanwhile_join_the_batch(monkeypatch):
    batches = []
    monkeypatch.setattr(
        vectors, "vectors_write_sessions", lambda s: batches.append(list(s)) or Written()
    )
    waiting = TurnsWaiting()
    waiting.linger = 0.5
    writer = threading.Thread(target=lambda: waiting.write(owner_id=1, session_id="a"))
    writer.start()
    try:
        while not waiting._writing.locked():
            threading.Event().wait(0.01)
        waiting.write(owner_id=2, session_id="b")  # ends while the writer lingers
    finally:
        writer.join(10)
    assert batches == [["a", "b"]]


def test_serving_sets_the_linger_and_gives_it_back(settings):
    from ethan_site import serving

    settings.ETHAN_EMBEDDED = True  # the process writes its turns' vectors itself
    settings.ETHAN_VECTORS_LINGER_MS = 250
    serving.tuning_apply()
    try:
        assert vectors.TURNS_WAITING.linger == 0.25
    finally:
        serving.tuning_undo()
    assert vectors.TURNS_WAITING.linger == 0.0


def test_the_catch_up_writes_the_sessions_left_behind_in_one_call(
    embedder_on, make_session, owner, other_owner, monkeypatch
):
    """What failed tasks left in recent sessions is written in one embedding call for all of
    them, not one call a session."""
    left = [
        make_session(owner, "I keep bees.", "Nice."),
        make_session(other_owner, "My sister lives in Porto.", "Noted."),
        make_session(owner, "I run on Sundays.", "Good."),
    ]
    calls = []
    vectors_of = meaning.vectors_of
    monkeypatch.setattr(
        meaning, "vectors_of", lambda texts: calls.append(texts) or vectors_of(texts)
    )

    assert vectors.vectors_catch_up() == 6
    assert len(calls) == 1 and len(calls[0]) == 6
    for session in left:
        assert len(_vectors(session)) == 2
    assert vectors.vectors_catch_up() == 0


# --- under a broker: the turns a serving process finished, sent to a worker as one task -------


@pytest.fixture
def sent(monkeypatch):
    """What TurnsSent publishes, recorded instead: [(task name, its argument)]."""
    published: list[tuple[str, list]] = []
    monkeypatch.setattr(vectors, "publish", lambda task, arg: published.append((task.name, arg)))
    return published


def _until(condition, seconds: float = 10.0) -> bool:
    waited = threading.Event()
    for _ in range(int(seconds / 0.01)):
        if condition():
            return True
        waited.wait(0.01)
    return condition()


def test_turns_ending_within_the_linger_are_sent_as_one_task(sent):
    turns = vectors.TurnsSent()
    turns.linger = 0.2
    turns.add(owner_id=1, session_id="a")
    turns.add(owner_id=2, session_id="b")
    turns.add(owner_id=1, session_id="a")  # a second turn of a session: the session once
    assert sent == []  # not before the linger
    assert _until(lambda: sent)
    assert sent == [("memory.vectors_write_turns", [["a", 1], ["b", 2]])]
    turns.add(owner_id=3, session_id="c")  # after a batch went, the next waits its own linger
    assert _until(lambda: len(sent) == 2)
    assert sent[1] == ("memory.vectors_write_turns", [["c", 3]])


def test_a_full_batch_is_sent_at_once_and_what_waits_is_sent_by_a_flush(sent):
    turns = vectors.TurnsSent()
    turns.linger = 60.0
    for n in range(vectors.BATCH_SESSIONS):
        turns.add(owner_id=n, session_id=f"s{n}")
    assert len(sent) == 1 and len(sent[0][1]) == vectors.BATCH_SESSIONS
    turns.add(owner_id=1, session_id="late")
    timer = turns._timer
    assert timer is not None and timer.is_alive()
    turns.flush()  # serving stops: sent now, and no timer thread is left behind
    timer.join(5)
    assert not timer.is_alive()
    assert sent[1] == ("memory.vectors_write_turns", [["late", 1]])


def test_without_a_linger_each_turn_is_queued_on_its_own(
    settings, sent, monkeypatch, embedder_on, django_capture_on_commit_callbacks
):
    """A process that does not serve (a worker's consolidation, the console) queues a turn's
    vectors as before; a serving one under a broker hands them to TurnsSent, after the commit."""
    queued = []
    monkeypatch.setattr(vectors, "enqueue", lambda task, *args: queued.append((task.name, args)))
    settings.ETHAN_EMBEDDED = False
    vectors.vectors_after_turn(owner_id=1, session_id="a")
    assert queued == [("memory.vectors_write", (1, "a"))]
    monkeypatch.setattr(vectors.TURNS_SENT, "linger", 60.0)
    try:
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            vectors.vectors_after_turn(owner_id=2, session_id="b")
        assert vectors.TURNS_SENT._waiting == {}  # nothing before the commit
        for callback in callbacks:
            callback()
        assert vectors.TURNS_SENT._waiting == {"b": 2}
    finally:
        vectors.TURNS_SENT.flush()
    assert queued == [("memory.vectors_write", (1, "a"))]
    assert sent == [("memory.vectors_write_turns", [["b", 2]])]


def test_serving_under_a_broker_lingers_before_it_sends_and_sends_what_waits_at_its_end(
    settings, sent
):
    from ethan_site import serving

    settings.ETHAN_EMBEDDED = False
    settings.ETHAN_VECTORS_LINGER_MS = 60_000
    serving.tuning_apply()
    try:
        assert vectors.TURNS_SENT.linger == 60.0
        assert vectors.TURNS_WAITING.linger == 0.0  # the worker writes, not this process
        vectors.TURNS_SENT.add(owner_id=1, session_id="a")
        assert sent == []
    finally:
        serving.tuning_undo()
    assert vectors.TURNS_SENT.linger == 0.0
    assert sent == [("memory.vectors_write_turns", [["a", 1]])]


def test_the_workers_task_writes_the_turns_sessions_in_one_call(
    embedder_on, make_session, owner, other_owner, monkeypatch
):
    mine = make_session(owner, "I keep bees on my balcony.", "Lovely!")
    theirs = make_session(other_owner, "My sister lives in Porto.", "Noted.")
    calls = []
    vectors_of = meaning.vectors_of
    monkeypatch.setattr(
        meaning, "vectors_of", lambda texts: calls.append(texts) or vectors_of(texts)
    )
    # As the worker gets it: JSON's lists, not tuples.
    written = vectors.vectors_write_turns_task.run(
        [[mine.pk, owner.pk], [theirs.pk, other_owner.pk]]
    )
    assert written == {"messages": 4, "facts": 0, "episodes": 0}
    assert len(calls) == 1
    assert len(_vectors(mine)) == 2 and len(_vectors(theirs)) == 2


def _texts_computed(monkeypatch) -> list[str]:
    """The texts the embedder's model computes from now on (not those it remembered)."""
    computed: list[str] = []
    real = embedder.client._computed

    def counted(choice, texts, kind):
        computed.extend(texts)
        return real(choice, texts, kind)

    monkeypatch.setattr(embedder.client, "_computed", counted)
    return computed


def test_a_conversation_s_next_turn_embeds_its_two_new_messages_only(
    embedder_on, make_session, owner, monkeypatch
):
    """The two messages before the turn are written again (their vectors now carry the turn's
    text), from the vectors remembered when they were embedded; the stored vectors are the
    ones a process that remembered nothing writes."""
    session = make_session(owner, "I keep bees.", "Nice.", "And two hens.", "Great.")
    computed = _texts_computed(monkeypatch)
    assert services.messages_embed(session_id=session.pk) == 4
    services.message_append(session=session, role=Message.Role.USER, content="They lay eggs.")
    services.message_append(session=session, role=Message.Role.ASSISTANT, content="Lucky you!")

    assert services.messages_embed(session_id=session.pk) == 2

    first_pass = ["I keep bees.", "Nice.", "And two hens.", "Great."]
    assert computed == [*first_pass, "They lay eggs.", "Lucky you!"]
    remembered = _vectors(session)
    embedder.forget()  # a new process: every text computed again
    Message.objects.filter(session=session).update(embedding=None, embedding_model=None)
    assert services.messages_embed(session_id=session.pk) == 6
    for text, vector in _vectors(session).items():
        np.testing.assert_allclose(remembered[text], vector, atol=1e-3)


def test_a_pass_reads_any_number_of_sessions_in_the_statements_of_one(
    embedder_on, make_session, owner, other_owner
):
    """Reading what is pending and writing the vectors take the same statements for a batch
    of turns as for one turn (a statement costs the process more to build than the database
    to run): before, two reads a session and a write growing with the rows."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def statements(sessions) -> int:
        with CaptureQueriesContext(connection) as captured:
            written = services.messages_embed_sessions(session_ids=[s.pk for s in sessions])
        assert sum(written.values()) == 2 * len(sessions)
        return len(captured.captured_queries)

    one = make_session(owner, "I keep bees.", "Nice.")
    many = [
        make_session(owner if n % 2 else other_owner, f"I live in town {n}.", "Noted.")
        for n in range(6)
    ]
    assert statements(many) == statements([one])


def test_the_message_written_again_finds_its_previous_turn_past_a_round_of_tool_steps(
    embedder_on, make_session, owner
):
    """The previous spoken turn is further back than the batch's read looks (a round of many
    tool steps in between): it is looked for on its own, and the message written again gets
    both its neighbours, as when written alone."""
    session = make_session(owner, "I keep bees.")
    for n in range(6):  # each tool step: the call, then its result
        services.message_append(
            session=session,
            role=Message.Role.ASSISTANT,
            content="",
            tool_calls=[{"id": f"c{n}", "name": "memory_search", "arguments": {"query": "bees"}}],
        )
        services.message_append(
            session=session, role=Message.Role.TOOL, content="nothing found", tool_call_id=f"c{n}"
        )
    services.message_append(session=session, role=Message.Role.ASSISTANT, content="Nice.")
    assert services.messages_embed(session_id=session.pk) == 2
    services.message_append(session=session, role=Message.Role.USER, content="And two hens.")
    assert services.messages_embed(session_id=session.pk) == 1

    _name, own = meaning.vectors_of(["I keep bees.", "Nice.", "And two hens."])
    stored = _vectors(session)["Nice."]
    both = meaning.combined(own[1], [own[0], own[2]])
    assert embedder.cosine(stored, both) > 0.9999
    assert embedder.cosine(stored, meaning.combined(own[1], [own[2]])) < 0.999
