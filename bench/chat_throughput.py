"""Chat throughput: POST /api/chat (the offline model) under gunicorn, in requests per second,
with the web workers' CPU per request and the SQL statements a turn runs.

The client (threads, one keep-alive connection each) drives POST /api/chat for `seconds`, in
`slices` one after another (each slice's rate is reported: whatever else the machine does
shows there). Each client thread keeps one session for the whole run (its first turn starts
it). Then the queries per turn are counted in-process, as bench.turn_overhead counts them
(CaptureQueriesContext around turn_run).

Until issue 42 this bench also served a hand-written minimal turn and a bare DRF endpoint
(bench/urls.py, under bench.settings) and measured /api/chat against them; issue 19's target,
/api/chat at >= 50% of the minimal turn's rate, was met, and those runs stay in
docs/benchmarks/throughput.md. The hand-written turn drifted whenever the tables changed, so
it was retired: the bench now runs the product's own settings and URLs only.

    python -m bench.chat_throughput --quick --no-record     # 2 slices of 3 s
    python -m bench.chat_throughput                         # 4 slices of 5 s, concurrency 8
    python -m bench.chat_throughput --database sqlite       # SQLite, embedded mode (no broker)
    python -m bench.chat_throughput --profile 50            # then 50 in-process turns, cProfile

PostgreSQL (the default) needs PostgreSQL and Redis on 127.0.0.1: database ethan_bench_http is
dropped and re-created, Redis database 13 flushed, and consolidation goes to a real Celery
worker, as deployed. SQLite runs gunicorn alone on a throwaway home, embedded mode (the
consolidation runs in the web worker after each answer).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import threading
import time
from dataclasses import dataclass, field

from bench.common import append_results, command_line, percentile
from bench.server import (
    BenchStack,
    Request,
    Sample,
    add_gunicorn_arguments,
    cpu_note,
    cpu_readings,
    cpu_spent,
    fixed,
    gunicorn_from_args,
    load,
    statuses,
)

MESSAGES = (
    "plan the launch of the memory server",
    "I prefer short answers",
    "帮我规划下个季度的目标",
    "the deadline moved to Friday",
    "我最近在学钢琴",
)
# Far above any rate the bench reaches: the per-user throttle (600/min by default) would
# otherwise answer 429, and the bench user is one user.
API_RATE = "10000000/min"
DATABASES = ("postgresql", "sqlite")
FACTS = 200  # the bench user's active facts
# The profile shows the project's own functions plus the two costs they are made of: queries
# and enqueueing.
PROFILE_FILTER = (
    r"(agent_app|memory_app|sessions_app|profile_app|episodes_app|/llm/"
    r"|django/db/models/query.py|celery/app/task.py)"
)
TRANSACTION_CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE SAVEPOINT")


def transaction_control(sql: str) -> bool:
    """BEGIN, COMMIT, savepoints: logged by Django with the statements (and counted by
    CaptureQueriesContext), round trips all the same."""
    return sql.lstrip().upper().startswith(TRANSACTION_CONTROL)


# --- the requests ----------------------------------------------------------------------------


def turn_requests(token: str):
    """next_request for POST /api/chat: each thread's first message starts its session, the
    next ones continue it (the session id comes back in the answer). Returns it and the
    {thread: session id} it keeps, which outlives a slice: the next slice goes on with them."""
    sessions: dict[int, str] = {}
    counts: dict[int, int] = {}
    lock = threading.Lock()
    headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}

    def next_request(thread: int, previous: Sample | None) -> Request:
        if previous is not None and previous.status == 200:
            sessions[thread] = json.loads(previous.body)["session_id"]
        with lock:
            counts[thread] = counts.get(thread, 0) + 1
            seq = counts[thread]
        body = {"message": f"{MESSAGES[seq % len(MESSAGES)]} (#{seq})"}
        if thread in sessions:
            body["session_id"] = sessions[thread]
        return Request("POST", "/api/chat", json.dumps(body).encode(), headers, tag="chat")

    return next_request, sessions


# --- measuring -------------------------------------------------------------------------------


@dataclass
class Result:
    """The slices, added up."""

    samples: list[Sample] = field(default_factory=list)
    wall: float = 0.0
    cpu: dict[str, float] = field(default_factory=dict)
    slices: list[float] = field(default_factory=list)  # requests/s of each slice

    @property
    def ok(self) -> list[float]:
        return [s.latency_ms for s in self.samples if s.status == 200]

    @property
    def rps(self) -> float:
        return len(self.ok) / self.wall if self.wall else 0.0

    @property
    def errors(self) -> list[bytes]:
        return [s.body[:200] for s in self.samples if s.status != 200][:3]

    def cpu_ms_per_request(self, name: str) -> float:
        return self.cpu.get(name, 0.0) * 1000 / max(1, len(self.ok))

    def cpu_text(self, cores: int) -> str:
        """'gunicorn 2.5 s, celery 1.4 s, …, others on the machine 0.3 s (of 40 core-seconds)'."""
        parts = [
            f"{name} {value:.1f} s" for name, value in self.cpu.items() if name != "machine busy"
        ]
        ours = sum(value for name, value in self.cpu.items() if name != "machine busy")
        others = max(0.0, self.cpu.get("machine busy", 0.0) - ours)
        return (
            f"{', '.join(parts)}, others on the machine {others:.1f} s "
            f"(of {self.wall * cores:.1f} core-seconds)"
        )


def measure(
    stack: BenchStack, *, token: str, concurrency: int, seconds: float, slices: int
) -> Result:
    """POST /api/chat for `seconds` in all, in `slices` one after another; the CPU is read
    around each slice, so the pauses between them are not counted."""
    next_request = turn_requests(token)[0]
    result = Result()
    for _ in range(slices):
        before = cpu_readings(stack)
        samples, wall = load(
            base=stack.base_url,
            concurrency=concurrency,
            next_request=next_request,
            seconds=seconds / slices,
        )
        for key, value in cpu_spent(before, cpu_readings(stack)).items():
            result.cpu[key] = result.cpu.get(key, 0.0) + value
        result.samples.extend(samples)
        result.wall += wall
        result.slices.append(sum(1 for s in samples if s.status == 200) / wall)
    return result


def fill_memory(*, owner, facts: int = FACTS) -> None:
    """What the prompt reads, so the turn has something to read: `facts` active facts
    (bench.turn_overhead's templates, some sharing words with MESSAGES), and its rules,
    written profile and past episodes (turn_overhead.fill_rest)."""
    import random

    from django.utils import timezone

    from bench.turn_overhead import fill_rest, template_facts
    from memory_app.models import Fact

    rng = random.Random(5)
    Fact.objects.bulk_create(
        template_facts(owner=owner, count=facts, rng=rng, source=Fact.Source.API)
    )
    fill_rest(owner=owner, now=timezone.now(), rng=rng)


def count_queries(*, owner, turns: int = 10, warmup: int = 3) -> list[tuple[int, int]]:
    """Queries per turn, in-process, of the product's turn (turn_run on the API channel, as
    POST /api/chat runs it) on one session: `warmup` turns, then `turns` counted, as (all
    queries, of which transaction control). The deferred consolidation (embedded mode) runs
    after each turn, outside the count, as in bench.turn_overhead; with a broker it is
    published to the worker."""
    from django.db import connection, reset_queries
    from django.test.utils import CaptureQueriesContext

    from channels_app.turns import turn_run
    from ethan_shared.queue import run_deferred
    from sessions_app.models import ChatSession

    counts: list[tuple[int, int]] = []
    session = None
    for index in range(warmup + turns):
        text = f"{MESSAGES[index % len(MESSAGES)]} (#{index})"
        reset_queries()  # the query log is bounded: once full, CaptureQueriesContext counts nothing
        with CaptureQueriesContext(connection) as captured:
            session = turn_run(
                owner=owner, session=session, text=text, channel=ChatSession.Channel.API
            ).session
        run_deferred()
        if index >= warmup:
            sqls = [query["sql"] for query in captured.captured_queries]
            counts.append((len(sqls), sum(1 for sql in sqls if transaction_control(sql))))
    return counts


def queries_text(counts: list[tuple[int, int]]) -> str:
    """'24 (4 of them BEGIN/COMMIT)', or '24-25 (…)' when the count varies."""
    totals = sorted({total for total, _ in counts})
    control = sorted({control for _, control in counts})
    span = str(totals[0]) if len(totals) == 1 else f"{totals[0]}-{totals[-1]}"
    control_span = str(control[0]) if len(control) == 1 else f"{control[0]}-{control[-1]}"
    return f"{span} ({control_span} of them BEGIN/COMMIT/savepoints)"


def profile_turns(owner, turns: int) -> str:
    """cProfile over `turns` in-process turns on one session: where a turn's time goes."""
    from channels_app.turns import turn_run
    from sessions_app.models import ChatSession

    session = None
    for index in range(3):  # imports and first queries, not measured
        session = turn_run(
            owner=owner, session=session, text=MESSAGES[index], channel=ChatSession.Channel.API
        ).session
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    for index in range(turns):
        session = turn_run(
            owner=owner,
            session=session,
            text=f"{MESSAGES[index % len(MESSAGES)]} (#{index})",
            channel=ChatSession.Channel.API,
        ).session
    profiler.disable()
    per_turn = (time.perf_counter() - started) / turns * 1000
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("cumulative").print_stats(PROFILE_FILTER, 40)
    return f"{turns} in-process turns, {per_turn:.1f} ms each (under cProfile)\n{out.getvalue()}"


