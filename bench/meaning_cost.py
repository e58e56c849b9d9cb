"""Memory found by meaning, what it costs (issue 43): a turn, memory_search, the scan's memory and
the disk, each with the default embedder on against it off in the same run.

1. A turn's overhead (bench.turn_overhead's owners, TurnTimer and its full path, the offline
   model, relevance injection) for an owner with 10 messages and one with 100,000, each with
   --facts active facts and 50 episodes. Every turn is run twice, embedder off and on, in
   alternating order round after round, so the machine's noise falls on both alike. The query
   vectors a thread remembers are forgotten before each turn: a real turn's words are new.
2. memory_search over the 100,000 messages, off and on, interleaved the same way, as a
   conversation makes it: after a turn (the session's vectors moved), with nothing moved, and
   cold (nothing held); then, on, where its time goes: the query's vector, the held vectors
   read, brought up to date and compared, the fusion, and for comparison the database scan
   (meaning.nearest) with its SQL read and numpy timed apart.
3. Memory and time at 100,000 and 1,000,000 vectors of one owner (sessions of --per-session),
   and one session of --one-session: the vectors messages_scan holds (cold and held) and the
   database scan, each with its peak memory two ways (tracemalloc's peak of Python and numpy
   allocations; the process's peak RSS, VmHWM, over its RSS before, which counts SQLite's
   page cache too), at TUNING.scan_cap.
4. Disk per message: two SQLite files with the message table's own schema (its indexes and
   full-text index included), N messages each, with and without the vector columns, after VACUUM.

Message vectors are random unit vectors (embedder.to_blob), written in bulk: the scan costs the
same whatever the vectors say. Facts and episodes get the default embedder's real vectors
(agent_app.vectors.vectors_write_all), so injection ranks what it would.

    python -m bench.meaning_cost --quick --no-record    # 10 / 2,000 messages, 20,000 scanned
    python -m bench.meaning_cost                        # 10 / 100,000; 100,000, 1M and 300,000

On SQLite the database is .bench-home, emptied first, unless ETHAN_HOME names another home
(then it must be empty, and is left in place).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import numpy as np

from bench.common import (
    append_results,
    comma_sizes,
    command_line,
    django_setup,
    ms_cells,
    percentiles,
)
from bench.turn_overhead import (
    ASSISTANT_LINES,
    EPISODES,
    TURN_TEXTS,
    USER_LINES,
    Samples,
    TurnTimer,
    fill_owner,
)

MODES = ("off", "on")
# memory_search's questions: some share words with the stored lines, some only their meaning.
SEARCHES = (
    "What did we say about the deadline?",
    "钢琴练习",
    "what are her hobbies",
    "家里人住在哪里",
    "which language for scripts",
    "周五的报告",
)
WRITE_BATCH = 5_000  # rows a fill writes at once


def switch(mode: str) -> None:
    """The embedder on ("default") or off, and the vectors the process remembers forgotten
    (embedder.forget: the embedder keeps the latest texts' vectors): every measured call
    computes its query's vector, as a turn with new words does."""
    import embedder

    embedder.configure(embedder="default" if mode == "on" else "off")
    embedder.forget()


class MeaningTimer:
    """What a turn spends on meaning, timed inside it: embedding its queries (embedder.embed
    with kind="query"; documents, the background's vectors after the turn, are not counted)
    and scanning vectors (meaning.nearest), both called through their modules by the
    selectors; and how many queries it embeds."""

    def __init__(self) -> None:
        import embedder
        from sessions_app import meaning

        self.embedder = embedder
        self.meaning = meaning
        self.real_embed = embedder.embed
        self.real_nearest = meaning.nearest
        self.reset()

    def __enter__(self) -> MeaningTimer:
        def timed_embed(texts, *, kind="document"):
            if kind != "query":
                return self.real_embed(texts, kind=kind)
            started = time.perf_counter()
            try:
                return self.real_embed(texts, kind=kind)
            finally:
                self.embed_s += time.perf_counter() - started
                self.embeds += 1

        def timed_nearest(*args, **kwargs):
            # A scan embeds its query when it first finds a stored vector (meaning.Query):
            # that time is the embedding's, counted there, not the scan's.
            started, embedding = time.perf_counter(), self.embed_s
            try:
                return self.real_nearest(*args, **kwargs)
            finally:
                self.scan_s += time.perf_counter() - started - (self.embed_s - embedding)

        self.embedder.embed = timed_embed
        self.meaning.nearest = timed_nearest
        return self

    def __exit__(self, *exc) -> None:
        self.embedder.embed = self.real_embed
        self.meaning.nearest = self.real_nearest

    def reset(self) -> None:
        self.embed_s = 0.0
        self.scan_s = 0.0
        self.embeds = 0


def unit_blobs(count: int, rng: np.random.Generator) -> Iterator[bytes]:
    """`count` random unit vectors of the default's dimension, as stored (embedder.to_blob),
    made WRITE_BATCH at a time."""
    import embedder
    from embedder import local

    for start in range(0, count, WRITE_BATCH):
        vectors = embedder.normalise(
            rng.standard_normal((min(WRITE_BATCH, count - start), local.DIM), dtype=np.float32)
        )
        yield from (embedder.to_blob(vector) for vector in vectors)


def vectors_to_history(session, rng: np.random.Generator) -> int:
    """Every message of `session` given a vector of the default embedder, in bulk (what the
    background would have written over time)."""
    from django.db import connection, transaction

    from embedder import local
    from sessions_app.models import Message

    ids = list(Message.objects.filter(session=session).order_by("pk").values_list("pk", flat=True))
    table = connection.ops.quote_name(Message._meta.db_table)
    with transaction.atomic(), connection.cursor() as cursor:
        blobs = unit_blobs(len(ids), rng)
        for start in range(0, len(ids), WRITE_BATCH):
            cursor.executemany(
                f"UPDATE {table} SET embedding = %s, embedding_model = %s WHERE id = %s",
                [(next(blobs), local.NAME, pk) for pk in ids[start : start + WRITE_BATCH]],
            )
    return len(ids)


def fill_turn_owners(*, history_sizes, facts: int, seed: int) -> dict[int, tuple]:
    """{messages: (owner, session)}: one owner per history size (bench.turn_overhead's
    fill_owner, renamed so the next can be made), its messages with vectors, its facts and
    episodes with the default embedder's own."""
    import embedder
    from agent_app.vectors import vectors_write_all
    from memory_app.working import memory_config

    config = memory_config()
    rng = random.Random(seed)
    vectors_rng = np.random.default_rng(seed)
    owners = {}
    for messages in history_sizes:
        owner, sessions = fill_owner(facts=facts, history_sizes=(messages,), config=config, rng=rng)
        owner.username = f"bench-meaning-{messages}"
        owner.save(update_fields=["username"])
        vectors_to_history(sessions[messages], vectors_rng)
        embedder.configure(embedder="default")
        written = vectors_write_all(owner_id=owner.pk)
        if written.messages:
            sys.exit(f"{written.messages} messages had no vector after the fill")
        owners[messages] = (owner, sessions[messages])
    return owners


def fill_scan_owner(messages: int, seed: int, *, per_session: int):
    """An owner with `messages` messages in sessions of `per_session`, the newest session the
    most recently active, every message with a vector (bulk_create): what the scans read.
    Returns the owner."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from embedder import local
    from sessions_app.models import ChatSession, Message
    from sessions_app.search import search_tokens

    owner = get_user_model().objects.create_user(
        username=f"bench-meaning-scan-{messages}-{per_session}"
    )
    now = timezone.now()
    start = now - timedelta(minutes=messages)
    tokens_of = {line: search_tokens(line) for line in USER_LINES + ASSISTANT_LINES}
    rng = random.Random(seed)
    blobs = unit_blobs(messages, np.random.default_rng(seed))
    batch = []
    for first in range(0, messages, per_session):
        size = min(per_session, messages - first)
        began = start + timedelta(minutes=first)
        session = ChatSession.objects.create(
            id=f"s_meaning_{messages}_{per_session}_{first // per_session}",
            owner=owner,
            title=USER_LINES[0][:40],
            model="offline",
            last_seq=size,
            round_count=size // 2,
            created_at=began,
            updated_at=began + timedelta(seconds=30 * size),
        )
        for seq in range(1, size + 1):
            user = seq % 2 == 1
            line = rng.choice(USER_LINES if user else ASSISTANT_LINES)
            batch.append(
                Message(
                    session=session,
                    seq=seq,
                    role=Message.Role.USER if user else Message.Role.ASSISTANT,
                    content=line,
                    search_tokens=tokens_of[line],
                    embedding=next(blobs),
                    embedding_model=local.NAME,
                    created_at=began + timedelta(seconds=30 * seq),
                )
            )
            if len(batch) >= WRITE_BATCH:
                Message.objects.bulk_create(batch, batch_size=1_000)
                batch = []
    Message.objects.bulk_create(batch, batch_size=1_000)
    return owner


# --- 1. a turn ---------------------------------------------------------------------------------


@dataclass
class TurnCell:
    messages: int
    samples: dict[str, Samples]
    embed_ms: list[float] = field(default_factory=list)  # the on turns' query embedding
    scan_ms: list[float] = field(default_factory=list)  # the on turns' scans (facts, episodes)
    embeds: set[int] = field(default_factory=set)  # query embeddings per on turn


def measure_turns(owners: dict[int, tuple], *, turns: int, warmup: int, facts: int):
    """Every owner's session, one turn off and one on per round, the order alternating from
    round to round."""
    from django.test.utils import override_settings

    cells = {
        messages: TurnCell(messages, {mode: Samples() for mode in MODES}) for messages in owners
    }
    sessions = {messages: session for messages, (_owner, session) in owners.items()}
    with (
        override_settings(ETHAN_FACT_CAPACITY=10 * facts, ETHAN_INJECTION="relevance"),
        TurnTimer() as timer,
        MeaningTimer() as spent,
    ):
        for index in range(warmup + turns):
            text = TURN_TEXTS[index % len(TURN_TEXTS)]
            order = MODES if index % 2 == 0 else MODES[::-1]
            for messages, (owner, _session) in owners.items():
                cell = cells[messages]
                for mode in order:
                    switch(mode)
                    spent.reset()
                    measured = index >= warmup
                    sessions[messages] = timer.turn(
                        owner=owner,
                        session=sessions[messages],
                        text=text,
                        samples=cell.samples[mode] if measured else None,
                        path="full",
                    )
                    if measured and mode == "on":
                        cell.embed_ms.append(spent.embed_s * 1000)
                        cell.scan_ms.append(spent.scan_s * 1000)
                        cell.embeds.add(spent.embeds)
    return [cells[messages] for messages in owners]


# --- 2. memory_search --------------------------------------------------------------------------


def timed(call, *args, **kwargs) -> tuple[float, object]:
    """(ms, what call(*args, **kwargs) returned)."""
    started = time.perf_counter()
    result = call(*args, **kwargs)
    return (time.perf_counter() - started) * 1000, result


SEARCH_CASES = (
    "after a turn (its session's vectors moved)",
    "held (nothing moved since the last search)",
    "cold (nothing held: a new process)",
)


def measure_searches(
    owner, session, *, rounds: int, warmup: int
) -> tuple[dict[tuple[str, str], list[float]], object]:
    """memory_search of `owner`'s messages as a conversation makes it: each round a turn in
    `session` first (embedder on, its vectors written after it, as the background does: the
    session's vectors move), then the search off and on in alternating order (on: the held
    vectors brought up to date), on again (nothing moved), and on once more with nothing held
    (sessions_app.meaning.messages_forget); scope all off and on, held. {(case, mode): ms},
    and the session after the turns."""
    from agent_app.memory_search import memory_search
    from sessions_app.meaning import messages_forget

    found: dict[tuple[str, str], list[float]] = {}

    def search(case: str, mode: str, index: int, scope: str = "messages") -> None:
        switch(mode)
        query = SEARCHES[index % len(SEARCHES)]
        ms, _hits = timed(memory_search, owner=owner, query=query, scope=scope)
        if index >= warmup:
            found.setdefault((case, mode), []).append(ms)

    with TurnTimer() as timer:
        for index in range(warmup + rounds):
            switch("on")
            session = timer.turn(
                owner=owner,
                session=session,
                text=TURN_TEXTS[index % len(TURN_TEXTS)],
                samples=None,
                path="full",
            )
            for mode in MODES if index % 2 == 0 else MODES[::-1]:
                search(SEARCH_CASES[0] if mode == "on" else "off", mode, index)
            search(SEARCH_CASES[1], "on", index)
            for mode in MODES:
                search("scope all", mode, index, scope="all")
            messages_forget()
            gc.collect()
            search(SEARCH_CASES[2], "on", index)
    return found, session


def scan_rows(rows, query, cap: int | None = None):
    """The queryset meaning.nearest reads."""
    from sessions_app.meaning import TUNING

    return (
        rows.filter(embedding_model=query.name)
        .order_by("-pk")
        .values_list("pk", "embedding")[: TUNING.scan_cap if cap is None else cap]
    )


def scan_parts(rows, query, cap: int | None = None) -> dict[str, float]:
    """The scan's steps timed apart (ms), each as meaning.nearest does it: the rows fetched by
    the database driver alone (the same SQL on a raw cursor), read through Django
    (values_list's iterator, each blob made bytes), turned into a float32 matrix
    (embedder.from_blobs) and compared (embedder.similarities), CHUNK rows at a time; and, to
    see what the blobs cost the read, the same SQL fetching the ids alone."""
    from django.db import connection

    import embedder
    from sessions_app.meaning import CHUNK

    vector = query.vector
    queryset = scan_rows(rows, query, cap)

    def fetched(queryset) -> float:
        sql, params = queryset.query.sql_with_params()
        started = time.perf_counter()
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            while cursor.fetchmany(CHUNK):
                pass
        return time.perf_counter() - started

    fetch = fetched(queryset)
    ids = fetched(queryset.values_list("pk"))
    started = time.perf_counter()
    read = [(pk, bytes(blob)) for pk, blob in queryset.iterator(chunk_size=CHUNK)]
    django = time.perf_counter() - started
    unpack = compare = 0.0
    for i in range(0, len(read), CHUNK):
        blobs = [blob for _pk, blob in read[i : i + CHUNK]]
        started = time.perf_counter()
        matrix = embedder.from_blobs(blobs, len(vector))
        unpack += time.perf_counter() - started
        started = time.perf_counter()
        embedder.similarities(vector, matrix)
        compare += time.perf_counter() - started
    return {
        "SQL fetch by the driver (raw cursor, same SQL)": fetch * 1000,
        "for comparison, the same SQL fetching the ids alone (no blob)": ids * 1000,
        "SQL read through Django (values_list iterator, the fetch included)": django * 1000,
        "numpy: blobs to float32 (from_blobs)": unpack * 1000,
        "numpy: cosines (similarities)": compare * 1000,
    }


def search_breakdown(owner, *, repeats: int) -> dict[str, list[float]]:
    """Where memory_search's added time goes, embedder on, messages scope: {step: ms}. The held
    vectors' steps on an instance of this bench's own (sessions_app.meaning.MessageVectors), as
    messages_scan runs them; then, for comparison, the database scan (meaning.nearest: how
    facts and episodes are scanned) over the same messages, its steps timed apart."""
    import embedder
    from sessions_app import meaning
    from sessions_app.models import Message
    from sessions_app.selectors import messages_search

    rows = Message.objects.filter(session__owner=owner)
    steps: dict[str, list[float]] = {}
    for index in range(repeats):
        query_text = SEARCHES[index % len(SEARCHES)]
        switch("off")
        bm25_ms, ranked = timed(messages_search, owner=owner, query=query_text)
        switch("on")
        embed_ms, found = timed(embedder.embed, [query_text], kind="query")
        query = meaning.Query(found.model, vector=found.vectors[0])
        held = meaning.MessageVectors(owner.pk, found.model)
        read_ms, _none = timed(held.refresh)
        check_ms, _none = timed(held.refresh)
        scan_ms, scan = timed(held.scan, query)
        lexical = [(r.item.pk, r.score) for r in ranked]
        fuse_ms, _fused = timed(meaning.fuse, lexical, scan)
        del held
        database_ms, _scan = timed(meaning.nearest, rows, query)
        parts = scan_parts(rows, query)
        for step, ms in (
            ("BM25 alone (messages_search, off)", bm25_ms),
            ("query vector (embedder.embed)", embed_ms),
            ("held vectors: read from the database (cold, or the session moved)", read_ms),
            ("held vectors: brought up to date, nothing moved (versions read)", check_ms),
            ("held vectors: compared (MessageVectors.scan)", scan_ms),
            ("fusion (meaning.fuse)", fuse_ms),
            ("for comparison, the database scan (meaning.nearest)", database_ms),
            *((f"database scan step: {part}", part_ms) for part, part_ms in parts.items()),
        ):
            steps.setdefault(step, []).append(ms)
    return steps


# --- 3. the scan's memory ----------------------------------------------------------------------


def _status_kb(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    return 0


def peak_rss_over(call) -> float | None:
    """MB the process's peak RSS rose above its RSS during `call` (VmHWM reset first), None
    where /proc does not allow it."""
    gc.collect()
    try:
        # What earlier scans freed but the allocator kept would otherwise be reused unseen.
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    except OSError:
        return None
    before = _status_kb("VmRSS")
    call()
    return (_status_kb("VmHWM") - before) / 1024


def tracemalloc_peak(call) -> float:
    """MB of tracemalloc's peak (Python objects and numpy arrays) during `call`."""
    gc.collect()
    tracemalloc.start()
    try:
        call()
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak / 2**20


@dataclass(frozen=True)
class ScanCost:
    vectors: int  # of the owner
    cap: int
    scanned: int
    ms: tuple[float, float]
    parts: dict[str, float]  # p50 of each step timed apart (scan_parts)
    traced_mb: float
    rss_mb: float | None


def measure_scan(owner, vectors: int, *, cap: int, repeats: int) -> ScanCost:
    import embedder
    from sessions_app import meaning
    from sessions_app.models import Message

    embedder.configure(embedder="default")
    found = embedder.embed([SEARCHES[0]], kind="query")
    query = meaning.Query(found.model, vector=found.vectors[0])
    rows = Message.objects.filter(session__owner=owner)

    def scan():
        return meaning.nearest(rows, query, cap=cap)

    times = []
    parts: dict[str, list[float]] = {}
    scanned = 0
    for _ in range(repeats):
        ms, result = timed(scan)
        times.append(ms)
        scanned = len(result.ids)
        for part, part_ms in scan_parts(rows, query, cap).items():
            parts.setdefault(part, []).append(part_ms)
    return ScanCost(
        vectors=vectors,
        cap=cap,
        scanned=scanned,
        ms=percentiles(times),
        parts={part: statistics.median(values) for part, values in parts.items()},
        traced_mb=tracemalloc_peak(scan),
        rss_mb=peak_rss_over(scan),
    )


# --- 4. disk -----------------------------------------------------------------------------------


def disk_per_message(messages: int, seed: int) -> tuple[float, float, float]:
    """(bytes per message without vectors, with them, the difference): two SQLite files made
    with the message table's own schema, indexes and full-text index (read from this
    database), each holding
    the same `messages` rows, one with the vector columns filled; sizes after VACUUM."""
    from django.db import connection

    from embedder import local
    from sessions_app.models import Message
    from sessions_app.search import search_tokens

    table = Message._meta.db_table
    with connection.cursor() as cursor:
        # The table, its full-text index (whose own tables FTS5 makes), its indexes, then the
        # triggers that keep the full-text index in step.
        cursor.execute(
            "SELECT sql FROM sqlite_master WHERE tbl_name IN (%s, %s) AND sql IS NOT NULL "
            "ORDER BY CASE type WHEN 'table' THEN 0 WHEN 'index' THEN 1 ELSE 2 END",
            [table, f"{table}_fts"],
        )
        schema = [row[0] for row in cursor.fetchall()]
    tokens_of = {line: search_tokens(line) for line in USER_LINES + ASSISTANT_LINES}
    rng = random.Random(seed)
    lines = [
        rng.choice(USER_LINES if seq % 2 else ASSISTANT_LINES) for seq in range(1, messages + 1)
    ]
    sizes = []
    with tempfile.TemporaryDirectory(prefix="ethan-meaning-disk-") as scratch:
        for with_vectors in (False, True):
            path = Path(scratch) / f"messages-{with_vectors}.sqlite3"
            database = sqlite3.connect(path)
            try:
                for statement in schema:
                    database.execute(statement)
                blobs = unit_blobs(messages, np.random.default_rng(seed))
                database.executemany(
                    f'INSERT INTO "{table}" (session_id, seq, role, content, tool_calls, '
                    "tool_call_id, interrupted, search_tokens, embedding, embedding_model, "
                    "created_at) VALUES (?, ?, ?, ?, NULL, '', 0, ?, ?, ?, ?)",
                    (
                        (
                            "s_disk",
                            seq,
                            "user" if seq % 2 else "assistant",
                            line,
                            tokens_of[line],
                            next(blobs) if with_vectors else None,
                            local.NAME if with_vectors else None,
                            f"2026-01-01 00:00:{seq % 60:02d}.000000",
                        )
                        for seq, line in enumerate(lines, start=1)
                    ),
                )
                database.commit()
                database.execute("VACUUM")
            finally:
                database.close()
            sizes.append(path.stat().st_size / messages)
    return sizes[0], sizes[1], sizes[1] - sizes[0]


# --- the run -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class HeldCost:
    """messages_scan over one owner: what it holds, its time cold and held, its memory."""

    vectors: int  # of the owner
    per_session: int
    held: int  # vectors held after a search
    held_mb: float  # MessageVectors.nbytes
    cold_ms: tuple[float, float]
    warm_ms: tuple[float, float]
    cold_traced_mb: float
    cold_rss_mb: float | None
    warm_traced_mb: float


def measure_held(owner, vectors: int, *, per_session: int, repeats: int) -> HeldCost:
    import embedder
    from sessions_app import meaning

    embedder.configure(embedder="default")
    found = embedder.embed([SEARCHES[0]], kind="query")
    query = meaning.Query(found.model, vector=found.vectors[0])

    def cold():
        meaning.messages_forget()
        gc.collect()
        return meaning.messages_scan(owner.pk, query)

    def warm():
        return meaning.messages_scan(owner.pk, query)

    cold_ms = []
    for _ in range(repeats):
        meaning.messages_forget()
        gc.collect()
        cold_ms.append(timed(meaning.messages_scan, owner.pk, query)[0])
    warm_ms = [timed(warm)[0] for _ in range(repeats)]
    held = meaning.MessageVectors(owner.pk, found.model)
    held.refresh()
    count, held_mb = len(held.joined()[0]), held.nbytes / 2**20
    del held
    meaning.messages_forget()
    cold_traced = tracemalloc_peak(cold)
    meaning.messages_forget()
    gc.collect()
    cold_rss = peak_rss_over(lambda: meaning.messages_scan(owner.pk, query))
    warm_traced = tracemalloc_peak(warm)
    meaning.messages_forget()
    return HeldCost(
        vectors=vectors,
        per_session=per_session,
        held=count,
        held_mb=held_mb,
        cold_ms=percentiles(cold_ms),
        warm_ms=percentiles(warm_ms),
        cold_traced_mb=cold_traced,
        cold_rss_mb=cold_rss,
        warm_traced_mb=warm_traced,
    )


def scan_plan(owner) -> str:
    """SQLite's plan for the scan's SQL over `owner`'s messages (EXPLAIN QUERY PLAN)."""
    from django.db import connection

    import embedder
    from sessions_app import meaning
    from sessions_app.models import Message

    query = meaning.Query(embedder.embedder_name() or "", vector=np.zeros(1, dtype=np.float32))
    sql, params = scan_rows(
        Message.objects.filter(session__owner=owner), query
    ).query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
        return "; ".join(row[-1] for row in cursor.fetchall())


def where_the_time_goes(cost: ScanCost) -> str:
    """One line on a scan: its time split between the SQL read and numpy."""
    django, fetch, ids, unpack, compare = (
        cost.parts[part]
        for part in (
            "SQL read through Django (values_list iterator, the fetch included)",
            "SQL fetch by the driver (raw cursor, same SQL)",
            "for comparison, the same SQL fetching the ids alone (no blob)",
            "numpy: blobs to float32 (from_blobs)",
            "numpy: cosines (similarities)",
        )
    )
    return (
        f"- scan of {cost.scanned:,} vectors (owner of {cost.vectors:,}): {cost.ms[0]:.0f} ms "
        f"at p50{' (over 100 ms)' if cost.ms[0] > 100 else ''}; its steps timed apart: the SQL "
        f"read {django:.0f} ms (the driver's fetch alone {fetch:.0f} ms; {ids:.0f} ms without "
        f"the blobs), numpy {unpack + compare:.0f} ms (from_blobs {unpack:.0f}, similarities "
        f"{compare:.0f})."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, few turns")
    parser.add_argument("--history", type=comma_sizes, default=None, help="turn owners' messages")
    parser.add_argument("--facts", type=int, default=200, help="active facts per turn owner")
    parser.add_argument("--turns", type=int, default=None, help="measured turns per cell and mode")
    parser.add_argument("--warmup", type=int, default=3, help="unmeasured rounds first")
    parser.add_argument("--searches", type=int, default=None, help="measured memory_search rounds")
    parser.add_argument("--scans", type=comma_sizes, default=None, help="scan owners' vectors")
    parser.add_argument("--per-session", type=int, default=1_000, help="scan owners' sessions")
    parser.add_argument(
        "--one-session",
        type=int,
        default=None,
        help="also an owner with this many messages in one session (0: none)",
    )
    parser.add_argument("--scan-repeats", type=int, default=None, help="timed scans per case")
    parser.add_argument("--disk", type=int, default=None, help="messages in each disk file")
    parser.add_argument("--seed", type=int, default=43)
    parser.add_argument("--no-record", action="store_true", help="do not append to docs/")
    args = parser.parse_args(argv)
    history = args.history or ((10, 2_000) if args.quick else (10, 100_000))
    scans = args.scans or ((20_000,) if args.quick else (100_000, 1_000_000))
    turns = args.turns or (8 if args.quick else 40)
    searches = args.searches or (6 if args.quick else 30)
    scan_repeats = args.scan_repeats or (2 if args.quick else 5)
    disk = args.disk or (5_000 if args.quick else 100_000)
    one_session = (
        args.one_session if args.one_session is not None else (0 if args.quick else 300_000)
    )

    # A home of one's own (ETHAN_HOME) is kept: django_setup would empty .bench-home, which
    # another bench may be using.
    django_setup(fresh_home="ETHAN_HOME" not in os.environ)
    from django.db import connection

    import embedder
    from sessions_app.meaning import TUNING
    from sessions_app.models import Message

    if Message.objects.exists():
        sys.exit("the benchmark database is not empty: point ETHAN_HOME at an empty home")
    if connection.vendor != "sqlite":
        sys.exit("SQLite only: the goal (and the disk measure) is SQLite's")
    began = time.perf_counter()
    embedder.configure(embedder="default")
    load_ms, _name = timed(embedder.preload)

    started = time.perf_counter()
    owners = fill_turn_owners(history_sizes=history, facts=args.facts, seed=args.seed)
    fill_s = time.perf_counter() - started
    print(f"turn owners filled in {fill_s:.0f} s", flush=True)
    cells = measure_turns(owners, turns=turns, warmup=args.warmup, facts=args.facts)
    print("turns measured", flush=True)
    largest_owner = owners[max(history)][0]
    search_ms, _session = measure_searches(
        largest_owner, owners[max(history)][1], rounds=searches, warmup=args.warmup
    )
    breakdown = search_breakdown(largest_owner, repeats=max(5, searches // 3))
    print("searches measured", flush=True)
    disk_without, disk_with, disk_added = disk_per_message(disk, args.seed)
    print("disk measured", flush=True)
    scan_costs, held_costs = [], []
    plan = ""
    layouts = [(vectors, args.per_session) for vectors in scans]
    if one_session:
        layouts.append((one_session, one_session))
    for vectors, per_session in layouts:
        started = time.perf_counter()
        owner = fill_scan_owner(vectors, args.seed, per_session=per_session)
        print(
            f"scan owner of {vectors:,} filled in {time.perf_counter() - started:.0f} s", flush=True
        )
        held_costs.append(
            measure_held(owner, vectors, per_session=per_session, repeats=scan_repeats)
        )
        if per_session == args.per_session:
            scan_costs.append(
                measure_scan(owner, vectors, cap=TUNING.scan_cap, repeats=scan_repeats)
            )
            plan = scan_plan(owner)
    took = time.perf_counter() - began

    goal = 15.0
    turn_rows, verdicts = [], []
    for cell in cells:
        off = percentiles(cell.samples["off"].overhead_ms)
        on = percentiles(cell.samples["on"].overhead_ms)
        added = on[1] - off[1]
        verdicts.append((cell.messages, added))
        turn_rows.append(
            f"| {cell.messages:,} | {len(cell.samples['on'].overhead_ms)} "
            f"| {ms_cells(off)} | {ms_cells(on)} "
            f"| {on[0] - off[0]:+.1f} | **{added:+.1f}** | {on[1] / off[1]:.2f}× "
            f"| {ms_cells(percentiles(cell.embed_ms))} | {ms_cells(percentiles(cell.scan_ms))} "
            f"| {', '.join(str(n) for n in sorted(cell.embeds))} "
            f"| {statistics.median(cell.samples['off'].queries):.0f} "
            f"| {statistics.median(cell.samples['on'].queries):.0f} |"
        )
    search_rows = []
    for scope, case, off_key in (
        *(("messages", case, ("off", "off")) for case in SEARCH_CASES),
        ("all", "held (nothing moved since the last search)", ("scope all", "off")),
    ):
        off = percentiles(search_ms[off_key])
        on = percentiles(search_ms["scope all" if scope == "all" else case, "on"])
        search_rows.append(
            f"| {scope} | {case} | {len(search_ms[off_key])} | {ms_cells(off)} | {ms_cells(on)} "
            f"| {on[1] - off[1]:+.1f} | {on[1] / off[1]:.2f}× |"
        )
    held_rows = [
        f"| {cost.vectors:,} | {cost.per_session:,} | {cost.held:,} | {cost.held_mb:.1f} "
        f"| {ms_cells(cost.cold_ms)} | {ms_cells(cost.warm_ms)} | {cost.cold_traced_mb:.1f} "
        f"| {'n/a' if cost.cold_rss_mb is None else f'{cost.cold_rss_mb:.1f}'} "
        f"| {cost.warm_traced_mb:.1f} |"
        for cost in held_costs
    ]
    breakdown_rows = [
        f"| {step} | {ms_cells(percentiles(values))} |" for step, values in breakdown.items()
    ]
    scan_rows = [
        f"| {cost.vectors:,} | {cost.cap:,}{' (scan_cap)' if cost.cap == TUNING.scan_cap else ''} "
        f"| {cost.scanned:,} | {ms_cells(cost.ms)} "
        f"| {' | '.join(f'{part_ms:.0f}' for part_ms in cost.parts.values())} "
        f"| {cost.traced_mb:.1f} | {'n/a' if cost.rss_mb is None else f'{cost.rss_mb:.1f}'} |"
        for cost in scan_costs
    ]
    table = "\n".join(
        [
            f"The default embedder ({embedder.embedder_name() or 'default'}, loaded once before "
            f"the run in {load_ms / 1000:.1f} s) on against off (BM25 alone), in the same run, "
            f"interleaved: each round runs the same work off and on, the order alternating from "
            f"round to round. The query vectors a thread remembers are forgotten before every "
            f"measured call, so each one embeds its query. Message vectors are random unit "
            f"vectors stored as the default's int8 blobs; facts and episodes have the "
            f"embedder's real ones. Whole run {took:.0f} s.",
            "",
            f"**A turn** (bench.turn_overhead's owners and TurnTimer: full path, offline model, "
            f"relevance injection; each owner has {args.facts} active facts, {EPISODES} episodes, "
            f"rules and a profile; the messages are one caught-up session's). {turns} measured "
            f"turns per size and mode after {args.warmup} rounds unmeasured. Overhead: the turn "
            f"minus the model. Added p95: p95 on minus p95 off. Query embedding: the time the "
            f"on turns spend in embedder.embed(kind=query), and how many they make per turn "
            f"(the facts' injection and the episodes' recall share a vector when they search "
            f"the same text); scans: the time they spend in meaning.nearest; SQL queries: "
            f"per turn, the median (TurnTimer's count). A turn scans "
            f"the owner's facts and episodes; its messages "
            f"are scanned only when the model calls memory_search (the offline model calls no "
            f"tool): such a turn pays memory_search's added time below as well.",
            "",
            "| owner's messages | turns per mode | off p50 ms | off p95 ms | on p50 ms "
            "| on p95 ms | added p50 ms | added p95 ms | p95 on/off | query embedding p50 ms "
            "| query embedding p95 ms | scans p50 ms | scans p95 ms | query embeddings per turn "
            "| SQL queries off | SQL queries on |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            *turn_rows,
            "",
            *(
                f"- added p95 at {messages:,} messages ≤ {goal:.0f} ms: "
                f"{'met' if added <= goal else 'NOT met'} ({added:+.1f} ms)"
                for messages, added in verdicts
            ),
            "",
            f"**memory_search** (agent_app.memory_search) over the owner of {max(history):,} "
            f"messages in one session (and its facts and episodes for scope all), "
            f"{searches} measured rounds of the questions in turn (some share words with the "
            f"history, some only meaning). Each round: a turn in that session, embedder on, "
            f"its vectors written after it (the session's vectors move); the search off and on "
            f"in alternating order (on: the held vectors brought up to date, here the whole "
            f"session read again); on again (nothing moved); scope all off and on; on once "
            f"more with nothing held (messages_forget: a new process, or an owner let go). "
            f"Each on row is compared with the off calls of its scope.",
            "",
            "| scope | on: the held vectors | calls | off p50 ms | off p95 ms | on p50 ms "
            "| on p95 ms | added p95 ms | p95 on/off |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|",
            *search_rows,
            "",
            f"Where the messages' search spends its time, embedder on, the same owner "
            f"({len(next(iter(breakdown.values())))} calls). The held vectors' steps on a "
            f"MessageVectors of the bench's own; then, for comparison, the database scan "
            f"(meaning.nearest, as facts and episodes are scanned) over the same messages, its "
            f"steps timed apart: the rows fetched by the driver alone on a raw cursor (and the "
            f"ids alone), read through Django's values_list iterator, unpacked to float32, "
            f"compared:",
            "",
            "| step | p50 ms | p95 ms |",
            "|---|---:|---:|",
            *breakdown_rows,
            "",
            f"**The messages' vectors held** (meaning.messages_scan) for one owner of each "
            f"size, its messages in sessions of the size given, {scan_repeats} searches per "
            f"case: cold (messages_forget first: every held vector read from the database) "
            f"and held (nothing moved: the versions read, the vectors compared). Held: the "
            f"vectors kept after a search and their bytes (MessageVectors.nbytes); "
            f"TUNING.scan_cap = {TUNING.scan_cap:,} bounds them by whole sessions, newest "
            f"first, and ETHAN_VECTOR_CACHE_MB all owners together. Peak memory of one more "
            f"search: tracemalloc's peak (Python objects, numpy arrays, the held vectors "
            f"included) and the process's peak RSS (VmHWM, reset before) over its RSS before, "
            f"which counts SQLite's page cache too.",
            "",
            "| owner's vectors | per session | held | held MB | cold p50 ms | cold p95 ms "
            "| held p50 ms | held p95 ms | cold: tracemalloc peak MB "
            "| cold: peak RSS over before MB | held: tracemalloc peak MB |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            *held_rows,
            "",
            f"**The database scan** (meaning.nearest: facts and episodes are scanned so) over "
            f"the same owners' messages, {scan_repeats} timed scans per case (its steps: p50 "
            f"of each timed apart, as above); peak memory of one more scan, measured as above. "
            f"TUNING.scan_cap: the newest that many rows are compared.",
            "",
            "| owner's vectors | cap | scanned | p50 ms | p95 ms | driver fetch ms "
            "| ids alone ms | Django read ms | from_blobs ms | similarities ms "
            "| tracemalloc peak MB | peak RSS over before MB |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            *scan_rows,
            "",
            *(where_the_time_goes(cost) for cost in scan_costs),
            f"- SQLite's plan for the scan's SQL: {plan}.",
            "",
            f"**Disk per message**: two SQLite files with the message table's schema, "
            f"indexes and FTS5 index, {disk:,} messages each (the bench's lines, their search "
            f"tokens), one with embedding (a {embedder.blob_size(512)}-byte blob) and "
            f"embedding_model filled, after VACUUM: {disk_without:.0f} bytes per message "
            f"without vectors, {disk_with:.0f} with them, **{disk_added:.0f} bytes added per "
            f"message** ({disk_added * 1_000_000 / 2**20:.0f} MB per million messages).",
        ]
    )
    print(table)
    if not args.no_record:
        append_results(
            "Memory found by meaning: cost", command_line("bench.meaning_cost", argv), table
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
