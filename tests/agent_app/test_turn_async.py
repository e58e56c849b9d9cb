"""The one turn read with `async for` (an ASGI view's way, agent_app.turn_io.ASYNC): the model
through its SDK's async client, the database steps in a bounded pool of threads, the event loop
free while the model writes; and the same turn read with `for` (turn_io.SYNC) stores the same."""

from __future__ import annotations

import asyncio

import pytest

from agent_app.turn import Delta, Done, Failed, Started, turn_plan, turn_start
from ethan_llm import loop_clients
from sessions_app.models import ChatSession, Message

# The async turn's database steps run in other threads: its rows must be committed to be seen.
pytestmark = pytest.mark.django_db(transaction=True)

ANSWER = "Lisbon is a fine place to live, by the river, with its trams and its light."


def start(owner, text: str, session=None):
    plan = turn_plan(owner=owner, session=session, text=text, model="gpt-4o")
    return turn_start(plan)


async def read(turn) -> list:
    return [event async for event in turn]


def test_two_turns_stream_at_once_on_one_event_loop_and_are_stored(owner, fakes):
    fake = fakes["openai"]
    # The second answer starts later and is written faster, so it ends well before the first.
    fake.fake.reply(fake.text(ANSWER), first_chunk_ms=150, chunk_ms=60)
    fake.fake.reply(fake.text(ANSWER), first_chunk_ms=450, chunk_ms=5)
    first, second = start(owner, "Where do I live?"), start(owner, "And where do you live?")

    async def both():
        return await asyncio.gather(read(first), read(second))

    for events in loop_clients.run(both()):
        assert isinstance(events[0], Started) and isinstance(events[-1], Done)
        assert "".join(e.text for e in events if isinstance(e, Delta)) == ANSWER
        assert events[-1].reply == ANSWER
    # Both model requests were open at once: the second went out before the first ended.
    one, two = sorted(fake.fake.requests, key=lambda request: request.chunk_times[0])
    assert len(one.chunk_times) > 10
    assert two.chunk_times[0] < one.chunk_times[-1]
    for turn in (first, second):
        roles = list(turn.session.messages.order_by("seq").values_list("role", "content"))
        assert roles[-1] == (Message.Role.ASSISTANT, ANSWER)
        assert ChatSession.objects.get(pk=turn.session.pk).turn_claim == ""  # given back


def test_a_model_down_is_a_failed_event_and_the_question_stays_stored(owner, fakes, llm_config):
    fake = fakes["openai"]
    for _ in range(4):
        fake.fake.reply(fake.error(503, "overloaded"), status=503)
    turn = start(owner, "Hello?")
    events = loop_clients.run(read(turn))
    assert isinstance(events[-1], Failed) and events[-1].kind == "model_unavailable"
    stored = list(turn.session.messages.values_list("role", flat=True))
    assert stored == [Message.Role.USER]
    assert ChatSession.objects.get(pk=turn.session.pk).turn_claim == ""


def test_a_turn_is_read_one_way_only(owner, fakes):
    fakes["openai"].fake.reply(fakes["openai"].text(ANSWER))
    turn = start(owner, "Hi")
    assert isinstance(next(iter(turn)), Started)
    with pytest.raises(AssertionError, match="one way only"):
        turn.__aiter__()
    turn.finish()
    assert turn.session.messages.last().content == ANSWER


def test_a_turn_nobody_reads_to_the_end_is_still_run_and_stored(owner, fakes):
    """An ASGI client that left after the first event: afinish runs the rest of the turn."""
    fakes["openai"].fake.reply(fakes["openai"].text(ANSWER))
    turn = start(owner, "Hi")

    async def leave_early():
        events = turn.__aiter__()
        assert isinstance(await events.__anext__(), Started)
        await turn.afinish()

    loop_clients.run(leave_early())
    assert turn.session.messages.last().content == ANSWER
    assert ChatSession.objects.get(pk=turn.session.pk).turn_claim == ""
