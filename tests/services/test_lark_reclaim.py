"""A Lark event whose worker is killed (SIGKILL) while it answers: the sweep takes it back and
the person gets exactly one reply, with that event's uuid (PostgreSQL, Redis, a real worker)."""

from __future__ import annotations

import json

import pytest

from agent_app.lark.handling import lark_events_reclaim
from agent_app.lark.tasks import handle_lark_event
from agent_app.models import LarkEvent
from sessions_app.models import Message
from tests.fakes.base import Reply
from tests.fakes.lark_fake import FakeLark
from tests.fakes.openai_fake import FakeOpenAI
from tests.services.conftest import wait_for

ANSWER = "Here is the answer, written only once."


@pytest.fixture
def hanging_model():
    """gpt-4o on the OpenAI fake: the first answer never comes in time (the worker is killed
    while it waits), the next ones at once."""
    fake = FakeOpenAI()
    answers = iter([Reply(body=FakeOpenAI.text(ANSWER), delay=120)])

    def answer(recorded):
        return next(answers, Reply(body=FakeOpenAI.text(ANSWER)))

    fake.responder = answer
    yield fake
    fake.close()


@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_answer_leaves_one_reply_after_the_sweep(
    workers, settings, hanging_model, llm_config
):
    lark = FakeLark()
    try:
        env = {
            "OPENAI_API_KEY": "test-key",
            "OPENAI_BASE_URL": f"{hanging_model.url}/v1",
            "ETHAN_MODEL": "gpt-4o",
            "LARK_BASE_URL": lark.url,
            "LARK_APP_ID": FakeLark.APP_ID,
            "LARK_APP_SECRET": FakeLark.APP_SECRET,
        }
        event = LarkEvent.objects.create(
            event_id="ev-killed",
            event_type="im.message.receive_v1",
            message_id="om_ev-killed",
            payload=_payload("ev-killed", "what should I read next?"),
        )
        doomed = workers.start("doomed", **env)
        handle_lark_event.delay(event.pk)
        # The worker claimed the event, stored the question and is waiting on the model.
        assert wait_for(lambda: len(hanging_model.requests) == 1, timeout=60), (
            doomed.log_path.read_text()[-3000:]
        )
        workers.crash(doomed)
        event.refresh_from_db()
        assert event.status == "processing" and event.question is not None
        assert lark.replies == []

        # The sweep (as beat runs it) takes it back, here in this process on the same database.
        settings.LARK_BASE_URL = lark.url
        settings.LARK_APP_ID, settings.LARK_APP_SECRET = FakeLark.APP_ID, FakeLark.APP_SECRET
        llm_config.configure(env=env, model="gpt-4o")
        assert lark_events_reclaim(older_than_seconds=0) == ["done"]
        assert lark_events_reclaim(older_than_seconds=0) == []  # a second sweep: nothing

        [reply] = lark.replies
        assert reply["uuid"] == "ev-killed" and reply["message_id"] == "om_ev-killed"
        assert json.loads(reply["content"]) == {"text": ANSWER}
        assert list(Message.objects.order_by("seq").values_list("role", "content")) == [
            ("user", "what should I read next?"),
            ("assistant", ANSWER),
        ]
        event.refresh_from_db()
        assert event.status == "done"
    finally:
        lark.close()


def _payload(event_id: str, text: str) -> dict:
    from tests.lark_helpers import message_event

    return message_event(event_id, text)
