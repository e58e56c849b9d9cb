"""Concurrent streams: how many slow streamed turns each server holds at once, and what each
costs, with half the clients on /v1/chat/completions and half on /api/chat (`"stream": true`),
at 100, 300 and 1,000 streams; issue 27's server and the synchronous baseline measured in the
same run, on the same machine state. The single streams read /v1 with the openai SDK, the
levels with aiohttp line by line (Clients says why).

How the N streams of a level arrive (`--arrival burst|spread|both`, both by default):

- burst: the N requests sent in the same instant, every turn starting at once (the N-th
  turn's start waits behind the N − 1 others' starts).
- spread: the N requests sent at evenly spaced times over one stream's length (the model's
  first chunk plus its stream, 11 s by default), one every 11 s / N, as N people chatting
  send theirs: the first stream ends about when the last is sent, so about N are open at
  once then ("most open at once" in the table shows whether they were).

The servers (`--server asgi|gunicorn|both`, both by default):

- asgi: the documented serve command, `<venv>/bin/ethan serve --bind 127.0.0.1:PORT` (what
  `make serve` runs): ethan_site.asgi under uvicorn, one process, every turn on its event loop;
  with `--asgi-workers N` (1 by default), `--workers N` added: N such processes on the port.
- gunicorn: the baseline, the old `make serve`'s command line (gunicorn reading
  gunicorn.conf.py, WEB_CONCURRENCY sync workers, 2 by default), now serving
  ethan_site.wsgi:application.
- before: `ethan serve` of another checkout (`--before PATH`, a clone at an earlier commit with
  its own `make install`), the same command: a change measured against the code before it in
  the same run. `--server change` measures asgi and before. `--before-env NAME=VALUE` sets a
  setting for it alone: `--before . --before-env ETHAN_GC_THRESHOLD=0` measures one setting
  on and off; `--asgi-env NAME=VALUE` sets one for this checkout's server alone (against older
  code that has no such setting: `--asgi-env ETHAN_EMBEDDER=off` does the same work it did).

The model is bench.slow_model in a process of its own: one asyncio loop speaking OpenAI's wire
protocol, its first chunk 1 s after a request, then a chunk every 250 ms for 10 s, as a real
model's long answer comes. Before the servers are measured, the same clients stream straight
from it at each level and arrival, to show that it is not what is measured and what the clients
themselves add ("model alone").

Both servers run on one fresh SQLite home (embedded mode, no broker) or one PostgreSQL database
with a Celery worker on Redis (as deployed), with ETHAN_MODEL=gpt-4o on the OpenAI provider at
the slow model's URL. Each stream is a person of its own (a user and an API token, made by the
bench); ETHAN_API_RATE is raised, and ETHAN_TURNS_PER_PROCESS raised to at least twice the
largest level (ETHAN_TURNS_PER_PERSON stays 8: one turn per person at a time here), so that
nothing is refused (the run says so). Every measurement (the single streams, each level in each
arrival) gets a server process of its own, warmed up, on a fresh port; the two servers take
turns going first, alternating from one measurement to the next (and from one database to the
other), so that neither systematically gets the quieter machine. After each measurement the
server is stopped before the database is read: gunicorn with SIGQUIT (its quick shutdown: a turn
a client gave up on dies with its worker); `ethan serve` with SIGTERM, its graceful drain
(ETHAN_DRAIN_SECONDS, 15 here: turns whose clients left finish and are stored, those still
running at the limit are stored as interrupted), and SIGKILL only if it is still running
STOP_SECONDS after the drain's limit (the table says how each stopped).

At each level, arrival and server, until `--timeout` seconds (60) after the level's last
request was sent: the streams completed (every event read, the reply whole); that each
completed reply is stored exactly once (after the server stopped, the database: one assistant
message with that reply in the session of that turn's message); the time the server adds
before the first delta,

    added = (first delta read − request sent) − (model's first chunk − request reached it)

p50 and p95 over every stream (one with no delta by the timeout counts as longer than it),
with its two parts, before the model (request sent → the model has it) and after (the model's
first chunk → the client reads its delta); GET /healthz every 100 ms, p99 (unanswered 5 s after
the level's end: longer than the run); the CPU seconds of the server's process group (gunicorn's
arbiter and workers, uvicorn's one process, or its supervisor and workers), from the level's
start until it is idle again (settle: the memory work its turns queued in-process, done even
when it lagged behind the streams; on PostgreSQL a Celery worker does it) and its RSS, the
peak over the level less the warmed-up start divided by the most streams open at once (headers
read, not finished) as memory per open stream. A line of single streams per server (one at a
time, `--single` of them, endpoints alternating) gives the added time with nothing else running.

    python -m bench.concurrent_streams --quick --no-record      # 5 streams, 1 s replies: ~1 min
    python -m bench.concurrent_streams                           # SQLite, 100 / 300 / 1,000
    python -m bench.concurrent_streams --database postgresql --levels 100 --server asgi
    python -m bench.concurrent_streams --levels 100 --arrival spread

PostgreSQL and Redis on 127.0.0.1 for the PostgreSQL run: the database `--pg-database` is
dropped and re-created, the Redis databases of `--broker-url` and `--cache-url` flushed.
Every process started here (the model, the servers, Celery) is stopped at the end, also on
errors and Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import math
import os
import re
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.common import ROOT, percentile, raise_open_files, run_per_database
from bench.first_delta import API_RATE, StreamTimes, read_events
from bench.openai_compat import API, V1, read_chunks, stream_problem
from bench.server import (
    POSTGRES_ADMIN,
    BenchStack,
    GunicornConfig,
    _psql,
    free_port,
    postgres_cpu,
    process_group_cpu,
)
from bench.slow_model import MARKER, WARM_UP, reply_text

MODEL = "gpt-4o"
LEVELS = (100, 300, 1_000)
DATABASES = ("sqlite", "postgresql")
HEALTHZ_EVERY = 0.1  # seconds between two /healthz requests
IDLE_SECONDS = 5.0  # the server's idle CPU, measured before the single streams
HEALTHZ_GRACE = 5.0  # seconds the requests still unanswered at a level's end may still take
RSS_EVERY = 0.25  # seconds between two readings of the server's memory
STOP_SECONDS = 10
# ETHAN_DRAIN_SECONDS for `ethan serve` here (30 by default): how long a SIGTERM lets the turns
# whose clients gave up finish before they are stored as interrupted.
DRAIN_SECONDS = 15
SERVERS = ("asgi", "gunicorn", "before")
# The documented serve command: this checkout's, or the --before checkout's.
SERVE_COMMANDS = ("asgi", "before")
# What --server names.
SERVER_SETS = {"both": ("asgi", "gunicorn"), "change": ("asgi", "before")}
BEFORE: Path | None = None  # --before
BEFORE_ENV: dict[str, str] = {}  # --before-env
ASGI_ENV: dict[str, str] = {}  # --asgi-env
ARRIVALS = ("burst", "spread")
MB = 1024 * 1024


# --- the model in a process of its own -------------------------------------------------------


class ModelProcess:
    """bench.slow_model started with the pace, its port read from its first line."""

    def __init__(self, *, first_chunk_ms: float, chunk_ms: float, stream_seconds: float):
        self.reply = reply_text(chunk_ms=chunk_ms, stream_seconds=stream_seconds)
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.slow_model",
                f"--first-chunk-ms={first_chunk_ms}",
                f"--chunk-ms={chunk_ms}",
                f"--stream-seconds={stream_seconds}",
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        line = self.process.stdout.readline()
        if not line.startswith("port "):
            self.close()
            raise RuntimeError(f"bench.slow_model did not start: {line!r}")
        self.url = f"http://127.0.0.1:{int(line.split()[1])}"

    def cpu_seconds(self) -> float:
        return process_group_cpu(self.process.pid)

    async def records(self, client) -> dict:
        """The streams since the last call, by marker, and the most open at once meanwhile."""
        response = await client.get(f"{self.url}/_records")
        return response.json()

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


# --- the servers -----------------------------------------------------------------------------


def asgi_command(*, port: int, workers: int = 1, checkout: Path | None = None) -> list[str]:
    """The documented serve command (`make serve`, docs/operations.md) on `port`: every door in
    one process, or in `workers` of them; another checkout's with `checkout`."""
    bin_dir = checkout / ".venv" / "bin" if checkout else Path(sys.executable).parent
    command = [str(bin_dir / "ethan"), "serve", "--bind", f"127.0.0.1:{port}"]
    return command if workers == 1 else [*command, "--workers", str(workers)]


