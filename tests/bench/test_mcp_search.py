"""The MCP-against-REST search benchmark: its core at the smallest size, so that it cannot rot
(a small history on the test database, GET /api/search from Django's live server, the MCP
server in a thread, every door's hits checked equal), and its verdict. No timing is asserted,
nothing is recorded."""

from __future__ import annotations

from argparse import Namespace

import pytest
from rest_framework.authtoken.models import Token

from bench import mcp_search
from bench.mcp_search import DOORS, MCP, QUERIES, REST, Run


@pytest.mark.django_db(transaction=True)  # the servers' threads read what the test wrote
def test_the_core_sends_every_query_through_every_door(live_server):
    from tests.mcp_client import served_in_thread

    owner = mcp_search.fill(200)
    token = Token.objects.create(user=owner).key
    with served_in_thread() as mcp_url:
        run = mcp_search.measure(
            base_url=live_server.url,
            mcp_url=mcp_url,
            token=token,
            owner_id=owner.pk,
            rounds=1,
            warmup=0,
        )

    assert run.protocol
    # measure() checked that all four doors found the same hits, in order, for every query.
    assert set(run.hits) == set(QUERIES) and all(run.hits.values())
    for door in DOORS:
        assert len(run.samples[door]) == len(QUERIES)
        assert all(ms > 0 for ms in run.samples[door])
    for query in QUERIES:
        assert all(len(run.by_query[query][door]) == 1 for door in DOORS)
    table = mcp_search.report(
        [mcp_search.result_of(run, database="SQLite 3.40.1", messages=200)],
        Namespace(rounds=1, warmup=0),
    )
    assert "| SQLite | MCP memory_search (SDK Client) | 6 |" in table
    assert f"MCP within {mcp_search.TARGET}× of GET /api/search" in table


def _result(database: str, rest: list[float], mcp: list[float]) -> dict:
    run = Run()
    run.samples[REST] = rest
    run.samples[MCP] = mcp
    return mcp_search.result_of(run, database=database, messages=10)


def test_the_verdict_takes_p50_and_p95_on_every_database():
    rest = [10.0] * 20
    within = _result("SQLite 3.40.1", rest, [14.0] * 10 + [15.0] * 10)
    # Nearest-rank p95 of 20 samples is the 19th smallest: 16 ms, 1.6× REST's.
    slow_tail = _result("PostgreSQL 15.2", rest, [14.0] * 10 + [15.0] * 8 + [16.0] * 2)

    assert mcp_search.verdict([within]).met
    assert mcp_search.verdict([within]).ratios["SQLite 3.40.1"] == pytest.approx((1.45, 1.5))
    assert not mcp_search.verdict([within, slow_tail]).met
    assert mcp_search.verdict([slow_tail]).ratios["PostgreSQL 15.2"] == pytest.approx((1.45, 1.6))


def test_a_json_rpc_answer_as_json_or_as_an_event_stream():
    answer = b'{"jsonrpc": "2.0", "id": 1, "result": {}}'
    stream = b'event: message\r\ndata: {"jsonrpc": "2.0", "id": 1, "result": {}}\r\n\r\n'

    assert mcp_search.json_rpc_answer("application/json", answer)["id"] == 1
    assert mcp_search.json_rpc_answer("text/event-stream", stream)["id"] == 1
    assert mcp_search.json_rpc_answer("text/event-stream", b"") is None
