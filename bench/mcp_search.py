"""memory_search over MCP against GET /api/search: the same search, the same queries, the same
person and database, in the same run, through the MCP server's streamable HTTP and through the
REST API, in latency p50 and p95.

One person with a history of `--messages` messages (bench.session_search's rows: 10 messages
a session, half the sessions Chinese and half English; written with bulk_create). Every query
goes through four doors, one after another, their order rotating from one query to the next,
so that whatever else the machine does falls on all of them alike:

    REST        GET /api/search?q=…&scope=all&limit=10 on gunicorn (`Authorization: Token`), one
                http.client keep-alive connection for the whole run
    MCP         tools/call memory_search through the official SDK's Client over streamable HTTP
                to `manage.py ethan_mcp --http` (uvicorn, a process of its own on the same
                database; `Authorization: Bearer`), one Client session for every call, as a host
                keeps one
    MCP raw     the same tools/call as one JSON-RPC POST from an httpx2 keep-alive client, no SDK
                on the client side: the server's share of MCP
    in-process  memory_search() in this process on the same database: the search alone

    MCP − MCP raw        = the SDK client (request framing, result validation)
    MCP raw − in-process = the MCP server (uvicorn, the SDK's transport, auth, tool dispatch)
    REST − in-process    = gunicorn, Django and DRF (token auth, throttle), the JSON answer

Each door's hits must be the same as the others', in the same order. Target (the issue): MCP's
p50 and p95 within 1.5× of GET /api/search's.

    python -m bench.mcp_search --quick --no-record      # 1,000 messages, 5 rounds
    python -m bench.mcp_search                          # 100,000 messages, 40 rounds
    python -m bench.mcp_search --database sqlite        # one database only

SQLite: gunicorn and the MCP server on one throwaway home, embedded mode (no broker).
PostgreSQL: as deployed, with a Celery worker on Redis (bench.server.BenchStack: database
ethan_bench_http is dropped and re-created, Redis database 13 flushed). Django is configured
once per process, so with both databases each runs in a child process of this module and this
one gathers the results, as in bench.first_delta.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import urlencode

from bench.common import percentiles, run_per_database
from bench.first_delta import API_RATE, EmbeddedStack, stack_for_database
from bench.server import (
    BenchStack,
    add_gunicorn_arguments,
    cpu_note,
    free_port,
    process_group_cpu,
)

DATABASES = ("sqlite", "postgresql")
# Words of bench.session_search's template lines, English and Chinese: every one has hits.
QUERIES = ("deadline", "Lisbon", "short answers", "钢琴", "报告", "周五 报告")
SCOPE = "all"  # both doors' default
LIMIT = 10
TOOL = "memory_search"
CLIENT_NAME = "ethan-bench"
TARGET = 1.5  # MCP p50 and p95 at most this many times GET /api/search's

REST, MCP, RAW, DIRECT = "REST", "MCP", "MCP raw", "in-process"
DOORS = (REST, MCP, RAW, DIRECT)
DOOR_LABELS = {
    REST: "GET /api/search (gunicorn)",
    MCP: "MCP memory_search (SDK Client)",
    RAW: "MCP memory_search (raw JSON-RPC POST)",
    DIRECT: "memory_search() in-process",
}


class BenchError(RuntimeError):
    """A search that did not answer as it should: the run stops, saying which."""


# --- the servers -------------------------------------------------------------------------------


class _WithMCP:
    """The stack, then `manage.py ethan_mcp --http` as a process of its own on the same
    environment (database, home, allowed hosts), stopped with the rest."""

    mcp_url = ""

    def _start(self) -> None:
        super()._start()
        bind = f"127.0.0.1:{free_port()}"
        self._spawn("mcp", [sys.executable, "manage.py", "ethan_mcp", "--http", "--bind", bind])
        self._wait_healthz("ethan_mcp", f"http://{bind}")
        self.mcp_url = f"http://{bind}/mcp"


class SQLiteStack(_WithMCP, EmbeddedStack):
    """gunicorn and the MCP server on one SQLite home, no broker."""


class PostgresStack(_WithMCP, BenchStack):
    """gunicorn, a Celery worker on Redis and the MCP server on the scratch PostgreSQL
    database."""


# --- the four doors ----------------------------------------------------------------------------

# A search's answer as the doors are compared: (kind, id) of each hit, best first.
Hits = list[tuple[str, int]]


class RestDoor:
    """GET /api/search over one keep-alive connection (reopened only when the server has
    closed it, which is counted)."""

    def __init__(self, base_url: str, token: str):
        host, port = base_url.removeprefix("http://").split(":")
        self.connection = http.client.HTTPConnection(host, int(port), timeout=30)
        self.headers = {"Authorization": f"Token {token}"}
        self.reconnects = 0

    def search(self, query: str) -> tuple[float, Hits]:
        path = "/api/search?" + urlencode({"q": query, "scope": SCOPE, "limit": LIMIT})
        started = time.perf_counter()
        try:
            self.connection.request("GET", path, headers=self.headers)
            response = self.connection.getresponse()
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            # gunicorn closes a keep-alive connection idle for 2 s (a slow first search on
            # another door): send again on a new one, as HTTP client libraries do.
            self.connection.close()
            self.reconnects += 1
            started = time.perf_counter()
            self.connection.request("GET", path, headers=self.headers)
            response = self.connection.getresponse()
        body = response.read()
        hits = json.loads(body) if response.status == 200 else None
        elapsed = (time.perf_counter() - started) * 1000
        if response.will_close:
            self.connection.close()  # http.client connects again on the next request
            self.reconnects += 1
        if hits is None:
            raise BenchError(f"GET {path}: HTTP {response.status} {body[:300]!r}")
        return elapsed, [(hit["kind"], hit["id"]) for hit in hits]

    def close(self) -> None:
        self.connection.close()


class RawDoor:
    """tools/call as one JSON-RPC POST, as the SDK's client frames it on the negotiated
    protocol (seen on the wire), from a synchronous httpx2 client with one keep-alive
    connection."""

    def __init__(self, mcp_url: str, token: str, protocol: str):
        import httpx2

        self.url = mcp_url
        self.protocol = protocol
        self.http = httpx2.Client(
            timeout=30,
            headers={
                "Authorization": f"Bearer {token}",
                "Accept": "application/json, text/event-stream",
                "Content-Type": "application/json",
                "Mcp-Protocol-Version": protocol,
                "Mcp-Method": "tools/call",
                "Mcp-Name": TOOL,
            },
        )
        self.ids = iter(range(1, 10**9))

    def search(self, query: str) -> tuple[float, Hits]:
        body = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": next(self.ids),
                "method": "tools/call",
                "params": {
                    "name": TOOL,
                    "arguments": {"query": query, "scope": SCOPE, "limit": LIMIT},
                    "_meta": {
                        "io.modelcontextprotocol/protocolVersion": self.protocol,
                        "io.modelcontextprotocol/clientInfo": {
                            "name": CLIENT_NAME,
                            "version": "1.0",
                        },
                        "io.modelcontextprotocol/clientCapabilities": {},
                    },
                },
            }
        )
        started = time.perf_counter()
        response = self.http.post(self.url, content=body)
        answer = json_rpc_answer(response.headers.get("content-type", ""), response.content)
        elapsed = (time.perf_counter() - started) * 1000
        result = (answer or {}).get("result") or {}
        if (
            response.status_code != 200
            or result.get("isError")
            or "structuredContent" not in result
        ):
            raise BenchError(f"POST {self.url}: HTTP {response.status_code} {response.text[:300]}")
        hits = result["structuredContent"]["hits"]
        return elapsed, [(hit["kind"], hit["id"]) for hit in hits]

    def close(self) -> None:
        self.http.close()


def json_rpc_answer(content_type: str, body: bytes) -> dict | None:
    """The JSON-RPC answer of a streamable HTTP POST: a JSON body, or the last `data:` line
    of an event stream."""
    if content_type.startswith("text/event-stream"):
        data = [line[5:] for line in body.decode().splitlines() if line.startswith("data:")]
        return json.loads(data[-1]) if data else None
    return json.loads(body) if body else None


class DirectDoor:
    """memory_search() in this process, in one thread of its own (Django's ORM is not for
    the event loop's thread), with one database connection kept for the run."""

    def __init__(self, owner_id: int):
        self.owner_id = owner_id
        self.pool = ThreadPoolExecutor(max_workers=1)
        self.owner = None

    def _search(self, query: str) -> tuple[float, Hits]:
        from django.contrib.auth import get_user_model

        from agent_app.memory_search import memory_search

        if self.owner is None:
            self.owner = get_user_model().objects.get(pk=self.owner_id)
        started = time.perf_counter()
        hits = memory_search(owner=self.owner, query=query, scope=SCOPE, limit=LIMIT)
        elapsed = (time.perf_counter() - started) * 1000
        return elapsed, [(hit.kind, hit.id) for hit in hits]

    async def search(self, query: str) -> tuple[float, Hits]:
        return await asyncio.get_running_loop().run_in_executor(self.pool, self._search, query)

    def close(self) -> None:
        from django.db import connections

        self.pool.submit(connections.close_all).result()
        self.pool.shutdown()


# --- the run -----------------------------------------------------------------------------------


@dataclass
class Run:
    """What the measured rounds gave: milliseconds per door, and per query and door."""

    samples: dict[str, list[float]] = field(default_factory=lambda: {d: [] for d in DOORS})
    by_query: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    hits: dict[str, int] = field(default_factory=dict)  # per query
    protocol: str = ""
    rest_reconnects: int = 0
    cpu: dict[str, float] = field(default_factory=dict)  # seconds per process, measured rounds


def measure(
    *,
    base_url: str,
    mcp_url: str,
    token: str,
    owner_id: int,
    queries: tuple[str, ...] = QUERIES,
    rounds: int,
    warmup: int,
    cpu: Callable[[], dict[str, float]] | None = None,
) -> Run:
    """`warmup` unmeasured rounds, then `rounds` measured ones; in each, every query through
    every door, one request at a time, the doors' order rotating by one from each query to the
    next. `cpu()` (CPU seconds per server process) is read when the measured rounds start and
    when they end."""
    import anyio

    return anyio.run(_measure, base_url, mcp_url, token, owner_id, queries, rounds, warmup, cpu)


async def _measure(base_url, mcp_url, token, owner_id, queries, rounds, warmup, cpu) -> Run:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp_types import Implementation

    run = Run(by_query={q: {d: [] for d in DOORS} for q in queries})
    expected: dict[str, Hits] = {}
    rest = RestDoor(base_url, token)
    direct = DirectDoor(owner_id)
    raw = None
    cpu_before: dict[str, float] = {}
    try:
        async with httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {token}"}, timeout=30
        ) as http:
            transport = streamable_http_client(mcp_url, http_client=http)
            info = Implementation(name=CLIENT_NAME, version="1.0")
            async with Client(transport, client_info=info) as client:
                run.protocol = client.session.protocol_version
                raw = RawDoor(mcp_url, token, run.protocol)

                async def through(door: str, query: str) -> tuple[float, Hits]:
                    if door == REST:
                        return rest.search(query)
                    if door == RAW:
                        return raw.search(query)
                    if door == DIRECT:
                        return await direct.search(query)
                    arguments = {"query": query, "scope": SCOPE, "limit": LIMIT}
                    started = time.perf_counter()
                    result = await client.call_tool(TOOL, arguments)
                    elapsed = (time.perf_counter() - started) * 1000
                    if result.is_error or result.structured_content is None:
                        raise BenchError(f"MCP {TOOL} {query!r}: {result.content[0].text}")
                    hits = result.structured_content["hits"]
                    return elapsed, [(hit["kind"], hit["id"]) for hit in hits]

                for index in range(warmup + rounds):
                    if index == warmup and cpu is not None:
                        cpu_before = cpu()
                    for position, query in enumerate(queries):
                        shift = (index * len(queries) + position) % len(DOORS)
                        for door in DOORS[shift:] + DOORS[:shift]:
                            elapsed, hits = await through(door, query)
                            if not hits:
                                raise BenchError(f"{door}: no hits for {query!r}")
                            if expected.setdefault(query, hits) != hits:
                                raise BenchError(
                                    f"{door} found other hits for {query!r} than "
                                    f"{DOORS[shift]}: {hits} ≠ {expected[query]}"
                                )
                            if index >= warmup:
                                run.samples[door].append(elapsed)
                                run.by_query[query][door].append(elapsed)
                if cpu is not None:
                    after = cpu()
                    run.cpu = {name: after[name] - cpu_before.get(name, 0) for name in after}
    finally:
        rest.close()
        direct.close()
        if raw is not None:
            raw.close()
    run.hits = {query: len(hits) for query, hits in expected.items()}
    run.rest_reconnects = rest.reconnects
    return run


