"""A Lark reply shown as it is written: a card sent once the reply takes a while, updated in
place (throttled), showing the stored reply at the end; falling back to one text message when
cards fail; and never touched by a worker that lost its event. A slowly streaming OpenAI fake
writes the replies, the fake Lark records each card and update."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from channels_app.lark import streaming
from channels_app.lark.handling import lark_event_handle, lark_events_reclaim
from channels_app.lark.streaming import CURSOR
from channels_app.models import LarkEvent
from channels_app.turns import STEP_BREAK
from sessions_app.models import ChatSession, Message
from tests.fakes.lark_fake import FakeLark
from tests.fakes.openai_fake import FakeOpenAI, MiniModel
from tests.lark_helpers import deliver, message_event

pytestmark = pytest.mark.django_db(transaction=True)

# 70 sentences: about 1,300 characters, some 330 pieces of the fake's stream.
LONG = " ".join(f"Sentence {n} of a long answer." for n in range(70))
# The card interval in steps of the simulated clock (each piece of the reply is one step).
STEPS = 4


@dataclass
class Model:
    fake: FakeOpenAI

    def writes(self, text: str, *, chunk_ms: float = 2) -> int:
        """The next chat answer is `text`, streamed slowly; returns how many pieces."""
        self.fake.reply(FakeOpenAI.text(text), first_chunk_ms=5, chunk_ms=chunk_ms)
        return len(self.fake.split(text))


@pytest.fixture
def model(llm_config):
    """gpt-4o on the OpenAI fake; what the test scripts first, then MiniModel's answers
    (consolidation after the reply)."""
    fake = FakeOpenAI()
    fake.responder = MiniModel()
    llm_config.configure(
        env={"OPENAI_API_KEY": "test-key", "OPENAI_BASE_URL": f"{fake.url}/v1"}, model="gpt-4o"
    )
    yield Model(fake)
    fake.close()


@pytest.fixture
def steps(monkeypatch, settings, lark):
    """Time simulated: each piece of the reply the card is fed takes 1/8 s, and a card is
    updated at most every STEPS pieces, so counts do not depend on the machine's speed. Lark's
    own rate limit, on real time, is left out here (real time is not what is throttled)."""
    settings.ETHAN_LARK_CARD_SECONDS = STEPS / 8
    lark.updates_per_second = None
    ticks = []

    def clock() -> float:
        ticks.append(None)
        return len(ticks) / 8

    monkeypatch.setattr(streaming, "clock", clock)
    monkeypatch.setattr(streaming, "sleep", lambda seconds: ticks.append(seconds))
    return ticks


def stored_reply() -> str:
    return Message.objects.filter(role="assistant").order_by("seq").last().content


def assert_grows_into(card: dict, updates: list[dict], reply: str) -> None:
    """Every text the card showed before the last is a beginning of the reply, with the
    cursor, each longer than the one before; the last is the reply, exactly."""
    shown = [card["text"]] + [update["text"] for update in updates]
    assert shown[-1] == reply
    partial = [text.removesuffix(CURSOR) for text in shown[:-1]]
    assert all(text.endswith(CURSOR) for text in shown[:-1])
    assert all(reply.startswith(text) and text for text in partial)
    assert all(a < b for a, b in zip(map(len, partial), map(len, partial[1:]), strict=False))


def test_a_long_reply_is_written_into_one_card_updated_in_place(client, lark, model, steps):
    pieces = model.writes(LONG)
    assert deliver(client, message_event("ev-s1", "tell me a long story")).status_code == 200

    [card] = lark.cards
    assert (card["reply_to"], card["uuid"]) == ("om_ev-s1", "ev-s1-card")
    updates = lark.card_updates
    assert len(updates) >= 3 and all(u["message_id"] == card["message_id"] for u in updates)
    assert_grows_into(card, updates, LONG)
    assert stored_reply() == LONG == lark.shown(card["message_id"])
    assert lark.replies == []  # the card is the answer: no text message besides
    assert LarkEvent.objects.get().status == "done"
    # The card opened STEPS pieces after the first words, with the words so far.
    assert card["text"] == "".join(model.fake.split(LONG)[: STEPS + 1]) + CURSOR
    assert len([tick for tick in steps if tick is None]) == pieces + 1  # and the last update


def test_updates_are_throttled_however_many_pieces_the_model_sends(client, lark, model, steps):
    pieces = model.writes(LONG * 3, chunk_ms=0)
    deliver(client, message_event("ev-s2", "an even longer one"))
    [card] = lark.cards
    # One update per STEPS pieces at most, and the last one with the whole reply.
    assert len(lark.card_updates) <= pieces // STEPS + 1
    assert len(lark.card_updates) >= pieces // STEPS - 2
    assert pieces > 900 and len(lark.card_updates) < pieces / 3
    assert lark.shown(card["message_id"]) == stored_reply() == LONG * 3


def test_updates_keep_within_larks_rate_limit_in_real_time(client, lark, model, settings):
    """Real time, Lark's 5 updates a second per message enforced by the fake: none refused."""
    settings.ETHAN_LARK_CARD_SECONDS = 0.25
    model.writes(LONG, chunk_ms=4)  # about 1.4 s of writing
    deliver(client, message_event("ev-s3", "a long one, in real time"))
    [card] = lark.cards
    assert lark.update_attempts == len(lark.card_updates) >= 1
    assert_grows_into(card, lark.card_updates, LONG)
    assert lark.replies == []


