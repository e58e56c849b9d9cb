"""The OpenAI adapter reads a Chat Completions stream's server-sent events itself (the SDK makes
the request): over a real socket from the fake, sync and async, it must read every body as the
SDK's own stream reads it: keep-alive comments, `event:`/`id:`/`retry:` fields, CRLF and CR line
ends, lines cut anywhere by the network, several `data:` lines in one event, an error payload,
a body that ends early."""

from __future__ import annotations

from typing import Any

import openai
import pytest

import ethan_llm
from ethan_llm import ModelRequestError, ModelUnavailable, StreamEnd, TextDelta, loop_clients
from ethan_llm.openai_adapter import OpenAIProvider, _ServerSentEvents
from ethan_llm.provider import Request
from ethan_llm.types import Message
from tests.fakes.base import Recorded, sse
from tests.fakes.openai_fake import FakeOpenAI

MODEL = "gpt-4o"
USAGE = {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}
DONE = sse("[DONE]")


class RawOpenAI(FakeOpenAI):
    """The OpenAI fake, but a streamed reply scripted as a list of bytes is sent as it is, each
    item one write (an HTTP chunk of its own)."""

    def stream_events(self, body: Any, recorded: Recorded) -> list[bytes]:
        if isinstance(body, list):
            return body
        return super().stream_events(body, recorded)


@pytest.fixture
def fake(llm_config):
    server = RawOpenAI()
    llm_config.configure(env={"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": f"{server.url}/v1"})
    yield server
    server.close()


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None) -> dict:
    choice = {"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish}
    return {"id": "c1", "object": "chat.completion.chunk", "model": MODEL, "choices": [choice]}


def text_frames(*pieces: str, finish: str | None = "stop", usage: bool = True) -> list[bytes]:
    """A text answer's events: the role, the pieces, the finish reason, the usage, [DONE]."""
    frames = [sse(chunk({"role": "assistant", "content": ""}))]
    frames += [sse(chunk({"content": piece})) for piece in pieces]
    if finish:
        frames.append(sse(chunk({}, finish)))
    if usage:
        frames.append(sse({"id": "c1", "choices": [], "usage": USAGE}))
    return frames


def ours(way: str) -> list:
    """The events of ethan_llm.stream or ethan_llm.astream, asked the same."""
    asked = {"model": MODEL, "messages": [Message.user("hi")]}
    if way == "stream":
        return list(ethan_llm.stream(**asked))

    async def read() -> list:
        return [event async for event in ethan_llm.astream(**asked)]

    return loop_clients.run(read())


def answer(events: list) -> tuple[list[str], str, str, tuple[int, int]]:
    """(the deltas' texts, the whole text, the finish reason, the token counts)."""
    *deltas, end = events
    assert all(isinstance(delta, TextDelta) for delta in deltas)
    assert isinstance(end, StreamEnd)
    completion = end.completion
    usage = (completion.usage.input_tokens, completion.usage.output_tokens)
    return [d.text for d in deltas], completion.text, completion.meta["finish_reason"], usage


def sdks_answer(fake: RawOpenAI, frames: list[bytes]) -> tuple[list[str], str, str, tuple]:
    """`frames` read by the SDK's own stream (pydantic chunks), as `answer` tells them."""
    fake.reply(frames)
    client = openai.OpenAI(api_key="k", base_url=f"{fake.url}/v1", max_retries=0)
    texts, finish, usage = [], None, (0, 0)
    with client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    ) as stream:
        for sdk_chunk in stream:
            if sdk_chunk.usage is not None:
                usage = (sdk_chunk.usage.prompt_tokens, sdk_chunk.usage.completion_tokens)
            for choice in sdk_chunk.choices:
                if choice.delta.content:
                    texts.append(choice.delta.content)
                finish = choice.finish_reason or finish
    return texts, "".join(texts), finish, usage


def crlf(frames: list[bytes], end: bytes = b"\r\n") -> list[bytes]:
    return [frame.replace(b"\n", end) for frame in frames]


