"""Time to first delta: what Ethan adds, over HTTP, between a streamed turn's request and its
first `delta` event, and between the model's last chunk and the `done` event.

POST /api/chat with `"stream": true` on a session that already holds 10 or 100,000 messages,
served by gunicorn on SQLite (embedded mode: no broker, the consolidation runs in the web
process once the answer is sent) and on PostgreSQL (a Celery worker on Redis, as deployed).
The model is the OpenAI fake (tests/fakes) in this process, as gpt-4o, streaming one fixed
reply at a set pace. It stamps when each request reached it and when each chunk went out, on
the client's own monotonic clock, so the model's time is taken out exactly:

    added   = (first `delta` read − request sent) − (fake's first text chunk − request reached it)
            = before the model (request sent → the model request reaches the fake)
              + after the model (the fake writes its first text chunk → the client reads `delta`)
    end gap = `done` read − the fake's last chunk (`data: [DONE]`)

    python -m bench.first_delta --quick --no-record     # 10 / 1,000 messages, 10 requests a cell
    python -m bench.first_delta                         # 10 / 100,000 messages, 40 requests a cell
    python -m bench.first_delta --database sqlite       # one database only

Django is configured once per process, so with both databases each runs in a child process of
this module and this one gathers the results. The PostgreSQL half needs PostgreSQL and Redis on
127.0.0.1 (database ethan_bench_http is dropped and re-created, Redis database 13 flushed), like
bench.chat_throughput.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import re
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass

from bench.common import ms_cells, percentile, percentiles, run_per_database
from bench.server import (
    BenchStack,
    add_gunicorn_arguments,
    cpu_note,
    gunicorn_from_args,
)

HISTORY_SIZES = (10, 100_000)
QUICK_HISTORY_SIZES = (10, 1_000)
DATABASES = ("sqlite", "postgresql")
TARGET_MS = 30.0  # added p95 before the first delta, and the end gap p95
MODEL = "gpt-4o"
# The reply the fake streams, in pieces of 4 characters (FakeServer.piece_chars).
REPLY = (
    "好的，我来帮你整理一下。First the checklist for Tuesday, then the notes for the team, "
    "and last the slides for Friday."
)
# The fake's chunks for a text reply: [0] the role (no text), [1] the first piece of text, …,
# the finish reason, the usage, `data: [DONE]`. Ethan sends no delta for chunk 0.
FIRST_TEXT_CHUNK = 1
# Far above any rate the bench reaches (the bench user is one user; 600/min by default).
API_RATE = "10000000/min"
MARKER = re.compile(r"\(#(\d+)\)")


class BenchError(RuntimeError):
    """A request that did not go as a turn should: the run stops, saying which."""


# --- reading one streamed turn ---------------------------------------------------------------


@dataclass(frozen=True)
class StreamTimes:
    """What the client read of one turn's events, and when."""

    events: tuple[str, ...]  # event names in order
    first_delta: float | None  # when the first `event: delta` line was read
    last_event: float | None  # when the `event: done` (or `error`) line was read
    text: str  # the deltas joined
    final: dict  # the data of done / error


def read_events(lines: Iterable[tuple[float, bytes]]) -> StreamTimes:
    """Server-Sent Events from (time read, line) pairs: `event:` lines, `data:` lines (JSON),
    blank lines between events."""
    names: list[str] = []
    texts: list[str] = []
    first_delta = last_event = None
    final: dict = {}
    name = None
    for at, raw in lines:
        line = raw.decode("utf-8").rstrip("\r\n")
        if line.startswith("event:"):
            name = line.removeprefix("event:").strip()
            names.append(name)
            if name == "delta" and first_delta is None:
                first_delta = at
            if name in ("done", "error"):
                last_event = at
        elif line.startswith("data:") and name is not None:
            data = json.loads(line.removeprefix("data:").strip())
            if name == "delta":
                texts.append(data["text"])
            elif name in ("done", "error"):
                final = data
        elif not line:
            name = None
    return StreamTimes(tuple(names), first_delta, last_event, "".join(texts), final)


