"""The OpenAI-compatible endpoint against /api/chat: POST /v1/chat/completions and
POST /api/chat in the same run, on the same gunicorn, the same owner and the same client,
streamed and not, in requests per second and in time to first delta.

Throughput, four cells (endpoint × streamed or not) on the offline model (`offline` for
/api/chat, `ethan/offline` for /v1): `--concurrency` client threads (bench.server.load, one
connection each), each on a session of its own per cell, opened by a first turn and continued
by every request after it (`session_id` for /api/chat; the `X-Ethan-Session` header for /v1,
with the new message as the request's only message). Every request is a real turn with a new
message. The cells take turns, `--seconds` each per round for `--rounds` rounds, the order
rotating every round, after one unmeasured round; so whatever else the machine does falls on
all four alike. Every answer is read whole and checked (a `done` event / `data: [DONE]`, a
reply), and at the end the user messages stored in each cell's sessions must be its turns.

Time to first delta, streamed, both endpoints: the model is the OpenAI fake (tests/fakes) in
this process as gpt-4o (`gpt-4o` for /api/chat, `ethan/gpt-4o` for /v1), streaming one fixed
reply at a set pace and stamping when each request reached it and each chunk went out, as in
bench.first_delta, whose machinery this reuses, so the model's own time is taken out exactly:

    added   = (first delta read − request sent) − (fake's first text chunk − request reached it)
    end gap = the last event read (`event: done` / `data: [DONE]`) − the fake's last chunk

The first delta is the first `event: delta` line for /api/chat and the first chunk with a
non-empty `delta.content` for /v1. One session per endpoint, turns alternating between them.

    python -m bench.openai_compat --quick --no-record     # 1 round of 2 s a cell, 10 turns each
    python -m bench.openai_compat                         # 8 rounds of 6 s a cell, 120 turns each
    python -m bench.openai_compat --database postgresql   # a Celery worker on Redis, as deployed

SQLite by default: gunicorn alone on a throwaway home, embedded mode (no broker: each turn's
consolidation runs in the web worker once its answer is sent), the owner and its API token
made by this process. The PostgreSQL run needs PostgreSQL and Redis on 127.0.0.1, like
bench.chat_throughput. Targets (the issue): /v1 at least 1/1.2 of /api/chat's requests per
second, streamed and not, and the same time to first delta (here: added p50 and p95 within
5 ms of /api/chat's).
"""

from __future__ import annotations

import argparse
import http.client
import io
import itertools
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from bench.chat_throughput import MESSAGES
from bench.common import append_results, command_line, percentiles
from bench.first_delta import (
    API_RATE,
    MODEL,
    REPLY,
    BenchError,
    PacedModel,
    StreamTimes,
    Timing,
    read_events,
    stack_for_database,
    stamped_lines,
    timing,
)
from bench.server import (
    Request,
    Sample,
    add_gunicorn_arguments,
    cpu_note,
    load,
    machine_busy_seconds,
    process_group_cpu,
)

OFFLINE = "offline"
SESSION_HEADER = "X-Ethan-Session"
API, V1 = "/api/chat", "/v1/chat/completions"
ENDPOINTS = (API, V1)
RPS_RATIO = 1.2  # /v1 requests/s >= /api/chat requests/s / 1.2
SAME_MS = 5.0  # "the same time to first delta": /v1's added p50 and p95 within this of /api/chat's
DATABASES = ("sqlite", "postgresql")


@dataclass(frozen=True)
class Cell:
    endpoint: str  # API or V1
    streamed: bool

    @property
    def label(self) -> str:
        return f"{self.endpoint}{', streamed' if self.streamed else ''}"


# The endpoints side by side: each /v1 cell right after its /api/chat cell.
CELLS = (Cell(API, False), Cell(V1, False), Cell(API, True), Cell(V1, True))


# --- one turn on the wire --------------------------------------------------------------------