# --- one database ------------------------------------------------------------------------------


def fill(messages: int, per_session: int = 10):
    """bench.session_search's history (the same seeded rows, their search tokens computed
    once per template line) for the person `bench`, with bulk_create on every database
    (session_search.bulk_fill; not session_search.fill, which copies on PostgreSQL: the runs
    recorded so far, and the table's own words, are bulk_create's), then fresh planner
    statistics on PostgreSQL (bench.turn_overhead._analyze)."""
    from django.contrib.auth import get_user_model

    from bench.session_search import bulk_fill
    from bench.turn_overhead import _analyze

    owner, _ = get_user_model().objects.get_or_create(username="bench")
    bulk_fill(owner, messages, per_session)
    _analyze()
    return owner


def prepare(messages: int) -> tuple[int, str, float]:
    """The person, their history (fill) and their API token: (owner id, token, seconds the
    fill took)."""
    from django.db import connections
    from rest_framework.authtoken.models import Token

    started = time.perf_counter()
    owner = fill(messages)
    took = time.perf_counter() - started
    token, _ = Token.objects.get_or_create(user=owner)
    connections.close_all()  # the servers have the database to themselves
    return owner.pk, token.key, took


def measure_database(database: str, args) -> dict:
    """Start the servers on `database`, fill it, run the rounds: a JSON-able result."""
    stack, server = stack_for_database(
        database,
        args,
        extra_env={"ETHAN_API_RATE": API_RATE},  # far above this run's rate
        embedded=SQLiteStack,
        deployed=PostgresStack,
    )
    with stack:
        from bench.common import database_label

        owner_id, token, filled = prepare(args.messages)
        groups = {
            p.bench_name: p.pid for p in stack.processes if p.bench_name in ("gunicorn", "mcp")
        }
        machine_load = cpu_note()
        started = time.perf_counter()
        run = measure(
            base_url=stack.base_url,
            mcp_url=stack.mcp_url,
            token=token,
            owner_id=owner_id,
            rounds=args.rounds,
            warmup=args.warmup,
            cpu=lambda: {name: process_group_cpu(pid) for name, pid in groups.items()},
        )
        took = time.perf_counter() - started
        label = database_label()
    return result_of(
        run,
        database=label,
        server=server,
        messages=args.messages,
        fill_seconds=filled,
        run_seconds=took,
        load=machine_load,
    )


