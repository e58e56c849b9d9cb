"""Consolidation on real Celery workers, Redis and PostgreSQL: turns consolidated in the
background, two workers racing on one session, and a worker killed in the middle of a task
(while summarising a batch, and while extracting a session's last facts at its end)."""

from __future__ import annotations

import json
import time

import pytest

from agent_app.lifecycle import session_episode_write_task
from channels_app.turns import turn_run
from episodes_app.models import Episode
from ethan_shared import queue
from memory_app.models import Fact, FactEvent, Summary, WorkingState
from memory_app.tasks import consolidation_run_task
from sessions_app import services as session_services
from tests.fakes.base import Reply
from tests.fakes.openai_fake import FakeOpenAI, MiniModel
from tests.services.conftest import wait_for

SMALL = {
    "ETHAN_MEMORY_HOT_SIZE": "1",
    "ETHAN_MEMORY_COMPRESS_BATCH": "1",
    "ETHAN_MEMORY_WARM_CAPACITY": "1000",
}


@pytest.fixture
def slow_model():
    """The compression model (gpt-4o-mini) on the OpenAI fake; `delays` sets how long each
    answer takes, request by request."""
    fake = FakeOpenAI()
    fake.delays = []

    def answer(recorded):
        delay = fake.delays.pop(0) if fake.delays else 0.05
        text = f"summary {len(fake.requests)}"
        if "You do two things" in recorded.body["messages"][0]["content"]:  # summary and facts
            text = json.dumps({"summary": text, "facts": []})
        return Reply(body=FakeOpenAI.text(text), delay=delay)

    fake.responder = answer
    fake.env = {
        "OPENAI_API_KEY": "test-key",
        "OPENAI_BASE_URL": f"{fake.url}/v1",
        "ETHAN_COMPRESSION_MODEL": "gpt-4o-mini",
    }
    yield fake
    fake.close()


def _session_with_rounds(owner, rounds: int):
    session = session_services.session_start(owner=owner, model="gpt-4o")
    for n in range(rounds):
        session_services.message_append(session=session, role="user", content=f"round {n + 1}")
        session_services.message_append(session=session, role="assistant", content="ok")
    return session


@pytest.mark.django_db(transaction=True)
def test_turns_are_consolidated_by_a_real_worker(celery_worker_process, owner, settings):
    settings.ETHAN_EMBEDDED = False
    session = None
    for n in range(16):
        result = turn_run(
            owner=owner, session=session, text=f"我们聊第{n + 1}个话题。", model="offline"
        )
        session = result.session
    assert queue._pending() == []  # sent to the broker, not kept in-process
    # After round 15 the first five rounds left the hot zone (10): one summary, by the worker.
    assert wait_for(lambda: Summary.objects.filter(session=session).exists())
    summary = Summary.objects.get(session=session)
    assert (summary.first_round, summary.last_round, summary.model) == (1, 5, "offline")
    assert summary.text.startswith("用户提到：我们聊第1个话题")


@pytest.mark.django_db(transaction=True)
def test_two_workers_racing_store_one_summary_per_batch(workers, owner, slow_model):
    session = _session_with_rounds(owner, 25)
    workers.start("racer-a", **SMALL, **slow_model.env)
    workers.start("racer-b", **SMALL, **slow_model.env)
    consolidation_run_task.delay(session.pk)
    consolidation_run_task.delay(session.pk)
    assert wait_for(
        lambda: WorkingState.objects.filter(session=session, compressed_through=24).exists(),
        timeout=60,
    )
    summaries = list(
        Summary.objects.filter(session=session)
        .order_by("first_round")
        .values_list("first_round", "last_round")
    )
    assert summaries == [(n, n) for n in range(1, 25)]
    # Claim first: the worker that found the session claimed made no call, so each batch was
    # computed once (issue 42), not once per worker.
    assert len(slow_model.requests) == 24
    assert WorkingState.objects.get(session=session).claimed_by == ""