# --- the run ---------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database", choices=DATABASES, default="postgresql")
    parser.add_argument("--seconds", type=float, default=20, help="seconds of load, in all")
    parser.add_argument("--slices", type=int, default=4, help="slices, one after another")
    parser.add_argument("--concurrency", type=int, default=8, help="client threads")
    parser.add_argument("--quick", action="store_true", help="2 slices of 3 s")
    parser.add_argument("--no-record", action="store_true", help="do not append to docs/")
    parser.add_argument(
        "--profile", type=int, default=0, metavar="TURNS", help="then profile TURNS turns"
    )
    add_gunicorn_arguments(parser)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.slices = 6, 2
    gunicorn = gunicorn_from_args(args)
    extra_env = {"ETHAN_API_RATE": API_RATE}
    if args.database == "sqlite":
        from bench.first_delta import EmbeddedStack

        stack = EmbeddedStack(gunicorn=gunicorn, extra_env=extra_env)
        server = f"{gunicorn.label()}, embedded (no broker: consolidation in the web workers)"
    else:
        stack = BenchStack(
            gunicorn=gunicorn,
            celery_concurrency=args.celery_concurrency,
            celery_nice=args.celery_nice,
            extra_env=extra_env,
        )
        server = (
            f"{gunicorn.label()}; one Celery worker (prefork, concurrency "
            f"{args.celery_concurrency}{f', nice {args.celery_nice}' if args.celery_nice else ''}"
            ") on the memory and channels queues, Redis broker"
        )
    with stack:
        return run(args, stack, server, argv)