def checkout_place(checkout: Path) -> tuple[Path, dict[str, str]]:
    """The directory and the environment another checkout's server runs in: its own. Started
    from this checkout's directory it would run this checkout's code: Celery's Django fixup puts
    the working directory first on sys.path when the Celery app is made (celery.fixups.django,
    DjangoFixup.install), so the packages imported after it are found there."""
    return checkout, {"PYTHONPATH": str(checkout)}


def gunicorn_command(*, port: int, workers: int) -> list[str]:
    """The baseline: the old `make serve`'s command line (before issue 27), on `port`."""
    return [
        str(Path(sys.executable).parent / "gunicorn"),
        "ethan_site.wsgi:application",
        "--config",
        "gunicorn.conf.py",
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        str(workers),
        "--access-logfile",
        "-",
    ]


def server_label(server: str, workers: int, asgi_workers: int = 1) -> str:
    if server == "before":
        commit = subprocess.run(
            ["git", "-C", str(BEFORE), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        settings = " ".join(f"{name}={value}" for name, value in BEFORE_ENV.items())
        if settings:
            return f"`ethan serve` at {commit or BEFORE} with {settings}"
        return f"`ethan serve` at {commit or BEFORE} (the code before the change)"
    settings = "".join(f" with {name}={value}" for name, value in ASGI_ENV.items())
    if server == "asgi" and asgi_workers > 1:
        return f"`ethan serve --workers {asgi_workers}`{settings} (ethan_site.asgi under uvicorn)"
    if server == "asgi":
        return f"`ethan serve`{settings} (ethan_site.asgi under uvicorn, one process)"
    return f"the old `make serve`'s gunicorn, {workers} sync workers (ethan_site.wsgi)"


def server_order(index: int, servers: tuple[str, ...]) -> tuple[str, ...]:
    """The servers in the order the `index`th measurement runs them: each goes first every other
    time, so that neither systematically gets the quieter machine."""
    return servers if index % 2 == 0 else servers[::-1]


class ServeStack(BenchStack):
    """bench.server's stack, its web server one of the servers measured here, a fresh one per
    measurement, on a database and Redis databases of this bench's own (never the other
    benches' or the suite's). Like the other HTTP benchmarks it holds bench.server's lock: on
    two cores, two of them at once would measure each other."""

    def __init__(
        self,
        *,
        database: str,
        server: str,
        workers: int,
        asgi_workers: int = 1,
        pg_database: str,
        broker_url: str,
        cache_url: str,
        extra_env: dict[str, str],
    ):
        super().__init__(gunicorn=GunicornConfig(workers=workers), extra_env=extra_env)
        assert not pg_database.startswith("test_") and pg_database != "ethan"
        self.database = database
        self.server = server  # the server started next
        self.workers = workers
        self.asgi_workers = asgi_workers
        self.pg_database = pg_database
        self.broker_url = broker_url
        self.cache_url = cache_url

    def _environment(self, database_url: str) -> dict[str, str]:
        env = super()._environment(database_url)
        # Both servers' processes are on their command lines; `ethan serve` would read this as
        # its number of processes.
        env.pop("WEB_CONCURRENCY", None)
        if self.database == "postgresql":
            env["CELERY_BROKER_URL"] = self.broker_url
            env["ETHAN_CACHE_URL"] = self.cache_url
        return env

    def _spawn(self, name: str, command: list[str]) -> None:
        if name == "gunicorn":  # bench.server's web server: the one measured next instead
            name = self.server
            if name == "before":
                command = asgi_command(port=self.port, workers=self.asgi_workers, checkout=BEFORE)
                cwd, place = checkout_place(BEFORE)
                super()._spawn(name, command, cwd=cwd, env={**self.env, **place, **BEFORE_ENV})
                return
            if name == "asgi":
                command = asgi_command(port=self.port, workers=self.asgi_workers)
                super()._spawn(name, command, env={**self.env, **ASGI_ENV})
                return
            command = gunicorn_command(port=self.port, workers=self.workers)
        super()._spawn(name, command)

    def _wait_web(self) -> float:
        return self._wait_healthz(self.server, self.base_url)

    def _flush_redis(self) -> None:
        import redis

        for url in (self.broker_url, self.cache_url):
            redis.Redis.from_url(url).flushdb()

    def _start(self) -> None:
        if self.database == "sqlite":
            self._start_web(f"sqlite:///{self.home / 'ethan.sqlite3'}", broker=False)
            self._wait_web()
            return
        from ethan_site.celery import worker_command

        self._flush_redis()
        _psql(f'DROP DATABASE IF EXISTS "{self.pg_database}" WITH (FORCE)')
        _psql(f'CREATE DATABASE "{self.pg_database}"')
        self._start_web(f"{POSTGRES_ADMIN}/{self.pg_database}")
        self.worker_name = f"bench-streams-{secrets.token_hex(3)}@localhost"
        self._spawn(
            "celery",
            worker_command(
                hostname=self.worker_name, pool="prefork", concurrency=1, loglevel="WARNING"
            ),
        )
        self._wait_ready()

    def web(self) -> subprocess.Popen:
        return next(p for p in self.processes if p.bench_name in SERVERS)

    def worker(self) -> subprocess.Popen | None:
        """The Celery worker (PostgreSQL), which both servers' turns queue their memory work to."""
        return next((p for p in self.processes if p.bench_name == "celery"), None)

    def start_server(self, server: str) -> None:
        """A fresh `server` on a fresh port, answering /healthz (the running one stopped
        first)."""
        if any(p.bench_name in SERVERS for p in self.processes):
            self.stop_server()
        self.server = server
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._spawn("gunicorn", [])
        self._wait_web()

    def stop_server(self) -> dict:
        """Stops the web server; how: the signal, the seconds until it exited, and whether it
        had to be killed."""
        web = self.web()
        self.processes.remove(web)
        if web.bench_name in SERVE_COMMANDS:  # the graceful drain, as a deployment stops it
            return _stop_group(web, signal.SIGTERM, wait=DRAIN_SECONDS + STOP_SECONDS)
        return _stop_group(web, signal.SIGQUIT)  # gunicorn's quick shutdown: workers at once

    def _stop(self) -> None:
        for process in self.processes:
            _stop_group(process, signal.SIGQUIT if process.bench_name == "gunicorn" else None)
        self.processes.clear()
        from django.apps import apps

        if apps.ready:
            from django.db import connections

            connections.close_all()
        if self.database == "postgresql":
            try:
                self._flush_redis()
            except Exception as exc:  # Redis gone: say so, still clean up the rest
                print(f"could not flush Redis: {exc}", file=sys.stderr)
        if self._failed:
            print(f"logs kept in {self.home}", file=sys.stderr)
        else:
            shutil.rmtree(self.home, ignore_errors=True)
        if self._lock_file is not None:  # the HTTP benchmarks' lock: one of them at a time
            self._lock_file.close()
            self._lock_file = None


def _stop_group(
    process: subprocess.Popen, first: signal.Signals | None = None, wait: float = STOP_SECONDS
) -> dict:
    """The process's group: `first` (SIGTERM unless said), then SIGKILL if it lingers past
    `wait` seconds. How it went: the signal, the seconds until the process exited, killed or
    not."""
    first = first or signal.SIGTERM
    started = time.monotonic()
    killed = False
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, first)
        try:
            process.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            killed = True
    with contextlib.suppress(ProcessLookupError):  # a worker outliving its leader
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    return {"signal": first.name, "seconds": time.monotonic() - started, "killed": killed}


def process_group_rss(pgid: int) -> int:
    """Resident bytes of the live processes in one process group (gunicorn's arbiter and
    workers), from /proc."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid:
                total += int(fields[21]) * resource.getpagesize()  # rss, in pages
    return total


# --- the clients -----------------------------------------------------------------------------


@dataclass
class Stream:
    """One streamed turn as its client saw it (time.monotonic() seconds)."""

    endpoint: str
    number: int
    sent: float = 0.0
    headers: float | None = None  # the response's headers read
    first_delta: float | None = None
    done: float | None = None  # the last event read, the reply whole
    problem: str = ""


@dataclass
class Clients:
    """The run's HTTP clients: aiohttp for /api/chat; for /v1 the openai SDK on aiohttp (its
    DefaultAioHttpClient) when `sdk`, else aiohttp too, its Server-Sent Events read line by
    line (bench.openai_compat.read_chunks: the same role, delta, stop and done the SDK's
    chunks give); httpx2 for /healthz and the model's records. No pool limit, no keep-alive
    (gunicorn's sync workers close every connection anyway), no retry.

    The clients share the server's two cores, so what they cost is taken from the server: on
    aiohttp (a parser in C) and uvloop (main's loop) they read a stream for about half the
    CPU of httpx2's pure-Python HTTP ("model alone" in the report says how much they used).
    The SDK turns every chunk into its typed objects: at 1,000 streams it was three quarters
    of the clients' CPU (py-spy), a quarter of a core while the streams arrive, so the levels
    read /v1 without it and the single streams, where the clients' CPU takes nothing from the
    server, with it (tests/channels/test_server.py and test_openai_api.py hold the SDK to the
    server's wire)."""

    base_url: str
    tokens: list[str]  # stream n is the person of tokens[n % len(tokens)]
    timeout: float
    numbers: itertools.count = field(default_factory=lambda: itertools.count(1))
    # Straight at the model: the /api/chat half reads the model's own /v1 stream too.
    straight: bool = False
    sdk: bool = False  # /v1 read by the openai SDK (the single streams)

    async def __aenter__(self) -> Clients:
        import aiohttp
        import httpx2
        from openai import AsyncOpenAI, DefaultAioHttpClient

        limits = httpx2.Limits(max_connections=None, max_keepalive_connections=0)
        timeout = httpx2.Timeout(self.timeout + 30, connect=self.timeout + 30)
        self.http = httpx2.AsyncClient(limits=limits, timeout=timeout)
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, force_close=True),
            timeout=aiohttp.ClientTimeout(total=self.timeout + 30),
        )
        self.openai = AsyncOpenAI(
            base_url=f"{self.base_url}/v1",
            api_key=self.tokens[0],
            max_retries=0,
            # Its aiohttp connector takes max_connections as its limit, where 0 is none (its
            # default is 100 connections).
            http_client=DefaultAioHttpClient(
                limits=httpx2.Limits(max_connections=0, max_keepalive_connections=0),
                timeout=timeout,
            ),
        )
        return self

    async def __aexit__(self, *exc) -> None:
        await self.openai.close()
        await self.session.close()
        await self.http.aclose()

    def token(self, number: int) -> str:
        return self.tokens[number % len(self.tokens)]

    def text(self, number: int) -> str:
        return f"Tell me a long story about the sea, please (#{number})"

    async def stream(self, endpoint: str, stream: Stream | None = None, warm: bool = False):
        """One streamed turn on `endpoint`, filled in on `stream` as it goes (so that a turn
        cut short by the level's end still shows how far it got)."""
        stream = stream or Stream(endpoint, next(self.numbers))
        text = f"{WARM_UP} {self.text(stream.number)}" if warm else self.text(stream.number)
        stream.sent = time.monotonic()
        try:
            if endpoint == API and self.straight:
                endpoint, times = V1, await self._raw_v1(stream, text)
            elif endpoint == API:
                times = await self._api_chat(stream, text)
            elif self.sdk:
                times = await self._v1(stream, text)
            else:
                times = await self._raw_v1(stream, text)
        except Exception as exc:  # any failure is this stream's, reported
            stream.problem = f"{type(exc).__name__}: {exc}"[:200]
            return stream
        stream.problem = stream_problem(endpoint, times)
        if not stream.problem:
            stream.done = times.last_event
        return stream

    async def _api_chat(self, stream: Stream, text: str) -> StreamTimes:
        body = {"message": text, "model": MODEL, "stream": True}
        headers = {"Authorization": f"Token {self.token(stream.number)}"}
        lines = await self._lines(stream, API, body, headers, _is_api_delta)
        return read_events(lines)

    async def _raw_v1(self, stream: Stream, text: str) -> StreamTimes:
        """A /v1 stream read line by line: the server's, or the model's own (the model-alone
        run's other half)."""
        model = MODEL if self.straight else f"ethan/{MODEL}"
        body = {"model": model, "messages": [{"role": "user", "content": text}], "stream": True}
        headers = {"Authorization": f"Bearer {self.token(stream.number)}"}
        return read_chunks(await self._lines(stream, V1, body, headers, _is_v1_delta))

    async def _lines(
        self, stream: Stream, path: str, body: dict, headers: dict, is_delta
    ) -> list[tuple[float, bytes]]:
        """The answer's lines, each with when it was read; the first that `is_delta` is the
        stream's first delta."""
        lines: list[tuple[float, bytes]] = []
        async with self.session.post(
            f"{self.base_url}{path}", json=body, headers=headers
        ) as response:
            stream.headers = time.monotonic()
            if response.status != 200:
                raise RuntimeError(f"HTTP {response.status}")
            async for line in response.content:  # line by line, each with its end
                at = time.monotonic()
                if stream.first_delta is None and is_delta(line):
                    stream.first_delta = at
                lines.append((at, line))
        return lines

    async def _v1(self, stream: Stream, text: str) -> StreamTimes:
        """The SDK's chunks as bench.openai_compat's read_chunks names them (role, delta, stop,
        done: the SDK ends the iteration at `data: [DONE]`)."""
        kinds: list[str] = []
        texts: list[str] = []
        final: dict = {}
        response = await self.openai.chat.completions.create(
            model=f"ethan/{MODEL}",
            messages=[{"role": "user", "content": text}],
            stream=True,
            extra_headers={"Authorization": f"Bearer {self.token(stream.number)}"},
        )
        stream.headers = time.monotonic()
        async with response:
            async for chunk in response:
                at = time.monotonic()
                for choice in chunk.choices:
                    if choice.delta.role:
                        kinds.append("role")
                    if choice.delta.content:
                        kinds.append("delta")
                        texts.append(choice.delta.content)
                        if stream.first_delta is None:
                            stream.first_delta = at
                    if choice.finish_reason:
                        kinds.append("stop")
                        final = {"finish_reason": choice.finish_reason}
        kinds.append("done")
        return StreamTimes(
            tuple(kinds), stream.first_delta, time.monotonic(), "".join(texts), final
        )


def _is_api_delta(line: bytes) -> bool:
    return line.startswith(b"event: delta")


def _is_v1_delta(line: bytes) -> bool:
    """A chunk with words in it: not the first, whose `"content": ""` comes with the role."""
    return b'"content"' in line and b'"content": ""' not in line and b'"content":""' not in line


async def poll_healthz(clients: Clients, latencies: list[float], stop: asyncio.Event) -> None:
    """GET /healthz every HEALTHZ_EVERY seconds, each on its own (a slow one does not hold
    the next back); each answered one's latency in ms, an unanswered one as infinity."""
    pending: set[asyncio.Task] = set()

    async def one() -> None:
        sent = time.monotonic()
        try:
            response = await clients.http.get(f"{clients.base_url}/healthz")
            ok = response.status_code == 200
        except Exception:  # unanswered is what is counted
            ok = False
        latencies.append((time.monotonic() - sent) * 1000 if ok else math.inf)

    while not stop.is_set():
        task = asyncio.create_task(one())
        pending.add(task)
        task.add_done_callback(pending.discard)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), HEALTHZ_EVERY)
    # The requests sent just before the end get HEALTHZ_GRACE to answer: one sent a few ms
    # before a quick level ended is not a request the server left unanswered.
    if pending:
        await asyncio.wait(set(pending), timeout=HEALTHZ_GRACE)
    unanswered = list(pending)
    for task in unanswered:
        task.cancel()
    latencies.extend(math.inf for _ in unanswered)


