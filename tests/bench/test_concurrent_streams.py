"""The concurrent-streams benchmark: its slow model, its reading of what was stored and timed,
the order in which the servers take turns, and the whole bench at its smallest (`--quick`)
against both servers, `ethan serve` and the old gunicorn baseline, so that it cannot rot (no
timing is asserted, nothing is recorded)."""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import math
import os
import sys

import pytest

from bench import concurrent_streams
from bench.common import ROOT
from bench.concurrent_streams import ModelProcess, added_ms, server_order, storage_check
from bench.openai_compat import read_chunks
from tests.conftest import run_in_group


def test_the_slow_model_streams_its_reply_and_records_when():
    model = ModelProcess(first_chunk_ms=20, chunk_ms=10, stream_seconds=0.05)
    try:
        host, port = model.url.removeprefix("http://").split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=10)
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi (#7)"}]}
        connection.request(
            "POST",
            "/v1/chat/completions",
            json.dumps({**body, "stream": True}),
            {"Authorization": "Bearer k", "Content-Type": "application/json"},
        )
        response = connection.getresponse()
        lines = [(0.0, line) for line in response.read().splitlines(keepends=True)]
        connection.close()
        connection = http.client.HTTPConnection(host, int(port), timeout=10)
        connection.request("GET", "/_records")
        records = json.loads(connection.getresponse().read())
        connection.close()
    finally:
        model.close()

    times = read_chunks(lines)
    assert times.events == ("role", "delta", *["delta"] * 5, "stop", "done")
    assert times.text == model.reply == "w000w001w002w003w004w005"
    record = records["records"]["7"]
    assert record["arrived"] < record["first"] <= record["last"]
    assert records["peak_open"] == 1


def test_added_counts_a_stream_without_a_delta_as_longer_than_the_run():
    streams = [
        {"number": 1, "sent": 10.0, "first_delta": 11.3},
        {"number": 2, "sent": 10.0, "first_delta": None},
    ]
    records = {"1": {"arrived": 10.2, "first": 11.2}, "2": {"arrived": 10.5, "first": 11.5}}

    added = added_ms(streams, records)

    assert math.isclose(added["before"][0], 200.0)
    assert math.isclose(added["after"][0], 100.0)
    assert math.isclose(added["added"][0], 300.0)
    assert [math.isinf(values[1]) for values in added.values()] == [True, True, True]


def test_storage_check_wants_each_completed_reply_stored_once():
    streams = [
        {"number": 1, "done": 5.0},
        {"number": 2, "done": 5.0},
        {"number": 3, "done": 5.0},
        {"number": 4, "done": None},
    ]
    # 1: once; 2: twice; 3: one message but not the whole reply; 4: given up, stored anyway.
    stored = {1: (1, 1), 2: (2, 2), 3: (1, 0), 4: (1, 1)}

    assert storage_check(streams, stored) == {
        "completed": 3,
        "stored_once": 1,
        "stored_twice": 1,
        "not_completed_stored": 1,
    }


def test_the_servers_take_turns_going_first():
    servers = ("asgi", "gunicorn")

    assert [server_order(index, servers) for index in range(4)] == [
        ("asgi", "gunicorn"),
        ("gunicorn", "asgi"),
        ("asgi", "gunicorn"),
        ("gunicorn", "asgi"),
    ]
    assert server_order(1, ("asgi",)) == ("asgi",)


def test_a_run_with_nothing_to_measure_is_refused_before_anything_starts(capsys):
    with pytest.raises(SystemExit) as refused:
        concurrent_streams.main(["--levels", "", "--single", "0", "--no-record"])
    assert refused.value.code == 2
    assert "nothing to measure: give --levels, --single, or both" in capsys.readouterr().err


# The bench's own limit (240 s, below) is the one that ends it, and its group with it: it takes
# about a minute, and two or three on a machine busy with other work (pytest's default, 120 s,
# cut it off once while other processes shared the two cores).
@pytest.mark.timeout(300)
def test_the_quick_bench_runs_against_both_servers(tmp_path):
    out = tmp_path / "result.json"
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("ETHAN_", "DJANGO_", "DATABASE_", "CELERY_", "OPENAI_"))
    }
    command = [sys.executable, "-m", "bench.concurrent_streams", "--quick", "--json", str(out)]
    # Its model and servers are ended with it on every path, a timeout included (end_group).
    ran = run_in_group(command, cwd=ROOT, env=env, timeout=240)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    result = json.loads(out.read_text())

    assert [alone["arrival"] for alone in result["alone"]] == ["burst", "spread"]
    for alone in result["alone"]:
        assert all(s["done"] for s in alone["streams"])
    # Each measurement on a fresh server, the two taking turns going first.
    assert result["order"] == [
        ["single streams", ["asgi", "gunicorn"]],
        ["5 burst", ["gunicorn", "asgi"]],
        ["5 spread", ["asgi", "gunicorn"]],
    ]
    assert sorted(result["single"]) == ["asgi", "gunicorn"]
    for single in result["single"].values():
        assert all(s["done"] for s in single["streams"])
    assert [(level["server"], level["arrival"]) for level in result["levels"]] == [
        ("gunicorn", "burst"),
        ("asgi", "burst"),
        ("asgi", "spread"),
        ("gunicorn", "spread"),
    ]
    for level in result["levels"]:
        assert level["storage"] == {
            "completed": 5,
            "stored_once": 5,
            "stored_twice": 0,
            "not_completed_stored": 0,
        }
        assert {s["endpoint"] for s in level["streams"]} == {"/api/chat", "/v1/chat/completions"}
        assert level["healthz_ms"] and level["server_cpu"] > 0 and level["rss_peak"] > 0
        # Nothing left running when the level ended: each server exited on its first signal.
        assert not level["stop"]["killed"]
    assert [level["stop"]["signal"] for level in result["levels"]] == [
        "SIGQUIT",
        "SIGTERM",
        "SIGTERM",
        "SIGQUIT",
    ]
    # Spread: each stream sent a fifth of a stream's length after the one before.
    spread = next(level for level in result["levels"] if level["arrival"] == "spread")
    sent = sorted(s["sent"] for s in spread["streams"])
    assert all(later - earlier >= 0.2 for earlier, later in itertools.pairwise(sent))
    table = concurrent_streams.report([result], quick_args())
    for arrival in ("burst", "spread"):
        for server in ("asgi", "gunicorn"):
            assert table.count(f"\n| 5 | {arrival} | {server} | 5 (3 / 2) | 5 of 5 | 5 |") == 1
    for arrival in ("burst", "spread"):
        assert f"- Model alone, {arrival} (the same clients straight at bench.slow_model" in table
    assert "- Single streams, asgi (2 one after another, endpoints alternating, 2 completed)" in (
        table
    )
    assert "- Single streams, gunicorn (2 one after another" in table
    assert "`ethan serve` (ethan_site.asgi under uvicorn, one process)" in table


def quick_args() -> argparse.Namespace:
    """--quick's settings, which the report names."""
    return argparse.Namespace(
        first_chunk_ms=200.0,
        chunk_ms=100.0,
        stream_seconds=1.0,
        timeout=20,
        levels=(5,),
        arrival="both",
    )