@dataclass(frozen=True)
class Timing:
    """One turn's numbers, in ms."""

    added: float  # before the first delta, the model's own time taken out
    before_model: float  # request sent → the model request reached the fake
    after_model: float  # the fake's first text chunk → the first delta read
    model_first_text: float  # the fake's own time: request reached it → first text chunk
    end_gap: float  # the fake's last chunk → `done` read


def timing(
    *, sent: float, first_delta: float, done: float, arrived: float, chunk_times: list[float]
) -> Timing:
    """The turn's numbers from the client's times (`sent`, `first_delta`, `done`) and the
    fake's (`arrived`, `chunk_times`), all time.monotonic() seconds in one process."""
    first_text = chunk_times[FIRST_TEXT_CHUNK]
    return Timing(
        added=((first_delta - sent) - (first_text - arrived)) * 1000,
        before_model=(arrived - sent) * 1000,
        after_model=(first_delta - first_text) * 1000,
        model_first_text=(first_text - arrived) * 1000,
        end_gap=(done - chunk_times[-1]) * 1000,
    )


def turn_problem(times: StreamTimes) -> str:
    """Why a streamed turn is not a good one ('' when it is): the events in order, one or more
    deltas, done last, and the deltas adding up to the stored reply."""
    if not times.events or times.events[0] != "started":
        return f"no started event first: {times.events[:3]}"
    if times.events[-1] != "done":
        return f"ended with {times.events[-1:]}: {times.final}"
    if times.first_delta is None:
        return "no delta"
    if times.text != times.final.get("reply") or times.text != REPLY:
        return f"the deltas ({times.text[:40]!r}…) are not the reply"
    return ""


# --- the model -------------------------------------------------------------------------------


class PacedModel:
    """The OpenAI fake as both models: gpt-4o streams REPLY at the set pace; gpt-4o-mini (the
    compression model gpt-4o routes to) answers the memory work at once (tests' MiniModel).
    Each chat request is kept by the marker `(#n)` of its message, with when it arrived."""

    def __init__(self, *, first_chunk_ms: float, chunk_ms: float):
        from tests.fakes.openai_fake import FakeOpenAI, MiniModel

        self.first_chunk_ms = first_chunk_ms
        self.chunk_ms = chunk_ms
        self.fake = FakeOpenAI()
        self.memory = MiniModel()
        self.chats: dict[int, object] = {}
        self.fake.responder = self._answer

    @property
    def base_url(self) -> str:
        return f"{self.fake.url}/v1"

    def _answer(self, recorded):
        from tests.fakes.base import Reply
        from tests.fakes.openai_fake import FakeOpenAI

        arrived = time.monotonic()
        body = recorded.body
        if body["model"] != MODEL:
            try:
                return self.memory(recorded)
            except AssertionError:  # memory work MiniModel does not know: any short text
                return Reply(body={**FakeOpenAI.text("好的"), "model": body["model"]})
        last_user = next(m for m in reversed(body["messages"]) if m["role"] == "user")
        found = MARKER.search(str(last_user["content"]))
        if found is None:
            raise BenchError(f"a chat request without a marker: {last_user['content']!r}")
        recorded.arrived = arrived
        self.chats[int(found.group(1))] = recorded
        return Reply(
            body=FakeOpenAI.text(REPLY),
            first_chunk_ms=self.first_chunk_ms,
            chunk_ms=self.chunk_ms,
        )

    def chat(self, number: int):
        """The recorded chat request of message number `number`."""
        recorded = self.chats.pop(number, None)
        if recorded is None or not recorded.streamed:
            raise BenchError(f"message #{number}: the model got no streamed request for it")
        return recorded

    def close(self) -> None:
        self.fake.close()


# --- the server on SQLite --------------------------------------------------------------------


class EmbeddedStack(BenchStack):
    """gunicorn alone on a SQLite home with no broker: embedded mode, as `make serve` runs on a
    laptop. The deferred consolidation runs in the web worker after each answer is sent."""

    def _start(self) -> None:
        self._start_web(f"sqlite:///{self.home / 'ethan.sqlite3'}", broker=False)
        self._wait_web()