def result_of(
    run: Run,
    *,
    database: str,
    messages: int,
    server: str = "",
    fill_seconds: float = 0.0,
    run_seconds: float = 0.0,
    load: str = "",
) -> dict:
    """One database's run with its setting, JSON-able (a child process hands it over so)."""
    return {
        "database": database,
        "server": server,
        "messages": messages,
        "fill_seconds": fill_seconds,
        "run_seconds": run_seconds,
        "load": load,
        "protocol": run.protocol,
        "rest_reconnects": run.rest_reconnects,
        "samples": run.samples,
        "by_query": run.by_query,
        "hits": run.hits,
        "cpu": run.cpu,
    }


# --- the report --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    met: bool
    ratios: dict[str, tuple[float, float]]  # database → MCP ÷ REST (p50, p95)


def verdict(results: list[dict]) -> Verdict:
    ratios = {}
    for result in results:
        (mcp50, mcp95), (rest50, rest95) = (
            percentiles(result["samples"][door]) for door in (MCP, REST)
        )
        ratios[result["database"]] = (mcp50 / rest50, mcp95 / rest95)
    met = all(p50 <= TARGET and p95 <= TARGET for p50, p95 in ratios.values())
    return Verdict(met=met, ratios=ratios)


def reconnects(count: int) -> str:
    if not count:
        return ""
    return f", the REST connection reopened {'once' if count == 1 else f'{count} times'}"


