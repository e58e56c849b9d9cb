"""The conversation-vectors bench at its smallest: a few rounds written here (not LoCoMo's),
the texts it counts and the vectors it compares."""

from __future__ import annotations

import json

import pytest

from bench import conversation_vectors as bench

pytestmark = pytest.mark.django_db

ROUNDS = [
    "I keep bees in my garden.",
    "How many hives do you have?",
    "Three, and a fourth next spring.",
    "That is a lot of honey.",
    "My sister sells it at the market in Ghent.",
    "A family business, then!",
]


def test_remembered_vectors_compute_the_two_new_texts_of_a_round_and_store_the_same(
    embedder_on,
):
    result = bench.measure(ROUNDS, rounds=3)
    # A round's two texts, plus the two before them written again when nothing is remembered
    # (the first round has none before it).
    assert result["computed"] == {"remembered": 6, "none remembered": 2 + 4 + 4}
    assert result["differ"] < 1e-6
    assert all(len(samples) == 3 for samples in result["cpu"].values())
    assert "| remembered | 2.00 |" in bench.table(result)


def test_a_locomo_conversation_is_read_as_its_sessions_in_order(tmp_path):
    conversation = {
        "speaker_a": "A",
        "speaker_b": "B",
        "session_2_date_time": "later",
        "session_2": [{"speaker": "A", "dia_id": "D2:1", "text": "third"}],
        "session_1_date_time": "then",
        "session_1": [
            {"speaker": "A", "dia_id": "D1:1", "text": "first"},
            {"speaker": "B", "dia_id": "D1:2", "text": "second"},
        ],
    }
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([{"conversation": conversation}]))
    assert bench.dialogue(path, 0) == ["first", "second", "third"]


def _locomo(tmp_path, conversations: int):
    def conversation(n: int) -> dict:
        turns = [
            {"speaker": "A", "dia_id": f"D1:{i}", "text": f"{text} ({n})"}
            for i, text in enumerate(ROUNDS)
        ]
        return {"conversation": {"session_1_date_time": "then", "session_1": turns}}

    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([conversation(n) for n in range(conversations)]))
    return path


def test_a_pass_over_many_sessions_runs_the_statements_of_one(embedder_on, tmp_path):
    """--sessions: each pass writes its sessions' new round, its statements do not grow with
    its sessions (sessions_app.services), and the table has a row for each."""
    path = _locomo(tmp_path, 2)
    texts = [bench.dialogue(path, n) for n in range(2)]
    found = {"this checkout": {n: bench.sessions_pass(texts[:n], rounds=3) for n in (1, 2)}}
    passes = found["this checkout"]
    assert passes[1]["statements"] == passes[2]["statements"] > 0
    assert all(one["cpu_ms"] > 0 for one in passes.values())
    assert "| this checkout | 2 |" in bench.sessions_table(found)


def test_the_same_pass_runs_in_a_checkout_before(tmp_path):
    """--before: the pass by another checkout's Python (here this one), on a home of its own."""
    from argparse import Namespace

    from bench.common import ROOT

    home = tmp_path / "home"
    home.mkdir()
    args = Namespace(data=_locomo(tmp_path, 2), rounds=3, before=ROOT)
    one = bench.before_pass(args, 2, str(home))
    assert one["statements"] > 0 and one["cpu_ms"] > 0
    assert (home / "ethan.sqlite3").exists()