def turn_request(
    cell: Cell, *, token: str, session_id: str | None, text: str, model: str
) -> Request:
    """One turn as each endpoint takes it: the REST API's token and `session_id`, or a Bearer
    token, the `X-Ethan-Session` header and the message as the conversation's only one."""
    if cell.endpoint == API:
        body = {"message": text, "model": model, "stream": cell.streamed}
        if session_id:
            body["session_id"] = session_id
        headers = {"Authorization": f"Token {token}"}
    else:
        body = {
            "model": f"ethan/{model}",
            "messages": [{"role": "user", "content": text}],
            "stream": cell.streamed,
        }
        headers = {"Authorization": f"Bearer {token}"}
        if session_id:
            headers[SESSION_HEADER] = session_id
    headers["Content-Type"] = "application/json"
    return Request("POST", cell.endpoint, json.dumps(body).encode(), headers, tag=cell.label)


def read_chunks(lines: Iterable[tuple[float, bytes]]) -> StreamTimes:
    """`chat.completion.chunk` events from (time read, line) pairs, as bench.first_delta's
    read_events reads /api/chat's: the kinds in order (role, delta, stop, usage, done, error),
    when the first non-empty `delta.content` and `data: [DONE]` (or the error) were read, the
    text, and the error or the finish reason."""
    kinds: list[str] = []
    texts: list[str] = []
    first_delta = last_event = None
    final: dict = {}
    for at, raw in lines:
        line = raw.decode("utf-8").rstrip("\r\n")
        if not line.startswith("data:"):
            continue
        data = line.removeprefix("data:").strip()
        if data == "[DONE]":
            kinds.append("done")
            last_event = at
            continue
        chunk = json.loads(data)
        if "error" in chunk:
            kinds.append("error")
            last_event = at
            final = chunk["error"]
            continue
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("role"):
                kinds.append("role")
            if delta.get("content"):
                kinds.append("delta")
                texts.append(delta["content"])
                if first_delta is None:
                    first_delta = at
            if choice.get("finish_reason"):
                kinds.append("stop")
                final = {"finish_reason": choice["finish_reason"]}
        if chunk.get("usage"):
            kinds.append("usage")
    return StreamTimes(tuple(kinds), first_delta, last_event, "".join(texts), final)


def stream_problem(endpoint: str, times: StreamTimes, reply: str | None = None) -> str:
    """Why a streamed answer is not a whole turn ('' when it is). /api/chat: `started` first,
    `done` last, deltas adding up to done's reply; /v1: the role first, a stop, `[DONE]` last.
    With `reply`, the text must be it."""
    if endpoint == API:
        first, last = "started", "done"
    else:
        first, last = "role", "done"
    if not times.events or times.events[0] != first:
        return f"no {first} first: {times.events[:3]}"
    if times.events[-1] != last:
        return f"ended with {times.events[-1:]}: {times.final}"
    if times.first_delta is None or not times.text:
        return "no delta"
    if endpoint == API and times.text != times.final.get("reply"):
        return f"the deltas ({times.text[:40]!r}…) are not the reply"
    if endpoint == V1 and "stop" not in times.events:
        return "no finish_reason"
    if reply is not None and times.text != reply:
        return f"the text ({times.text[:40]!r}…) is not the model's reply"
    return ""


def answer_problem(cell: Cell, body: bytes) -> str:
    """Why a whole answer read at once is not a turn ('' when it is)."""
    if cell.streamed:
        lines = ((0.0, line) for line in body.splitlines(keepends=True))
        times = read_events(lines) if cell.endpoint == API else read_chunks(lines)
        return stream_problem(cell.endpoint, times)
    try:
        answer = json.loads(body)
    except ValueError:
        return f"not JSON: {body[:80]!r}"
    if cell.endpoint == API:
        return "" if answer.get("reply") and answer.get("session_id") else f"{answer}"[:200]
    choices = answer.get("choices") or [{}]
    content = (choices[0].get("message") or {}).get("content")
    return "" if answer.get("object") == "chat.completion" and content else f"{answer}"[:200]


