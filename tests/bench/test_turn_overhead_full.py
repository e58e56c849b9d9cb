"""bench.turn_overhead on the full path (its default since the lean-hot-path issue), at tiny
sizes on the test database (nothing is recorded)."""

from __future__ import annotations

import pytest

from bench import turn_overhead


@pytest.mark.django_db
def test_full_path_grid_reads_the_whole_prompt_at_the_same_query_count():
    from episodes_app.models import Episode
    from memory_app.models import Procedure
    from profile_app.models import ProfileSection

    cells = turn_overhead.run_grid(
        history_sizes=(10, 60), fact_sizes=(10,), turns=2, warmup=1, path="full"
    )

    assert [(cell.messages, cell.facts, cell.paths) for cell in cells] == [
        (10, 10, "full"),
        (60, 10, "full"),
    ]
    assert len({cell.queries_every_read for cell in cells}) == 1
    # What the full path's prompt reads is there to be read.
    assert Procedure.objects.count() == len(turn_overhead.RULES)
    assert ProfileSection.objects.count() == len(turn_overhead.PROFILE)
    assert Episode.objects.count() == turn_overhead.EPISODES