def stack_for_database(
    database: str,
    args,
    *,
    extra_env: dict[str, str],
    embedded: type[BenchStack] = EmbeddedStack,
    deployed: type[BenchStack] = BenchStack,
) -> tuple[BenchStack, str]:
    """The servers for `database`, not yet started, and how they run (for the tables): on
    SQLite gunicorn alone in embedded mode, on PostgreSQL as deployed, with a Celery worker on
    Redis; gunicorn and Celery as add_gunicorn_arguments's `args` say. A bench that starts a
    server of its own besides passes its subclasses as `embedded` and `deployed`."""
    gunicorn = gunicorn_from_args(args)
    if database == "sqlite":
        return (
            embedded(gunicorn=gunicorn, extra_env=extra_env),
            f"{gunicorn.label()}, embedded (no broker)",
        )
    stack = deployed(
        gunicorn=gunicorn,
        celery_concurrency=args.celery_concurrency,
        celery_nice=args.celery_nice,
        extra_env=extra_env,
    )
    return (
        stack,
        f"{gunicorn.label()}, one Celery worker (prefork, concurrency "
        f"{args.celery_concurrency}) on Redis",
    )


# --- one database ----------------------------------------------------------------------------


def prepare(*, history_sizes, facts: int, seed: int) -> tuple[str, dict[int, str]]:
    """One owner with `facts` active facts and one caught-up gpt-4o session per history size
    (bench.turn_overhead's fill: bulk_create, working state as a caught-up consolidator leaves
    it). Returns the owner's API token and {messages: session id}."""
    from django.db import connections
    from rest_framework.authtoken.models import Token

    from bench.turn_overhead import _analyze, fill_owner
    from memory_app.working import memory_config
    from sessions_app.models import ChatSession

    owner, sessions = fill_owner(
        facts=facts, history_sizes=history_sizes, config=memory_config(), rng=random.Random(seed)
    )
    ChatSession.objects.filter(pk__in=[s.pk for s in sessions.values()]).update(model=MODEL)
    _analyze()
    token, _ = Token.objects.get_or_create(user=owner)
    connections.close_all()  # the web processes have the database to themselves
    return token.key, {messages: session.pk for messages, session in sessions.items()}


def stamped_lines(response: http.client.HTTPResponse) -> Iterator[tuple[float, bytes]]:
    """The answer's lines as they arrive (chunked: http.client returns each line once it is
    there), each with the time it was read."""
    while line := response.readline():
        yield time.monotonic(), line


def stream_turn(base_url: str, token: str, session_id: str, text: str) -> tuple[float, StreamTimes]:
    """One streamed turn: (when the request was sent, what was read). The connection is made
    before the clock starts (gunicorn's sync workers take one request per connection)."""
    host, port = base_url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    body = json.dumps({"message": text, "session_id": session_id, "stream": True}).encode()
    headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
    try:
        connection.connect()
        sent = time.monotonic()
        connection.request("POST", "/api/chat", body, headers)
        response = connection.getresponse()
        if response.status != 200:
            raise BenchError(f"POST /api/chat: HTTP {response.status} {response.read()[:300]!r}")
        return sent, read_events(stamped_lines(response))
    finally:
        connection.close()


