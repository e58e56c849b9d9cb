"""The OpenAI-compatibility benchmark: its reading of both endpoints' answers, and its core at
the smallest size against the server (as make serve runs it) on a home of its own, so that it
cannot rot (no timing is asserted, nothing is recorded)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from bench import openai_compat
from bench.first_delta import REPLY, PacedModel
from bench.openai_compat import API, CELLS, V1, Cell, answer_problem, read_chunks, stream_problem


def chunk_lines(chunks, start=10.0, step=0.001):
    """`data:` lines of chat.completion.chunk events as (time read, line) pairs, a blank line
    after each, one line every `step` seconds."""
    at = start
    for chunk in chunks:
        data = chunk if isinstance(chunk, str) else json.dumps(chunk)
        for line in (f"data: {data}\n", "\n"):
            yield at, line.encode()
            at += step


def chunk(delta: dict | None = None, finish: str | None = None, usage=None) -> dict:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {"object": "chat.completion.chunk", "choices": choices, "usage": usage}


def test_read_chunks_times_the_first_content_and_done():
    chunks = [
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "好的，"}),
        chunk({"content": "done."}),
        chunk({}, finish="stop"),
        chunk(usage={"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}),
        "[DONE]",
    ]

    times = read_chunks(chunk_lines(chunks))

    assert times.events == ("role", "delta", "delta", "stop", "usage", "done")
    # Two lines per event, a millisecond apart: the first text is the 2nd event's data line.
    assert times.first_delta == pytest.approx(10.002)
    assert times.last_event == pytest.approx(10.010)
    assert times.text == "好的，done."
    assert times.final == {"finish_reason": "stop"}
    assert stream_problem(V1, times) == ""
    assert "not the model's reply" in stream_problem(V1, times, REPLY)


def test_read_chunks_of_a_failed_turn():
    failed = {"error": {"message": "the model could not answer", "code": "model_failed"}}
    times = read_chunks(chunk_lines([chunk({"role": "assistant", "content": ""}), failed]))

    assert times.events == ("role", "error")
    assert times.first_delta is None
    assert times.final["code"] == "model_failed"
    assert "ended with ('error',)" in stream_problem(V1, times)


def test_answer_problem_knows_a_whole_turn_on_each_cell():
    sse = (
        b'event: started\ndata: {"session_id": "s_1"}\n\nevent: delta\ndata: {"text": "hi"}\n\n'
        b'event: done\ndata: {"session_id": "s_1", "reply": "hi"}\n\n'
    )
    chunks = b"".join(
        line
        for _, line in chunk_lines(
            [
                chunk({"role": "assistant", "content": ""}),
                chunk({"content": "hi"}),
                chunk({}, "stop"),
                "[DONE]",
            ]
        )
    )
    completion = {
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
    }
    whole = {
        Cell(API, False): json.dumps({"session_id": "s_1", "reply": "hi"}).encode(),
        Cell(API, True): sse,
        Cell(V1, False): json.dumps(completion).encode(),
        Cell(V1, True): chunks,
    }

    for cell in CELLS:
        assert answer_problem(cell, whole[cell]) == "", cell
    assert answer_problem(Cell(API, True), sse.split(b"event: done")[0])
    assert answer_problem(Cell(V1, True), chunks.replace(b"data: [DONE]", b""))
    assert answer_problem(Cell(V1, False), b'{"error": {"message": "no"}}')


def _user_messages(home, session_ids) -> int:
    marks = ",".join("?" * len(session_ids))
    with sqlite3.connect(home / "ethan.sqlite3") as db:
        [(count,)] = db.execute(
            f"SELECT COUNT(*) FROM sessions_app_message WHERE role = 'user' "
            f"AND session_id IN ({marks})",
            list(session_ids),
        )
    return count


def test_the_core_measures_both_endpoints_under_the_server(tmp_path):
    from tests.web_server import api_token, web_server

    model = PacedModel(first_chunk_ms=5, chunk_ms=0)
    home = tmp_path / "home"
    token = api_token(home, "bench")  # `ethan` migrates a new embedded home first
    env = {
        "OPENAI_API_KEY": "bench-key",
        "OPENAI_BASE_URL": model.base_url,
        "ETHAN_API_RATE": openai_compat.API_RATE,
    }
    try:
        with web_server(home, **env) as server:
            base_url = f"http://127.0.0.1:{server.port}"
            throughput = openai_compat.measure_throughput(
                base_url=base_url,
                token=token,
                concurrency=2,
                rounds=1,
                seconds=0.2,
                warmup_seconds=0,
            )
            first_delta = openai_compat.measure_first_delta(
                base_url=base_url, token=token, model=model, requests=2, warmup=1, pause=0
            )
    finally:
        model.close()

    sessions = [s for cell in CELLS for s in throughput[cell].sessions]
    assert len(set(sessions)) == len(sessions) == 2 * len(CELLS)
    for cell in CELLS:
        result = throughput[cell]
        assert result.ok and not result.problems, (cell, result.problems)
        # Every request a turn, stored once in the session it continued.
        assert result.turns == 2 + len(result.ok)
        assert _user_messages(home, result.sessions) == result.turns
    assert [len(first_delta[endpoint]) for endpoint in (API, V1)] == [2, 2]
    for timing in first_delta[API] + first_delta[V1]:
        assert timing.model_first_text > 0 and timing.before_model > 0

    table = openai_compat.report(
        throughput,
        first_delta,
        setting="test",
        concurrency=2,
        rounds=1,
        seconds=0.2,
        warmup_seconds=0,
        pause=0,
        first_chunk_ms=5,
        chunk_ms=0,
    )
    assert table.count("| /v1/chat/completions |") == 3  # two throughput rows, one delta row
    assert "- /v1 requests/s ≥ /api/chat's ÷ 1.2" in table
    assert "not a whole turn" not in table