async def watch_memory(pgid: int, streams: list[Stream], peak: dict, stop: asyncio.Event):
    """The server's RSS every RSS_EVERY seconds: the highest, and the most streams open at
    once (headers read, not finished) at any reading."""
    while not stop.is_set():
        rss = await asyncio.to_thread(process_group_rss, pgid)
        now_open = sum(1 for s in streams if s.headers and not s.done and not s.problem)
        peak["rss"] = max(peak["rss"], rss)
        peak["open"] = max(peak["open"], now_open)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), RSS_EVERY)


# --- one level -------------------------------------------------------------------------------


def endpoint_of(index: int) -> str:
    """Half the streams on each endpoint, alternating."""
    return API if index % 2 == 0 else V1


async def warm_up(clients: Clients, workers: int) -> None:
    """Two unpaced streamed turns per web worker on each endpoint, at once: every worker has
    loaded what a streamed turn loads (the SDK, the tokenizer) before its memory is read."""
    turns = [clients.stream(endpoint_of(i), warm=True) for i in range(4 * workers)]
    for stream in await asyncio.gather(*turns):
        if stream.problem:
            raise RuntimeError(f"a warm-up turn on {stream.endpoint} failed: {stream.problem}")


def stream_span(args) -> float:
    """One stream's length at the model, in seconds: its first chunk, then the stream."""
    return args.first_chunk_ms / 1000 + args.stream_seconds


