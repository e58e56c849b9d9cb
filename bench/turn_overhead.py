"""Turn overhead: everything a chat turn costs except the model, at growing history and fact
store sizes.

One owner per fact-store size, one session per history size for each of them (a grid), all
written with bulk_create; each session's working state is what a caught-up consolidator leaves
(the hot zone verbatim, warm summaries, older rounds folded into the rolling summary), so every
measured turn is a steady-state turn. Each owner also has what the rest of the prompt reads:
rules, a written profile and past episodes. The offline model answers (`model="offline"`); its
own time inside the turn is measured apart, so the overhead is the turn minus the model.

The turns take the full path (`--path full`, the default): the whole prompt, past episodes
recalled included, on real messages that share words with the stored facts, episodes and
rounds. `--path router` lets the router choose (medium for these messages), as runs before
that option did.

    python -m bench.turn_overhead --quick --no-record      # 10/1,000 messages × 10/1,000 facts
    python -m bench.turn_overhead                          # 10/1,000/100,000 × 10/1,000/10,000
    python -m bench.turn_overhead --history 10,100000 --facts 1000 --turns 20   # the targets, fast
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/ethan_bench_turn python -m bench.turn_overhead
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from bench.common import (
    append_results,
    comma_sizes,
    command_line,
    django_setup,
    ms_cells,
    percentiles,
)

HISTORY_SIZES = (10, 1_000, 100_000)
FACT_SIZES = (10, 1_000, 10_000)
QUICK_HISTORY_SIZES = (10, 1_000)
QUICK_FACT_SIZES = (10, 1_000)
TARGET_QUERIES = 12  # per turn, at every size (the issue "A lean hot path")

# The stored conversation: user lines and assistant replies, half Chinese, half English.
USER_LINES = (
    "我最近在准备一个关于记忆系统的分享",
    "周五之前要把季度报告交给老板",
    "我更喜欢简短直接的回答",
    "今天和张三讨论了新版本的发布时间",
    "我在学钢琴，每天练半个小时",
    "The deadline for the memory server moved to Friday",
    "My sister lives in Lisbon and I visit her in spring",
    "I prefer Python for scripts and Go for services",
    "We decided to ship the beta next Tuesday",
    "I usually run in the park before work",
)
ASSISTANT_LINES = (
    "好的，我记下了。需要我帮你列个提纲吗？",
    "明白，周五前交报告，我可以帮你先整理结构。",
    "收到，之后我会尽量简短。",
    "Got it. Do you want a checklist for the release?",
    "Sounds good, I will keep that in mind.",
    "Noted. Tell me if the plan changes.",
)
# What each fact says, with a number so that every fact is a different one (content_key).
FACT_TEMPLATES = (
    "用户喜欢在早上{n}点之前处理最重要的工作",
    "用户的项目代号是 Atlas-{n}",
    "用户每周练习钢琴 {n} 次",
    "The user prefers short answers in meeting notes ({n})",
    "The user's team ships a release every {n} weeks",
    "The user lives {n} minutes from the office by bike",
)
# The measured turns: ordinary messages that the router sends down the medium path (no memory
# instruction, so the offline model calls no tool and every turn does the same work).
TURN_TEXTS = (
    "报告的结构怎么安排比较好？",
    "How should I prepare for the release on Tuesday?",
    "钢琴练习有什么建议吗",
    "What did we say about the deadline?",
    "明天的会议需要准备什么材料",
    "Any tips for running before work?",
)
FACT_CATEGORIES = ("preference", "decision", "knowledge", "correction")
# What every owner has besides facts and sessions: the rest of what a full-path prompt reads.
RULES = (
    "回答尽量简短，先给结论",
    "Reply in the language the user writes in",
    "涉及日期时写明星期几",
    "Offer a checklist when the user plans a release",
    "不要在深夜提醒工作",
)
PROFILE = {
    "basic": "- 喜欢跑步和钢琴\n- Lives near the park",
    "identity": "- 后端工程师，负责记忆服务器\n- Works with a team of five",
    "goals": "- 本季度发布记忆服务器\n- Ship the beta on Tuesday",
    "work_style": "- 喜欢简短直接的回答\n- Plans in the morning",
    "psych": "- 截止日期前容易焦虑",
    "language": "- “先跑起来再说”",
    "agreements": "- 周五前提醒季度报告",
}
EPISODES = 50  # past sessions an owner has, for the full path's recall


@dataclass(frozen=True)
class Cell:
    messages: int
    facts: int
    turns: int
    paths: str
    turn_ms: tuple[float, float]
    model_ms: tuple[float, float]
    overhead_ms: tuple[float, float]
    queries: tuple[int, ...]  # the distinct per-turn query counts seen (one, when constant)
    # The same with the context reads the working state let the turn skip added back (the
    # promoted facts before an extraction, the warm summaries while none is warm): what a
    # turn costs when it reads everything, which must not grow with the history.
    queries_every_read: tuple[int, ...] = ()


def steady_state(rounds: int, *, hot: int, batch: int, warm: int) -> tuple[int, int]:
    """(compressed_through, folded_through) as a caught-up consolidator leaves them after
    `rounds` rounds: every full batch that left the hot zone is summarised (and extracted, in
    the same call: extracted_through = compressed_through), and each time the warm summaries
    cover `warm` rounds they are folded (memory_app.consolidator)."""
    compressed = max(0, rounds - hot) // batch * batch
    extracted = 0
    # The cursor moves one batch per consolidation; an extraction takes all that is warm.
    for through in range(batch, compressed + 1, batch):
        if through - extracted >= warm:
            extracted = through
    return compressed, extracted


def _summary_text(first: int, last: int, rng: random.Random) -> str:
    picks = rng.sample(USER_LINES, 3)
    return f"第 {first}-{last} 轮：" + "；".join(picks) + "。"


def fill_owner(*, facts: int, history_sizes, config, rng: random.Random):
    """One owner with `facts` active facts and one caught-up session per history size:
    {messages: session}."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from memory_app.models import Fact, Summary, WorkingState
    from sessions_app.models import ChatSession, Message
    from sessions_app.search import search_tokens

    owner = get_user_model().objects.create_user(username=f"bench-{facts}")
    now = timezone.now()
    # Each template line's tokens once: tokenising 100,000 messages one by one would make the
    # fill, which is not measured, take minutes.
    tokens_of = {line: search_tokens(line) for line in USER_LINES + ASSISTANT_LINES}
    sessions = {}
    for messages in history_sizes:
        rounds = messages // 2
        start = now - timedelta(minutes=messages)
        session = ChatSession.objects.create(
            id=f"s_bench_{facts}_{messages}",
            owner=owner,
            title=USER_LINES[0][:40],
            model="offline",
            mode=ChatSession.Mode.WORK,
            channel=ChatSession.Channel.API,
            last_seq=2 * rounds,
            round_count=rounds,
            created_at=start,
            updated_at=now,
        )
        batch = []
        for seq in range(1, 2 * rounds + 1):
            user = seq % 2 == 1
            line = rng.choice(USER_LINES if user else ASSISTANT_LINES)
            batch.append(
                Message(
                    session=session,
                    seq=seq,
                    role=Message.Role.USER if user else Message.Role.ASSISTANT,
                    content=line,
                    search_tokens=tokens_of[line],
                    created_at=start + timedelta(seconds=30 * seq),
                )
            )
            if len(batch) >= 10_000:
                Message.objects.bulk_create(batch, batch_size=2_000)
                batch = []
        Message.objects.bulk_create(batch, batch_size=2_000)
        compressed, extracted = steady_state(
            rounds, hot=config.hot_size, batch=config.compress_batch, warm=config.warm_capacity
        )
        # Every batch ever summarised has its row; those up to folded_through are folded.
        Summary.objects.bulk_create(
            [
                Summary(
                    session=session,
                    first_round=first,
                    last_round=first + config.compress_batch - 1,
                    text=_summary_text(first, first + config.compress_batch - 1, rng),
                    model="offline",
                    folded=first + config.compress_batch - 1 <= extracted,
                )
                for first in range(1, compressed + 1, config.compress_batch)
            ],
            batch_size=2_000,
        )
        rolling = "\n".join(_summary_text(1, extracted, rng) for _ in range(4)) if extracted else ""
        WorkingState.objects.create(
            session=session,
            compressed_through=compressed,
            extracted_through=compressed,  # each batch's call extracts it too
            folded_through=extracted,
            rolling_summary=rolling,
        )
        sessions[messages] = session
    provenance = list(sessions.values())
    rows = template_facts(
        owner=owner,
        count=facts,
        rng=rng,
        source=Fact.Source.CONSOLIDATOR,
        per_fact=lambda index: {
            # Learnt in the owner's sessions in turn: each session's long-term block has
            # facts to show.
            "session": provenance[index % len(provenance)],
            "last_accessed": now - timedelta(minutes=rng.randrange(100_000)),
        },
    )
    Fact.objects.bulk_create(rows, batch_size=2_000)
    fill_rest(owner=owner, now=now, rng=rng)
    return owner, sessions


