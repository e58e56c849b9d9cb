"""The append-cost bench at its smallest: a few appends here, and by a checkout's own Python."""

from __future__ import annotations

import argparse

import pytest

from bench import append_cost
from sessions_app.models import Message


@pytest.mark.django_db
def test_the_appends_are_stored_and_timed():
    one = append_cost.appends(6)
    assert one["cpu_ms"] > 0
    assert Message.objects.count() == 7  # the session's first message, then the six
    args = argparse.Namespace(appends=6, repeats=2)
    rows = append_cost.table({"this checkout": [0.3, 0.2], "before (x)": [0.5, 0.4]}, args)
    assert "| this checkout | 0.250 | 0.300, 0.200 |" in rows


def test_the_same_appends_run_in_a_checkout_before(tmp_path):
    """--before: the appends by another checkout's Python (here this one), on SQLite in a home
    of its own, whatever database this process has."""
    from bench.common import ROOT

    home = tmp_path / "home"
    home.mkdir()
    args = argparse.Namespace(appends=6, before=ROOT)
    assert append_cost.before_appends(args, str(home)) > 0
    assert (home / "ethan.sqlite3").exists()
