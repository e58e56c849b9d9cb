"""The chat-throughput benchmark's own pieces, in their quickest form (no server, nothing
recorded): the rotation of the endpoints, the request bodies, and the in-process count of
queries per turn of /api/chat's turn and of the minimal turn."""

from __future__ import annotations

import json

import pytest

from bench import chat_throughput
from bench.server import Sample


def test_every_endpoint_leads_a_round_in_turn():
    names = ("bare", "minimal", "chat")
    assert chat_throughput.rotation(names, 4) == [
        ("bare", "minimal", "chat"),
        ("minimal", "chat", "bare"),
        ("chat", "bare", "minimal"),
        ("bare", "minimal", "chat"),
    ]


def test_turn_requests_start_a_session_then_keep_it():
    next_request, sessions = chat_throughput.turn_requests("k", "/bench/minimal-turn", "minimal")

    first = next_request(0, None)
    assert first.path == "/bench/minimal-turn" and first.tag == "minimal"
    assert "session_id" not in json.loads(first.body)
    answer = Sample("minimal", 200, 1.0, json.dumps({"session_id": "s_1"}).encode(), 0)
    later = next_request(0, answer)
    assert json.loads(later.body)["session_id"] == "s_1"
    assert sessions == {0: "s_1"}
    assert "session_id" not in json.loads(next_request(1, None).body)  # another thread


def test_transaction_control():
    assert chat_throughput.transaction_control("BEGIN IMMEDIATE")
    assert chat_throughput.transaction_control('RELEASE SAVEPOINT "s1_x2"')
    assert chat_throughput.transaction_control("COMMIT")
    assert not chat_throughput.transaction_control("SELECT 1")


@pytest.mark.django_db(transaction=True)  # counted as a server runs them: no savepoints
def test_queries_per_turn_are_counted_for_both_turns(settings, owner):
    settings.ETHAN_EMBEDDED = True

    counts = chat_throughput.count_queries(owner=owner, turns=3, warmup=1)

    assert len(counts["chat"]) == len(counts["minimal"]) == 3
    assert set(counts["minimal"]) == {(13, 4)}  # nine statements, two transactions
    for total, control in counts["chat"]:
        assert 0 < control < total
    assert "13 (4 of them" in chat_throughput.queries_text(counts["minimal"])