def template_facts(
    *,
    owner,
    count: int,
    rng: random.Random,
    per_fact: Callable[[int], dict] | None = None,
    **fields,
) -> list:
    """`count` active facts of `owner`, unsaved: each a FACT_TEMPLATES line with its number,
    in the FACT_CATEGORIES in turn, with a confidence from `rng`. `fields` are set on every
    fact; `per_fact(index)` gives those that differ from one fact to the next, called after
    the fact's confidence is drawn, so that what it draws from `rng` keeps its place and a
    seed gives the same facts as ever."""
    from memory_app.models import Fact
    from memory_app.normalize import content_key
    from memory_app.services import fact_search_tokens

    rows = []
    for index in range(count):
        content = FACT_TEMPLATES[index % len(FACT_TEMPLATES)].format(n=index + 1)
        confidence = round(rng.uniform(0.5, 0.95), 2)
        rows.append(
            Fact(
                owner=owner,
                content=content,
                content_key=content_key(content),
                search_tokens=fact_search_tokens(content, None),
                category=FACT_CATEGORIES[index % len(FACT_CATEGORIES)],
                confidence=confidence,
                **fields,
                **(per_fact(index) if per_fact else {}),
            )
        )
    return rows


def fill_rest(*, owner, now, rng: random.Random) -> None:
    """The rules, the written profile and the past episodes of one owner."""
    from episodes_app.models import Episode
    from memory_app.models import Procedure
    from memory_app.normalize import content_key
    from profile_app.models import ProfileSection
    from sessions_app.search import search_tokens

    Procedure.objects.bulk_create(
        Procedure(owner=owner, rule=rule, rule_key=content_key(rule), source="api")
        for rule in RULES
    )
    ProfileSection.objects.bulk_create(
        ProfileSection(owner=owner, key=key, content=content) for key, content in PROFILE.items()
    )
    episodes = []
    for index in range(EPISODES):
        summary = "；".join(rng.sample(USER_LINES, 2))
        keywords = rng.sample(["报告", "钢琴", "release", "deadline", "running", "Lisbon"], 2)
        episodes.append(
            Episode(
                owner=owner,
                session_ref=f"s_past_{index:04d}",
                summary=summary,
                keywords=keywords,
                search_tokens=search_tokens(f"{summary} {' '.join(keywords)}"),
                model="offline",
                turn_count=rng.randrange(2, 40),
                timestamp=now - timedelta(days=index + 1),
            )
        )
    Episode.objects.bulk_create(episodes)