def send_times(level: int, arrival: str, span: float) -> list[float]:
    """When each of a level's `level` requests is sent, in seconds from the level's start.
    burst: all at once. spread: evenly over `span` (one stream's length), one every
    span / level, the last at span − span / level: the first stream ends about when the last
    is sent, so that about `level` are open at once then."""
    if arrival == "burst":
        return [0.0] * level
    return [index * span / level for index in range(level)]


async def send_at(started: float, offset: float, clients: Clients, stream: Stream) -> Stream:
    """`stream`, sent `offset` seconds after `started`."""
    if offset > 0:
        await asyncio.sleep(started + offset - time.monotonic())
    return await clients.stream(stream.endpoint, stream)


async def run_level(
    *,
    clients: Clients,
    model: ModelProcess,
    server_pgid: int | None,
    level: int,
    arrival: str,
    span: float,
    workers: int,
    worker_pgid: int | None = None,
) -> dict:
    """`level` streams, sent as `arrival` says (send_times), until clients.timeout seconds
    after the last was sent; what each did, /healthz, the server's CPU and memory, and the
    model's records of the streams."""
    if server_pgid is not None:
        await warm_up(clients, workers)
    await model.records(clients.http)  # forget the warm-up
    streams = [Stream(endpoint_of(i), next(clients.numbers)) for i in range(level)]
    send = send_times(level, arrival, span)
    healthz: list[float] = []
    peak = {"rss": 0, "open": 0}
    stop = asyncio.Event()
    rss_before = process_group_rss(server_pgid) if server_pgid else 0
    cpu_before = process_group_cpu(server_pgid) if server_pgid else 0.0
    model_cpu_before = model.cpu_seconds()
    worker_cpu_before = process_group_cpu(worker_pgid) if worker_pgid else 0.0
    postgres_before = postgres_cpu() if worker_pgid else 0.0
    own_before = sum(os.times()[:2])
    watchers = []
    if server_pgid is not None:
        watchers = [
            asyncio.create_task(poll_healthz(clients, healthz, stop)),
            asyncio.create_task(watch_memory(server_pgid, streams, peak, stop)),
        ]
    started = time.monotonic()
    tasks = [
        asyncio.create_task(send_at(started, offset, clients, s))
        for offset, s in zip(send, streams, strict=True)
    ]
    await asyncio.wait(tasks, timeout=max(send, default=0.0) + clients.timeout)
    wall = time.monotonic() - started
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    stop.set()
    await asyncio.gather(*watchers)
    records = await model.records(clients.http)
    settled = await settle(server_pgid) if server_pgid is not None else 0.0
    if worker_pgid is not None:
        await settle(worker_pgid)  # the vectors the level's turns sent it, written
    return {
        "level": level,
        "arrival": arrival,
        "wall": wall,
        "settled": settled,
        "streams": [asdict(s) for s in streams],
        "model": records,
        "healthz_ms": healthz,
        "server_cpu": (process_group_cpu(server_pgid) - cpu_before) if server_pgid else None,
        "model_cpu": model.cpu_seconds() - model_cpu_before,
        "worker_cpu": (process_group_cpu(worker_pgid) - worker_cpu_before) if worker_pgid else None,
        "postgres_cpu": (postgres_cpu() - postgres_before) if worker_pgid else None,
        "bench_cpu": sum(os.times()[:2]) - own_before,
        "rss_before": rss_before,
        "rss_peak": peak["rss"],
        "open_peak": peak["open"],
    }


