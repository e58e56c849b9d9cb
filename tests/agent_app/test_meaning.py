"""Memory found by meaning as well as words (issue 43): vectors written in the background after a
turn, a paraphrase found with no word in common in English and Chinese, the same ranking as
before with the embedder off, vectors of another embedder never compared, a fact's vector
dropped with its old words, and the backfill command finishing a run that was killed."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from django.core.management import call_command

import embedder
from agent_app.memory_search import memory_search
from agent_app.prompts import build_system
from agent_app.vectors import vectors_write
from embedder import client as embedder_client
from ethan_shared import queue
from memory_app import services as memory_services
from memory_app.models import Fact
from memory_app.selectors import facts_for_injection
from sessions_app import meaning
from sessions_app.models import Message
from sessions_app.search import query_terms
from sessions_app.selectors import messages_search
from tests.conftest import ROOT, clean_env, end_group, run_manage, start_in_group

pytestmark = pytest.mark.django_db

# Each target shares no word with its question (after the tokenizer's stopwords and stems);
# the distractors are about other things.
ENGLISH = [
    "My car needs new tyres before the winter.",
    "I spend my weekends playing Zelda and reading manga.",
    "The meeting with the landlord moved to Tuesday.",
    "We ordered pizza for the office party.",
]
CHINESE = [
    "明天上午要去银行办手续。",
    "我们刚买了新空调和洗碗机。",
    "周末的火车票已经订好了。",
    "这本小说的结局让我很意外。",
]


def _said(make_session, owner, lines):
    """A conversation: each line the person's, each answered "OK.", then its vectors written
    as the background writes them after a turn."""
    texts = []
    for line in lines:
        texts += [line, "OK."]
    session = make_session(owner, *texts)
    vectors_write(owner_id=owner.pk, session_id=session.pk)
    return session


def _contents(hits):
    return [hit.content for hit in hits]


@pytest.mark.parametrize(
    ("lines", "question", "target"),
    [
        (ENGLISH, "what are her hobbies", ENGLISH[1]),
        (CHINESE, "家里添了什么家电", CHINESE[1]),
    ],
)
def test_a_paraphrase_is_found_by_meaning_with_no_word_in_common(
    embedder_on, make_session, owner, lines, question, target
):
    _said(make_session, owner, lines)
    target_words = set(query_terms(target))
    assert not set(query_terms(question)) & target_words  # no word in common
    hits = _contents(memory_search(owner=owner, query=question, scope="messages", limit=8))
    # The target before every other statement; the replies ("OK.") around it may come first,
    # since a message's vector carries its neighbours' (as BM25 indexes it).
    statements = [text for text in hits if text in lines]
    assert statements[0] == target
    assert hits.index(target) <= 2


def test_with_the_embedder_off_search_is_bm25_alone(make_session, owner):
    """Stored vectors change nothing while the embedder is off: the same hits, the same scores,
    as before any vector was written."""
    session = make_session(owner, *ENGLISH, "I also like reading the news on the car radio.")
    question = "reading in the car"

    def found():
        return [(hit.item.pk, hit.score) for hit in messages_search(owner=owner, query=question)]

    before = found()
    assert before  # words in common
    embedder.configure(embedder="default")
    vectors_write(owner_id=owner.pk, session_id=session.pk)
    assert Message.objects.exclude(embedding_model=None).count() == 5
    embedder.configure(embedder="off")
    assert found() == before
    # and a question sharing no word finds nothing, as before
    assert memory_search(owner=owner, query="what are her hobbies", scope="messages") == []


def test_after_a_turn_its_messages_have_vectors(
    embedder_on, api_for, owner, llm_config, settings, django_capture_on_commit_callbacks
):
    settings.ETHAN_EMBEDDED = True
    with django_capture_on_commit_callbacks(execute=True):
        response = api_for(owner).post(
            "/api/chat", {"message": "I collect old maps of Lisbon."}, format="json"
        )
    assert Message.objects.exclude(embedding_model=None).count() == 0  # not on the turn's path
    queue.run_deferred()  # what runs after the reply, in-process when embedded
    assert response.status_code == 200, response.content
    spoken = Message.objects.filter(session_id=response.json()["session_id"])
    spoken = spoken.filter(role__in=["user", "assistant"])
    assert spoken.count() >= 2
    assert set(spoken.values_list("embedding_model", flat=True)) == {"use-multilingual-v3"}
    blob = spoken.first().embedding
    assert len(bytes(blob)) == embedder.blob_size(512)


def test_a_message_carries_its_neighbours_and_the_last_reply_gains_the_next_turn(
    embedder_on, make_session, owner
):
    session = _said(make_session, owner, ENGLISH[:2])
    reply = Message.objects.get(session=session, seq=4)  # the last "OK."
    before = bytes(reply.embedding)
    from sessions_app import services as session_services

    session_services.message_append(session=session, role="user", content=ENGLISH[2])
    vectors_write(owner_id=owner.pk, session_id=session.pk)
    reply.refresh_from_db()
    assert bytes(reply.embedding) != before  # written again with its next neighbour
    # Two identical replies ("OK.") differ by the turns around them.
    first_reply = Message.objects.get(session=session, seq=2)
    assert bytes(first_reply.embedding) != bytes(reply.embedding)


def test_vectors_of_another_embedder_are_never_compared(embedder_on, make_session, owner):
    session = _said(make_session, owner, ENGLISH)
    # As if written by another embedder: same bytes, another name.
    Message.objects.filter(session=session).update(embedding_model="openai:text-embedding-3-small")
    hits = memory_search(owner=owner, query="what are her hobbies", scope="messages")
    assert hits == []  # no shared word, and no vector of this embedder to compare
    scan = meaning.nearest(Message.objects.filter(session=session), meaning.query_vector("hobbies"))
    assert scan.empty
    # The next pass writes them again under the configured embedder's name.
    vectors_write(owner_id=owner.pk, session_id=session.pk)
    hits = memory_search(owner=owner, query="what are her hobbies", scope="messages", limit=2)
    assert ENGLISH[1] in _contents(hits)


def _known(owner, content: str) -> Fact:
    """A trusted fact of the owner's, as the API writes it (no vector yet)."""
    return memory_services.fact_write(
        owner=owner, content=content, category="knowledge", confidence=0.8, source="api"
    )