def run_cells(
    *,
    base_url: str,
    token: str,
    sessions: dict[int, str],
    model: PacedModel,
    requests: int,
    warmup: int,
    pause: float,
) -> dict[int, list[Timing]]:
    """`warmup` unmeasured rounds, then `requests` measured turns per session, the sessions
    taking turns (one each, round after round) so that whatever else the machine does falls
    on all of them alike; `pause` seconds between turns, as a person reads before answering.

    In a warm-up round the sessions' turns go at once: each takes a gunicorn sync worker of
    its own, so every worker (up to one per session) has loaded what a first turn loads
    (jieba's dictionary, the model client) before anything is measured."""
    from concurrent.futures import ThreadPoolExecutor

    from bench.turn_overhead import TURN_TEXTS

    samples: dict[int, list[Timing]] = {messages: [] for messages in sessions}
    numbers = iter(range(1, 1_000_000))

    def turn(index: int, messages: int, session_id: str) -> Timing:
        number = next(numbers)
        text = f"{TURN_TEXTS[index % len(TURN_TEXTS)]} (#{number})"
        sent, times = stream_turn(base_url, token, session_id, text)
        problem = turn_problem(times)
        if problem:
            raise BenchError(f"session of {messages:,} messages, #{number}: {problem}")
        recorded = model.chat(number)
        return timing(
            sent=sent,
            first_delta=times.first_delta,
            done=times.last_event,
            arrived=recorded.arrived,
            chunk_times=recorded.chunk_times,
        )

    with ThreadPoolExecutor(max_workers=len(sessions)) as pool:
        for index in range(warmup):
            futures = [pool.submit(turn, index, *item) for item in sessions.items()]
            for future in futures:
                future.result()
            time.sleep(pause)
    for index in range(warmup, warmup + requests):
        for messages, session_id in sessions.items():
            samples[messages].append(turn(index, messages, session_id))
            time.sleep(pause)
    return samples


# The steps of a turn timed in --profile: (label, module, attribute). Before the first delta:
STEPS_BEFORE = (
    ("turn_plan (validate, choose path and model)", "channels_app.rest", "turn_plan"),
    ("turn_start (claim the session, store the message)", "channels_app.turns", "turn_start"),
    ("build_system (prompt, facts, profile)", "agent_app.turn", "build_system"),
    ("context_parts (working state, hot rounds)", "agent_app.turn", "context_parts"),
    ("context_assemble (long-term, summaries)", "agent_app.turn", "context_assemble"),
    ("facts_mark_injected (UPDATE)", "memory_app.services", "facts_mark_injected"),
)
# After the model's last chunk, before `done`:
STEPS_AFTER = (
    ("store the reply (message_append)", "sessions_app.services", "message_append"),
    ("enqueue the consolidation", "agent_app.turn", "enqueue"),
    ("give the session back (UPDATE)", "agent_app.turn", "_release"),
)
SDK_STEP = "the SDK until the request reaches the model"
REST = "the rest (middleware, DRF: auth, throttle; the response)"