def answer_session(cell: Cell, headers: Mapping[str, str], body: bytes) -> str:
    """The session an answer belongs to: the header on /v1, the answer itself on /api/chat."""
    if cell.endpoint == V1:
        return headers[SESSION_HEADER]
    if cell.streamed:
        return read_events((0.0, line) for line in body.splitlines(keepends=True)).final[
            "session_id"
        ]
    return json.loads(body)["session_id"]


def send(base_url: str, request: Request) -> tuple[int, Mapping[str, str], bytes]:
    host, port = base_url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        connection.request(request.method, request.path, request.body, request.headers)
        response = connection.getresponse()
        # Header names found whatever their case (uvicorn sends them in lower case).
        return response.status, response.headers, response.read()
    finally:
        connection.close()


# --- requests per second ---------------------------------------------------------------------


@dataclass
class Throughput:
    """One cell's measured phases together, and every turn it made (warm-up included)."""

    cell: Cell
    sessions: list[str]
    phases: list[tuple[int, float]] = field(default_factory=list)  # (whole turns, s) a round
    samples: list[Sample] = field(default_factory=list)
    server_cpu: float | None = None  # seconds of gunicorn's process group
    client_cpu: float = 0.0  # seconds of this process (the client threads)
    machine_busy: float = 0.0  # seconds of all the machine's cores not idle
    turns: int = 0  # answers that were whole turns, warm-up and session openings included
    ok: list[Sample] = field(default_factory=list)  # the measured answers that were whole turns
    problems: list[str] = field(default_factory=list)

    @property
    def wall(self) -> float:
        return sum(seconds for _, seconds in self.phases)

    @property
    def rps(self) -> float:
        return len(self.ok) / self.wall if self.wall else 0.0


def open_sessions(*, base_url: str, token: str, concurrency: int) -> dict[Cell, list[str]]:
    """One session per cell and client thread, each opened by a first turn; all at once, so
    that every gunicorn worker has loaded what a first turn loads."""
    jobs = [(cell, thread) for thread in range(concurrency) for cell in CELLS]

    def first_turn(job: tuple[Cell, int]) -> str:
        cell, thread = job
        text = f"{MESSAGES[thread % len(MESSAGES)]} (open {cell.label} {thread})"
        request = turn_request(cell, token=token, session_id=None, text=text, model=OFFLINE)
        status, headers, body = send(base_url, request)
        if status != 200 or answer_problem(cell, body):
            raise BenchError(f"{cell.label}: the first turn got HTTP {status}: {body[:300]!r}")
        return answer_session(cell, headers, body)

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        opened = list(pool.map(first_turn, jobs))
    sessions: dict[Cell, list[str]] = {cell: [] for cell in CELLS}
    for (cell, _), session_id in zip(jobs, opened, strict=True):
        sessions[cell].append(session_id)
    return sessions


def run_phase(
    *, base_url: str, token: str, cell: Cell, sessions: list[str], seconds: float, numbers
) -> tuple[list[Sample], float]:
    """`len(sessions)` client threads for `seconds`, each continuing its own session."""

    def next_request(thread: int, previous: Sample | None) -> Request:
        number = next(numbers)  # itertools.count: one atomic step under the GIL
        text = f"{MESSAGES[number % len(MESSAGES)]} (#{number})"  # new every time: a new turn
        return turn_request(
            cell, token=token, session_id=sessions[thread], text=text, model=OFFLINE
        )

    return load(
        base=base_url, concurrency=len(sessions), next_request=next_request, seconds=seconds
    )