def test_a_fact_found_by_meaning_is_injected_first(embedder_on, owner):
    for content in [
        "The user's car is a blue Volvo.",
        "The user owns a golden retriever called Max.",
        "The user works night shifts at the hospital.",
    ]:
        _known(owner, content)
    vectors_write(owner_id=owner.pk)
    assert not Fact.objects.filter(embedding_model=None).exists()
    injected = facts_for_injection(owner=owner, limit=3, text="any tips for my puppy?")
    assert injected[0].content == "The user owns a golden retriever called Max."


def test_an_edited_fact_loses_its_old_vector_and_gets_a_new_one(embedder_on, owner):
    fact = _known(owner, "The user lives in Porto.")
    vectors_write(owner_id=owner.pk)
    fact.refresh_from_db()
    old = bytes(fact.embedding)
    memory_services.fact_edit(fact=fact, actor="test", content="The user lives in Lisbon.")
    fact.refresh_from_db()
    assert fact.embedding is None and fact.embedding_model is None
    vectors_write(owner_id=owner.pk)
    fact.refresh_from_db()
    assert fact.embedding_model == "use-multilingual-v3" and bytes(fact.embedding) != old


def _queries_embedded(monkeypatch) -> list[tuple[str, ...]]:
    """The texts the embedder's model computes as a search's query from now on (not those it
    remembered, embedder.client.REMEMBERED)."""
    calls: list[tuple[str, ...]] = []
    real = embedder_client._computed

    def counted(choice, texts, kind):
        if kind == "query":
            calls.append(tuple(texts))
        return real(choice, texts, kind)

    monkeypatch.setattr(embedder_client, "_computed", counted)
    return calls


def _computed(monkeypatch) -> list[tuple[str, tuple[str, ...]]]:
    """(kind, texts) of each call the embedder's model computes from now on, in a list that
    fills as they come."""
    calls: list[tuple[str, tuple[str, ...]]] = []
    real = embedder_client._computed

    def counted(choice, texts, kind):
        calls.append((kind, tuple(texts)))
        return real(choice, texts, kind)

    monkeypatch.setattr(embedder_client, "_computed", counted)
    return calls


def test_the_query_vector_is_computed_once_for_the_same_text(embedder_on, monkeypatch):
    queries = _queries_embedded(monkeypatch)
    first = meaning.query_vector("where does she work")
    second = meaning.query_vector("where does she work")
    assert queries == []  # not until a scan needs it
    assert np.array_equal(first.vector, second.vector)
    assert queries == [("where does she work",)]