# The server is idle again when a second of it costs less than this much CPU; it is given at
# most SETTLE_SECONDS to get there.
IDLE_CPU_RATE = 0.05
SETTLE_SECONDS = 60.0


async def settle(pgid: int) -> float:
    """Wait until the server's background work after a level (the memory work its turns
    queued: vectors, consolidation) is done, so that the level's CPU counts it, however far
    it lagged behind the streams; how long that took."""
    started = time.monotonic()
    last = process_group_cpu(pgid)
    while time.monotonic() - started < SETTLE_SECONDS:
        await asyncio.sleep(1.0)
        now = process_group_cpu(pgid)
        if now - last < IDLE_CPU_RATE:
            break
        last = now
    return time.monotonic() - started


async def run_single(
    *, clients: Clients, model: ModelProcess, count: int, workers: int, server_pgid: int
) -> dict:
    """`count` streams one after another, the endpoints alternating, and the server's CPU for
    them: what one turn costs when nothing else runs (the levels' CPU against it is what
    load adds)."""
    await warm_up(clients, workers)
    await model.records(clients.http)
    await settle(server_pgid)  # the warm-up's memory work done: it is not the idle's
    # What the server spends doing nothing (its timers, uvicorn's supervisor), taken out of
    # the streams' CPU: with 11 s streams it would be most of it.
    idle_before = process_group_cpu(server_pgid)
    await asyncio.sleep(IDLE_SECONDS)
    idle_rate = (process_group_cpu(server_pgid) - idle_before) / IDLE_SECONDS
    cpu_before = process_group_cpu(server_pgid)
    started = time.monotonic()
    streams = [await clients.stream(endpoint_of(i)) for i in range(count)]
    await settle(server_pgid)
    spent = process_group_cpu(server_pgid) - cpu_before
    return {
        "streams": [asdict(s) for s in streams],
        "model": await model.records(clients.http),
        "server_cpu": spent - idle_rate * (time.monotonic() - started),
        "server_idle": idle_rate,
    }


# --- what was stored -------------------------------------------------------------------------


def stored_replies(reply: str) -> dict[int, tuple[int, int]]:
    """For each marked turn's message in the database: (assistant messages in its session,
    how many of them hold the whole reply)."""
    from django.db.models import Count, Q

    from sessions_app.models import Message

    sessions: dict[str, int] = {}
    users = Message.objects.filter(role="user", content__contains="(#").exclude(
        content__contains=WARM_UP
    )
    for session_id, content in users.values_list("session_id", "content").iterator():
        found = MARKER.search(content)
        if found:
            sessions[session_id] = int(found.group(1))
    counts = (
        Message.objects.filter(role="assistant", session_id__in=list(sessions))
        .values("session_id")
        .annotate(replies=Count("pk"), whole=Count("pk", filter=Q(content=reply)))
    )
    stored = {number: (0, 0) for number in sessions.values()}
    for row in counts:
        stored[sessions[row["session_id"]]] = (row["replies"], row["whole"])
    return stored


