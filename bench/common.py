"""Shared by the benchmarks: a Django set-up on a throwaway home, timing, and the results file."""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "benchmarks.md"


def django_setup(fresh_home: bool = True) -> None:
    """Configure Django on .bench-home (SQLite) unless DATABASE_URL points elsewhere."""
    home = ROOT / ".bench-home"
    if fresh_home and home.exists() and "DATABASE_URL" not in os.environ:
        shutil.rmtree(home)
    os.environ.setdefault("ETHAN_HOME", str(home))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ethan_site.settings")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", interactive=False, verbosity=0)


def percentile(samples_ms: list[float], fraction: float) -> float:
    """Nearest-rank percentile (p99 of 550 samples is the 545th smallest)."""
    ordered = sorted(samples_ms)
    if not ordered:
        return float("nan")
    rank = max(1, math.ceil(len(ordered) * fraction))
    return ordered[rank - 1]


def percentiles(samples_ms: list[float]) -> tuple[float, float]:
    """(p50 as the median, p95)."""
    return statistics.median(samples_ms), percentile(samples_ms, 0.95)


def command_line(module: str, argv: list[str] | None) -> str:
    """How this run was started, for the results file."""
    return " ".join(["python -m", module, *(argv or sys.argv[1:])])


def machine() -> str:
    cpus = os.cpu_count() or 0
    python = platform.python_version()
    return f"{platform.system()} {platform.machine()}, {cpus} cores, Python {python}"


def database_label() -> str:
    from django.db import connection

    if connection.vendor == "sqlite":
        return f"SQLite {connection.Database.sqlite_version}"
    return f"PostgreSQL {connection.pg_version // 10000}.{connection.pg_version % 10000}"


def append_results(title: str, command: str, table: str, database: str | None = None) -> None:
    """Append one run to docs/benchmarks.md: what ran, where, when, and the table. `database`
    names the database(s) when this process has no Django of its own (a run made of child
    processes, one per database); otherwise it is this process's."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        commit = ""
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    RESULTS.parent.mkdir(exist_ok=True)
    if not RESULTS.exists():
        RESULTS.write_text("# Benchmarks\n\nEach run appends its results here (newest last).\n")
    with RESULTS.open("a", encoding="utf-8") as out:
        out.write(
            f"\n## {title}\n\n- command: `{command}`\n- machine: {machine()}\n"
            f"- database: {database or database_label()}\n- date: {when}"
            f"{f' (commit {commit})' if commit else ''}\n\n{table}\n"
        )


def measure_in_child(module: str, database: str, argv: list[str]) -> dict:
    """`module` on one database, in a process of its own (Django is set up once per process):
    its result, which the child writes to a file (`--json`)."""
    name = module.rpartition(".")[2].replace("_", "-")
    with tempfile.TemporaryDirectory(prefix=f"ethan-{name}-") as scratch:
        out = Path(scratch) / "result.json"
        command = [sys.executable, "-m", module, *argv, "--database", database, "--json", str(out)]
        subprocess.run(command, cwd=ROOT, check=True)
        return json.loads(out.read_text())


def run_per_database(
    *,
    module: str,
    argv: list[str],
    args: argparse.Namespace,
    databases: Sequence[str],
    measure_database: Callable[[str, argparse.Namespace], dict],
    report: Callable[[list[dict], argparse.Namespace], str],
    title: str,
) -> int:
    """The end of a benchmark measured on one database or on each (`--database both`), the
    results gathered in one table. A child (`--json`) measures its database into the file and
    stops there; otherwise the table is printed and, unless `--no-record`, appended to
    docs/benchmarks.md under `title`."""
    if args.json:
        Path(args.json).write_text(json.dumps(measure_database(args.database, args)))
        return 0
    if args.database == "both":
        results = [measure_in_child(module, database, argv) for database in databases]
    else:
        results = [measure_database(args.database, args)]
    table = report(results, args)
    print(table)
    if not args.no_record:
        append_results(
            title,
            command_line(module, argv),
            table,
            database=", ".join(result["database"] for result in results),
        )
    return 0


def raise_open_files() -> None:
    """A thousand streams are two thousand sockets here (client and model) and more: the soft
    limit on open files up to the hard one (bench.concurrent_streams, its model process
    bench.slow_model, bench.chunk_reading)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
