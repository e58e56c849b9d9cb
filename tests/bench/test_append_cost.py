"""The append-cost bench at its smallest: a few appends here, and by a checkout's own Python."""

from __future__ import annotations

import argparse

import pytest

from bench import append_cost
from sessions_app.models import Message


@pytest.mark.django_db
def test_the_appends_are_stored_and_timed_here_and_in_a_checkout_before():
    """--before: the same appends by another checkout (here this one, by its path)."""
    from bench.common import ROOT

    args = argparse.Namespace(appends=6, repeats=2, before=ROOT)
    found = append_cost.run(args)

    assert list(found) == ["this checkout", f"before ({ROOT})"]
    assert all(len(samples) == 2 and min(samples) > 0 for samples in found.values())
    # This process's two repeats: two sessions of the first message and six appends each.
    assert Message.objects.count() == 2 * 7
    assert f"| before ({ROOT}) |" in append_cost.table(found, args)