def test_a_quick_reply_is_one_text_message(client, lark, model, steps):
    model.writes("Short and sweet.")  # 4 pieces: done before the card's interval
    deliver(client, message_event("ev-s4", "hi"))
    assert lark.cards == [] and lark.card_updates == []
    [reply] = lark.replies
    assert (reply["uuid"], json.loads(reply["content"])) == ("ev-s4", {"text": "Short and sweet."})


def test_a_group_message_for_the_bot_is_answered_in_a_card_under_it(client, lark, model, steps):
    model.writes(LONG)
    mention = [{"key": "@_user_1", "id": {"open_id": FakeLark.BOT_OPEN_ID}, "name": "Ethan"}]
    asked = message_event(
        "ev-s5", "@_user_1 说个长故事", chat_type="group", chat_id="oc_g", mentions=mention
    )
    deliver(client, asked)
    [card] = lark.cards
    assert card["reply_to"] == "om_ev-s5" and lark.shown(card["message_id"]) == LONG
    assert ChatSession.objects.get().messages.first().content == "说个长故事"


def test_a_card_that_cannot_be_sent_falls_back_to_one_text_message(client, lark, model, steps):
    lark.fail_cards = 1
    model.writes(LONG)
    deliver(client, message_event("ev-s6", "tell me a long story"))
    sends = [r for r in lark.requests if r.path.endswith("/reply")]
    # One card tried (not again while the model writes), then the whole reply as text.
    assert [r.body["msg_type"] for r in sends] == ["interactive", "text"]
    assert lark.cards == [] and not [r for r in lark.requests if r.method == "PATCH"]
    [reply] = lark.replies
    assert json.loads(reply["content"]) == {"text": LONG} and reply["uuid"] == "ev-s6"
    assert stored_reply() == LONG
    assert LarkEvent.objects.get().status == "done"


def test_a_card_whose_update_fails_once_is_brought_up_to_date_at_the_end(
    client, lark, model, steps
):
    lark.fail_update = lambda n: n == 2
    model.writes(LONG)
    deliver(client, message_event("ev-s7", "tell me a long story"))
    [card] = lark.cards
    # After the failed update, no more while the model writes; then one with the whole reply.
    assert lark.update_attempts == 3 and len(lark.card_updates) == 2
    assert lark.shown(card["message_id"]) == LONG == stored_reply()
    assert lark.replies == []


def test_a_card_that_can_no_longer_be_updated_keeps_its_words_and_the_reply_goes_as_text(
    client, lark, model, steps
):
    lark.fail_update = lambda n: n >= 2
    model.writes(LONG)
    deliver(client, message_event("ev-s8", "tell me a long story"))
    [card] = lark.cards
    shown = lark.shown(card["message_id"])
    assert shown.endswith(CURSOR) and LONG.startswith(shown.removesuffix(CURSOR))
    # The end tried with one retry, then the whole reply once, as text, under the card.
    assert lark.update_attempts == 4 and len(lark.card_updates) == 1
    [reply] = lark.replies
    assert json.loads(reply["content"]) == {"text": LONG} and reply["message_id"] == "om_ev-s8"
    assert stored_reply() == LONG
    assert LarkEvent.objects.get().status == "done"