def _analyze() -> None:
    """On PostgreSQL, fresh planner statistics, as autovacuum leaves a database that has had
    time to settle. SQLite is left as the project leaves it, with no statistics: ANALYZE there
    would describe this bench's few huge sessions, and the planner then scans the whole message
    table for a session's latest user message."""
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            # VACUUM cannot run inside a transaction (a test's); ANALYZE alone can.
            cursor.execute("ANALYZE" if connection.in_atomic_block else "VACUUM ANALYZE")


@dataclass
class Samples:
    """What the measured turns of one cell gave."""

    turn_ms: list[float] = field(default_factory=list)
    model_ms: list[float] = field(default_factory=list)
    overhead_ms: list[float] = field(default_factory=list)
    queries: list[int] = field(default_factory=list)
    queries_every_read: list[int] = field(default_factory=list)
    paths: set[str] = field(default_factory=set)


class TurnTimer:
    """Runs one turn at a time, timing turn_run and, inside it, the model (ethan_llm.stream, from
    the call to its last event)."""

    def __init__(self) -> None:
        import ethan_llm

        self.llm = ethan_llm
        self.real_stream = ethan_llm.stream
        self.model_s = 0.0

    def __enter__(self) -> TurnTimer:
        def timed_stream(**kwargs):
            # agent_app.turn calls ethan_llm.stream through the module: this wrapper sees it. The
            # time between events is the model's; the turn's own work between them is not
            # counted here (the offline model's events follow each other at once).
            started = time.perf_counter()
            try:
                yield from self.real_stream(**kwargs)
            finally:
                self.model_s += time.perf_counter() - started

        self.llm.stream = timed_stream
        return self

    def __exit__(self, *exc) -> None:
        self.llm.stream = self.real_stream

    def turn(self, *, owner, session, text: str, samples: Samples | None, path: str | None = None):
        """One turn of `session`; its numbers go to `samples` (None: a warm-up turn). The
        deferred consolidation (embedded mode) runs after it, outside the timed part, so the
        working state stays caught up as it would between a person's turns."""
        from django.db import connection, reset_queries
        from django.test.utils import CaptureQueriesContext

        from channels_app.turns import turn_run
        from ethan_shared.queue import run_deferred
        from memory_app.models import WorkingState

        state = WorkingState.objects.filter(session=session).first()
        skipped = (state is None or not state.extracted_through) + (
            state is None or state.compressed_through <= state.folded_through
        )
        # The query log is a bounded deque: once full, CaptureQueriesContext counts nothing.
        reset_queries()
        self.model_s = 0.0
        with CaptureQueriesContext(connection) as captured:
            started = time.perf_counter()
            result = turn_run(owner=owner, session=session, text=text, model="offline", path=path)
            elapsed = time.perf_counter() - started
        run_deferred()
        if samples is not None:
            samples.paths.add(result.path)
            samples.turn_ms.append(elapsed * 1000)
            samples.model_ms.append(self.model_s * 1000)
            samples.overhead_ms.append((elapsed - self.model_s) * 1000)
            samples.queries.append(len(captured.captured_queries))
            samples.queries_every_read.append(len(captured.captured_queries) + skipped)
        return result.session