def profile_first_delta(*, token: str, session_id: str, model: PacedModel, turns: int) -> str:
    """Where the time goes, in-process (Django's test client: the middleware, DRF and the view
    as gunicorn runs them, without gunicorn): `turns` streamed turns on one session, the model
    answering at once, the steps before the model call and after its last chunk timed, every
    SQL statement logged with its time."""
    import importlib
    from contextlib import ExitStack
    from unittest import mock

    from django.db import connection
    from django.test import Client

    import ethan_llm

    client = Client(HTTP_HOST="127.0.0.1", HTTP_AUTHORIZATION=f"Token {token}")
    spans: list[tuple[str, float, float]] = []  # (step, start, end) of the current turn
    log: list[tuple[float, float, str]] = []  # (start, ms, sql) of the current turn
    real_stream = ethan_llm.stream
    marks: dict[str, float] = {}

    def timed(label, function):
        def wrapper(*args, **kwargs):
            started = time.monotonic()
            try:
                return function(*args, **kwargs)
            finally:
                spans.append((label, started, time.monotonic()))

        return wrapper

    def spent(label: str, low: float, high: float) -> float:
        """Seconds of the turn's `label` calls that ran between `low` and `high`."""
        return sum(b - a for name, a, b in spans if name == label and low <= a and b <= high)

    def stream(**kwargs):
        marks["stream"] = time.monotonic()
        yield from real_stream(**kwargs)

    def logged(execute, sql, params, many, context):
        started = time.monotonic()
        try:
            return execute(sql, params, many, context)
        finally:
            log.append((started, (time.monotonic() - started) * 1000, sql))

    before = {label: [] for label, _, _ in STEPS_BEFORE} | {SDK_STEP: [], REST: []}
    after = {label: [] for label, _, _ in STEPS_AFTER} | {"the rest": []}
    totals: dict[str, list[float]] = {"added": [], "end gap": []}
    sql_count: dict[str, list[int]] = {"added": [], "end gap": []}
    sql_ms: dict[str, list[float]] = {"added": [], "end gap": []}
    by_statement: dict[str, list[float]] = {}
    saved_pace = model.first_chunk_ms, model.chunk_ms
    model.first_chunk_ms = model.chunk_ms = 0.0
    with ExitStack() as patches:
        for label, module, attribute in STEPS_BEFORE + STEPS_AFTER:
            target = importlib.import_module(module)
            patches.enter_context(
                mock.patch.object(target, attribute, timed(label, getattr(target, attribute)))
            )
        patches.enter_context(mock.patch.object(ethan_llm, "stream", stream))
        patches.enter_context(connection.execute_wrapper(logged))
        for index in range(turns + 2):  # the first two are not counted
            number = 1_000_000 + index
            spans.clear()
            log.clear()
            sent = time.monotonic()
            response = client.post(
                "/api/chat",
                {
                    "message": f"How should I prepare for Tuesday? (#{number})",
                    "session_id": session_id,
                    "stream": True,
                },
                content_type="application/json",
            )
            first_delta = done = 0.0
            for chunk in response.streaming_content:
                if not first_delta and b"event: delta" in chunk:
                    first_delta = time.monotonic()
                if b"event: done" in chunk:
                    done = time.monotonic()
            response.close()  # request_finished: the deferred consolidation (embedded mode)
            recorded = model.chat(number)
            if index < 2:
                continue
            first_text = recorded.chunk_times[FIRST_TEXT_CHUNK]
            last_chunk = recorded.chunk_times[-1]
            added = ((first_delta - sent) - (first_text - recorded.arrived)) * 1000
            end_gap = (done - last_chunk) * 1000
            totals["added"].append(added)
            totals["end gap"].append(end_gap)

            for label, _, _ in STEPS_BEFORE:
                before[label].append(spent(label, sent, first_delta) * 1000)
            sdk = (recorded.arrived - marks["stream"]) * 1000
            before[SDK_STEP].append(sdk)
            steps = sum(before[label][-1] for label, _, _ in STEPS_BEFORE)
            # The rest also holds the fake's first text reaching the client (under 1 ms).
            before[REST].append(added - sdk - steps)
            for label, _, _ in STEPS_AFTER:
                after[label].append(spent(label, last_chunk, done) * 1000)
            after["the rest"].append(end_gap - sum(after[label][-1] for label, _, _ in STEPS_AFTER))
            for phase, low, high in (("added", sent, first_delta), ("end gap", last_chunk, done)):
                statements = [(ms, sql) for at, ms, sql in log if low <= at <= high]
                sql_count[phase].append(len(statements))
                sql_ms[phase].append(sum(ms for ms, _ in statements))
                if phase == "added":
                    for ms, sql in statements:
                        key = re.sub(r"\s+", " ", sql)[:110]
                        by_statement.setdefault(key, []).append(ms)
    model.first_chunk_ms, model.chunk_ms = saved_pace

    def p(values):
        return ms_cells(percentiles(values))

    def counted(phase):
        low, high = min(sql_count[phase]), max(sql_count[phase])
        return str(low) if low == high else f"{low}-{high}"

    lines = [
        f"{turns} in-process streamed turns (Django test client, the model at once). Added "
        f"before the first delta: p50 {percentiles(totals['added'])[0]:.1f} ms, p95 "
        f"{percentiles(totals['added'])[1]:.1f} ms, {counted('added')} SQL statements "
        f"taking p50 {percentiles(sql_ms['added'])[0]:.1f} ms together; end gap: p50 "
        f"{percentiles(totals['end gap'])[0]:.1f} ms, p95 {percentiles(totals['end gap'])[1]:.1f} "
        f"ms, {counted('end gap')} statements, p50 {percentiles(sql_ms['end gap'])[0]:.1f} ms.",
        "",
        "| before the first delta | p50 ms | p95 ms |",
        "|---|---|---|",
        *(f"| {label} | {p(values)} |" for label, values in before.items()),
        "",
        "| after the model's last chunk | p50 ms | p95 ms |",
        "|---|---|---|",
        *(f"| {label} | {p(values)} |" for label, values in after.items()),
        "",
        "| SQL before the first delta, the 8 costliest | per turn | p50 ms each |",
        "|---|---|---|",
    ]
    ranked = sorted(by_statement.items(), key=lambda item: -sum(item[1]))
    for sql, times in ranked[:8]:
        lines.append(f"| `{sql}` | {len(times) / turns:g} | {percentiles(times)[0]:.2f} |")
    return "\n".join(lines)