def measure_throughput(
    *,
    base_url: str,
    token: str,
    concurrency: int,
    rounds: int,
    seconds: float,
    warmup_seconds: float,
    server_cpu: Callable[[], float] | None = None,
) -> dict[Cell, Throughput]:
    """The four cells: sessions opened, one unmeasured round of `warmup_seconds` a cell, then
    `rounds` rounds of `seconds` a cell, the cells' order rotating by one each round.
    `server_cpu` reads the server's CPU seconds so far (None: not measured)."""
    sessions = open_sessions(base_url=base_url, token=token, concurrency=concurrency)
    results = {cell: Throughput(cell, sessions[cell], turns=concurrency) for cell in CELLS}
    numbers = itertools.count(1)
    if warmup_seconds:
        for cell in CELLS:
            samples, _ = run_phase(
                base_url=base_url,
                token=token,
                cell=cell,
                sessions=sessions[cell],
                seconds=warmup_seconds,
                numbers=numbers,
            )
            results[cell].turns += sum(
                1 for s in samples if s.status == 200 and not answer_problem(cell, s.body)
            )
    for index in range(rounds):
        shift = index % len(CELLS)
        for cell in CELLS[shift:] + CELLS[:shift]:
            result = results[cell]
            server_before = server_cpu() if server_cpu else 0.0
            client_before = sum(os.times()[:2])
            machine_before = machine_busy_seconds()
            samples, wall = run_phase(
                base_url=base_url,
                token=token,
                cell=cell,
                sessions=sessions[cell],
                seconds=seconds,
                numbers=numbers,
            )
            result.client_cpu += sum(os.times()[:2]) - client_before
            result.machine_busy += machine_busy_seconds() - machine_before
            if server_cpu:
                result.server_cpu = (result.server_cpu or 0.0) + server_cpu() - server_before
            # Checked after the phase's clock stopped: the client reads answers and nothing more.
            whole = [s for s in samples if s.status == 200 and not answer_problem(cell, s.body)]
            result.phases.append((len(whole), wall))
            result.ok.extend(whole)
            result.samples.extend(samples)
    for result in results.values():
        for sample in result.samples:
            if sample.status != 200:
                result.problems.append(f"HTTP {sample.status}: {sample.body[:200]!r}")
            elif problem := answer_problem(result.cell, sample.body):
                result.problems.append(problem)
        result.turns += len(result.ok)
    return results


# --- time to first delta ---------------------------------------------------------------------


def timed_turn(base_url: str, request: Request, endpoint: str) -> tuple[float, str, StreamTimes]:
    """One streamed turn: (when the request was sent, its session, what was read and when).
    The connection is made before the clock starts, as in bench.first_delta."""
    host, port = base_url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        connection.connect()
        sent = time.monotonic()
        connection.request(request.method, request.path, request.body, request.headers)
        response = connection.getresponse()
        if response.status != 200:
            raise BenchError(f"{endpoint}: HTTP {response.status} {response.read()[:300]!r}")
        session_id = response.getheader(SESSION_HEADER, "")
        lines = stamped_lines(response)
        times = read_events(lines) if endpoint == API else read_chunks(lines)
        return sent, session_id or times.final.get("session_id", ""), times
    finally:
        connection.close()


def measure_first_delta(
    *, base_url: str, token: str, model: PacedModel, requests: int, warmup: int, pause: float
) -> dict[str, list[Timing]]:
    """One session per endpoint on the paced fake (gpt-4o): `warmup` unmeasured rounds (the
    two endpoints' turns at once, so each gunicorn worker serves some), then `requests`
    measured turns each, the endpoints taking turns (the first of each pair alternating),
    `pause` seconds between turns."""
    sessions: dict[str, str | None] = dict.fromkeys(ENDPOINTS)
    numbers = itertools.count(1)

    def turn(endpoint: str) -> Timing:
        number = next(numbers)
        text = f"{MESSAGES[number % len(MESSAGES)]} (#{number})"
        request = turn_request(
            Cell(endpoint, True),
            token=token,
            session_id=sessions[endpoint],
            text=text,
            model=MODEL,
        )
        sent, session_id, times = timed_turn(base_url, request, endpoint)
        problem = stream_problem(endpoint, times, REPLY)
        if problem:
            raise BenchError(f"{endpoint}, #{number}: {problem}")
        if sessions[endpoint] not in (None, session_id):
            raise BenchError(f"{endpoint}, #{number}: answered in {session_id}, not the session")
        sessions[endpoint] = session_id
        recorded = model.chat(number)
        return timing(
            sent=sent,
            first_delta=times.first_delta,
            done=times.last_event,
            arrived=recorded.arrived,
            chunk_times=recorded.chunk_times,
        )

    with ThreadPoolExecutor(max_workers=len(ENDPOINTS)) as pool:
        for _ in range(warmup):
            list(pool.map(turn, ENDPOINTS))
            time.sleep(pause)
    samples: dict[str, list[Timing]] = {endpoint: [] for endpoint in ENDPOINTS}
    for index in range(requests):
        for endpoint in ENDPOINTS if index % 2 == 0 else ENDPOINTS[::-1]:
            samples[endpoint].append(turn(endpoint))
            time.sleep(pause)
    return samples