def storage_check(streams: list[dict], stored: dict[int, tuple[int, int]]) -> dict:
    """Completed streams whose reply is stored exactly once (one assistant message, the whole
    reply); and, of the streams not completed, how many replies were stored anyway (the server
    finishes a turn whose client went away)."""
    completed = [s for s in streams if s["done"]]
    once = sum(1 for s in completed if stored.get(s["number"]) == (1, 1))
    not_completed = [s for s in streams if not s["done"]]
    stored_anyway = sum(1 for s in not_completed if stored.get(s["number"], (0, 0))[0])
    twice = sum(1 for s in streams if stored.get(s["number"], (0, 0))[0] > 1)
    return {
        "completed": len(completed),
        "stored_once": once,
        "stored_twice": twice,
        "not_completed_stored": stored_anyway,
    }


# --- the numbers -----------------------------------------------------------------------------


def added_ms(streams: list[dict], records: dict) -> dict[str, list[float]]:
    """Per stream (in ms): added, before the model, after the model. A stream with no delta
    (or the model's record missing) is infinity in each: longer than the run."""
    out: dict[str, list[float]] = {"added": [], "before": [], "after": []}
    for s in streams:
        record = records.get(str(s["number"]))
        if s["first_delta"] is None or not record or record["first"] is None:
            for values in out.values():
                values.append(math.inf)
            continue
        before = record["arrived"] - s["sent"]
        after = s["first_delta"] - record["first"]
        out["added"].append((before + after) * 1000)
        out["before"].append(before * 1000)
        out["after"].append(after * 1000)
    return out


def ms(value: float) -> str:
    return "> run" if math.isinf(value) else f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def p50_p95(values: list[float]) -> tuple[float, float]:
    return percentile(values, 0.5), percentile(values, 0.95)


def arrival_note(arrival: str, span: float, levels: tuple[int, ...]) -> str:
    """What an arrival mode means, in the run's description."""
    if arrival == "burst":
        return "burst, a level's N requests sent in the same instant"
    every = ", ".join(f"{span / level * 1000:,.0f} ms at {level:,}" for level in levels)
    return (
        f"spread, a level's N requests sent at evenly spaced times over one stream's length "
        f"({span:g} s: the model's first chunk plus its stream), one every {span:g} s / N "
        f"({every}), as N people chatting send theirs, so that about N are open at once when "
        f"the last is sent"
    )


def model_alone_line(alone: dict, timeout: float) -> str:
    streams = alone["streams"]
    completed = sum(1 for s in streams if s["done"])
    records = alone["model"]["records"]
    # The model's first chunk as the client read it, against when it was due (arrival + pace).
    late = [
        (s["first_delta"] - records[str(s["number"])]["arrived"]) * 1000 - alone["first_chunk_ms"]
        for s in streams
        if s["first_delta"] is not None and str(s["number"]) in records
    ]
    late += [math.inf] * (len(streams) - len(late))
    chunk_late = [r["late_max"] * 1000 for r in records.values()]
    p50, p95 = p50_p95(late)
    return (
        f"- Model alone, {alone['arrival']} (the same clients straight at bench.slow_model, "
        f"{len(streams):,} streams, read line by line as the levels read): {completed:,} of "
        f"{len(streams):,} completed within {timeout:.0f} s of the last request, "
        f"{alone['model']['peak_open']:,} open at once at the model; first chunk read p50 "
        f"{ms(p50)} ms, p95 {ms(p95)} ms after it was due; the model's latest chunk "
        f"{ms(max(chunk_late, default=0))} ms late; CPU: model {alone['model_cpu']:.1f} s, "
        f"clients {alone['bench_cpu']:.1f} s over {alone['wall']:.1f} s."
    )


def level_row(result: dict) -> tuple[str, list[str]]:
    """The row of one level in one arrival on one server, and how its streams not completed
    ended."""
    streams = result["streams"]
    storage = result["storage"]
    by_endpoint = {
        endpoint: sum(1 for s in streams if s["done"] and s["endpoint"] == endpoint)
        for endpoint in (API, V1)
    }
    added = added_ms(streams, result["model"]["records"])
    a50, a95 = p50_p95(added["added"])
    b50, b95 = p50_p95(added["before"])
    f50, f95 = p50_p95(added["after"])
    healthz = result["healthz_ms"]
    answered = sum(1 for h in healthz if not math.isinf(h))
    delta_read = sum(1 for s in streams if s["first_delta"] is not None)
    grown = max(0, result["rss_peak"] - result["rss_before"])
    per_stream = grown / result["open_peak"] / MB if result["open_peak"] else math.nan
    twice = f", {storage['stored_twice']} twice" if storage["stored_twice"] else ""
    problems = sorted({s["problem"] for s in streams if s["problem"] and not s["done"]})
    row = (
        f"| {result['level']:,} | {result['arrival']} | {result['server']} "
        f"| {storage['completed']:,} "
        f"({by_endpoint[API]:,} / {by_endpoint[V1]:,}) | {storage['stored_once']:,} of "
        f"{storage['completed']:,}{twice} | {delta_read:,} "
        f"| {ms(a50)} | {ms(a95)} | {ms(b50)} / {ms(b95)} | {ms(f50)} / {ms(f95)} "
        f"| {ms(percentile(healthz, 0.99))} ({answered:,} of {len(healthz):,}) "
        f"| {result['server_cpu']:.1f} | {result['rss_before'] / MB:.0f} → "
        f"{result['rss_peak'] / MB:.0f} | {result['open_peak']:,} / "
        f"{result['model']['peak_open']:,} | {per_stream:.2f} "
        f"| {storage['not_completed_stored']:,} | {stopped(result['stop'])} |"
    )
    return row, problems


def stopped(stop: dict) -> str:
    """How the server stopped after the level: '{signal}, 0.4 s', or killed after the wait."""
    if stop["killed"]:
        return f"{stop['signal']}, SIGKILL after {stop['seconds']:.0f} s"
    return f"{stop['signal']}, {stop['seconds']:.1f} s"


