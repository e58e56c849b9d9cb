"""ethan_import on a generated ~/.ethan layout: how long N messages take.

python -m bench.import_speed --quick            # 20,000 messages
python -m bench.import_speed --messages 100000
python -m bench.import_speed --messages 100000 --embed   # and the vectors (search by meaning)
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import tempfile
import time
from io import StringIO
from pathlib import Path

from bench.common import append_results, command_line, django_setup

LINES = (
    "我想整理一下这个季度的工作计划",
    "Let's plan the Lisbon trip",
    "好的，先列出目标",
    "Sure, here is a first draft",
    "记住我喜欢喝美式咖啡",
)


def build(home: Path, messages: int, per_session: int = 50) -> None:
    (home / "memory").mkdir(parents=True)
    db = sqlite3.connect(home / "sessions.db")
    db.execute("CREATE TABLE sessions (id TEXT, title TEXT, model TEXT, created_at, updated_at)")
    db.execute(
        "CREATE TABLE messages (session_id TEXT, role TEXT, content TEXT, "
        "tool_calls TEXT, tool_call_id TEXT)"
    )
    sessions = max(1, messages // per_session)
    db.executemany(
        "INSERT INTO sessions VALUES (?, ?, ?, ?, ?)",
        [
            (
                f"s_20260101_{n // 10000:04d}_{n % 10000:04d}",
                LINES[n % 5],
                "offline",
                1767225600 + n * 60,
                1767225600 + n * 60 + 30,
            )
            for n in range(sessions)
        ],
    )
    db.executemany(
        "INSERT INTO messages VALUES (?, ?, ?, ?, ?)",
        [
            (
                f"s_20260101_{(m // per_session) // 10000:04d}_{(m // per_session) % 10000:04d}",
                "user" if m % 2 == 0 else "assistant",
                f"{LINES[m % 5]} #{m}",
                None,
                None,
            )
            for m in range(messages)
        ],
    )
    db.commit()
    db.close()
    (home / "memory/facts.json").write_text(
        json.dumps(
            [{"content": f"fact {n}: {LINES[n % 5]}", "confidence": 0.8} for n in range(500)],
            ensure_ascii=False,
        )
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="20,000 messages")
    parser.add_argument(
        "--embed", action="store_true", help="with the vectors (the default embedder), as embedded"
    )
    parser.add_argument("--no-record", action="store_true", help="do not append to docs/")
    args = parser.parse_args(argv)
    messages = 20_000 if args.quick else args.messages
    django_setup()
    from django.core.management import call_command

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "layout"
        build(home, messages)

        def timed_import() -> float:
            started = time.perf_counter()
            call_command(
                "ethan_import",
                "--home",
                str(home),
                "--user",
                "bench",
                stdout=StringIO(),
                stderr=StringIO(),
            )
            return time.perf_counter() - started

        import embedder

        embedder.configure(embedder="default" if args.embed else "off")
        first = timed_import()  # with --embed, the import's vectors too (imported_embed)
        again = timed_import()  # everything is there already: nothing is written
    embedding = ""
    if args.embed:
        from sessions_app.models import Message

        embedded = Message.objects.exclude(embedding_model=None).count()
        embedding = f", with the default embedder's vectors ({embedded:,} messages embedded)"
    table = "\n".join(
        [
            f"Import{embedding}:",
            "",
            "| messages | sessions | facts | first import s | messages/s | re-import (no-op) s |",
            "|---|---|---|---|---|---|",
            f"| {messages:,} | {max(1, messages // 50):,} | 500 | {first:.1f} | "
            f"{messages / first:,.0f} | {again:.1f} |",
        ]
    )
    print(table)
    if not args.no_record:
        command = command_line("bench.import_speed", argv)
        append_results("Import (ethan_import)", command, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
