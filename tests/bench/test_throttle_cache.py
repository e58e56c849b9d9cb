"""The throttle-cache bench at its smallest: every store counted, each repeat in the table."""

from __future__ import annotations

import argparse

from bench import throttle_cache


def test_each_store_counts_the_requests_and_is_timed(tmp_path):
    for name in throttle_cache.STORES:
        cache = throttle_cache.store(name, str(tmp_path / "cache"))
        assert throttle_cache.requests_cost(cache, people=3, requests=9) > 0
        # Three requests each on top of the stored three: the latest first.
        assert len(cache.get("throttle_user_0")) == 6


def test_the_table_has_a_row_a_store_and_size():
    args = argparse.Namespace(people="1,5", requests=10, repeats=2)
    found = throttle_cache.run(args)
    assert set(found) == {(name, n) for name in throttle_cache.STORES for n in (1, 5)}
    assert all(len(costs) == 2 for costs in found.values())
    text = throttle_cache.table(found, args)
    assert text.count("\n| ") == 2 + len(found) - 1  # the header, then a row each
