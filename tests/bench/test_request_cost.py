"""The request-cost bench at its smallest: two real `ethan serve` at once, a few requests each,
in turn; both stopped afterwards."""

from __future__ import annotations

import argparse

import pytest

from bench import request_cost


def _args(**changes) -> argparse.Namespace:
    values = {
        "env": ["ETHAN_REQUEST_THREADS_KEPT=8"],
        "before_env": ["ETHAN_REQUEST_THREADS_KEPT=0"],
        "path": "/api/chat",
        "stream": True,
        "requests": 4,
        "rounds": 1,
        "before": None,
    }
    return argparse.Namespace(**{**values, **changes})


@pytest.mark.timeout(300)
def test_two_servers_answer_in_turn_and_are_stopped():
    """The `before` server from a checkout of its own (--before; here this one, by its path)."""
    from bench.common import ROOT

    args = _args(before=ROOT)
    result = request_cost.run(args)
    (round_,) = result["rounds"]
    for side in ("change", "before"):
        assert round_[side]["cpu_ms"] > 0 and 0 < round_[side]["p50"] <= round_[side]["p95"]
    assert all(side.process.poll() is not None for side in result["sides"])
    rows = request_cost.table(result, args)
    assert "POST /api/chat (streamed), 4 requests" in rows
    assert "| change | ETHAN_REQUEST_THREADS_KEPT=8 |" in rows
    assert f"| before | ETHAN_REQUEST_THREADS_KEPT=0, the code of {ROOT} (" in rows


def test_only_ethan_settings_are_taken():
    assert request_cost.settings_of(["ETHAN_X=1"]) == {"ETHAN_X": "1"}
    for wrong in ("PATH=/tmp", "ETHAN_X"):
        with pytest.raises(SystemExit):
            request_cost.settings_of([wrong])