# --- the report ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    plain_ratio: float  # /v1 requests/s ÷ /api/chat's, not streamed
    streamed_ratio: float
    rps_met: bool
    added_gap: tuple[float, float]  # /v1 − /api/chat, added p50 and p95, ms
    first_delta_met: bool
    errors: int


def verdict(throughput: dict[Cell, Throughput], first_delta: dict[str, list[Timing]]) -> Verdict:
    def ratio(streamed: bool) -> float:
        api, v1 = throughput[Cell(API, streamed)].rps, throughput[Cell(V1, streamed)].rps
        return v1 / api if api else 0.0

    api = percentiles([t.added for t in first_delta[API]])
    v1 = percentiles([t.added for t in first_delta[V1]])
    gap = (v1[0] - api[0], v1[1] - api[1])
    errors = sum(len(result.problems) for result in throughput.values())
    plain, streamed = ratio(False), ratio(True)
    return Verdict(
        plain_ratio=plain,
        streamed_ratio=streamed,
        rps_met=min(plain, streamed) >= 1 / RPS_RATIO and not errors,
        added_gap=gap,
        first_delta_met=max(gap) <= SAME_MS,
        errors=errors,
    )


def round_ratios(throughput: dict[Cell, Throughput], streamed: bool) -> list[float]:
    """/v1's requests/s ÷ /api/chat's in each round (each cell's phase of that round)."""
    api, v1 = throughput[Cell(API, streamed)].phases, throughput[Cell(V1, streamed)].phases
    return [
        (v1_ok / v1_wall) / (api_ok / api_wall)
        for (api_ok, api_wall), (v1_ok, v1_wall) in zip(api, v1, strict=True)
        if api_ok and api_wall and v1_wall
    ]


def _pair(values: list[float]) -> str:
    p50, p95 = percentiles(values)
    return f"{p50:.1f} | {p95:.1f}"


