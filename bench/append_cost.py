"""What storing one message costs the process: sessions_app.services.message_append's CPU for a
spoken message (the session's next seq, the search tokens it gives the turn before it, the
INSERT), questions and replies in turn on one session, as every turn stores two.

python -m bench.append_cost --appends 2000 --before ../base-checkout

With --before CHECKOUT the same appends run by that checkout's Python and code too (SQLite, a
home of its own), in the same run, the two taking turns --repeats times.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench.common import append_results, command_line, django_setup

TEXTS = (
    "I went to the market in town this morning and bought apples and pears.",
    "Nice! What kind of apples did you buy, and are they for a pie?",
)


def appends(count: int) -> dict:
    """CPU ms an append, over `count` spoken appends on a new session."""
    from django.contrib.auth import get_user_model

    from sessions_app import services
    from sessions_app.models import Message

    owner = get_user_model().objects.create(username=f"appends-{time.time_ns()}")
    session = services.session_start(owner=owner, channel="console")
    services.message_append(session=session, role=Message.Role.USER, content=TEXTS[0])
    roles = (Message.Role.ASSISTANT, Message.Role.USER)
    started = time.thread_time()
    for index in range(count):
        services.message_append(session=session, role=roles[index % 2], content=TEXTS[index % 2])
    return {"cpu_ms": (time.thread_time() - started) * 1000 / count}


def run(args) -> dict[str, list[float]]:
    """{code: [CPU ms an append, each repeat]}."""
    found: dict[str, list[float]] = {"this checkout": []}
    before = f"before ({args.before})"
    if args.before:
        from django.db import connection

        if connection.vendor != "sqlite":
            raise SystemExit("--before compares on SQLite: run without DATABASE_URL")
        found[before] = []
    home = tempfile.mkdtemp(prefix="ethan-appends-before-")
    try:
        for _ in range(args.repeats):
            found["this checkout"].append(appends(args.appends)["cpu_ms"])
            if args.before:
                found[before].append(before_appends(args, home))
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return found


def before_appends(args, home: str) -> float:
    """CPU ms an append by --before's Python and code, on an embedded home of its own
    (`home`): SQLite, as this process's must be then (run)."""
    # Here, not at the top: --before's checkout runs this file with its own bench.common.
    from bench.common import in_checkout

    child = ["--appends", str(args.appends), "--child"]
    return in_checkout(args.before, __file__, child, home)["cpu_ms"]


def table(found: dict[str, list[float]], args) -> str:
    lines = [
        f"{args.appends} spoken appends a repeat, {args.repeats} repeats.",
        "",
        "| code | CPU an append, ms (median) | each repeat |",
        "|---|---|---|",
    ]
    for label, samples in found.items():
        each = ", ".join(f"{sample:.3f}" for sample in samples)
        lines.append(f"| {label} | {statistics.median(samples):.3f} | {each} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--appends", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--before", type=Path, help="a checkout to run the appends in too")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-record", action="store_true", help="do not append to docs/")
    args = parser.parse_args(argv)
    django_setup(fresh_home=not args.child)
    if args.child:  # one repeat of --before's: its result as JSON
        print(json.dumps(appends(args.appends)))
        return
    rows = table(run(args), args)
    print(rows)
    if not args.no_record:
        append_results("Append cost", command_line("bench.append_cost", argv), rows)


if __name__ == "__main__":
    main()