def test_a_prompt_embeds_its_query_only_when_a_stored_vector_is_there(
    embedder_on, owner, monkeypatch
):
    """A person with no fact or episode embedded yet (a new person) costs no query vector;
    once a fact has its vector, the turn embeds one, shared by facts and episodes."""
    queries = _queries_embedded(monkeypatch)
    fact = _known(owner, "The user owns a golden retriever called Max.")
    build_system(owner=owner, mode="work", path="full", text="any tips for my puppy?")
    assert queries == []  # the fact has no vector yet: found by its words alone
    vectors_write(owner_id=owner.pk)
    system = build_system(owner=owner, mode="work", path="full", text="any tips for my puppy?")
    assert queries == [("any tips for my puppy?",)]
    assert system.facts == [fact]


# Two processes loading the embedder's weights (10-20 s): make test-slow.
@pytest.mark.slow
def test_the_backfill_finishes_a_run_that_was_killed(tmp_path):
    """A home with 300 messages from before vectors existed; `ethan_embed --batch 20` is killed
    after its first batches, then run again: everything ends embedded, nothing twice."""
    home = tmp_path / "home"
    home.mkdir()
    lines = [f"Note {i}: the harbour crane number {i} was painted." for i in range(150)]
    seed = (
        "from sessions_app import services as s\n"
        "owner = s.local_user_get_or_create(username='ada')\n"
        "session = s.session_start(owner=owner)\n"
        f"for i, line in enumerate({lines!r}):\n"
        "    s.message_append(session=session, role='user', content=line)\n"
        "    s.message_append(session=session, role='assistant', content='Noted ' + str(i))\n"
    )
    assert run_manage(["migrate", "-v", "0"], home, ETHAN_EMBEDDER="off").returncode == 0
    seeded = run_manage(["shell", "-v", "0", "-c", seed], home, ETHAN_EMBEDDER="off")
    assert seeded.returncode == 0, seeded.stderr
    count = (
        "from sessions_app.models import Message as M;"
        "print(M.objects.exclude(embedding_model=None).count())"
    )

    def embedded() -> int:
        shown = run_manage(["shell", "-v", "0", "-c", count], home, ETHAN_EMBEDDER="off")
        assert shown.returncode == 0, shown.stderr
        return int(shown.stdout.strip())

    assert embedded() == 0
    first = start_in_group(
        [sys.executable, "manage.py", "ethan_embed", "--batch", "20", "-v", "2"],
        cwd=ROOT,
        env=clean_env(home, ETHAN_EMBEDDER="default"),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        seen = []
        while time.monotonic() < deadline:
            line = first.stdout.readline()
            seen.append(line)
            if line.startswith("messages: 40 of 300 written") or not line:
                break
        assert any(line.startswith("messages: 40 of 300") for line in seen), seen
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        end_group(first)
    part = embedded()
    assert 40 <= part < 300
    again = run_manage(["ethan_embed", "--batch", "20"], home, ETHAN_EMBEDDER="default")
    assert again.returncode == 0, again.stderr
    assert embedded() == 300
    # The second run embedded only what the first had not (its count of rows with no vector).
    assert f"messages: {300 - part} written" in again.stdout or (
        f"({300 - part} had no vector)" in again.stdout
    ), again.stdout


def test_the_backfill_refuses_with_the_embedder_off():
    with pytest.raises(Exception, match="the embedder is off"):
        call_command("ethan_embed")


def test_a_turn_embeds_its_query_once_for_facts_and_episodes(embedder_on, owner, monkeypatch):
    from agent_app.prompts import build_system
    from episodes_app.models import Episode

    memory_services.fact_write(
        owner=owner,
        content="The user owns a golden retriever.",
        category="knowledge",
        confidence=0.8,
        source="api",
    )
    Episode.objects.create(
        owner=owner,
        session_ref="s_1",
        summary="Talked about the dog's training.",
        keywords=["dog"],
        turn_count=2,
    )
    vectors_write(owner_id=owner.pk)
    computed = _computed(monkeypatch)
    system = build_system(
        owner=owner,
        mode="work",
        path="full",
        text="any tips for my puppy?",
        previous="I got a new pet last week.",
    )
    assert "golden retriever" in system.text and "dog's training" in system.text
    queries = [texts for kind, texts in computed if kind == "query"]
    assert queries == [("any tips for my puppy?\nI got a new pet last week.",)]