def run(args, stack: BenchStack, server: str, argv) -> int:
    from django.core.management import call_command
    from django.db import connections

    from bench.common import database_label
    from memory_app.models import Summary
    from sessions_app.models import ChatSession
    from sessions_app.services import local_user_get_or_create

    out = io.StringIO()
    call_command("ethan_token", "bench", stdout=out)  # `ethan token bench`
    token = out.getvalue().strip()
    owner = local_user_get_or_create(username="bench")
    fill_memory(owner=owner)
    connections.close_all()  # the web processes have the database to themselves

    # Warm-up, not measured: each gunicorn worker loads the URLconf, the offline model and
    # its connections. These sessions are left aside; the measured threads start new ones.
    warm = 2 * stack.gunicorn.workers * stack.gunicorn.threads
    next_request = turn_requests(token)[0]
    load(
        base=stack.base_url,
        concurrency=args.concurrency,
        next_request=fixed(next_request(i, None) for i in range(warm)),
    )
    warm_sessions = ChatSession.objects.count()
    connections.close_all()

    machine_load = cpu_note()
    started = time.perf_counter()
    result = measure(
        stack,
        token=token,
        concurrency=args.concurrency,
        seconds=args.seconds,
        slices=args.slices,
    )
    took = time.perf_counter() - started
    summaries = Summary.objects.count()
    sessions_made = ChatSession.objects.count() - warm_sessions
    label = database_label()

    counts = count_queries(owner=owner)

    passed = bool(result.ok) and not result.errors
    cores = os.cpu_count() or 1
    table = "\n".join(
        [
            f"{args.concurrency} client threads (one keep-alive http.client connection each); "
            f"POST /api/chat for {args.seconds:.0f} s in all, in {args.slices} slices of "
            f"{args.seconds / args.slices:.1f} s one after another; whole run {took:.0f} s. "
            f"{label}, {server}. The bench user has {FACTS} active facts, 5 rules, a written "
            f"profile and 50 past episodes (bench.turn_overhead's); the offline model, the path "
            f"by the router; each client thread keeps one session ({sessions_made} sessions, "
            f"{summaries} warm summaries written by the end). The API throttle is raised to "
            f"{API_RATE}. The machine ({cores} cores) is shared: other tests and benchmarks "
            f"may run meanwhile ({machine_load}; their CPU is under 'others on the machine'). "
            f"gunicorn CPU ms/request: the web workers' CPU over the slices divided by the "
            f"answers. Queries per turn: counted in-process afterwards (CaptureQueriesContext "
            f"around turn_run, 10 turns after 3, on the same messages), as bench.turn_overhead "
            f"counts them; the view adds the token lookup and the session lookup.",
            "",
            "| requests | HTTP 200 | requests/s | p50 ms | p99 ms "
            "| gunicorn CPU ms/request | queries/turn |",
            "|---|---|---|---|---|---|---|",
            f"| {len(result.samples)} | {len(result.ok)} | {result.rps:.1f} "
            f"| {percentile(result.ok, 0.5):.1f} | {percentile(result.ok, 0.99):.1f} "
            f"| {result.cpu_ms_per_request('gunicorn'):.1f} | {queries_text(counts)} |",
            "",
            f"Requests/s of each slice, in order: "
            f"{', '.join(f'{rps:.0f}' for rps in result.slices)}.",
            "",
            f"CPU during the slices: {result.cpu_text(cores)}.",
            *([] if passed else ["", f"Answers by status: {statuses(result.samples)}."]),
        ]
    )
    print(table)
    for error in result.errors:
        print(f"error: {error!r}", file=sys.stderr)
    if args.profile:
        print(profile_turns(local_user_get_or_create(username="bench-profile"), args.profile))
    if not args.no_record:
        title = (
            "Chat throughput of POST /api/chat (gunicorn, Celery, Redis)"
            if args.database == "postgresql"
            else "Chat throughput of POST /api/chat (gunicorn, embedded)"
        )
        append_results(title, command_line("bench.chat_throughput", argv), table, database=label)
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
