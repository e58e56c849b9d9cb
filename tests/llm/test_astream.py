"""ethan_llm.astream(): each SDK's async client (AsyncOpenAI, AsyncAnthropic, google-genai's `aio`)
streaming from its fake over a real socket: the same events as ethan_llm.stream, the same retries
before the first delta and none after it, and an event loop left free while the model writes."""

from __future__ import annotations

import asyncio
import gc
import time
from dataclasses import replace

import pytest

import ethan_llm
from ethan_llm import ModelConfigError, ModelUnavailable, StreamEnd, TextDelta, loop_clients
from ethan_llm.types import Message
from tests.llm.test_providers import MEMORY_WRITE
from tests.llm.test_streaming import BEFORE_TEXT, LONG, collect, tool_reply


async def events_of(**kwargs) -> list:
    return [event async for event in ethan_llm.astream(**kwargs)]


def astream(**kwargs) -> list:
    """ethan_llm.astream drained in an event loop of its own (a fresh one each call)."""
    return loop_clients.run(events_of(**kwargs))


def test_astream_gives_the_events_stream_gives(provider):
    provider.fake.reply(provider.text(LONG))
    provider.fake.reply(provider.text(LONG))
    asked = {"model": provider.model, "system": "You are Ethan.", "messages": [Message.user("hi")]}
    deltas, end = collect(astream(**asked))
    sync_deltas, sync_end = collect(ethan_llm.stream(**asked))
    assert len(deltas) > 1 and "".join(deltas) == LONG
    assert deltas == sync_deltas
    assert end.completion == replace(sync_end.completion, latency_ms=end.completion.latency_ms)
    assert [request.streamed for request in provider.fake.requests] == [True, True]
    # A second event loop gets a client of its own (connections belong to their loop).
    provider.fake.reply(provider.text("again"))
    assert collect(astream(**asked))[1].completion.text == "again"


@pytest.mark.parametrize("text", ["", "Let me save that for you."])
def test_astream_tool_calls_equal_the_sync_ones(provider, text):
    provider.fake.reply(tool_reply(provider, text))
    provider.fake.reply(tool_reply(provider, text))
    asked = {"model": provider.model, "messages": [Message.user("hi")], "tools": [MEMORY_WRITE]}
    _deltas, end = collect(astream(**asked))
    _sync_deltas, sync_end = collect(ethan_llm.stream(**asked))
    assert end.completion.tool_calls == sync_end.completion.tool_calls
    assert end.completion.tool_calls[0].name == "memory_write"


def test_astream_retries_a_503_and_a_break_before_the_first_delta(provider):
    provider.fake.reply(provider.error(503, "overloaded"), status=503)
    provider.fake.reply(provider.text(LONG), fail_after=BEFORE_TEXT[provider.name])
    provider.fake.reply(provider.text(LONG))
    deltas, end = collect(astream(model=provider.model, messages=[Message.user("hi")]))
    assert "".join(deltas) == end.completion.text == LONG
    assert len(provider.fake.requests) == 3


def test_astream_raises_a_break_after_the_first_delta_and_does_not_retry(provider):
    provider.fake.reply(provider.text(LONG), fail_after=5)
    provider.fake.reply(provider.text("a second answer nobody may see"))
    seen: list[str] = []

    async def read() -> None:
        async for event in ethan_llm.astream(model=provider.model, messages=[Message.user("hi")]):
            assert isinstance(event, TextDelta)
            seen.append(event.text)

    with pytest.raises(ModelUnavailable, match="not retried"):
        loop_clients.run(read())
    assert seen and LONG.startswith("".join(seen)) and "".join(seen) != LONG
    assert len(provider.fake.requests) == 1


def test_the_event_loop_is_free_while_the_model_writes(provider):
    """Two slow streams at once finish in about the time of one, and a ticker keeps ticking
    between their deltas: no call blocks the loop."""
    for _ in range(2):
        provider.fake.reply(provider.text(LONG), first_chunk_ms=150, chunk_ms=20)
    ticks: list[float] = []

    async def ticker(stop: asyncio.Event) -> None:
        while not stop.is_set():
            ticks.append(time.monotonic())
            await asyncio.sleep(0.01)

    async def both() -> list[list]:
        stop = asyncio.Event()
        ticking = asyncio.create_task(ticker(stop))
        asked = {"model": provider.model, "messages": [Message.user("hi")]}
        results = await asyncio.gather(events_of(**asked), events_of(**asked))
        stop.set()
        await ticking
        return results

    first, second = loop_clients.run(both())
    assert collect(first)[1].completion.text == collect(second)[1].completion.text == LONG
    # Both requests were open at once: the second was sent before the first's last chunk.
    one, two = sorted(provider.fake.requests, key=lambda request: request.chunk_times[0])
    assert two.chunk_times[0] < one.chunk_times[-1]
    # The loop ran the ticker while both waited for their first chunk (150 ms) and between
    # deltas.
    assert len(ticks) > 10


def test_astream_refuses_a_missing_key_before_any_request(provider, llm_config):
    llm_config.configure(env={})
    with pytest.raises(ModelConfigError, match=provider.key_var):
        ethan_llm.astream(model=provider.model, messages=[Message.user("hi")])
    assert provider.fake.requests == []


def test_the_offline_model_astreams_its_pieces(llm_config):
    events = astream(model="offline", messages=[Message.user("你好")])
    assert isinstance(events[-1], StreamEnd) and len(events) > 1
    sync = list(ethan_llm.stream(model="offline", messages=[Message.user("你好")]))
    assert [e.text for e in events[:-1]] == [e.text for e in sync[:-1]]


def _unclosed_after_a_stream(provider, *, close: bool) -> list[str]:
    """What a loop reports once its clients are collected after one stream, closed by
    ethan_llm.aclose or not: aiohttp reports a session it was never told to close."""
    provider.fake.reply(provider.text(LONG))
    reported: list[str] = []
    loop = asyncio.new_event_loop()
    loop.set_exception_handler(lambda _loop, context: reported.append(context["message"]))

    async def one_stream() -> None:
        await events_of(model=provider.model, messages=[Message.user("hi")])
        if close:
            await ethan_llm.aclose()

    try:
        loop.run_until_complete(one_stream())
    finally:
        loop.close()
    # A next loop asks for its own: the ended loop's clients are let go, and collected.
    provider.fake.reply(provider.text(LONG))
    loop_clients.run(events_of(model=provider.model, messages=[Message.user("hi")]))
    gc.collect()
    return reported


def test_aclose_closes_the_connections_a_loop_opened(provider):
    if provider.name != "gemini":  # google-genai lets an ended loop's session go quietly
        assert "Unclosed client session" in _unclosed_after_a_stream(provider, close=False)
    assert _unclosed_after_a_stream(provider, close=True) == []


def test_a_loop_gets_new_clients_after_aclose(provider):
    provider.fake.reply(provider.text("one"))
    provider.fake.reply(provider.text("two"))
    asked = {"model": provider.model, "messages": [Message.user("hi")]}

    async def twice() -> list[str]:
        first = collect(await events_of(**asked))[1].completion.text
        await ethan_llm.aclose()
        return [first, collect(await events_of(**asked))[1].completion.text]

    assert loop_clients.run(twice()) == ["one", "two"]