@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_task_is_redelivered_without_duplicates(workers, owner, slow_model):
    session = _session_with_rounds(owner, 3)
    slow_model.delays = [60]  # the first model call hangs: the worker is killed during it
    # The dead worker's claim runs out (2 s) before the task comes back (3 s), as in production
    # (300 s against the broker's hour).
    env = {
        **SMALL,
        **slow_model.env,
        "ETHAN_BROKER_VISIBILITY_TIMEOUT": "3",
        "ETHAN_MEMORY_CLAIM_SECONDS": "2",
    }
    first = workers.start("doomed", pool="prefork", **env)
    consolidation_run_task.delay(session.pk)
    assert wait_for(lambda: len(slow_model.requests) == 1, timeout=30), first.log_path.read_text()[
        -3000:
    ]
    workers.crash(first)
    assert not Summary.objects.exists()  # it died before writing anything

    # A replacement worker starting after the visibility timeout (3 s here) takes the task
    # back at start-up; a worker already running rescans only every ~100 s (kombu's throttle).
    time.sleep(4)
    survivor = workers.start("survivor", pool="prefork", **env)
    # Redis hands the unacknowledged task to the survivor once the visibility timeout passed.
    assert wait_for(
        lambda: WorkingState.objects.filter(session=session, compressed_through=2).exists(),
        timeout=90,
    ), survivor.log_path.read_text()[-3000:]
    assert list(
        Summary.objects.filter(session=session)
        .order_by("first_round")
        .values_list("first_round", "last_round")
    ) == [(1, 1), (2, 2)]


class EndOfSessionHangs(MiniModel):
    """MiniModel whose first consolidating call (a session's end: its episode and last facts)
    never comes back in time: the worker asking is killed while it waits."""

    def __init__(self) -> None:
        super().__init__()
        self.hung = False

    def __call__(self, recorded):
        system = recorded.body["messages"][0]["content"]
        if "You do two things" in system and not self.hung:
            self.hung = True
            self.calls.append("consolidate (hung)")
            return Reply(body=FakeOpenAI.text('{"summary": "", "facts": []}'), delay=60)
        return super().__call__(recorded)


@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_during_end_of_session_extraction_leaves_the_facts_once(workers, owner):
    fake = FakeOpenAI()
    model = fake.responder = EndOfSessionHangs()
    env = {
        "OPENAI_API_KEY": "test-key",
        "OPENAI_BASE_URL": f"{fake.url}/v1",
        "ETHAN_COMPRESSION_MODEL": "gpt-4o-mini",
        "ETHAN_BROKER_VISIBILITY_TIMEOUT": "3",
        "ETHAN_MEMORY_CLAIM_SECONDS": "2",  # the dead worker's claim runs out first
    }
    try:
        # Three rounds, all in the hot zone: nothing extracted while the session went on.
        session = _session_with_rounds(owner, 3)
        session_services.session_end(session=session)
        first = workers.start("doomed", pool="prefork", **env)
        session_episode_write_task.delay(session.pk)
        assert wait_for(lambda: model.hung, timeout=30), first.log_path.read_text()[-3000:]
        workers.crash(first)
        # It died holding the call: nothing of the session's end is stored.
        assert not Fact.objects.exists() and not Episode.objects.exists()

        time.sleep(4)  # past the visibility timeout: a new worker takes the task back
        survivor = workers.start("survivor", pool="prefork", **env)
        assert wait_for(lambda: Episode.objects.filter(session=session).exists(), timeout=90), (
            survivor.log_path.read_text()[-3000:]
        )
        state = WorkingState.objects.get(session=session)
        assert (state.compressed_through, state.extracted_through) == (0, 3)
        facts = Fact.objects.order_by("id")
        assert [(fact.content, fact.hit_count) for fact in facts] == [
            (f"用户说过：round {n}", 1) for n in (1, 2, 3)
        ]
        assert [fact.sources.get().content for fact in facts] == ["round 1", "round 2", "round 3"]
        assert list(FactEvent.objects.values_list("event", flat=True)) == [FactEvent.Kind.ADD] * 3
        assert Episode.objects.get(session=session).summary == "摘要1"
        # The survivor redid the one call: episode and facts together.
        assert model.calls == ["consolidate (hung)", "consolidate"]

        # Delivered once more (a crash after the commit, before the acknowledgement): the
        # moved cursor and the episode up to date make it a no-op, with no model call.
        assert session_episode_write_task.apply(args=[session.pk]).get() is True
        assert model.calls == ["consolidate (hung)", "consolidate"]
        assert Fact.objects.count() == 3 and Episode.objects.count() == 1
    finally:
        fake.close()
