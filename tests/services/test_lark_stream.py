"""A Lark reply written into a card by a real worker (PostgreSQL, Redis), while the model is
still writing; and a worker whose event the sweep takes back mid-card, which never updates the
card again (its fence is the event's row, locked across each update)."""

from __future__ import annotations

import time

import pytest

from channels_app.lark.handling import lark_events_reclaim
from channels_app.lark.streaming import CURSOR
from channels_app.models import LarkEvent
from sessions_app.models import Message
from tests.fakes.base import Reply
from tests.fakes.lark_fake import FakeLark
from tests.fakes.openai_fake import FakeOpenAI, MiniModel
from tests.lark_helpers import worker_answers
from tests.services.conftest import wait_for

# About 1,300 characters: some 330 pieces of the fake's stream.
LONG = " ".join(f"Sentence {n} of a long answer." for n in range(70))
SWEEPS = "The sweep's answer. " + LONG
QUESTION = "tell me a long story"


@pytest.fixture
def slow_model():
    """gpt-4o writes LONG slowly (about 20 s: the sweep must find the worker still writing it
    even when a loaded machine holds the test up for seconds), then SWEEPS (about 2 s);
    gpt-4o-mini consolidates."""
    fake = FakeOpenAI()
    mini = MiniModel()
    chats = []

    def answer(recorded):
        if recorded.body["model"] != "gpt-4o":
            return mini(recorded)
        chats.append(recorded)
        if len(chats) == 1:
            return Reply(body=FakeOpenAI.text(LONG), first_chunk_ms=10, chunk_ms=60)
        return Reply(body=FakeOpenAI.text(SWEEPS), first_chunk_ms=10, chunk_ms=5)

    fake.responder = answer
    yield fake
    fake.close()


@pytest.fixture
def lark_fake():
    fake = FakeLark()
    yield fake
    fake.close()


@pytest.mark.django_db(transaction=True)
def test_a_worker_writes_the_reply_into_a_card_while_the_model_writes(
    workers, slow_model, lark_fake
):
    worker, event, _ = worker_answers(
        workers, "card", QUESTION, model_url=slow_model.url, lark=lark_fake
    )
    log = worker.log_path
    # The card is out, and updated, before the reply is stored: it is being written.
    assert wait_for(lambda: len(lark_fake.card_updates) >= 2, timeout=60), log.read_text()[-3000:]
    assert not Message.objects.filter(role="assistant").exists()
    assert wait_for(lambda: LarkEvent.objects.get(pk=event.pk).status == "done", timeout=60)
    [card] = lark_fake.cards
    assert card["reply_to"] == event.message_id
    stored = Message.objects.get(role="assistant").content
    assert stored == LONG == lark_fake.shown(card["message_id"])
    partial = [card["text"]] + [update["text"] for update in lark_fake.card_updates[:-1]]
    assert all(LONG.startswith(text.removesuffix(CURSOR)) for text in partial)
    # Throttled to Lark's limit in real time: the fake (5 a second per message) refused none.
    assert lark_fake.update_attempts == len(lark_fake.card_updates)
    assert lark_fake.replies == []


@pytest.mark.django_db(transaction=True)
def test_a_worker_whose_event_is_taken_back_mid_card_never_updates_it_again(
    workers, settings, slow_model, lark_fake, llm_config
):
    worker, event, env = worker_answers(
        workers, "taken", QUESTION, model_url=slow_model.url, lark=lark_fake
    )
    log = worker.log_path
    assert wait_for(lambda: len(lark_fake.card_updates) >= 1, timeout=60), log.read_text()[-3000:]

    # The sweep, here in this process, takes the event back and answers into the same card.
    settings.LARK_BASE_URL = lark_fake.url
    settings.LARK_APP_ID, settings.LARK_APP_SECRET = FakeLark.APP_ID, FakeLark.APP_SECRET
    llm_config.configure(env=env, model="gpt-4o")
    assert lark_events_reclaim(older_than_seconds=0) == ["done"]
    after_sweep = len(lark_fake.card_updates)

    assert wait_for(lambda: "taken back while" in log.read_text(), timeout=60), log.read_text()[
        -3000:
    ]
    time.sleep(1)  # nothing more comes from the worker
    assert len(lark_fake.card_updates) == after_sweep
    [card] = lark_fake.cards
    assert lark_fake.shown(card["message_id"]) == SWEEPS
    assert list(Message.objects.order_by("seq").values_list("role", "content")) == [
        ("user", QUESTION),
        ("assistant", SWEEPS),
    ]
    event.refresh_from_db()
    assert event.status == "done" and lark_fake.replies == []
