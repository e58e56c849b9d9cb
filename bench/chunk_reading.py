"""CPU per chunk of reading an OpenAI Chat Completions stream: OpenAIProvider.astream (the
adapter reads the body's server-sent events itself, each chunk a plain dict) against the SDK's
own AsyncStream of pydantic chunks (how the adapter read them before), in the same run, from
bench.slow_model in a process of its own, so the CPU counted here is the client's alone.

Each round runs the ways one after the other, their order rotating: `--streams` streams at
once, each `--chunks` chunks of text, then the finish reason and the usage. Unpaced by default
(a "[warm-up]" message: the model writes its chunks at once, one write each); with --paced at
the model's pace, a chunk every --chunk-ms, so that each comes in a read of its own, as under
many slow streams. Reported per way: the median over the rounds of this process's CPU seconds
(user + system) per 1,000 chunks, and its range. The third way only reads the body's bytes: the
transport and the event loop, the floor under the other two.

    python -m bench.chunk_reading                     # 10 streams of 1,000 chunks, 5 rounds
    python -m bench.chunk_reading --paced --streams 200 --chunk-ms 50 --chunks 100
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable

from bench.common import machine, raise_open_files
from bench.concurrent_streams import ModelProcess
from bench.slow_model import WARM_UP, reply_text
from ethan_llm import config, loop_clients
from ethan_llm.openai_adapter import OpenAIProvider, _async_client, _client_args, _request_kwargs
from ethan_llm.provider import Request
from ethan_llm.types import Message, StreamEnd

MODEL = "gpt-4o"
# After the text, the model sends the finish reason and the usage, each a chunk of its own.
CHUNKS_AFTER_TEXT = 2


def request_for(paced: bool, number: int) -> Request:
    said = f"({number})" if paced else f"{WARM_UP} ({number})"
    return Request(
        model=MODEL,
        system="",
        messages=(Message.user(said),),
        tools=(),
        max_tokens=4096,
        timeout=120.0,
    )


async def through_the_adapter(request: Request, reply: str) -> None:
    end = None
    async for event in OpenAIProvider().astream(request):
        end = event
    if not isinstance(end, StreamEnd) or end.completion.text != reply:
        raise RuntimeError("the adapter's stream did not give the model's reply")


async def through_the_sdks_stream(request: Request, reply: str) -> None:
    """The SDK's AsyncStream, each chunk read as the adapter read the pydantic chunks before:
    choice 0's text, tool-call pieces and finish reason, and the usage."""
    client = _async_client(*_client_args(request))
    texts, finish, usage = [], None, None
    async with await client.chat.completions.create(**_request_kwargs(request)) as stream:
        async for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                if choice.index != 0:
                    continue
                delta = choice.delta
                if delta is not None and delta.content:
                    texts.append(delta.content)
                for piece in (delta.tool_calls if delta is not None else None) or []:
                    texts.append(piece.function.arguments if piece.function else "")
                finish = choice.finish_reason or finish
    if "".join(texts) != reply or finish is None or usage is None:
        raise RuntimeError("the SDK's stream did not give the model's reply")


async def only_the_bytes(request: Request, reply: str) -> None:
    client = _async_client(*_client_args(request))
    create = client.chat.completions.with_streaming_response.create
    async with create(**_request_kwargs(request)) as response:
        async for _piece in response.http_response.aiter_bytes():
            pass


WAYS: dict[str, Callable[[Request, str], Awaitable[None]]] = {
    "OpenAIProvider.astream": through_the_adapter,
    "the SDK's AsyncStream": through_the_sdks_stream,
    "the body's bytes only": only_the_bytes,
}


async def one_round(way, *, streams: int, paced: bool, reply: str, first: int) -> float:
    """CPU seconds of `streams` streams read at once the given way."""
    started = time.process_time()
    await asyncio.gather(*(way(request_for(paced, first + n), reply) for n in range(streams)))
    return time.process_time() - started


async def run(args, url: str, reply: str) -> dict[str, list[float]]:
    config.configure(env={"OPENAI_API_KEY": "bench", "OPENAI_BASE_URL": f"{url}/v1"})
    names = list(WAYS)
    per_thousand: dict[str, list[float]] = {name: [] for name in names}
    chunks = args.streams * (args.chunks + CHUNKS_AFTER_TEXT)
    number = 0
    for round_number in range(args.rounds + 1):  # the first round warms up, unmeasured
        shift = round_number % len(names)
        for name in names[shift:] + names[:shift]:
            cpu = await one_round(
                WAYS[name], streams=args.streams, paced=args.paced, reply=reply, first=number
            )
            number += args.streams
            if round_number:
                per_thousand[name].append(cpu / chunks * 1000)
    return per_thousand


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=10, help="streams at once")
    parser.add_argument("--chunks", type=int, default=1000, help="chunks of text per stream")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--paced", action="store_true", help="at the model's pace")
    parser.add_argument("--chunk-ms", type=float, default=50.0, help="the pace, with --paced")
    args = parser.parse_args(argv)
    raise_open_files()
    chunk_ms = args.chunk_ms if args.paced else 1.0  # unpaced, only the count matters
    stream_seconds = (args.chunks - 1) * chunk_ms / 1000
    model = ModelProcess(first_chunk_ms=chunk_ms, chunk_ms=chunk_ms, stream_seconds=stream_seconds)
    try:
        reply = reply_text(chunk_ms=chunk_ms, stream_seconds=stream_seconds)
        per_thousand = loop_clients.run(run(args, model.url, reply))
    finally:
        model.close()
    pace = f"a chunk every {args.chunk_ms:g} ms" if args.paced else "unpaced"
    print(
        f"{machine()}; {args.streams} streams at once of {args.chunks:,} chunks of text "
        f"(+{CHUNKS_AFTER_TEXT}), {pace}, {args.rounds} rounds"
    )
    print(f"{'':<26}CPU s per 1,000 chunks: median (min–max)")
    for name, values in per_thousand.items():
        print(f"{name:<26}{statistics.median(values):.3f}  ({min(values):.3f}–{max(values):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
