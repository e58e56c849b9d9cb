"""A Lark event whose worker is killed (SIGKILL) while it answers, or is only slow: the sweep
takes it back and the person gets exactly one reply, with that event's uuid (PostgreSQL, Redis,
a real worker)."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from channels_app.lark.handling import lark_events_reclaim
from channels_app.models import LarkEvent
from sessions_app.models import Message
from tests.fakes.base import Reply
from tests.fakes.lark_fake import FakeLark
from tests.fakes.openai_fake import FakeOpenAI
from tests.services.conftest import wait_for

QUESTION = "what should I read next?"
ANSWER = "Here is the answer, written only once."


@dataclass
class Answering:
    """A worker answering an event, waiting on the model's first answer."""

    worker: object
    event: LarkEvent
    env: dict[str, str]


@pytest.fixture
def late_model():
    """gpt-4o on the OpenAI fake: its first answer comes after `delay` seconds (set by the
    test), the next ones at once."""
    fake = FakeOpenAI()
    fake.delay = 120
    answered = []

    def answer(recorded):
        answered.append(recorded)
        delay = fake.delay if len(answered) == 1 else 0
        text = "the first worker's answer" if len(answered) == 1 else ANSWER
        return Reply(body=FakeOpenAI.text(text), delay=delay)

    fake.responder = answer
    yield fake
    fake.close()


@pytest.fixture
def lark_fake():
    fake = FakeLark()
    yield fake
    fake.close()


def answering(workers, name: str, *, model: FakeOpenAI, lark: FakeLark) -> Answering:
    """Store an event, start a worker of its own on it, and wait until the worker has claimed
    it, stored the question and is waiting on the model."""
    from tests.lark_helpers import worker_answers

    worker, event, env = worker_answers(workers, name, QUESTION, model_url=model.url, lark=lark)
    assert wait_for(lambda: len(model.requests) == 1, timeout=60), worker.log_path.read_text()[
        -3000:
    ]
    return Answering(worker=worker, event=event, env=env)


def sweep_here(answer: Answering, *, settings, llm_config, lark: FakeLark) -> list[str]:
    """The sweep (as beat runs it), here in this process on the same database."""
    settings.LARK_BASE_URL = lark.url
    settings.LARK_APP_ID, settings.LARK_APP_SECRET = FakeLark.APP_ID, FakeLark.APP_SECRET
    llm_config.configure(env=answer.env, model="gpt-4o")
    return lark_events_reclaim(older_than_seconds=0)


def assert_answered_once(event: LarkEvent, lark: FakeLark) -> None:
    sent = [r for r in lark.requests if r.path.endswith(f"/messages/{event.message_id}/reply")]
    assert len(sent) == 1
    [reply] = lark.replies
    assert reply["uuid"] == event.event_id and reply["message_id"] == event.message_id
    assert json.loads(reply["content"]) == {"text": ANSWER}
    assert list(Message.objects.order_by("seq").values_list("role", "content")) == [
        ("user", QUESTION),
        ("assistant", ANSWER),
    ]
    event.refresh_from_db()
    assert event.status == "done"


@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_answer_leaves_one_reply_after_the_sweep(
    workers, settings, late_model, lark_fake, llm_config
):
    doomed = answering(workers, "killed", model=late_model, lark=lark_fake)
    workers.crash(doomed.worker)
    doomed.event.refresh_from_db()
    assert doomed.event.status == "processing" and doomed.event.question is not None
    assert lark_fake.replies == []

    assert sweep_here(doomed, settings=settings, llm_config=llm_config, lark=lark_fake) == ["done"]
    assert lark_events_reclaim(older_than_seconds=0) == []  # a second sweep: nothing
    assert_answered_once(doomed.event, lark_fake)


@pytest.mark.django_db(transaction=True)
def test_a_slow_worker_whose_event_the_sweep_took_back_stores_and_sends_nothing(
    workers, settings, late_model, lark_fake, llm_config
):
    """The sweep takes an event back from a worker that is alive, only slow (its model
    answers late): the sweep answers, and the slow worker, once its model is done, finds its
    claim gone at its reply's write and stops. One stored reply, one reply sent."""
    late_model.delay = 5
    slow = answering(workers, "slow", model=late_model, lark=lark_fake)

    assert sweep_here(slow, settings=settings, llm_config=llm_config, lark=lark_fake) == ["done"]
    log = slow.worker.log_path
    assert wait_for(lambda: "taken back while" in log.read_text(), timeout=60), log.read_text()[
        -3000:
    ]
    assert_answered_once(slow.event, lark_fake)