def single_line(server: str, single: dict) -> str:
    streams = single["streams"]
    added = added_ms(streams, single["model"]["records"])
    a50, a95 = p50_p95(added["added"])
    b50, b95 = p50_p95(added["before"])
    f50, f95 = p50_p95(added["after"])
    completed = sum(1 for s in streams if s["done"])
    cpu = single.get("server_cpu")
    per_stream = (
        f"; server CPU {cpu / len(streams) * 1000:.1f} ms a stream beyond its idle "
        f"{single['server_idle'] * 1000:.1f} ms a second"
        if cpu is not None
        else ""
    )
    return (
        f"- Single streams, {server} ({len(streams)} one after another, endpoints alternating, "
        f"{completed} completed): added before the first delta p50 {ms(a50)} ms, p95 "
        f"{ms(a95)} ms (before the model {ms(b50)} / {ms(b95)} ms, after it {ms(f50)} / "
        f"{ms(f95)} ms){per_stream}."
    )


def report(results: list[dict], args) -> str:
    lines = []
    for result in results:
        reply = result["reply"]
        servers = "; ".join(f"{name}: {label}" for name, label in result["servers"].items())
        order = ", ".join(f"{what}: {' then '.join(first)}" for what, first in result["order"])
        span = stream_span(args)
        arrivals = "; ".join(arrival_note(a, span, args.levels) for a in arrivals_of(args))
        lines += [
            f"{result['database']}, {result['broker']}. Servers ({servers}), each measurement "
            f"on a fresh warmed-up process of its own; who went first ({order}). "
            f"ETHAN_API_RATE raised to {API_RATE} and ETHAN_TURNS_PER_PROCESS to "
            f"{result['turns_cap']:,} for the run, ETHAN_TURNS_PER_PERSON at 8, each stream a "
            f"person of its own; `ethan serve` stopped with SIGTERM (ETHAN_DRAIN_SECONDS "
            f"{DRAIN_SECONDS}), gunicorn with SIGQUIT. The model: first chunk "
            f"{args.first_chunk_ms:.0f} ms after each request, then one every "
            f"{args.chunk_ms:.0f} ms for {args.stream_seconds:g} s ({len(reply) // 4} pieces). "
            f"Arrival: {arrivals}; each level measured until {args.timeout:.0f} s after its "
            f"last request. {result['load']}.",
            "",
            *(model_alone_line(alone, args.timeout) for alone in result.get("alone") or ()),
            *(single_line(server, single) for server, single in result["single"].items()),
            "",
            "| streams at once | arrival | server | completed (/api/chat / /v1) "
            "| stored exactly once | first delta read | added p50 ms | added p95 ms "
            "| before model p50 / p95 ms | after model p50 / p95 ms | /healthz p99 ms (answered) "
            "| server CPU s "
            "| server RSS MB (start → peak) | most open: clients / model | MB per open stream "
            "| given up, stored anyway | stopped |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        problems: dict[str, set[str]] = {}
        levels = sorted(result["levels"], key=lambda r: (r["level"], r["arrival"], r["server"]))
        for level in levels:
            row, level_problems = level_row(level)
            lines.append(row)
            where = f"{level['server']}, {level['arrival']}"
            problems.setdefault(where, set()).update(level_problems)
        worker_cpu = [
            f"{level['level']:,} {level['arrival']}, {level['server']}: worker "
            f"{level['worker_cpu']:.1f} s"
            + (f", PostgreSQL {level['postgres_cpu']:.1f} s" if level.get("postgres_cpu") else "")
            for level in levels
            if level.get("worker_cpu") is not None
        ]
        if worker_cpu:
            lines += [
                "",
                "The Celery worker's CPU in each level, until it was idle again (the memory "
                "work the turns sent it: their vectors), and all of PostgreSQL's (its "
                f"processes, closed connections' included): {'; '.join(worker_cpu)}.",
            ]
        for where, seen in problems.items():
            if seen:
                shown = "; ".join(sorted(seen)[:4])
                lines += ["", f"{where}: streams not completed ended with: {shown}."]
        lines.append("")
    return "\n".join(lines).replace("\n\n\n", "\n\n").strip()


# --- one database ----------------------------------------------------------------------------


def people_tokens(count: int) -> list[str]:
    """`count` people, each with an API token (no password: nobody signs in): each stream is
    a person of its own, as many conversations at once are, so that no per-person limit (the
    API rate, and the caps issue 27 brings) is what a level measures."""
    from django.contrib.auth import get_user_model
    from django.db import connections
    from rest_framework.authtoken.models import Token

    User = get_user_model()
    users = User.objects.bulk_create(
        User(username=f"bench-streams-{n}", password="!") for n in range(count)
    )
    tokens = Token.objects.bulk_create(Token(key=Token.generate_key(), user=u) for u in users)
    connections.close_all()  # the web processes have the database to themselves
    return [token.key for token in tokens]


def arrivals_of(args) -> tuple[str, ...]:
    return ARRIVALS if args.arrival == "both" else (args.arrival,)


def measure_database(database: str, args) -> dict:
    """The model alone, then both servers (or the one asked for) on `database`: single
    streams, then each level in each arrival, the servers taking turns going first."""
    from bench.server import cpu_note

    raise_open_files()
    servers = SERVER_SETS.get(args.server, (args.server,))
    levels = [(level, arrival) for level in args.levels for arrival in arrivals_of(args)]
    turns_cap = max(2_000, 2 * max(args.levels, default=0))
    model = ModelProcess(
        first_chunk_ms=args.first_chunk_ms,
        chunk_ms=args.chunk_ms,
        stream_seconds=args.stream_seconds,
    )
    # The single streams, then each level in each arrival; the PostgreSQL run starts where the
    # SQLite one did not, so that over a `--database both` run each server goes first as often.
    plan = [("single streams", None)] if args.single else []
    plan += [(f"{level:,} {arrival}", (level, arrival)) for level, arrival in levels]
    offset = DATABASES.index(database)
    try:
        alone = []
        if args.model_check:
            alone = [run_clients(model_alone(model, *level, args)) for level in levels]
        extra_env = {
            "OPENAI_API_KEY": "bench-key",
            "OPENAI_BASE_URL": f"{model.url}/v1",
            "ETHAN_MODEL": MODEL,
            "ETHAN_API_RATE": API_RATE,
            "ETHAN_TURNS_PER_PROCESS": str(turns_cap),
            "ETHAN_DRAIN_SECONDS": str(DRAIN_SECONDS),
        }
        stack = ServeStack(
            database=database,
            server=server_order(offset, servers)[0],
            workers=args.workers,
            asgi_workers=args.asgi_workers,
            pg_database=args.pg_database,
            broker_url=args.broker_url,
            cache_url=args.cache_url,
            extra_env=extra_env,
        )
        with stack:
            from bench.common import database_label

            label = database_label()
            tokens = people_tokens(max(args.levels, default=1))
            load = cpu_note()
            numbers = itertools.count(1)
            single: dict[str, dict] = {}
            results = []
            order = []
            for index, (what, level) in enumerate(plan):
                first = server_order(index + offset, servers)
                order.append((what, first))
                for server in first:
                    result = measure_server(stack, server, level, tokens, numbers, model, args)
                    if level is None:
                        single[server] = result
                    else:
                        results.append(result)
                        print(level_row(result)[0], flush=True)
    finally:
        model.close()
    broker = "embedded (no broker)" if database == "sqlite" else "one Celery worker on Redis"
    return {
        "database": label,
        "broker": broker,
        "servers": {
            server: server_label(server, args.workers, args.asgi_workers) for server in servers
        },
        "order": order,
        "turns_cap": turns_cap,
        "load": load,
        "reply": model.reply,
        "alone": alone,
        "single": single,
        "levels": results,
    }


def measure_server(
    stack: ServeStack,
    server: str,
    level: tuple[int, str] | None,
    tokens: list[str],
    numbers: itertools.count,
    model: ModelProcess,
    args,
) -> dict:
    """A fresh `server`, warmed up: a level's streams, (how many, their arrival) (None: the
    single streams), the server stopped, then what it stored."""
    from django.db import connections

    stack.start_server(server)
    workers = args.workers if server == "gunicorn" else args.asgi_workers
    if level is None:
        run, kwargs = run_single, {"count": args.single, "server_pgid": stack.web().pid}
    else:
        count, arrival = level
        run = run_level
        worker = stack.worker()
        kwargs = {
            "server_pgid": stack.web().pid,
            "worker_pgid": worker.pid if worker is not None else None,
            "level": count,
            "arrival": arrival,
            "span": stream_span(args),
        }
    result = run_clients(
        with_clients(
            stack.base_url, tokens, args, numbers, run, model=model, workers=workers, **kwargs
        )
    )
    # Before the count: gunicorn drops the turns given up on, `ethan serve` drains them.
    result["stop"] = stack.stop_server()
    result["server"] = server
    result["storage"] = storage_check(result["streams"], stored_replies(model.reply))
    connections.close_all()
    return result


def run_clients(main):
    """The clients' coroutine on uvloop, as the server's loop is (Clients)."""
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


async def with_clients(base_url, tokens, args, numbers, run, **kwargs) -> dict:
    sdk = run is run_single
    async with Clients(base_url, tokens, args.timeout, numbers, sdk=sdk) as clients:
        return await run(clients=clients, **kwargs)


async def model_alone(model: ModelProcess, level: int, arrival: str, args) -> dict:
    """The clients straight at the model (the model's URL as the server's, the model taking
    any key), `level` streams sent as `arrival` says: what the bench itself holds."""
    async with Clients(model.url, ["bench-key"], args.timeout, straight=True) as clients:
        result = await run_level(
            clients=clients,
            model=model,
            server_pgid=None,
            level=level,
            arrival=arrival,
            span=stream_span(args),
            workers=0,
        )
    return {**result, "first_chunk_ms": args.first_chunk_ms}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database", choices=(*DATABASES, "both"), default="sqlite")
    parser.add_argument("--server", choices=(*SERVERS, *SERVER_SETS), default="both")
    parser.add_argument(
        "--before", type=Path, help="a checkout whose `ethan serve` is the server `before`"
    )
    parser.add_argument(
        "--before-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting of the server `before` only (a setting measured on and off: --before .)",
    )
    parser.add_argument(
        "--asgi-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting of this checkout's `ethan serve` only",
    )
    parser.add_argument(
        "--levels",
        type=lambda text: tuple(int(n) for n in re.split(r"[, ]+", text.strip()) if n),
        default=LEVELS,
        help="streams at once, comma-separated (100,300,1000)",
    )
    parser.add_argument(
        "--arrival",
        choices=(*ARRIVALS, "both"),
        default="both",
        help="a level's requests all at once (burst), or evenly over one stream's length (spread)",
    )
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds per level after its last request"
    )
    parser.add_argument("--single", type=int, default=20, help="single streams (0: none)")
    parser.add_argument("--first-chunk-ms", type=float, default=1000.0)
    parser.add_argument("--chunk-ms", type=float, default=250.0)
    parser.add_argument("--stream-seconds", type=float, default=10.0)
    parser.add_argument(
        "--workers", type=int, default=2, help="the baseline gunicorn's workers (old make serve: 2)"
    )
    parser.add_argument(
        "--asgi-workers",
        type=int,
        default=1,
        help="`ethan serve --workers`: its processes (1, the default serve command)",
    )
    parser.add_argument(
        "--no-model-check",
        dest="model_check",
        action="store_false",
        help="skip the model-alone run",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="5 streams, 1 s replies, both servers, both arrivals: ~1 min",
    )
    parser.add_argument("--pg-database", default="ethan_bench_streams")
    parser.add_argument("--broker-url", default="redis://127.0.0.1:6379/11")
    parser.add_argument("--cache-url", default="redis://127.0.0.1:6379/12")
    parser.add_argument("--no-record", action="store_true", help="do not append to docs/")
    parser.add_argument("--json", help=argparse.SUPPRESS)  # a child's result file
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.quick:
        args.levels, args.timeout, args.single = (5,), 20.0, 2
        args.first_chunk_ms, args.chunk_ms, args.stream_seconds = 200.0, 100.0, 1.0
    if not args.levels and not args.single:
        parser.error("nothing to measure: give --levels, --single, or both")
    if "before" in SERVER_SETS.get(args.server, (args.server,)):
        if args.before is None or not (args.before / ".venv" / "bin" / "ethan").exists():
            parser.error("--server before/change needs --before CHECKOUT, installed (make install)")
        global BEFORE
        BEFORE = args.before.resolve()
        BEFORE_ENV.update(item.split("=", 1) for item in args.before_env)
    ASGI_ENV.update(item.split("=", 1) for item in args.asgi_env)
    return run_per_database(
        module="bench.concurrent_streams",
        argv=argv,
        args=args,
        databases=DATABASES,
        measure_database=measure_database,
        report=report,
        title="Concurrent streams: ethan serve (ASGI) and the gunicorn baseline, slow model",
    )


if __name__ == "__main__":
    raise SystemExit(main())