def report(
    throughput: dict[Cell, Throughput],
    first_delta: dict[str, list[Timing]],
    *,
    setting: str,
    concurrency: int,
    rounds: int,
    seconds: float,
    warmup_seconds: float,
    pause: float,
    first_chunk_ms: float,
    chunk_ms: float,
    stored: str = "",
) -> str:
    result = verdict(throughput, first_delta)
    cores = os.cpu_count() or 1
    rps_rows = []
    for cell in CELLS:
        r = throughput[cell]
        ok = r.ok
        latency = _pair([s.latency_ms for s in ok]) if ok else "- | -"
        server = f"{r.server_cpu / len(ok) * 1000:.1f}" if r.server_cpu and ok else "-"
        client = f"{r.client_cpu / len(ok) * 1000:.1f}" if ok else "-"
        busy = f"{r.machine_busy / (r.wall * cores):.0%}" if r.wall else "-"
        turns_each = len(ok) / max(1, len(r.sessions))
        rps_rows.append(
            f"| {cell.endpoint} | {'yes' if cell.streamed else 'no'} | {len(r.samples)} "
            f"| {len(ok)} | {r.rps:.1f} | {latency} | {server} | {client} | {busy} "
            f"| {turns_each:.0f} |"
        )
    spread = []
    for streamed in (False, True):
        ratios = round_ratios(throughput, streamed)
        if ratios:
            spread.append(
                f"{'streamed' if streamed else 'not streamed'} {min(ratios):.0%}–"
                f"{max(ratios):.0%} (median {statistics.median(ratios):.0%})"
            )
    delta_rows = []
    for endpoint in ENDPOINTS:
        timings = first_delta[endpoint]
        to_first = [t.added + t.model_first_text for t in timings]
        delta_rows.append(
            f"| {endpoint} | {len(timings)} | {_pair(to_first)} "
            f"| {_pair([t.added for t in timings])} "
            f"| {_pair([t.before_model for t in timings])} "
            f"| {_pair([t.after_model for t in timings])} "
            f"| {_pair([t.end_gap for t in timings])} "
            f"| {percentiles([t.model_first_text for t in timings])[0]:.1f} |"
        )
    problems = [
        f"{cell.label}: {problem}" for cell in CELLS for problem in throughput[cell].problems[:3]
    ]
    return "\n".join(
        [
            f"{setting}. Both endpoints in the same run, against the same server, by the same "
            f"client, as the same owner.",
            "",
            f"Throughput: the offline model (`offline` on /api/chat, `ethan/offline` on /v1); "
            f"{concurrency} client threads (one http.client connection each), each continuing "
            f"a session of its own per cell (`session_id`; the `X-Ethan-Session` header with "
            f"the new message as the only message on /v1), a new message every request. One "
            f"unmeasured round of {warmup_seconds:g} s a cell, then {rounds} round(s) of "
            f"{seconds:g} s a cell, the cells' order rotating each round. Latency: the whole "
            f"answer read. CPU ms per request: gunicorn's process group (in embedded mode its "
            f"workers also run the consolidation; with a broker the Celery worker does, not "
            f"counted here) and this process (the client), over the measured phases."
            f"{f' {stored}' if stored else ''}",
            "",
            "| endpoint | streamed | requests | whole turns | requests/s | p50 ms | p95 ms "
            "| gunicorn CPU ms/request | client CPU ms/request | machine busy "
            "| turns per session |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
            *rps_rows,
            "",
            f"/v1 ÷ /api/chat requests/s round by round: {'; '.join(spread)}. Machine busy: "
            f"all {cores} cores' CPU not idle over the cell's phases, this run's and any other "
            f"work on the host.",
            "",
            f"Time to first delta, streamed: one session per endpoint, turns alternating "
            f"between them, {pause:.1f} s apart; the model the OpenAI fake in the bench "
            f"process as gpt-4o (`gpt-4o` on /api/chat, `ethan/gpt-4o` on /v1) streaming a "
            f"{len(REPLY)}-character reply in 4-character chunks, the role {first_chunk_ms:.0f}"
            f" ms after its headers, then one every {chunk_ms:.0f} ms (bench.first_delta's "
            f"PacedModel). First delta: the first `event: delta` line on /api/chat, the first "
            f"chunk with a non-empty `delta.content` on /v1. to first delta: request sent → "
            f"that line read; added: that minus the fake's own time to its first text chunk "
            f"(= before model + after model); end gap: `event: done` / `data: [DONE]` read − "
            f"the fake's last chunk.",
            "",
            "| endpoint | turns | to first delta p50 ms | p95 ms | added p50 ms | added p95 ms "
            "| before model p50 ms | p95 ms | after model p50 ms | p95 ms | end gap p50 ms "
            "| p95 ms | model first text p50 ms |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
            *delta_rows,
            "",
            f"- /v1 requests/s ≥ /api/chat's ÷ {RPS_RATIO} (≥ {1 / RPS_RATIO:.0%}), streamed and "
            f"not: {'met' if result.rps_met else 'NOT met'} (not streamed "
            f"{result.plain_ratio:.0%}, streamed {result.streamed_ratio:.0%}"
            f"{f'; {result.errors} answers were not whole turns' if result.errors else ''})",
            f"- the same time to first delta (/v1's added p50 and p95 within {SAME_MS:.0f} ms "
            f"of /api/chat's): {'met' if result.first_delta_met else 'NOT met'} (/v1 − "
            f"/api/chat: p50 {result.added_gap[0]:+.1f} ms, p95 {result.added_gap[1]:+.1f} ms)",
            *(f"- not a whole turn: {problem}" for problem in problems),
        ]
    )


