"""The 我的记忆 benchmark at tiny sizes on the test database (nothing is recorded): well-formed
cells, and a query count per view that does not grow with the store."""

from __future__ import annotations

import pytest

from bench import memory_page


@pytest.mark.django_db
def test_memory_page_cells_are_well_formed_and_cost_the_same_queries_at_any_size():
    cells = memory_page.run(sizes=(10, 120), requests=3, warmup=1)

    assert [(cell.facts, cell.view) for cell in cells] == [
        (facts, view) for facts in (10, 120) for view, _ in memory_page.VIEWS
    ]
    for cell in cells:
        assert cell.requests == 3
        assert 0 < cell.ms[0] <= cell.ms[1]
        assert len(cell.queries) == 1  # the same for every request
    # The facts tab: the signed-in session and user, the count, the page, its sources.
    assert {cell.queries for cell in cells if cell.view == "facts tab"} == {(5,)}
    flat, _fast, ratio = memory_page.targets(cells)
    assert flat is True
    assert ratio > 0
    table = memory_page.table(cells)
    assert table.splitlines()[0] == "| facts | view | requests | p50 ms | p95 ms | SQL queries |"
    assert "Query count the same at every size: yes." in table


def test_targets_read_the_default_view_and_every_views_query_count():
    def cell(facts, view, p95, queries=(5,)):
        return memory_page.Cell(facts, view, 10, (p95 / 2, p95), queries)

    views = [view for view, _ in memory_page.VIEWS]
    steady = [cell(10, view, 10.0) for view in views] + [cell(10_000, view, 19.0) for view in views]
    assert memory_page.targets(steady) == (True, True, 1.9)
    slow = [*steady[: -len(views)], cell(10_000, views[0], 25.0), *steady[-len(views) + 1 :]]
    assert memory_page.targets(slow)[:2] == (True, False)
    growing = [*steady[:-1], cell(10_000, views[-1], 19.0, queries=(5, 6))]
    assert memory_page.targets(growing)[0] is False