def measure_database(database: str, args) -> dict:
    """Start the server on `database`, fill it, run the cells: a JSON-able result."""
    model = PacedModel(first_chunk_ms=args.first_chunk_ms, chunk_ms=args.chunk_ms)
    extra_env = {
        "OPENAI_API_KEY": "bench-key",
        "OPENAI_BASE_URL": model.base_url,
        "ETHAN_API_RATE": API_RATE,
    }
    try:
        stack, server = stack_for_database(database, args, extra_env=extra_env)
        with stack:
            from bench.common import database_label

            started = time.perf_counter()
            token, sessions = prepare(
                history_sizes=args.history_sizes, facts=args.facts, seed=args.seed
            )
            filled = time.perf_counter() - started
            machine_load = cpu_note()
            started = time.perf_counter()
            samples = run_cells(
                base_url=stack.base_url,
                token=token,
                sessions=sessions,
                model=model,
                requests=args.requests,
                warmup=args.warmup,
                pause=args.pause,
            )
            took = time.perf_counter() - started
            label = database_label()
            profile = ""
            if args.profile:
                largest = max(sessions)
                profile = f"{label}, the {largest:,}-message session: " + profile_first_delta(
                    token=token, session_id=sessions[largest], model=model, turns=args.profile
                )
    finally:
        model.close()
    return {
        "database": label,
        "server": server,
        "fill_seconds": filled,
        "run_seconds": took,
        "load": machine_load,
        "profile": profile,
        "cells": {str(m): [asdict(t) for t in timings] for m, timings in samples.items()},
    }


# --- the report ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    database: str
    messages: int
    requests: int
    added: tuple[float, float]  # (p50, p95)
    before_model: tuple[float, float]
    after_model: tuple[float, float]
    model_first_text: tuple[float, float]
    end_gap: tuple[float, float]
    end_gap_max: float


def cells_of(result: dict) -> list[Cell]:
    cells = []
    for messages, rows in result["cells"].items():
        timings = [Timing(**row) for row in rows]

        def of(name: str, timings=timings) -> tuple[float, float]:
            return percentiles([getattr(t, name) for t in timings])

        cells.append(
            Cell(
                database=result["database"],
                messages=int(messages),
                requests=len(timings),
                added=of("added"),
                before_model=of("before_model"),
                after_model=of("after_model"),
                model_first_text=of("model_first_text"),
                end_gap=of("end_gap"),
                end_gap_max=percentile([t.end_gap for t in timings], 1.0),
            )
        )
    return cells


def targets(cells: list[Cell]) -> tuple[bool, bool]:
    """(added p95 ≤ 30 ms in every cell, end gap p95 ≤ 30 ms in every cell)."""
    return (
        all(cell.added[1] <= TARGET_MS for cell in cells),
        all(cell.end_gap[1] <= TARGET_MS for cell in cells),
    )