# --- the run ---------------------------------------------------------------------------------


def stored_turns(throughput: dict[Cell, Throughput]) -> str:
    """Each cell's user messages in its sessions against its whole turns: every request was a
    turn stored once, in the session it was pinned to."""
    from sessions_app.models import Message

    found = []
    for cell in CELLS:
        result = throughput[cell]
        stored = Message.objects.filter(
            session_id__in=result.sessions, role=Message.Role.USER
        ).count()
        if stored != result.turns:
            raise BenchError(
                f"{cell.label}: {result.turns} turns answered, {stored} user messages stored"
            )
        found.append(stored)
    return (
        f"Every turn stored once in its session ({', '.join(f'{n:,}' for n in found)} user "
        f"messages in the four cells' sessions, warm-up included)."
    )


def make_token() -> str:
    """The bench owner's API token, as `ethan token bench` makes it."""
    from django.core.management import call_command
    from django.db import connections

    out = io.StringIO()
    call_command("ethan_token", "bench", stdout=out)
    connections.close_all()  # the web processes have the database to themselves
    return out.getvalue().strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database", choices=DATABASES, default="sqlite")
    parser.add_argument("--quick", action="store_true", help="1 round of 2 s, 10 turns")
    parser.add_argument("--concurrency", type=int, default=4, help="client threads")
    parser.add_argument("--rounds", type=int, default=8, help="measured rounds of the cells")
    parser.add_argument("--seconds", type=float, default=6.0, help="seconds a cell per round")
    parser.add_argument("--warmup-seconds", type=float, default=2.0)
    parser.add_argument("--requests", type=int, default=120, help="streamed turns per endpoint")
    parser.add_argument("--warmup", type=int, default=3, help="unmeasured streamed rounds")
    parser.add_argument("--pause", type=float, default=0.2, help="seconds between turns")
    parser.add_argument("--first-chunk-ms", type=float, default=100.0)
    parser.add_argument("--chunk-ms", type=float, default=5.0)
    parser.add_argument("--no-record", action="store_true", help="do not append to docs/")
    add_gunicorn_arguments(parser)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.seconds, args.warmup_seconds, args.requests = 1, 2.0, 1.0, 10

    model = PacedModel(first_chunk_ms=args.first_chunk_ms, chunk_ms=args.chunk_ms)
    extra_env = {
        "OPENAI_API_KEY": "bench-key",
        "OPENAI_BASE_URL": model.base_url,
        "ETHAN_API_RATE": API_RATE,
    }
    try:
        stack, server = stack_for_database(args.database, args, extra_env=extra_env)
        with stack:
            from bench.common import database_label

            token = make_token()
            [web] = [p for p in stack.processes if p.bench_name == "gunicorn"]
            machine_load = cpu_note()
            started = time.perf_counter()
            throughput = measure_throughput(
                base_url=stack.base_url,
                token=token,
                concurrency=args.concurrency,
                rounds=args.rounds,
                seconds=args.seconds,
                warmup_seconds=args.warmup_seconds,
                server_cpu=lambda: process_group_cpu(web.pid),
            )
            first_delta = measure_first_delta(
                base_url=stack.base_url,
                token=token,
                model=model,
                requests=args.requests,
                warmup=args.warmup,
                pause=args.pause,
            )
            took = time.perf_counter() - started
            stored = stored_turns(throughput)
            label = database_label()
    finally:
        model.close()
    table = report(
        throughput,
        first_delta,
        setting=f"{label}, {server}; measured in {took:.0f} s, {machine_load}",
        concurrency=args.concurrency,
        rounds=args.rounds,
        seconds=args.seconds,
        warmup_seconds=args.warmup_seconds,
        pause=args.pause,
        first_chunk_ms=args.first_chunk_ms,
        chunk_ms=args.chunk_ms,
        stored=stored,
    )
    print(table)
    if not args.no_record:
        append_results(
            "OpenAI-compatible endpoint against /api/chat (gunicorn, offline model)",
            command_line("bench.openai_compat", argv),
            table,
            database=label,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
