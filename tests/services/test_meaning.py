"""Memory found by meaning on PostgreSQL: the per-owner scan of the stored vectors, and a real
Celery worker writing them from the memory queue."""

from __future__ import annotations

import pytest

from agent_app.memory_search import memory_search
from agent_app.vectors import TurnsSent, vectors_write, vectors_write_task
from ethan_shared import queue
from sessions_app.models import Message
from tests.agent_app.test_meaning import CHINESE, ENGLISH
from tests.services.conftest import wait_for


def _conversation(make_session, owner, lines):
    texts = []
    for line in lines:
        texts += [line, "OK."]
    return make_session(owner, *texts)


@pytest.mark.django_db
def test_the_scan_finds_a_paraphrase_on_postgresql(
    services_ready, embedder_on, make_session, owner, other_owner
):
    mine = _conversation(make_session, owner, [*ENGLISH, *CHINESE])
    # Another person's vectors are never scanned for this owner: the same hobby, theirs.
    theirs = _conversation(make_session, other_owner, ["I play Zelda and read manga every day."])
    for session in (mine, theirs):
        vectors_write(owner_id=session.owner_id, session_id=session.pk)
    hits = memory_search(owner=owner, query="what are her hobbies", scope="messages", limit=2)
    assert ENGLISH[1] in [hit.content for hit in hits]  # or first its reply, its neighbour
    assert {hit.session_id for hit in hits} == {mine.pk}
    hits = memory_search(owner=owner, query="家里添了什么家电", scope="messages", limit=8)
    assert next(hit.content for hit in hits if hit.content in CHINESE) == CHINESE[1]


@pytest.mark.django_db(transaction=True)
def test_a_real_worker_writes_the_vectors_from_the_memory_queue(
    workers, embedder_on, make_session, owner
):
    workers.start("memory", ETHAN_EMBEDDER="default")
    session = _conversation(make_session, owner, ENGLISH)
    queue.enqueue(vectors_write_task, owner.pk, session.pk)  # autocommit: sent at once
    spoken = Message.objects.filter(session=session)
    assert wait_for(lambda: not spoken.filter(embedding_model=None).exists(), timeout=60)
    assert set(spoken.values_list("embedding_model", flat=True)) == {"use-multilingual-v3"}


@pytest.mark.django_db(transaction=True)
def test_a_real_worker_writes_the_turns_a_serving_process_sent_as_one_task(
    workers, embedder_on, make_session, owner, other_owner
):
    """Under a broker, `ethan serve` sends the turns that ended within its linger as one task
    (TurnsSent): the worker writes all their sessions from it."""
    workers.start("memory", ETHAN_EMBEDDER="default")
    sessions = [
        _conversation(make_session, owner, ENGLISH),
        _conversation(make_session, other_owner, CHINESE),
    ]
    turns = TurnsSent()
    turns.linger = 0.1
    for session in sessions:
        turns.add(owner_id=session.owner_id, session_id=session.pk)
    spoken = Message.objects.filter(session__in=sessions)
    assert wait_for(lambda: not spoken.filter(embedding_model=None).exists(), timeout=60)
    assert set(spoken.values_list("embedding_model", flat=True)) == {"use-multilingual-v3"}