def run_grid(
    *,
    history_sizes,
    fact_sizes,
    turns: int,
    warmup: int,
    seed: int = 11,
    path: str | None = None,
) -> list[Cell]:
    """Fill every owner and session, then measure each (history, facts) cell. The cells take
    turns, one turn each in a round, so that whatever else the machine is doing meanwhile
    falls on all of them alike. `path`: the turns' path (None: the router's choice)."""
    from django.test.utils import override_settings

    from memory_app.working import memory_config

    config = memory_config()
    rng = random.Random(seed)
    owners = {
        facts: fill_owner(facts=facts, history_sizes=history_sizes, config=config, rng=rng)
        for facts in fact_sizes
    }
    _analyze()
    grid = [(messages, facts) for facts in fact_sizes for messages in history_sizes]
    sessions = {(m, f): owners[f][1][m] for m, f in grid}
    samples = {cell: Samples() for cell in grid}
    # The bench goes past the default capacity (1,000 active facts): without this the first
    # extraction after a turn would evict the fact store down to it.
    with override_settings(ETHAN_FACT_CAPACITY=2 * max(fact_sizes)), TurnTimer() as timer:
        for index in range(warmup + turns):
            text = TURN_TEXTS[index % len(TURN_TEXTS)]
            for messages, facts in grid:
                sessions[messages, facts] = timer.turn(
                    owner=owners[facts][0],
                    session=sessions[messages, facts],
                    text=text,
                    samples=samples[messages, facts] if index >= warmup else None,
                    path=path,
                )
    return [
        Cell(
            messages=messages,
            facts=facts,
            turns=turns,
            paths=", ".join(sorted(samples[messages, facts].paths)),
            turn_ms=percentiles(samples[messages, facts].turn_ms),
            model_ms=percentiles(samples[messages, facts].model_ms),
            overhead_ms=percentiles(samples[messages, facts].overhead_ms),
            queries=tuple(sorted(set(samples[messages, facts].queries))),
            queries_every_read=tuple(sorted(set(samples[messages, facts].queries_every_read))),
        )
        for messages, facts in grid
    ]