def cut(frames: list[bytes], size: int) -> list[bytes]:
    """The same bytes in writes of `size` bytes: lines and UTF-8 characters cut anywhere."""
    body = b"".join(frames)
    return [body[i : i + size] for i in range(0, len(body), size)]


KEEP_ALIVE = [b": keep-alive\n\n", b":\n\n", b": OPENROUTER PROCESSING\n\n"]
BODIES = {
    "plain": [*text_frames("你好，", "Ethan", "。"), DONE],
    "keep-alive comments": [
        KEEP_ALIVE[0],
        *text_frames("你好，")[:1],
        KEEP_ALIVE[1],
        *text_frames("你好，", "Ethan")[1:3],
        KEEP_ALIVE[2],
        *text_frames("。")[1:],
        DONE,
    ],
    "event and id fields": [
        b"event: message\nid: 1\n" + frame for frame in text_frames("a", "b", "c")
    ]
    + [DONE],
    "CRLF": crlf([*text_frames("你好，", "Ethan", "。"), DONE]),
    "CR": crlf([*text_frames("你好，", "Ethan", "。"), DONE], b"\r"),
    "cut in 5-byte writes, CRLF": cut(crlf([*text_frames("你好，", "Ethan"), DONE]), 5),
    "several data lines in one event": [
        b'data: {"id": "c1", "choices":\ndata: [{"index": 0, "delta": {"content": "a"},\n'
        b'data: "finish_reason": null}]}\n\n',
        *text_frames("b")[1:],
        DONE,
    ],
    "no [DONE]": text_frames("the", " end"),
    "events after [DONE]": [*text_frames("kept"), DONE, *text_frames(" dropped"), DONE],
    "usage on every chunk, the last one's kept": [
        sse({**chunk({"content": "x"}), "usage": None}),
        sse({**chunk({}, "length"), "usage": None}),
        sse({"id": "c1", "choices": [], "usage": USAGE}),
        DONE,
    ],
}


@pytest.mark.parametrize("way", ["stream", "astream"])
@pytest.mark.parametrize("body", list(BODIES))
def test_a_body_reads_as_the_sdks_own_stream_reads_it(fake, way, body):
    expected = sdks_answer(fake, BODIES[body])
    fake.reply(BODIES[body], chunk_ms=1)
    got = answer(ours(way))
    assert got == expected
    assert got[1] and got[3] == (12, 5)


def test_a_line_cut_at_any_byte_gives_the_same_payloads():
    """Every place the network may cut a body: UTF-8 characters, CRLF halves (an event of
    several `data:` lines must not end at one)."""
    several_lines = BODIES["several data lines in one event"][0]
    body = b"".join(crlf([several_lines, *text_frames("你好")[1:], KEEP_ALIVE[0], DONE]))
    whole = list(_ServerSentEvents().feed(body))
    contents = [[choice["delta"].get("content") for choice in p["choices"]] for p in whole]
    assert contents == [["a"], ["你好"], [None], []]
    for at in range(1, len(body)):
        events = _ServerSentEvents()
        assert [*events.feed(body[:at]), *events.feed(body[at:])] == whole, at
        assert events.done


def test_an_event_with_no_data_is_none(fake):
    """As the SSE standard has it (the SDK would try to decode empty JSON)."""
    for way in ("stream", "astream"):
        fake.reply([b"retry: 3000\n\n", b"event: ping\n\n", *text_frames("ok"), DONE])
        assert answer(ours(way))[1] == "ok"


ERRORS = {
    "a message": {"error": {"message": "overloaded", "type": "server_error", "code": None}},
    "no message": {"error": {"type": "server_error"}},
    "a string": {"error": "something broke"},
    "invalid request": {"error": {"message": "bad schema", "type": "invalid_request_error"}},
}


def sdk_error(fake: RawOpenAI, frames: list[bytes]) -> openai.APIError:
    fake.reply(frames)
    client = openai.OpenAI(api_key="k", base_url=f"{fake.url}/v1", max_retries=0)
    with (
        pytest.raises(openai.APIError) as raised,
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=True
        ) as stream,
    ):
        for _chunk in stream:
            pass
    return raised.value


