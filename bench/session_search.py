"""Searching past messages at growing history sizes: the memory search engine against the
plain LIKE of layer 1.

The baseline that the indexed memory search is measured against later. Messages are written
with bulk_create (the append service is measured by the turn-overhead benchmark), half Chinese
and half English, one owner.

    python -m bench.session_search --quick          # 20,000 messages
    python -m bench.session_search --messages 200000
    DATABASE_URL=postgres://... python -m bench.session_search --messages 1000000 --like-repeats 5

LIKE over a history with no match reads every message (seconds at a million): --like-repeats
and --like-budget bound its runs, and the table says how many it got. --keep measures again on
a database an earlier run filled (same --messages) instead of refusing it.
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from bench.common import append_results, command_line, django_setup, percentiles

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


def _line_tokens() -> dict[str, str]:
    """search_tokens of each template line, computed once: jieba on a million messages would
    make the fill, which is not what is measured, take minutes."""
    from sessions_app.search import search_tokens

    return {line: search_tokens(line) for line in ENGLISH + CHINESE}


def _rows(messages: int, per_session: int):
    """(session id, title, [(seq, role, content, search_tokens)]) for every session, the same
    history on every run (seeded)."""
    tokens_of = _line_tokens()
    rng = random.Random(7)
    sessions = messages // per_session
    for index in range(sessions):
        session_id = f"s_20260101_{index // 10000:04d}_{index % 10000:04d}"
        lines = ENGLISH if index % 2 else CHINESE
        rows = []
        for seq in range(1, per_session + 1):
            line = rng.choice(lines)
            text = f"{line} #{index}-{seq}"
            # The line's tokens and the suffix's one token (`index-seq`), exactly what
            # search_tokens(text) gives (checked in fill()).
            tokens = f"{tokens_of[line]}{index}-{seq} "
            if index == sessions // 2 and seq == 3:
                text += " zebra"
                tokens += "zebra "
            rows.append((seq, "user" if seq % 2 else "assistant", text, tokens))
        yield session_id, lines[index % 5], rows


def fill(messages: int, per_session: int = 10):
    """Write the history: COPY on PostgreSQL, bulk_create elsewhere."""
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.utils import timezone

    from sessions_app.search import search_tokens

    owner, _ = get_user_model().objects.get_or_create(username="bench")
    sample = next(_rows(per_session, per_session))[2][0]
    assert sample[3] == search_tokens(sample[2]), "the fill's tokens differ from search_tokens"
    if connection.vendor == "postgresql":
        now = timezone.now()
        with connection.cursor() as cursor:
            raw = cursor.cursor  # psycopg 3: COPY is on the driver's cursor
            with raw.copy(
                # Every NOT NULL column: COPY fills no Django default (turn_claim came later).
                "COPY sessions_app_chatsession (id, owner_id, title, model, mode, channel, "
                "last_seq, round_count, turn_claim, created_at, updated_at) FROM STDIN"
            ) as copy:
                for session_id, title, _messages in _rows(messages, per_session):
                    copy.write_row(
                        (
                            session_id,
                            owner.pk,
                            title,
                            "",
                            "work",
                            "console",
                            per_session,
                            per_session // 2,
                            "",
                            now,
                            now,
                        )
                    )
            with raw.copy(
                "COPY sessions_app_message (session_id, seq, role, content, tool_call_id, "
                "interrupted, search_tokens, created_at) FROM STDIN"
            ) as copy:
                for session_id, _title, rows in _rows(messages, per_session):
                    for seq, role, text, tokens in rows:
                        copy.write_row((session_id, seq, role, text, "", False, tokens, now))
            # Fresh statistics and the GIN pending list merged, as autovacuum would leave a
            # database that has had time to settle. Without statistics the planner took 14
            # sessions and 26 matches for LIKE '%钢琴%' and joined them by a nested loop over
            # every pair: the 26 s of the earlier 200,000-message runs (62 s when repeated
            # unanalysed), not the cost of UPPER() on Chinese text.
            cursor.execute("VACUUM ANALYZE sessions_app_chatsession")
            cursor.execute("VACUUM ANALYZE sessions_app_message")
        return owner
    bulk_fill(owner, messages, per_session)
    return owner


def bulk_fill(owner, messages: int, per_session: int) -> None:
    """Write `owner`'s history with bulk_create, 20,000 messages at a time: a million never
    sit in memory at once."""
    from sessions_app.models import ChatSession, Message

    batch_sessions, batch_messages = [], []
    for session_id, title, rows in _rows(messages, per_session):
        batch_sessions.append(
            ChatSession(id=session_id, owner=owner, title=title, last_seq=per_session)
        )
        batch_messages.extend(
            Message(session_id=session_id, seq=seq, role=role, content=text, search_tokens=tok)
            for seq, role, text, tok in rows
        )
        if len(batch_messages) >= 20_000:
            ChatSession.objects.bulk_create(batch_sessions)
            Message.objects.bulk_create(batch_messages, batch_size=5000)
            batch_sessions, batch_messages = [], []
    ChatSession.objects.bulk_create(batch_sessions)
    Message.objects.bulk_create(batch_messages, batch_size=5000)


def _timed(run, query: str, repeats: int, budget_s: float | None) -> tuple[int, list[float]]:
    """Run one search `repeats` times (stopping early, after at least 3 runs, once
    `budget_s` seconds are spent): (results of the last run, milliseconds per run)."""
    samples: list[float] = []
    found: list = []
    spent = 0.0
    while len(samples) < repeats:
        t0 = time.perf_counter()
        found = run(query)
        elapsed = time.perf_counter() - t0
        samples.append(elapsed * 1000)
        spent += elapsed
        if budget_s is not None and spent > budget_s and len(samples) >= 3:
            break
    return len(found), samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000, help="history size")
    parser.add_argument("--quick", action="store_true", help="20,000 messages, fewer repeats")
    parser.add_argument("--repeats", type=int, default=None, help="searches per query")
    parser.add_argument(
        "--like-repeats",
        type=int,
        default=None,
        help="LIKE searches per query (default: --repeats)",
    )
    parser.add_argument(
        "--like-budget",
        type=float,
        default=60.0,
        help="seconds of LIKE per query, after which (and at least 3 runs) it stops repeating",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="reuse a database already filled with exactly --messages messages",
    )
    parser.add_argument("--no-record", action="store_true", help="do not append to docs/")
    args = parser.parse_args(argv)
    messages = 20_000 if args.quick else args.messages
    repeats = args.repeats or (10 if args.quick else 30)
    like_repeats = min(args.like_repeats or repeats, repeats)

    django_setup(fresh_home=not args.keep)
    from django.contrib.auth import get_user_model

    from sessions_app.models import Message
    from sessions_app.selectors import messages_search, session_search

    fill_note = ""
    if Message.objects.exists():
        found = Message.objects.count()
        if not args.keep or found != messages:
            sys.exit(
                f"the benchmark database holds {found:,} messages: point DATABASE_URL at a "
                f"scratch database (or --keep one filled with exactly {messages:,})"
            )
        owner = get_user_model().objects.get(username="bench")
        fill_note = "reused from an earlier run"
    else:
        started = time.perf_counter()
        owner = fill(messages)
        fill_note = f"written in {time.perf_counter() - started:.1f} s"

    def ratio(like_p95: float, p95: float) -> str:
        return f"{like_p95 / p95:,.{0 if like_p95 >= 10 * p95 else 1}f}×" if p95 else "-"

    rows = []
    for label, query in QUERIES.items():
        # LIKE, the engine and session_search side by side on the same data, one after another.
        like_n, like = _timed(
            lambda q: like_search(owner, q), query, like_repeats, args.like_budget
        )
        engine_n, engine = _timed(
            lambda q: messages_search(owner=owner, query=q, limit=20), query, repeats, None
        )
        sessions_n, sessions = _timed(
            lambda q: session_search(owner=owner, query=q), query, repeats, None
        )
        (like50, like95), (e50, e95), (s50, s95) = map(percentiles, (like, engine, sessions))
        rows.append(
            f"| {label} | `{query}` | {like_n} | {len(like)} | {like50:.1f} | {like95:.1f} "
            f"| {engine_n} | {e50:.1f} | {e95:.1f} | {ratio(like95, e95)} "
            f"| {sessions_n} | {s50:.1f} | {s95:.1f} | {ratio(like95, s95)} |"
        )
        print(rows[-1], flush=True)
    table = "\n".join(
        [
            f"{messages:,} messages in {messages // 10:,} sessions ({fill_note}), one owner; "
            "half the sessions Chinese, half English (5 template lines each, plus a per-message "
            "id); `zebra` in one message. Latest 20 results.",
            "",
            f"Repeats per query: {repeats} for the engine and sessions; LIKE up to {like_repeats}, "
            f"stopping after {args.like_budget:g} s once it has 3 (the runs column). "
            "LIKE: layer 1's plain substring scan (`content__icontains`, the baseline); engine: "
            "messages_search (BM25 over the GIN index on PostgreSQL, FTS5 on SQLite); sessions: "
            "session_search (what `ethan session search` and `GET /api/sessions?q=` run). "
            "× LIKE: LIKE p95 / p95.",
            "",
            "| query | text | LIKE results | runs | p50 ms | p95 ms | engine results | p50 ms "
            "| p95 ms | × LIKE | sessions results | p50 ms | p95 ms | × LIKE |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
            *rows,
        ]
    )
    print(table)
    if not args.no_record:
        command = command_line("bench.session_search", argv)
        append_results("Session search: the index against LIKE", command, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
