"""Chat throughput: POST /api/chat (the offline model) under gunicorn, in requests per second,
against a bare authenticated DRF endpoint of the same app in the same run.

Both are driven by the same client (threads, one keep-alive connection each), at the same
concurrency, for the same time, against the same gunicorn. Each client thread chats on a session
of its own, created by its first request. Consolidation goes to a real Celery worker through
Redis, as deployed. The bare endpoint (bench/urls.py) exists only under bench.settings.

    python -m bench.chat_throughput --quick --no-record     # 5 s per endpoint
    python -m bench.chat_throughput                         # 20 s per endpoint, concurrency 8
    python -m bench.chat_throughput --profile 50            # then 50 in-process turns, cProfile

Needs PostgreSQL and Redis on 127.0.0.1 (database ethan_bench_http is dropped and re-created;
Redis database 13 is flushed).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import threading
import time

from bench.common import append_results, command_line, percentile
from bench.server import (
    BenchStack,
    Request,
    Sample,
    add_gunicorn_arguments,
    cpu_note,
    cpu_used,
    fixed,
    gunicorn_from_args,
    load,
    statuses,
)

TARGET_RATIO = 0.5
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
# The profile shows the project's own functions plus the two costs they are made of: queries
# and enqueueing.
PROFILE_FILTER = (
    r"(agent_app|memory_app|sessions_app|profile_app|episodes_app|/llm/"
    r"|django/db/models/query.py|celery/app/task.py)"
)


def chat_requests(token: str) -> tuple:
    """next_request for the chat: each thread's first message starts its session, the next
    ones continue it (the session id comes back in the answer)."""
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


def bare_requests(token: str):
    headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
    # The same kind of body as a chat message, so both read the same bytes.
    body = json.dumps({"message": f"{MESSAGES[0]} (#1)"}).encode()

    def next_request(thread: int, previous: Sample | None) -> Request:
        return Request("POST", "/bench/bare", body, headers, tag="bare")

    return next_request


def measure(stack: BenchStack, concurrency: int, seconds: float, next_request) -> dict:
    before = stack.cpu_seconds()
    samples, wall = load(
        base=stack.base_url, concurrency=concurrency, next_request=next_request, seconds=seconds
    )
    cpu = cpu_used(before, stack.cpu_seconds(), wall)
    ok = [s.latency_ms for s in samples if s.status == 200]
    return {
        "requests": len(samples),
        "ok": len(ok),
        "statuses": statuses(samples),
        "rps": len(ok) / wall,
        "p50": percentile(ok, 0.5),
        "p99": percentile(ok, 0.99),
        "wall": wall,
        "cpu": cpu,
        "errors": [s.body[:200] for s in samples if s.status != 200][:3],
    }


def profile_turns(owner, turns: int) -> str:
    """cProfile over `turns` in-process turns on one session: where a turn's time goes."""
    from agent_app.turn import turn_run
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=20, help="seconds per endpoint")
    parser.add_argument("--concurrency", type=int, default=8, help="client threads")
    parser.add_argument("--quick", action="store_true", help="5 s per endpoint")
    parser.add_argument("--no-record", action="store_true", help="do not append to docs/")
    parser.add_argument(
        "--profile", type=int, default=0, metavar="TURNS", help="then profile TURNS turns"
    )
    add_gunicorn_arguments(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds = 5
    gunicorn = gunicorn_from_args(args)
    with BenchStack(
        gunicorn=gunicorn,
        settings_module="bench.settings",
        celery_concurrency=args.celery_concurrency,
        celery_nice=args.celery_nice,
        extra_env={"ETHAN_API_RATE": API_RATE},
    ) as stack:
        return run(args, stack, gunicorn.label(), argv)


def run(args, stack: BenchStack, gunicorn_label: str, argv) -> int:
    from django.core.management import call_command

    from memory_app.models import Summary
    from sessions_app.models import ChatSession

    out = io.StringIO()
    call_command("ethan_token", "bench", stdout=out)  # `ethan token bench`
    token = out.getvalue().strip()

    # Warm-up, not measured: each gunicorn worker loads the URLconf, the offline model and
    # its connections. These sessions are left aside; the measured threads start new ones.
    warm_chat, _ = chat_requests(token)
    warm = [warm_chat(i, None) for i in range(2 * stack.gunicorn.workers * stack.gunicorn.threads)]
    bare = bare_requests(token)
    load(base=stack.base_url, concurrency=args.concurrency, next_request=fixed(warm))
    load(
        base=stack.base_url,
        concurrency=args.concurrency,
        next_request=fixed(bare(0, None) for _ in range(len(warm))),
    )
    warm_sessions = ChatSession.objects.count()

    machine_load = cpu_note()
    # The bare endpoint first: the chat leaves consolidation work on the worker behind it,
    # which would otherwise compete with the bare run for the CPU.
    bare_result = measure(stack, args.concurrency, args.seconds, bare)
    chat_next, _ = chat_requests(token)
    chat_result = measure(stack, args.concurrency, args.seconds, chat_next)
    summaries = Summary.objects.count()
    sessions_made = ChatSession.objects.count() - warm_sessions

    ratio = chat_result["rps"] / bare_result["rps"] if bare_result["rps"] else 0.0
    met = ratio >= TARGET_RATIO and not chat_result["errors"] and not bare_result["errors"]
    rows = [
        f"| {name} | {r['requests']} | {r['ok']} | {r['rps']:.1f} | {r['p50']:.1f} "
        f"| {r['p99']:.1f} |"
        for name, r in (("bare DRF endpoint", bare_result), ("POST /api/chat", chat_result))
    ]
    table = "\n".join(
        [
            f"{args.concurrency} client threads (one keep-alive http.client connection each), "
            f"{args.seconds:.0f} s per endpoint, the bare endpoint first; {gunicorn_label}; "
            f"one Celery worker (prefork, concurrency {args.celery_concurrency}"
            f"{f', nice {args.celery_nice}' if args.celery_nice else ''}) on the memory "
            f"and channels queues, Redis broker, PostgreSQL. Chat: the offline model, one "
            f"session per thread ({sessions_made} sessions, "
            f"{chat_result['ok'] // max(1, sessions_made)} turns each on average; "
            f"{summaries} warm summaries written by the worker by the end). Bare: an "
            f'authenticated, throttled DRF APIView answering {{"ok": true}} (bench/urls.py). '
            f"The API throttle is raised to {API_RATE} for both; {machine_load}.",
            "",
            "| endpoint | requests | HTTP 200 | requests/s | p50 ms | p99 ms |",
            "|---|---|---|---|---|---|",
            *rows,
            "",
            f"Bare run: {bare_result['cpu']}. Chat run: {chat_result['cpu']}.",
            "",
            f"Chat at {ratio:.0%} of the bare rate; target >= {TARGET_RATIO:.0%}: "
            f"{'met' if met else 'NOT met'}"
            + (
                f" (errors: bare {bare_result['statuses']}, chat {chat_result['statuses']})"
                if chat_result["errors"] or bare_result["errors"]
                else ""
            )
            + ".",
        ]
    )
    print(table)
    for result in (bare_result, chat_result):
        for error in result["errors"]:
            print(f"error: {error!r}", file=sys.stderr)
    if args.profile:
        from sessions_app.services import local_user_get_or_create

        print(profile_turns(local_user_get_or_create(username="bench-profile"), args.profile))
    if not args.no_record:
        command = command_line("bench.chat_throughput", argv)
        append_results("Chat throughput (gunicorn, Celery, Redis)", command, table)
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
