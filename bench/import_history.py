"""`ethan import --from chatgpt` on generated exports: conversations and messages imported per
second, the import's peak memory at several export sizes (it streams the file, so the peak
should not grow with it), and learning from the import with the offline model.

python -m bench.import_history                     # 1,250 / 2,500 / 5,000 conversations
python -m bench.import_history --quick             # 100 / 200 / 400, nothing recorded
python -m bench.import_history --learn 1000        # learn from the first 1,000 (default 500)

Each size runs in a process of its own on a fresh home (SQLite unless DATABASE_URL is set), so
its peak resident memory (ru_maxrss) is the import's own: measured after Django is set up, the
export written and a one-conversation import has loaded what a first import loads once (the
segmenter's dictionary), then after the import.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import ROOT, append_results, command_line

SIZES = (1_250, 2_500, 5_000)
QUICK_SIZES = (100, 200, 400)
SAYINGS = (
    ("I live in Lisbon and work as a nurse", "Noted: Lisbon, nursing."),
    ("我想整理一下这个季度的工作计划", "好的，先列出目标和时间表。"),
    ("I prefer short answers", "Understood, I'll keep them short."),
    ("Can you write a Python function that sums a list?", "def total(xs): return sum(xs)"),
    ("记住我喜欢喝美式咖啡", "好的，记住了：美式咖啡。"),
    ("What is a good book about habits?", "Atomic Habits by James Clear."),
)


def rounds_of(n: int) -> int:
    """1 to 24 rounds, most conversations short, as real histories are."""
    return (1, 2, 2, 3, 4, 5, 6, 8, 12, 24)[n % 10]


def conversation(n: int) -> dict:
    from tests.imports.exports import ChatGPT

    start = 1_600_000_000 + n * 3_600
    from datetime import UTC, datetime

    chat = ChatGPT(f"bench-{n}", f"Conversation {n}", datetime.fromtimestamp(start, tz=UTC))
    chat.add("system", "", hidden=True)
    for r in range(rounds_of(n)):
        question, answer = SAYINGS[(n + r) % len(SAYINGS)]
        if r == 0 and n % 7 == 0:  # an edited first question: the first version is left behind
            chat.add("user", f"{question} (first try)")
            chat.add("assistant", answer)
            chat.current = chat.mapping[chat.current]["parent"]
            chat.current = chat.mapping[chat.current]["parent"]
        if n % 5 == 0 and r == 0:
            image = {"content_type": "image_asset_pointer", "asset_pointer": "file-service://x"}
            chat.add("user", {"content_type": "multimodal_text", "parts": [image, question]})
        else:
            chat.add("user", f"{question} #{n}.{r}")
        chat.add("assistant", answer)
    return chat.export()


def write_export(path: Path, count: int) -> int:
    """conversations.json with `count` conversations, written one at a time; its size."""
    with path.open("w", encoding="utf-8") as out:
        out.write("[")
        for n in range(count):
            if n:
                out.write(",")
            out.write(json.dumps(conversation(n), ensure_ascii=False))
        out.write("]")
    return path.stat().st_size


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kB


def measure(count: int, learn: int) -> dict:
    """One size, in this (child) process: import, then learn from the first `learn`."""
    from bench.common import django_setup

    with tempfile.TemporaryDirectory(prefix="ethan-import-history-") as scratch:
        import os

        os.environ["ETHAN_HOME"] = str(Path(scratch) / "home")
        os.environ["ETHAN_MODEL"] = "offline"
        django_setup(fresh_home=False)
        from agent_app.history_import import (
            history_import,
            imported_sessions_learn,
            learning_estimate,
            next_step,
            session_calls,
            sessions_to_learn,
        )
        from memory_app.models import Fact
        from memory_app.working import memory_config
        from sessions_app.services import local_user_get_or_create

        export = Path(scratch) / "conversations.json"
        size = write_export(export, count)
        owner = local_user_get_or_create(username="bench")
        # What any first import loads once (the segmenter's dictionary, the parser), loaded
        # before the peak is read: the import's own memory is what follows.
        warm = Path(scratch) / "warm.json"
        write_export(warm, 3)  # English and Chinese
        history_import(owner=local_user_get_or_create(username="warm"), path=warm, source="chatgpt")
        before = peak_mb()
        started = time.perf_counter()
        report = history_import(owner=owner, path=export, source="chatgpt")
        imported = time.perf_counter() - started
        after = peak_mb()
        started = time.perf_counter()
        again = history_import(owner=owner, path=export, source="chatgpt")
        reimported = time.perf_counter() - started
        estimate = learning_estimate(owner=owner)
        from bench.common import database_label

        result = {
            "database": database_label(),
            "conversations": report.conversations,
            "messages": report.messages_created,
            "export_mb": size / 1_048_576,
            "import_s": imported,
            "reimport_s": reimported,
            "reimport_added": again.messages_created,
            "rss_before_mb": before,
            "rss_peak_mb": after,
            "estimate": [estimate.conversations, estimate.rounds, estimate.calls, estimate.tokens],
        }
        if learn:
            config = memory_config()
            rounds_of = dict(sessions_to_learn(owner=owner).values_list("pk", "round_count"))
            sessions = rounds = calls = 0
            started = time.perf_counter()
            # The learning's own steps (a long session alone, short ones together), until
            # `learn` sessions are learnt.
            while sessions < learn and (step := next_step(owner=owner)):
                imported_sessions_learn(session_ids=step)
                sessions += len(step)
                rounds += sum(rounds_of[session_id] for session_id in step)
                calls += 1 if len(step) > 1 else session_calls(rounds_of[step[0]], config)
            learnt = time.perf_counter() - started
            result.update(
                learnt_sessions=sessions,
                learnt_rounds=rounds,
                learnt_calls=calls,
                learn_s=learnt,
                facts=Fact.objects.filter(owner=owner).count(),
            )
        return result


def table(results: list[dict]) -> str:
    lines = [
        "| conversations | messages | export MB | import s | conversations/s | messages/s "
        "| re-import s (adds) | peak RSS MB (before → after import) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in results:
        lines.append(
            f"| {row['conversations']:,} | {row['messages']:,} | {row['export_mb']:.1f} "
            f"| {row['import_s']:.1f} | {row['conversations'] / row['import_s']:,.0f} "
            f"| {row['messages'] / row['import_s']:,.0f} "
            f"| {row['reimport_s']:.1f} ({row['reimport_added']}) "
            f"| {row['rss_before_mb']:.0f} → {row['rss_peak_mb']:.0f} |"
        )
    learnt = [row for row in results if row.get("learnt_sessions")]
    if learnt:
        lines += [
            "",
            "| learning (offline model) from | sessions | rounds | model calls | s "
            "| sessions/s | rounds/s | facts |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for row in learnt:
            lines.append(
                f"| {row['conversations']:,} imported | {row['learnt_sessions']:,} "
                f"| {row['learnt_rounds']:,} | {row['learnt_calls']:,} | {row['learn_s']:.1f} "
                f"| {row['learnt_sessions'] / row['learn_s']:.1f} "
                f"| {row['learnt_rounds'] / row['learn_s']:.0f} | {row['facts']:,} |"
            )
    largest = results[-1]
    conversations, rounds, calls, tokens = largest["estimate"]
    lines += [
        "",
        f"Estimate printed before learning all {conversations:,} conversations of the largest "
        f"export: {rounds:,} rounds, about {calls:,} compression-model calls reading about "
        f"{tokens:,} tokens.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, nothing recorded")
    parser.add_argument("--sizes", type=int, nargs="+", help="conversations per export")
    parser.add_argument("--learn", type=int, default=500, help="sessions learnt at each size")
    parser.add_argument("--no-record", action="store_true", help="do not append to docs/")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--json", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        Path(args.json).write_text(json.dumps(measure(args.child, args.learn)))
        return 0
    sizes = args.sizes or (QUICK_SIZES if args.quick else SIZES)
    results = []
    for count in sizes:
        with tempfile.TemporaryDirectory() as scratch:
            out = Path(scratch) / "result.json"
            command = [
                sys.executable,
                "-m",
                "bench.import_history",
                "--child",
                str(count),
                "--learn",
                str(args.learn if count == sizes[-1] else 0),
                "--json",
                str(out),
            ]
            subprocess.run(command, cwd=ROOT, check=True)
            results.append(json.loads(out.read_text()))
    shown = table(results)
    print(shown)
    if not (args.no_record or args.quick):
        command = command_line("bench.import_history", argv)
        title = "Import of ChatGPT exports (ethan import --from)"
        append_results(title, command, shown, database=results[-1]["database"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