def report(results: list[dict], args) -> str:
    cells = [cell for result in results for cell in cells_of(result)]
    added_met, end_met = targets(cells)

    rows = [
        f"| {cell.database.split()[0]} | {cell.messages:,} | {cell.requests} "
        f"| {ms_cells(cell.added)} | {ms_cells(cell.before_model)} "
        f"| {ms_cells(cell.after_model)} | {ms_cells(cell.end_gap)} "
        f"| {cell.end_gap_max:.1f} | {cell.model_first_text[0]:.1f} |"
        for cell in cells
    ]
    servers = "; ".join(
        f"{r['database']}: {r['server']}, history written in {r['fill_seconds']:.0f} s, "
        f"measured in {r['run_seconds']:.0f} s, {r['load']}"
        for r in results
    )
    worst_added = max(cells, key=lambda cell: cell.added[1])
    worst_end = max(cells, key=lambda cell: cell.end_gap[1])
    return "\n".join(
        [
            f'POST /api/chat with `"stream": true` over HTTP (a new connection per request, '
            f"made before the clock starts), continuing one session per history size (messages "
            f"already in it, written with bulk_create and caught up as in bench.turn_overhead; "
            f"{args.facts} active facts). {args.requests} measured turns per cell after "
            f"{args.warmup} unmeasured rounds (in which the sessions' turns go at once, so that "
            f"each gunicorn worker has served one), the sessions taking turns, {args.pause:.1f} s "
            f"between turns. The model: the OpenAI fake in the bench process as gpt-4o, "
            f"streaming a {len(REPLY)}-character reply in 4-character chunks, the first (the role) "
            f"{args.first_chunk_ms:.0f} ms after its headers, then one every "
            f"{args.chunk_ms:.0f} ms; gpt-4o-mini (the compression model) answers at once. "
            f"added: time to the first `delta` event minus the fake's own time from the "
            f"request reaching it to its first text chunk (both on the same monotonic clock), "
            f"= before the model (request sent → model request at the fake) + after the model "
            f"(the fake writes its first text chunk → the client reads `event: delta`). end "
            f"gap: `event: done` read − the fake's last chunk (`data: [DONE]`). model: the "
            f"fake's own first-text time, p50. {servers}.",
            "",
            "| database | history messages | turns | added p50 ms | added p95 ms "
            "| before model p50 ms | before model p95 ms | after model p50 ms "
            "| after model p95 ms | end gap p50 ms | end gap p95 ms | end gap max ms "
            "| model first text p50 ms |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            f"- added p95 ≤ {TARGET_MS:.0f} ms in every cell: {'met' if added_met else 'NOT met'} "
            f"(worst {worst_added.added[1]:.1f} ms, {worst_added.database.split()[0]} at "
            f"{worst_added.messages:,} messages)",
            f"- end gap p95 ≤ {TARGET_MS:.0f} ms in every cell: {'met' if end_met else 'NOT met'} "
            f"(worst {worst_end.end_gap[1]:.1f} ms, {worst_end.database.split()[0]} at "
            f"{worst_end.messages:,} messages)",
            *(
                f"\nWhere the time before the first delta goes (`--profile`), {r['profile']}"
                for r in results
                if r.get("profile")
            ),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database", choices=(*DATABASES, "both"), default="both")
    parser.add_argument("--quick", action="store_true", help="10 / 1,000 messages, 10 turns")
    parser.add_argument("--requests", type=int, default=None, help="measured turns per cell")
    parser.add_argument("--warmup", type=int, default=3, help="unmeasured turns per cell first")
    parser.add_argument("--facts", type=int, default=100, help="the owner's active facts")
    parser.add_argument("--pause", type=float, default=0.2, help="seconds between turns")
    parser.add_argument("--first-chunk-ms", type=float, default=100.0)
    parser.add_argument("--chunk-ms", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="TURNS",
        help="then TURNS in-process turns on the largest session: steps and SQL before the delta",
    )
    parser.add_argument("--no-record", action="store_true", help="do not append to docs/")
    parser.add_argument("--json", help=argparse.SUPPRESS)  # a child's result file
    add_gunicorn_arguments(parser)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.history_sizes = QUICK_HISTORY_SIZES if args.quick else HISTORY_SIZES
    args.requests = args.requests or (10 if args.quick else 40)

    return run_per_database(
        module="bench.first_delta",
        argv=argv,
        args=args,
        databases=DATABASES,
        measure_database=measure_database,
        report=report,
        title="Time to first delta (gunicorn, streamed)",
    )


if __name__ == "__main__":
    raise SystemExit(main())