@pytest.mark.parametrize("event", [b"", b"event: error\n"])
@pytest.mark.parametrize("error", list(ERRORS))
def test_an_error_payload_raises_the_sdks_error(fake, error, event):
    frames = [*text_frames("half")[:2], event + sse(ERRORS[error]), *text_frames("never")[1:]]
    expected = sdk_error(fake, frames)
    request = Request(
        model=MODEL,
        system="",
        messages=(Message.user("hi"),),
        tools=(),
        max_tokens=64,
        timeout=5.0,
    )

    async def read_async() -> None:
        async for _event in OpenAIProvider().astream(request):
            pass

    for read in (
        lambda: list(OpenAIProvider().stream(request)),
        lambda: loop_clients.run(read_async()),
    ):
        fake.reply(frames)
        with pytest.raises(openai.APIError) as raised:
            read()
        got = raised.value
        assert type(got) is type(expected) is openai.APIError
        assert (got.message, got.body, got.code, got.type) == (
            expected.message,
            expected.body,
            expected.code,
            expected.type,
        )


@pytest.mark.parametrize("way", ["stream", "astream"])
def test_an_error_payload_after_the_first_delta_is_the_error_it_was(fake, way):
    fake.reply([*text_frames("half")[:2], sse(ERRORS["a message"]), DONE])
    with pytest.raises(ModelUnavailable) as raised:
        ours(way)
    assert str(raised.value) == (
        f"openai {MODEL!r}: error in the stream: overloaded "
        "(the stream broke after it started; not retried)"
    )


@pytest.mark.parametrize("way", ["stream", "astream"])
def test_text_and_an_error_in_one_read_give_the_text_then_the_error(fake, way):
    # One write: a transport may hand the text and the error after it over in one read.
    fake.reply([b"".join([*text_frames("half", " more")[:3], sse(ERRORS["a message"]), DONE])])
    seen: list[str] = []
    asked = {"model": MODEL, "messages": [Message.user("hi")]}

    async def read_async() -> None:
        async for event in ethan_llm.astream(**asked):
            seen.append(event.text)

    with pytest.raises(ModelUnavailable, match=r"overloaded .*not retried"):
        if way == "stream":
            seen.extend(event.text for event in ethan_llm.stream(**asked))
        else:
            loop_clients.run(read_async())
    assert seen == ["half", " more"]
    assert len(fake.requests) == 1


@pytest.mark.parametrize("way", ["stream", "astream"])
def test_an_invalid_request_error_before_the_first_delta_is_a_request_error(fake, way):
    fake.reply([*text_frames()[:1], sse(ERRORS["invalid request"]), DONE])
    with pytest.raises(ModelRequestError, match="openai rejected the request for 'gpt-4o': bad"):
        ours(way)
    assert len(fake.requests) == 1


@pytest.mark.parametrize("way", ["stream", "astream"])
def test_a_stream_that_ends_unfinished_is_unavailable(fake, way):
    fake.reply(text_frames("half", finish=None, usage=False))
    with pytest.raises(ModelUnavailable, match="the stream ended unfinished"):
        ours(way)


@pytest.mark.parametrize("way", ["stream", "astream"])
def test_a_body_with_no_events_has_no_choices(fake, way, llm_config):
    llm_config.configure(retries=0)
    fake.reply([*KEEP_ALIVE, DONE])
    with pytest.raises(ModelUnavailable, match="the answer had no choices"):
        ours(way)


@pytest.mark.parametrize("way", ["stream", "astream"])
def test_a_read_timeout_mid_stream_is_a_timeout(fake, way, llm_config):
    """The first text arrives, the next not within the read timeout."""
    llm_config.configure(timeout=0.3)
    role, one, *rest = text_frames("one", "two")
    fake.reply([role + one, *rest], chunk_ms=600)
    with pytest.raises(ModelUnavailable) as raised:
        ours(way)
    assert str(raised.value) == (
        f"openai {MODEL!r}: the request timed out (the stream broke after it started; not retried)"
    )
    assert len(fake.requests) == 1