def report(results: list[dict], args) -> str:
    rows, query_rows, shares = [], [], []
    for result in results:
        name = result["database"].split()[0]
        of = {door: percentiles(result["samples"][door]) for door in DOORS}
        rest50, rest95 = of[REST]
        cpu = result["cpu"]
        server_cpu = {
            REST: cpu.get("gunicorn", 0.0) / max(1, len(result["samples"][REST])),
            # Both MCP doors reach the one server: its CPU is theirs together.
            MCP: cpu.get("mcp", 0.0)
            / max(1, len(result["samples"][MCP]) + len(result["samples"][RAW])),
        }
        for door in DOORS:
            p50, p95 = of[door]
            used = server_cpu.get(door if door != RAW else MCP)
            rows.append(
                f"| {name} | {DOOR_LABELS[door]} | {len(result['samples'][door])} | {p50:.1f} "
                f"| {p95:.1f} | {p50 / rest50:.2f}× | {p95 / rest95:.2f}× "
                f"| {'-' if used is None else f'{used * 1000:.1f}'} |"
            )
        for query, doors in result["by_query"].items():
            cells = " | ".join(f"{percentiles(doors[door])[0]:.1f}" for door in DOORS)
            query_rows.append(f"| {name} | `{query}` | {result['hits'][query]} | {cells} |")
        (mcp50, _), (raw50, _), (direct50, _) = of[MCP], of[RAW], of[DIRECT]
        shares.append(
            f"{name}: the search alone p50 {direct50:.1f} ms; REST adds {rest50 - direct50:.1f} "
            f"ms to it, MCP {mcp50 - direct50:.1f} ms, of which the MCP server (raw − in-process) "
            f"{raw50 - direct50:.1f} ms and the SDK client (MCP − raw) {mcp50 - raw50:.1f} ms"
        )
    servers = "; ".join(
        f"{r['database']}: {r['server']}, the MCP server `manage.py ethan_mcp --http` (uvicorn, "
        f"its own process), protocol {r['protocol']}; history written in "
        f"{r['fill_seconds']:.0f} s, measured in {r['run_seconds']:.0f} s, {r['load']}"
        f"{reconnects(r['rest_reconnects'])}"
        for r in results
    )
    messages = results[0]["messages"]
    result = verdict(results)
    ratios = "; ".join(
        f"{database.split()[0]} p50 {p50:.2f}×, p95 {p95:.2f}×"
        for database, (p50, p95) in result.ratios.items()
    )
    return "\n".join(
        [
            f"{messages:,} messages in {messages // 10:,} sessions of one person "
            f"(bench.session_search's rows, written with bulk_create: half the sessions "
            f"Chinese, half English). The same {len(QUERIES)} queries through every door "
            f"(scope={SCOPE}, limit={LIMIT}), "
            f"{args.rounds} measured rounds after {args.warmup} unmeasured, each query through "
            f"the four doors one request at a time, their order rotating from one query to the "
            f"next; every door's hits checked equal, in order. REST: one http.client keep-alive "
            f"connection, `Authorization: Token`. MCP: the official SDK's Client (mcp 2.3, "
            f"httpx2), one session for every call, `Authorization: Bearer`. MCP raw: the same "
            f"tools/call as one JSON-RPC POST from an httpx2 keep-alive client (the server's "
            f"share). in-process: memory_search() in the bench process on the same database "
            f"(the search alone). Server CPU: the serving process group's CPU over the measured "
            f"rounds per request (gunicorn for REST; the MCP server for both MCP doors "
            f"together). {servers}.",
            "",
            "| database | door | requests | p50 ms | p95 ms | ÷ REST p50 | ÷ REST p95 "
            "| server CPU ms/request |",
            "|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            "| database | query | hits | REST p50 ms | MCP p50 ms | MCP raw p50 ms "
            "| in-process p50 ms |",
            "|---|---|---|---|---|---|---|",
            *query_rows,
            "",
            *(f"- {share}" for share in shares),
            f"- MCP within {TARGET}× of GET /api/search, p50 and p95, on every database: "
            f"{'met' if result.met else 'NOT met'} ({ratios})",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database", choices=(*DATABASES, "both"), default="both")
    parser.add_argument("--quick", action="store_true", help="1,000 messages, 5 rounds")
    parser.add_argument("--messages", type=int, default=100_000, help="the person's history")
    parser.add_argument("--rounds", type=int, default=None, help="measured rounds (all queries)")
    parser.add_argument("--warmup", type=int, default=None, help="unmeasured rounds first")
    parser.add_argument("--no-record", action="store_true", help="do not append to docs/")
    parser.add_argument("--json", help=argparse.SUPPRESS)  # a child's result file
    # gthread: gunicorn keeps the REST client's connection open, as uvicorn keeps MCP's.
    add_gunicorn_arguments(parser, worker_class="gthread")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.quick:
        args.messages = 1_000
    args.rounds = args.rounds or (5 if args.quick else 40)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.quick else 3)

    return run_per_database(
        module="bench.mcp_search",
        argv=argv,
        args=args,
        databases=DATABASES,
        measure_database=measure_database,
        report=report,
        title=f"memory_search over MCP against /api/search ({args.messages:,} messages)",
    )


if __name__ == "__main__":
    raise SystemExit(main())
