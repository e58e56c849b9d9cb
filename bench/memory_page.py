"""我的记忆: how long the facts tab (/memory/) takes to render, and how many SQL queries it
costs, at 10 and at 10,000 facts.

One owner per store size, every fact active and said in one or two messages of a session (so
each row has its source links to show), all written with bulk_create. Each request goes through
the whole Django stack in this process (middleware, the signed-in session, the view, the
template) with the test client; the time is the request's, the queries are counted per request.
Besides the default view (most trusted first, page 1) it times the newest-first order on page
2, a search, and the 新记住的 tab with every fact new (never reviewed: its worst case).

Targets: the query count is the same at both sizes for every view (it must not grow with the
store), and the default view's p95 at 10,000 facts is within 2x of its p95 at 10.

    python -m bench.memory_page --quick --no-record    # 30 requests a view
    python -m bench.memory_page                        # 200 requests a view
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/ethan_bench_page python -m bench.memory_page
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta

from bench.common import append_results, command_line, django_setup, percentiles

SIZES = (10, 10_000)
# The views timed: (label, URL). The first is the one the target is about.
VIEWS = (
    ("facts tab", "/memory/"),
    ("newest first, page 2", "/memory/?sort=recent&page=2"),
    ("search", "/memory/?q=钢琴"),
    ("new since you last looked (all new)", "/memory/new/"),
)
LINES = (
    "我在学钢琴，每天练半个小时",
    "好的，我记下了。",
    "My project is called Atlas and it ships every two weeks",
    "Noted. Tell me if the plan changes.",
)
SOURCES = ("consolidator", "agent_proactive", "api", "mcp")
MESSAGES = 200


@dataclass(frozen=True)
class Cell:
    facts: int
    view: str
    requests: int
    ms: tuple[float, float]  # p50, p95
    queries: tuple[int, ...]  # the distinct per-request query counts seen (one, when constant)


def fill_owner(*, facts: int, rng: random.Random):
    """An owner with `facts` active facts, each said in one or two of a session's messages."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from bench.turn_overhead import template_facts
    from memory_app.models import Fact
    from sessions_app.models import ChatSession, Message
    from sessions_app.search import search_tokens

    get_user_model().objects.filter(username=f"page-{facts}").delete()  # a run before, on PG
    owner = get_user_model().objects.create_user(username=f"page-{facts}")
    now = timezone.now()
    session = ChatSession.objects.create(
        id=f"s_page_{facts}",
        owner=owner,
        title=LINES[0],
        channel=ChatSession.Channel.API,
        last_seq=MESSAGES,
        round_count=MESSAGES // 2,
        created_at=now - timedelta(days=1),
        updated_at=now,
    )
    Message.objects.bulk_create(
        [
            Message(
                session=session,
                seq=seq,
                role="user" if seq % 2 else "assistant",
                content=LINES[(seq - 1) % len(LINES)],
                search_tokens=search_tokens(LINES[(seq - 1) % len(LINES)]),
            )
            for seq in range(1, MESSAGES + 1)
        ]
    )
    said = list(session.messages.order_by("seq").values_list("pk", flat=True))
    rows = template_facts(
        owner=owner,
        count=facts,
        rng=rng,
        session=session,
        per_fact=lambda index: {
            "source": SOURCES[index % len(SOURCES)],
            "source_client": "Cursor" if index % len(SOURCES) == 3 else "",
            "hit_count": rng.randrange(1, 20),
            "created_at": now - timedelta(minutes=facts - index),
            "last_accessed": now - timedelta(minutes=rng.randrange(100_000)),
        },
    )
    created = Fact.objects.bulk_create(rows, batch_size=2_000)
    links = Fact.sources.through
    through = []
    for index, fact in enumerate(created):
        first = index % (MESSAGES - 1)
        for pk in said[first : first + 1 + index % 2]:
            through.append(links(fact_id=fact.pk, message_id=pk))
    links.objects.bulk_create(through, batch_size=5_000)
    return owner


def measure(*, owner, facts: int, requests: int, warmup: int) -> list[Cell]:
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client(HTTP_HOST="localhost")
    client.force_login(owner)
    cells = []
    for label, url in VIEWS:
        for _ in range(warmup):
            assert client.get(url).status_code == 200
        times, counts = [], set()
        for _ in range(requests):
            with CaptureQueriesContext(connection) as queries:
                start = time.perf_counter()
                response = client.get(url)
                elapsed = time.perf_counter() - start
            assert response.status_code == 200, (url, response.status_code)
            times.append(elapsed * 1000)
            counts.add(len(queries))
        cells.append(
            Cell(
                facts=facts,
                view=label,
                requests=requests,
                ms=percentiles(times),
                queries=tuple(sorted(counts)),
            )
        )
    return cells


def run(*, sizes=SIZES, requests: int = 200, warmup: int = 5, seed: int = 7) -> list[Cell]:
    from bench.turn_overhead import _analyze

    rng = random.Random(seed)
    cells = []
    for facts in sizes:
        owner = fill_owner(facts=facts, rng=rng)
        _analyze()  # PostgreSQL plans on fresh statistics, as a settled database has them
        cells += measure(owner=owner, facts=facts, requests=requests, warmup=warmup)
    return cells


def targets(cells: list[Cell]) -> tuple[bool, bool, float]:
    """(the query count is one number per view, the same at every size; the default view's p95
    at the largest size is within 2x of the smallest's; that ratio)."""
    flat = all(
        len({count for cell in cells if cell.view == view for count in cell.queries}) == 1
        for view, _ in VIEWS
    )
    default = sorted((cell for cell in cells if cell.view == VIEWS[0][0]), key=lambda c: c.facts)
    ratio = default[-1].ms[1] / default[0].ms[1]
    return flat, ratio <= 2.0, ratio


def table(cells: list[Cell]) -> str:
    lines = [
        "| facts | view | requests | p50 ms | p95 ms | SQL queries |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for cell in cells:
        lines.append(
            f"| {cell.facts:,} | {cell.view} | {cell.requests} | {cell.ms[0]:.1f} | "
            f"{cell.ms[1]:.1f} | {', '.join(map(str, cell.queries))} |"
        )
    flat, fast, ratio = targets(cells)
    lines.append("")
    lines.append(
        f"Query count the same at every size: {'yes' if flat else 'NO'}. "
        f"p95 of the facts tab at {cells[-1].facts:,} facts / at {cells[0].facts:,}: "
        f"{ratio:.2f}x (target within 2x: {'met' if fast else 'NOT met'})."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="30 requests a view, not 200")
    parser.add_argument("--requests", type=int, help="requests a view")
    parser.add_argument("--no-record", action="store_true", help="do not append to docs/")
    args = parser.parse_args(argv)
    # A SQLite home of its own: the other benchmarks share .bench-home, and may be running.
    home = None
    if "DATABASE_URL" not in os.environ and "ETHAN_HOME" not in os.environ:
        home = tempfile.mkdtemp(prefix="ethan-bench-memory-page-")
        os.environ["ETHAN_HOME"] = home
    try:
        django_setup(fresh_home=False)
        requests = args.requests or (30 if args.quick else 200)
        cells = run(requests=requests)
    finally:
        if home:
            shutil.rmtree(home, ignore_errors=True)
    result = table(cells)
    print(result)
    if not args.no_record:
        append_results(
            "我的记忆: facts tab render", command_line("bench.memory_page", argv), result
        )
    flat, fast, _ = targets(cells)
    return 0 if flat and fast else 1


if __name__ == "__main__":
    sys.exit(main())