def test_a_reply_too_long_for_a_card_goes_as_text(client, lark, model, steps, monkeypatch):
    from channels_app.lark import client as lark_client

    monkeypatch.setattr(lark_client, "CARD_MAX_BYTES", 900)  # Lark's is 30 KB
    model.writes(LONG)
    deliver(client, message_event("ev-s9", "tell me a long story"))
    [card] = lark.cards
    # Updated while the words fit, then left with them; the whole reply went as text.
    assert lark.update_attempts == len(lark.card_updates) >= 3
    assert all(lark_client.card_fits(update["text"]) for update in lark.card_updates)
    shown = lark.shown(card["message_id"])
    assert LONG.startswith(shown.removesuffix(CURSOR)) and len(shown) > 600
    [reply] = lark.replies
    assert json.loads(reply["content"]) == {"text": LONG}


def test_a_worker_whose_event_is_taken_back_never_updates_the_card_again(
    lark, model, steps, monkeypatch
):
    """The sweep takes the event back while the first worker's card is being written (a
    reclaim time shorter than the reply): the sweep answers again into the same card (Lark
    gives back the card sent under the same uuid), and the first worker, at its next update,
    finds its claim gone and stops: the card ends with the one stored reply."""
    model.writes(LONG)
    model.writes("The sweep's answer, " + LONG)
    sweep: dict = {}
    ticking = streaming.clock

    def clock():
        now = ticking()
        if lark.cards and not sweep:  # the first worker's card is out: the sweep runs now
            sweep["outcome"] = "running"  # (its own turn's words come through here too)
            sweep["outcome"] = lark_events_reclaim(older_than_seconds=0)
            sweep["updates"] = len(lark.card_updates)
        return now

    monkeypatch.setattr(streaming, "clock", clock)
    event = LarkEvent.objects.create(
        event_id="ev-s10",
        event_type="im.message.receive_v1",
        message_id="om_ev-s10",
        payload=message_event("ev-s10", "tell me a long story"),
    )
    assert lark_event_handle(event_pk=event.pk) == "taken over"
    assert sweep["outcome"] == ["done"]
    assert len(lark.card_updates) == sweep["updates"]  # nothing from the first worker since
    [card] = lark.cards
    answer = "The sweep's answer, " + LONG
    assert lark.shown(card["message_id"]) == answer == stored_reply()
    assert list(Message.objects.order_by("seq").values_list("role", flat=True)) == [
        "user",
        "assistant",
    ]
    assert lark.replies == []
    event.refresh_from_db()
    assert event.status == "done"
    assert ChatSession.objects.values_list("turn_claim", flat=True).get() == ""


def test_a_model_that_fails_mid_reply_leaves_the_apology_in_the_card(client, lark, model, steps):
    model.fake.reply(FakeOpenAI.text(LONG), chunk_ms=2, fail_after=60, fail_with="close")
    deliver(client, message_event("ev-s11", "tell me a long story"))
    [card] = lark.cards
    assert LONG.startswith(card["text"].removesuffix(CURSOR))
    shown = lark.shown(card["message_id"])
    assert shown.startswith("抱歉，模型暂时不可用，你的消息已保存") and lark.replies == []
    assert "your message is stored" in shown
    assert list(Message.objects.values_list("role", flat=True)) == ["user"]


def test_words_before_a_tool_step_stay_and_the_reply_follows(client, lark, model, steps):
    """The model writes, saves a memory, then answers: the card shows both, a blank line
    between, as every door shows a turn (channels_app.turns.Shown); the card only grows; the
    stored reply is the words after the step."""
    before = "Let me note that down before I answer you. "
    step = FakeOpenAI.tool_calls(
        ("call_1", "memory_write", {"content": "用户喜欢长故事", "category": "preference"})
    )
    step["choices"][0]["message"]["content"] = before
    model.fake.reply(step, first_chunk_ms=5, chunk_ms=2)
    model.writes(LONG)
    deliver(client, message_event("ev-s12", "记住我喜欢长故事，然后讲一个"))
    [card] = lark.cards
    whole = before + STEP_BREAK + LONG
    assert card["text"].startswith(before[:16])
    assert lark.shown(card["message_id"]) == whole
    assert stored_reply() == LONG
    texts = [card["text"]] + [update["text"].removesuffix(CURSOR) for update in lark.card_updates]
    assert all(whole.startswith(text.removesuffix(CURSOR)) for text in texts)
    assert lark.replies == []
