"""The chat-throughput benchmark: its request bodies, the in-process count of queries per
turn of /api/chat's turn, and the whole bench at its smallest on SQLite (gunicorn, embedded;
nothing recorded, no rate asserted), so that it cannot rot."""

from __future__ import annotations

import json
import os
import re
import sys

import pytest

from bench import chat_throughput
from bench.common import ROOT
from bench.server import Sample
from tests.conftest import run_in_group


def test_turn_requests_start_a_session_then_keep_it():
    next_request, sessions = chat_throughput.turn_requests("k")

    first = next_request(0, None)
    assert (first.method, first.path, first.tag) == ("POST", "/api/chat", "chat")
    assert first.headers["Authorization"] == "Token k"
    assert "session_id" not in json.loads(first.body)
    answer = Sample("chat", 200, 1.0, json.dumps({"session_id": "s_1"}).encode(), 0)
    later = next_request(0, answer)
    assert json.loads(later.body)["session_id"] == "s_1"
    assert sessions == {0: "s_1"}
    assert "session_id" not in json.loads(next_request(1, None).body)  # another thread


def test_transaction_control():
    assert chat_throughput.transaction_control("BEGIN IMMEDIATE")
    assert chat_throughput.transaction_control('RELEASE SAVEPOINT "s1_x2"')
    assert chat_throughput.transaction_control("COMMIT")
    assert not chat_throughput.transaction_control("SELECT 1")


def test_queries_text():
    assert chat_throughput.queries_text([(17, 4), (17, 4)]) == (
        "17 (4 of them BEGIN/COMMIT/savepoints)"
    )
    assert chat_throughput.queries_text([(18, 4), (17, 3)]) == (
        "17-18 (3-4 of them BEGIN/COMMIT/savepoints)"
    )


@pytest.mark.django_db(transaction=True)  # counted as a server runs them: no savepoints
def test_queries_per_turn_are_counted_on_the_products_turn(settings, owner):
    from sessions_app.models import ChatSession, Message

    settings.ETHAN_EMBEDDED = True

    counts = chat_throughput.count_queries(owner=owner, turns=3, warmup=1)

    assert len(counts) == 3
    for total, control in counts:
        assert 0 < control < total
    # Four turns on one session, through the product's turn: question and reply each.
    session = ChatSession.objects.get(owner=owner)
    assert Message.objects.filter(session=session, role=Message.Role.USER).count() == 4


# The bench's own limit (180 s, below) is the one that ends it, and its group with it: it takes
# about a minute, and two or three on a machine busy with other work (pytest's default, 120 s,
# cut it off once while other processes shared the two cores).
@pytest.mark.timeout(240)
def test_the_quick_bench_runs_against_the_products_server():
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("ETHAN_", "DJANGO_", "DATABASE_", "CELERY_", "OPENAI_"))
    }
    command = [
        *(sys.executable, "-m", "bench.chat_throughput", "--database", "sqlite"),
        *("--seconds", "2", "--slices", "2", "--concurrency", "2", "--no-record"),
    ]
    ran = run_in_group(command, cwd=ROOT, env=env, timeout=180)

    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    row = re.search(
        r"^\| (\d+) \| (\d+) \| ([\d.]+) \| [\d.]+ \| [\d.]+ \| [\d.]+ "
        r"\| (\d+)(?:-\d+)? \(\d+(?:-\d+)? of them BEGIN/COMMIT/savepoints\) \|$",
        ran.stdout,
        re.MULTILINE,
    )
    assert row, ran.stdout
    requests, answered, rate, queries = row.groups()
    assert int(requests) == int(answered) > 0 and float(rate) > 0
    assert int(queries) > 0
    assert re.search(r"Requests/s of each slice, in order: \d+, \d+\.", ran.stdout)
    assert "embedded" in ran.stdout and "minimal" not in ran.stdout
