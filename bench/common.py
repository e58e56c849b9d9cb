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
# docs/benchmarks.md is the index: the current figures, each linking to the run it comes from.
# The runs themselves are kept in docs/benchmarks/, one file per topic, each bench appending
# to its own (RECORDS).
ARCHIVE = ROOT / "docs" / "benchmarks"

# Which topic file each bench's runs are appended to. A bench missing here gets a file named
# after itself (records_file), so a new one records somewhere a reader can find.
RECORDS = {
    "bench.session_search": "search.md",
    "bench.mcp_search": "search.md",
    "bench.import_speed": "imports.md",
    "bench.import_history": "imports.md",
    "bench.locomo_recall": "recall.md",
    "bench.meaning_recall": "recall.md",
    "bench.chinese_recall": "recall.md",
    "bench.meaning_cost": "memory.md",
    "bench.fact_twins": "memory.md",
    "bench.consolidation_cost": "memory.md",
    "bench.conversation_vectors": "memory.md",
    "bench.memory_page": "memory.md",
    "bench.turn_overhead": "turn.md",
    "bench.context_tokens": "turn.md",
    "bench.append_cost": "turn.md",
    "bench.chat_throughput": "throughput.md",
    "bench.request_cost": "throughput.md",
    "bench.throttle_cache": "throughput.md",
    "bench.first_delta": "first-delta.md",
    "bench.concurrent_streams": "streams.md",
    "bench.openai_compat": "chat-apps.md",
    "bench.v1_chat_apps": "chat-apps.md",
    "bench.housekeeping_recognition": "chat-apps.md",
    "bench.lark_ack": "lark.md",
}

# Each topic file's heading.
TOPIC_TITLES = {
    "search.md": "search (session search against LIKE, memory_search over MCP)",
    "imports.md": "imports (ethan_import, ChatGPT exports)",
    "recall.md": "recall (LoCoMo, DuLeMon)",
    "memory.md": "memory (consolidation, found by meaning, facts deduplicated, 我的记忆)",
    "turn.md": "turn overhead and context tokens",
    "throughput.md": "chat throughput",
    "first-delta.md": "time to first delta",
    "streams.md": "concurrent streams",
    "chat-apps.md": "/v1 and chat apps",
    "lark.md": "Lark acknowledgement",
}


def records_file(module: str) -> Path:
    """The topic file `module`'s runs are appended to."""
    return ARCHIVE / RECORDS.get(module, module.rpartition(".")[2].replace("_", "-") + ".md")


def archive_header(topic: str) -> str:
    """The top of a topic file: what it holds, and where the current figures are."""
    modules = ", ".join(f"`{module}`" for module, file in RECORDS.items() if file == topic)
    title = TOPIC_TITLES.get(topic, topic.removesuffix(".md"))
    runs = f"The runs of {modules}" if modules else "The runs"
    return (
        f"# Benchmarks: {title}\n\n{runs}, newest last, each as it was recorded: the command,"
        " the machine, the date and the tables. The current figures are in"
        " [the index](../benchmarks.md).\n"
    )


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


def in_checkout(checkout: Path, script: str, args: list[str], home: str) -> dict:
    """Run a bench's `script` with `args` by another checkout's Python (its code: a change
    measured against the code before it in the same run), on an embedded home of its own
    (SQLite, `home`: that checkout's migrations); the JSON object its last line prints."""
    env = {name: value for name, value in os.environ.items() if name != "DATABASE_URL"}
    done = subprocess.run(
        [str(checkout / ".venv" / "bin" / "python"), script, *args],
        cwd=checkout,
        env={**env, "ETHAN_HOME": home},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.splitlines()[-1])


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


def ms_cells(pair: tuple[float, float]) -> str:
    """A (p50, p95) pair in milliseconds as two table cells."""
    return f"{pair[0]:.1f} | {pair[1]:.1f}"


def comma_sizes(text: str) -> tuple[int, ...]:
    """A comma-separated list of sizes on the command line (`10,100_000`)."""
    return tuple(int(part.replace("_", "")) for part in text.split(",") if part.strip())


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
    """Append one run to its bench's topic file in docs/benchmarks/ (records_file): what ran,
    where, when, and the table. `command` is command_line's (`python -m <module> …`), which
    names the bench. `database` names the database(s) when this process has no Django of its
    own (a run made of child processes, one per database); otherwise it is this process's."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        commit = ""
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    results = records_file(command.split()[2])
    results.parent.mkdir(parents=True, exist_ok=True)
    if not results.exists():
        results.write_text(archive_header(results.name), encoding="utf-8")
    with results.open("a", encoding="utf-8") as out:
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
    the bench's topic file in docs/benchmarks/ under `title`."""
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
