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


def test_the_before_server_runs_in_its_checkout(monkeypatch, tmp_path):
    """Started from this checkout's directory, another checkout's server imports this one's
    code (Celery's Django fixup puts the working directory first on sys.path): it is started in
    its own, with its own path first."""
    started = {}

    class Started(Exception):
        pass

    def popen(command, *, env, cwd, **kwargs):
        started.update(command=command, env=env, cwd=cwd)
        raise Started

    monkeypatch.setattr(request_cost.subprocess, "Popen", popen)
    side = request_cost.Side("before", {}, checkout=tmp_path)
    with pytest.raises(Started), request_cost.served([side], {"ETHAN_HOME": "/nowhere"}):
        pass
    assert started["cwd"] == tmp_path and started["env"]["PYTHONPATH"] == str(tmp_path)
    assert started["command"][0] == str(tmp_path / ".venv" / "bin" / "ethan")
