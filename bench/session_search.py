"""Searching past messages at growing history sizes: the memory search engine against the
plain LIKE of layer 1.

The baseline that the indexed memory search is measured against later. Messages are written
with bulk_create (the append service is measured by the turn-overhead benchmark), half Chinese
and half English, one owner.

    python -m bench.session_search --quick          # 20,000 messages
    python -m bench.session_search --messages 200000
    DATABASE_URL=postgres://... python -m bench.session_search
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from bench.common import append_results, django_setup, percentiles

ENGLISH = (
    "plan the launch of the memory server",
    "my sister lives in Lisbon",
    "the deadline moved to Friday",
    "I prefer short answers",
    "book a table for two",
)
CHINESE = (
    "帮我规划下个季度的目标",
    "我最近在学钢琴",
    "周五之前要交报告",
    "我更喜欢简短的回答",
    "明天和张三开会",
)
QUERIES = {"english hit": "deadline", "chinese hit": "钢琴", "rare": "zebra", "miss": "不存在的词"}


def like_search(owner, query: str) -> list:
    """Layer 1's original search: a case-insensitive substring over every message."""
    from sessions_app.models import Message

    return list(
        Message.objects.filter(session__owner=owner, content__icontains=query).order_by("-id")[:20]
    )


def fill(messages: int, per_session: int = 10):
    from django.contrib.auth import get_user_model

    from sessions_app.models import ChatSession, Message
    from sessions_app.search import search_tokens

    owner, _ = get_user_model().objects.get_or_create(username="bench")
    rng = random.Random(7)
    sessions = messages // per_session
    batch_sessions, batch_messages = [], []
    for index in range(sessions):
        session_id = f"s_20260101_{index // 10000:04d}_{index % 10000:04d}"
        lines = ENGLISH if index % 2 else CHINESE
        batch_sessions.append(
            ChatSession(id=session_id, owner=owner, title=lines[index % 5], last_seq=per_session)
        )
        for seq in range(1, per_session + 1):
            text = f"{rng.choice(lines)} #{index}-{seq}"
            if index == sessions // 2 and seq == 3:
                text += " zebra"
            batch_messages.append(
                Message(
                    session_id=session_id,
                    seq=seq,
                    role="user" if seq % 2 else "assistant",
                    content=text,
                    search_tokens=search_tokens(text),
                )
            )
        if len(batch_messages) >= 20_000 or index == sessions - 1:
            ChatSession.objects.bulk_create(batch_sessions)
            Message.objects.bulk_create(batch_messages, batch_size=5000)
            batch_sessions, batch_messages = [], []
    return owner


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000, help="history size")
    parser.add_argument("--quick", action="store_true", help="20,000 messages, fewer repeats")
    parser.add_argument("--repeats", type=int, default=None, help="searches per query")
    parser.add_argument("--no-record", action="store_true", help="do not append to docs/")
    args = parser.parse_args(argv)
    messages = 20_000 if args.quick else args.messages
    repeats = args.repeats or (10 if args.quick else 30)

    django_setup()
    from sessions_app.models import Message
    from sessions_app.selectors import messages_search, session_search

    if Message.objects.exists():
        sys.exit("the benchmark database is not empty: point DATABASE_URL at a scratch database")
    started = time.perf_counter()
    owner = fill(messages)
    fill_seconds = time.perf_counter() - started

    rows = []
    for label, query in QUERIES.items():
        cells = []
        for _name, run in (
            ("LIKE", lambda q: like_search(owner, q)),
            ("engine", lambda q: messages_search(owner=owner, query=q, limit=20)),
            ("sessions", lambda q: session_search(owner=owner, query=q)),
        ):
            samples = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                found = run(query)
                samples.append((time.perf_counter() - t0) * 1000)
            p50, p95 = percentiles(samples)
            cells.append(f"{len(found)} | {p50:.1f} | {p95:.1f}")
        rows.append(f"| {label} | `{query}` | " + " | ".join(cells) + " |")
    table = "\n".join(
        [
            f"{messages:,} messages in {messages // 10:,} sessions "
            f"(written in {fill_seconds:.1f} s); {repeats} searches per query, latest 20 results.",
            "",
            "LIKE: layer 1's plain substring scan (the baseline); engine: messages_search (BM25 "
            "over the GIN index on PostgreSQL, a LIKE per word on SQLite); sessions: "
            "session_search on the engine.",
            "",
            "| query | text | LIKE results | p50 ms | p95 ms | engine results | p50 ms | p95 ms "
            "| sessions results | p50 ms | p95 ms |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
            *rows,
        ]
    )
    print(table)
    if not args.no_record:
        command = "python -m bench.session_search " + " ".join(argv or sys.argv[1:])
        append_results("Session search (layer 1, LIKE)", command.strip(), table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
