"""The turn-overhead and context-tokens benchmarks' measuring functions, at tiny sizes on the
test database (nothing is recorded)."""

from __future__ import annotations

import pytest

from bench import context_tokens, turn_overhead


@pytest.mark.django_db
def test_turn_overhead_grid_is_well_formed_and_costs_the_same_queries():
    cells = turn_overhead.run_grid(history_sizes=(10, 60), fact_sizes=(10, 40), turns=2, warmup=1)

    sizes = [(cell.messages, cell.facts) for cell in cells]
    assert sizes == [(10, 10), (60, 10), (10, 40), (60, 40)]
    for cell in cells:
        assert cell.turns == 2
        assert cell.paths == "medium"
        for p50, p95 in (cell.turn_ms, cell.model_ms, cell.overhead_ms):
            assert 0 < p50 <= p95
        assert cell.model_ms[1] < cell.turn_ms[1]
    # One query count, the same at both history sizes and both fact-store sizes.
    assert len({cell.queries_every_read for cell in cells}) == 1
    assert len(cells[0].queries) == 1
    assert turn_overhead.targets(cells)[0] is True


def test_steady_state_matches_a_caught_up_consolidator():
    # hot 10, batch 5, warm 20: 500 rounds leave 490 summarised, 480 of them extracted.
    assert turn_overhead.steady_state(500, hot=10, batch=5, warm=20) == (490, 480)
    assert turn_overhead.steady_state(5, hot=10, batch=5, warm=20) == (0, 0)
    assert turn_overhead.steady_state(34, hot=10, batch=5, warm=20) == (20, 20)
    assert turn_overhead.steady_state(49, hot=10, batch=5, warm=20) == (35, 20)


@pytest.mark.django_db(transaction=True)  # consolidation runs after each turn's commit
def test_context_tokens_rounds_are_well_formed(settings):
    settings.ETHAN_EMBEDDED = True  # the benchmark's set-up, also under the services suite
    settings.ETHAN_MEMORY_HOT_SIZE = 2
    settings.ETHAN_MEMORY_COMPRESS_BATCH = 2
    settings.ETHAN_MEMORY_WARM_CAPACITY = 4

    measured = context_tokens.run_rounds(rounds=14, seed=1)

    assert [row.round for row in measured] == list(range(1, 15))
    assert measured[0].sent == measured[0].baseline  # nothing to leave out yet
    for row in measured:
        assert row.sent == row.system + row.cold + row.warm + row.hot
        assert 0 < row.sent <= row.baseline
    last = measured[-1]
    assert last.warm > 0  # summaries formed
    assert last.sent < last.baseline
    low, high, _growth = context_tokens.flatness(measured, start=8)
    assert 0 < low <= high


def test_user_messages_are_deterministic_and_mixed():
    import random

    first = [context_tokens.user_message(random.Random(5)) for _ in range(2)]
    assert first[0] == first[1]
    rng = random.Random(5)
    messages = [context_tokens.user_message(rng) for _ in range(200)]
    chinese = sum(any("\u4e00" <= ch <= "\u9fff" for ch in text) for text in messages)
    assert 50 < chinese < 150
    assert len({len(text) for text in messages}) > 20
