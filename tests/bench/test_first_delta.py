"""The time-to-first-delta benchmark's own reading and scoring (no server, nothing recorded)."""

from __future__ import annotations

import http.client
import json
import re

import pytest

from bench import first_delta
from bench.first_delta import REPLY, StreamTimes, Timing, read_events, timing, turn_problem


def sse_lines(events, start=10.0, step=0.001):
    """Server-Sent Events as (time read, line) pairs, one line every `step` seconds."""
    at = start
    for name, data in events:
        for line in (f"event: {name}\r\n", f"data: {json.dumps(data)}\r\n", "\r\n"):
            yield at, line.encode()
            at += step


def test_read_events_times_the_first_delta_and_done():
    events = [
        ("started", {"session_id": "s_1", "path": "medium", "model": "gpt-4o"}),
        ("delta", {"text": "好的，"}),
        ("delta", {"text": "done."}),
        ("done", {"session_id": "s_1", "reply": "好的，done."}),
    ]

    times = read_events(sse_lines(events))

    assert times.events == ("started", "delta", "delta", "done")
    # Each event is three lines a millisecond apart: the first delta's `event:` line is the 4th.
    assert times.first_delta == pytest.approx(10.003)
    assert times.last_event == pytest.approx(10.009)
    assert times.text == "好的，done."
    assert times.final["reply"] == "好的，done."


def test_read_events_without_a_delta_or_done():
    times = read_events(sse_lines([("started", {}), ("error", {"kind": "model_failed"})]))

    assert times.first_delta is None
    assert times.final == {"kind": "model_failed"}
    assert "ended with ('error',)" in turn_problem(times)


def test_turn_problem_accepts_only_a_whole_reply():
    good = StreamTimes(("started", "delta", "done"), 1.0, 2.0, REPLY, {"reply": REPLY})
    assert turn_problem(good) == ""
    cut = StreamTimes(("started", "delta", "done"), 1.0, 2.0, REPLY[:8], {"reply": REPLY})
    assert "not the reply" in turn_problem(cut)
    assert turn_problem(StreamTimes(("delta", "done"), 1.0, 2.0, REPLY, {"reply": REPLY}))


def test_timing_takes_the_models_own_time_out():
    # Sent at 100.000; the fake had the request at 100.020, its role chunk at 100.120, its
    # first text at 100.125 and its last chunk at 100.300; the client read the first delta at
    # 100.126 and done at 100.310.
    result = timing(
        sent=100.0,
        first_delta=100.126,
        done=100.310,
        arrived=100.020,
        chunk_times=[100.120, 100.125, 100.200, 100.300],
    )

    assert result.model_first_text == pytest.approx(105.0)
    assert result.before_model == pytest.approx(20.0)
    assert result.after_model == pytest.approx(1.0)
    assert result.added == pytest.approx(result.before_model + result.after_model)
    assert result.end_gap == pytest.approx(10.0)


def test_cells_and_targets():
    def row(added, end_gap):
        return Timing(added, added - 1, 1.0, 100.0, end_gap).__dict__

    result = {
        "database": "SQLite 3.40.1",
        "cells": {
            "10": [row(10.0 + i, 5.0) for i in range(20)],
            "100000": [row(20.0 + i, 40.0 if i == 19 else 5.0) for i in range(20)],
        },
    }

    small, large = first_delta.cells_of(result)

    assert (small.messages, small.requests) == (10, 20)
    assert small.added == (19.5, 28.0)  # median; nearest-rank p95 = the 19th of 20
    assert large.added == (29.5, 38.0)
    assert large.end_gap == (5.0, 5.0) and large.end_gap_max == 40.0
    assert first_delta.targets([small]) == (True, True)
    assert first_delta.targets([small, large]) == (False, True)


def test_the_paced_model_stamps_arrival_and_chunks():
    model = first_delta.PacedModel(first_chunk_ms=5, chunk_ms=1)
    try:
        host, port = model.fake.url.removeprefix("http://").split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=5)
        body = {
            "model": "gpt-4o",
            "messages": [{"role": "user", "content": "hello (#7)"}],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        connection.request(
            "POST",
            "/v1/chat/completions",
            json.dumps(body),
            {"Authorization": "Bearer k", "Content-Type": "application/json"},
        )
        frames = connection.getresponse().read().decode()
        connection.close()
        recorded = model.chat(7)
    finally:
        model.close()

    chunks = [json.loads(line[6:]) for line in frames.splitlines() if line.startswith("data: {")]
    # The first chunk carries the role and no text; the first text is FIRST_TEXT_CHUNK.
    assert not chunks[0]["choices"][0]["delta"]["content"]
    assert chunks[first_delta.FIRST_TEXT_CHUNK]["choices"][0]["delta"]["content"] == REPLY[:4]
    assert len(recorded.chunk_times) == len(chunks) + 1  # and `data: [DONE]`
    assert recorded.arrived < recorded.chunk_times[0] < recorded.chunk_times[-1]
    assert recorded.chunk_times[0] - recorded.arrived >= 0.005


@pytest.mark.django_db(transaction=True)
def test_profile_times_every_step_of_a_real_turn(llm_config, settings):
    """`--profile` patches the turn's steps by name: each must still be where the turn calls it
    (a renamed or moved step made --profile crash), and each is seen taking time."""
    settings.ALLOWED_HOSTS = ["127.0.0.1"]
    model = first_delta.PacedModel(first_chunk_ms=0, chunk_ms=0)
    llm_config.configure(env={"OPENAI_API_KEY": "test-key", "OPENAI_BASE_URL": model.base_url})
    try:
        token, sessions = first_delta.prepare(history_sizes=[40], facts=5, seed=1)
        report = first_delta.profile_first_delta(
            token=token, session_id=sessions[40], model=model, turns=1
        )
    finally:
        model.close()

    def p50(label: str) -> float:
        row = next(line for line in report.splitlines() if line.startswith(f"| {label} |"))
        return float(row.split("|")[2])

    # Every step has its row (a step the turn no longer calls would be an AttributeError
    # above); their times are the bench's to report, too small here to compare with zero.
    steps = first_delta.STEPS_BEFORE + first_delta.STEPS_AFTER
    assert all(p50(label) >= 0 for label, _module, _attribute in steps)
    assert re.search(r"Added before the first delta: .* ([1-9]\d*) SQL statements", report)