def targets(cells: list[Cell]) -> tuple[bool, bool, float]:
    """(same query count everywhere, p95 of the largest cell within 2× the smallest, ratio).
    The count compared is a turn's with every read: the context reads the working state lets
    a turn skip depend on where consolidation stands, not on the size."""
    counts = {count for cell in cells for count in cell.queries_every_read}
    smallest = min(cells, key=lambda cell: (cell.messages, cell.facts))
    largest = max(cells, key=lambda cell: (cell.messages, cell.facts))
    ratio = largest.turn_ms[1] / smallest.turn_ms[1] if smallest.turn_ms[1] else 0.0
    return len(counts) == 1, ratio <= 2.0, ratio


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10/1,000 messages × 10/1,000 facts")
    parser.add_argument(
        "--path",
        choices=("full", "medium", "fast", "router"),
        default="full",
        help="the turns' path (router: as the router chooses, medium for these messages)",
    )
    parser.add_argument(
        "--history", type=comma_sizes, default=None, help="history sizes, e.g. 10,100000"
    )
    parser.add_argument(
        "--facts", type=comma_sizes, default=None, help="fact-store sizes, e.g. 1000"
    )
    parser.add_argument("--turns", type=int, default=None, help="measured turns per cell")
    parser.add_argument("--warmup", type=int, default=3, help="unmeasured turns per cell first")
    parser.add_argument("--no-record", action="store_true", help="do not append to docs/")
    args = parser.parse_args(argv)
    history_sizes = args.history or (QUICK_HISTORY_SIZES if args.quick else HISTORY_SIZES)
    fact_sizes = args.facts or (QUICK_FACT_SIZES if args.quick else FACT_SIZES)
    turns = args.turns or (10 if args.quick else 40)

    django_setup()
    from sessions_app.models import Message

    if Message.objects.exists():
        sys.exit("the benchmark database is not empty: point DATABASE_URL at a scratch database")
    started = time.perf_counter()
    cells = run_grid(
        history_sizes=history_sizes,
        fact_sizes=fact_sizes,
        turns=turns,
        warmup=args.warmup,
        path=None if args.path == "router" else args.path,
    )
    took = time.perf_counter() - started
    same_queries, within_2x, ratio = targets(cells)
    most = max(count for cell in cells for count in cell.queries)

    rows = [
        f"| {cell.messages:,} | {cell.facts:,} | {cell.paths} | {cell.turns} "
        f"| {ms_cells(cell.turn_ms)} "
        f"| {ms_cells(cell.model_ms)} | {ms_cells(cell.overhead_ms)} "
        f"| {', '.join(str(count) for count in cell.queries)} "
        f"| {', '.join(str(count) for count in cell.queries_every_read)} |"
        for cell in cells
    ]
    table = "\n".join(
        [
            f"One owner per fact-store size with that many active facts, and one session per "
            f"history size (messages in the session being chatted), written with bulk_create; "
            f"each session's working state as a caught-up consolidator leaves it (hot zone "
            f"verbatim, warm summaries, the rest folded into the rolling summary). "
            f"{cells[0].turns} measured turns per cell after {args.warmup} unmeasured, the "
            f"cells taking turns (one turn each, round after round), "
            f'`model="offline"`, '
            + (
                "path chosen by the router"
                if args.path == "router"
                else f"the {args.path} path for every turn"
            )
            + f"; each owner also has {len(RULES)} rules, a written profile (all "
            f"{len(PROFILE)} sections) and {EPISODES} past episodes; ETHAN_FACT_CAPACITY "
            f"raised above the largest store so extraction does not evict it. Only turn_run "
            f"is timed: the "
            f"deferred consolidation (embedded mode) runs after each turn with "
            f"ethan_shared.queue.run_deferred(), outside the timed part. model: the time spent "
            f"in ethan_llm.stream; overhead: turn minus model. Queries: SQL per turn "
            f"(CaptureQueriesContext around turn_run; BEGIN and COMMIT included, as Django "
            f"logs them); with every read: the promoted-facts and warm-summary reads that "
            f"the session's working state let the turn skip counted back in. "
            f"Whole run {took:.0f} s.",
            "",
            "| history messages | active facts | path | turns | turn p50 ms | turn p95 ms "
            "| model p50 ms | model p95 ms | overhead p50 ms | overhead p95 ms | queries/turn "
            "| with every read |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            f"- same query count at every size (with every read): "
            f"{'met' if same_queries else 'NOT met'}",
            f"- at most {TARGET_QUERIES} queries per turn: "
            f"{'met' if most <= TARGET_QUERIES else 'NOT met'} ({most} at most)",
            f"- p95 at the largest size within 2× of the smallest: "
            f"{'met' if within_2x else 'NOT met'} ({ratio:.2f}×)",
        ]
    )
    print(table)
    if not args.no_record:
        command = command_line("bench.turn_overhead", argv)
        append_results("Turn overhead", command, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
