"""The app as deployed, for the HTTP benchmarks: a scratch PostgreSQL database, gunicorn and a
Celery worker on a Redis broker, and a thread-pool load generator.

    with BenchStack(gunicorn=GunicornConfig()) as stack:
        samples = load(base=stack.base_url, concurrency=50, next_request=fixed(requests))

The bench process itself runs Django on the same database and broker (to create users and
tokens, to check rows afterwards, and for append_results), so everything is configured through
one environment that the subprocesses inherit. Every process started here is stopped on exit,
also on errors and Ctrl-C.
"""

from __future__ import annotations

import contextlib
import fcntl
import http.client
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import ROOT
from ethan_llm.config import PROVIDER_VARS
from ethan_site.celery import worker_command

# The scratch database and the broker database; never the suite's (test_*, ethan, Redis /15).
POSTGRES_ADMIN = "postgres://postgres@127.0.0.1:5432"
DATABASE_NAME = "ethan_bench_http"
BROKER_URL = "redis://127.0.0.1:6379/13"
START_SECONDS = 60
STOP_SECONDS = 20
# Two runs at once would drop each other's database and flush each other's broker.
LOCK_PATH = Path(tempfile.gettempdir()) / "ethan-bench-http.lock"
# Settings the bench decides for itself, never inherited from the caller's shell.
_OURS = ("ETHAN_", "DJANGO_", "LARK_", "CELERY_", "DATABASE_")


@dataclass(frozen=True)
class GunicornConfig:
    """The defaults are `make serve`'s: two sync workers."""

    workers: int = 2
    worker_class: str = "sync"
    threads: int = 1

    def args(self) -> list[str]:
        return [
            "--workers",
            str(self.workers),
            "--worker-class",
            self.worker_class,
            "--threads",
            str(self.threads),
        ]

    def label(self) -> str:
        """How the web side runs, for the result tables."""
        if self.worker_class == "gthread" or self.threads > 1:
            return (
                f"gunicorn {self.workers} × {self.worker_class} workers, "
                f"{self.threads} threads each"
            )
        return f"gunicorn {self.workers} × {self.worker_class} workers"


def add_gunicorn_arguments(parser, *, workers: int = 2, worker_class: str = "sync") -> None:
    parser.add_argument("--workers", type=int, default=workers, help="gunicorn workers")
    parser.add_argument(
        "--worker-class",
        default=worker_class,
        choices=("sync", "gthread"),
        help="gunicorn worker class",
    )
    parser.add_argument("--threads", type=int, default=1, help="threads per gthread worker")
    parser.add_argument(
        "--celery-concurrency", type=int, default=1, help="Celery worker processes (prefork)"
    )
    parser.add_argument(
        "--celery-nice",
        type=int,
        default=0,
        help="run the Celery worker at this nice level (on a shared host: the web first)",
    )


def gunicorn_from_args(args) -> GunicornConfig:
    worker_class = "gthread" if args.threads > 1 else args.worker_class
    return GunicornConfig(workers=args.workers, worker_class=worker_class, threads=args.threads)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _psql(sql: str) -> None:
    subprocess.run(
        ["psql", "-h", "127.0.0.1", "-U", "postgres", "-v", "ON_ERROR_STOP=1", "-qc", sql],
        check=True,
        capture_output=True,
        text=True,
    )


def scratch_database() -> str:
    """Drop and create the benchmark's own database: every run starts empty."""
    assert not DATABASE_NAME.startswith("test_") and DATABASE_NAME != "ethan"
    # FORCE: a process of an interrupted run may still hold a connection.
    _psql(f'DROP DATABASE IF EXISTS "{DATABASE_NAME}" WITH (FORCE)')
    _psql(f'CREATE DATABASE "{DATABASE_NAME}"')
    return f"{POSTGRES_ADMIN}/{DATABASE_NAME}"


def flush_broker() -> None:
    import redis

    redis.Redis.from_url(BROKER_URL).flushdb()


class BenchStack:
    """Scratch database + migrate, gunicorn and a Celery worker, all stopped on exit (the
    database is kept for a look afterwards and dropped by the next run).

    `extra_env` reaches the bench process's Django and both subprocesses (Lark settings, the
    API rate). Logs go to a throwaway home, kept (and named) only when something failed.
    """

    def __init__(
        self,
        *,
        gunicorn: GunicornConfig,
        settings_module: str = "ethan_site.settings",
        celery_concurrency: int = 1,
        celery_nice: int = 0,
        extra_env: dict[str, str] | None = None,
    ):
        self.gunicorn = gunicorn
        self.settings_module = settings_module
        self.celery_concurrency = celery_concurrency
        self.celery_nice = celery_nice
        self.extra_env = extra_env or {}
        self.home = Path()
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.processes: list[subprocess.Popen] = []
        self.env: dict[str, str] = {}
        self._lock_file = None
        self._failed = False

    # --- set-up ------------------------------------------------------------------------------

    def _environment(self, database_url: str) -> dict[str, str]:
        env = {
            name: value
            for name, value in os.environ.items()
            # No provider keys: the offline model. No inherited Django or Ethan settings.
            if not name.startswith(_OURS) and name not in PROVIDER_VARS
        }
        env.update(
            {
                "DJANGO_SETTINGS_MODULE": self.settings_module,
                "DJANGO_DEBUG": "0",
                "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
                "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
                "ETHAN_HOME": str(self.home),
                "ETHAN_LOG_LEVEL": "WARNING",
                "DATABASE_URL": database_url,
                "CELERY_BROKER_URL": BROKER_URL,
                "PYTHONPATH": str(ROOT),
                **self.extra_env,
            }
        )
        return env

    def __enter__(self) -> BenchStack:
        self._lock_file = LOCK_PATH.open("w")
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            sys.exit(f"another HTTP benchmark is running (lock {LOCK_PATH})")
        # Outside the repository: nothing of a run can end up in git.
        self.home = Path(tempfile.mkdtemp(prefix="ethan-bench-http-"))
        # Ctrl-C and a plain `kill` both unwind through __exit__, which stops the children.
        signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
        try:
            self._start()
        except BaseException:
            self._failed = True
            self._stop()
            raise
        return self

    def _start(self) -> None:
        flush_broker()
        self._start_web(scratch_database())
        self.worker_name = f"bench-{secrets.token_hex(3)}@localhost"
        # nice execs the worker: the pid (and process group) stay the worker's.
        niced = ["nice", "-n", str(self.celery_nice)] if self.celery_nice else []
        self._spawn(
            "celery",
            [
                *niced,
                # As deployed: one worker on both queues (README, `make worker`).
                *worker_command(
                    hostname=self.worker_name,
                    pool="prefork",
                    concurrency=self.celery_concurrency,
                    loglevel="WARNING",
                ),
            ],
        )
        self._wait_ready()

    def _start_web(self, database_url: str, *, broker: bool = True) -> None:
        """The environment (this process's Django runs on the same settings), the migrated
        database and gunicorn; `broker=False`: embedded mode, no CELERY_BROKER_URL."""
        self.env = self._environment(database_url)
        if not broker:
            del self.env["CELERY_BROKER_URL"]
        for name in [n for n in os.environ if n not in self.env]:
            if name.startswith(_OURS) or name in PROVIDER_VARS:
                del os.environ[name]
        os.environ.update(self.env)
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", interactive=False, verbosity=0)
        self._spawn(
            "gunicorn",
            [
                sys.executable,
                "-m",
                "gunicorn",
                "ethan_site.wsgi:application",
                "--bind",
                f"127.0.0.1:{self.port}",
                *self.gunicorn.args(),
                "--log-level",
                "warning",
            ],
        )

    def _spawn(
        self, name: str, command: list[str], *, cwd: Path = ROOT, env: dict | None = None
    ) -> None:
        log = (self.home / f"{name}.log").open("w")
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env=self.env if env is None else env,
            stdout=log,
            stderr=subprocess.STDOUT,
            # Its own process group: stopping it reaches its workers / pool children too.
            start_new_session=True,
        )
        process.bench_name = name
        process.log_path = log.name
        self.processes.append(process)

    def _check_alive(self) -> None:
        for process in self.processes:
            if process.poll() is not None:
                raise RuntimeError(
                    f"{process.bench_name} exited with {process.returncode}:\n"
                    f"{Path(process.log_path).read_text()[-3000:]}"
                )

    def _wait_ready(self) -> None:
        from ethan_site.celery import app as celery_app

        deadline = self._wait_web()
        while not celery_app.control.ping(destination=[self.worker_name], timeout=1.0):
            self._check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Celery worker did not answer within {START_SECONDS} s")

    def _wait_web(self) -> float:
        """Until gunicorn answers /healthz; returns the start-up deadline."""
        return self._wait_healthz("gunicorn", self.base_url)

    def _wait_healthz(self, name: str, base_url: str) -> float:
        """Until the server `name` at `base_url` answers /healthz, every started process still
        running; returns the start-up deadline."""
        deadline = time.monotonic() + START_SECONDS
        while True:
            self._check_alive()
            try:
                status, _ = request_once(base_url, "GET", "/healthz")
            except OSError:
                status = 0
            if status == 200:
                return deadline
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not answer /healthz within {START_SECONDS} s")
            time.sleep(0.2)

    # --- tear-down ---------------------------------------------------------------------------

    def __exit__(self, exc_type, exc, tb) -> None:
        self._failed = self._failed or exc_type is not None
        self._stop()

    def _stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)  # graceful: gunicorn and Celery drain
        for process in self.processes:
            try:
                process.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=STOP_SECONDS)
        self.processes.clear()
        from django.apps import apps

        if apps.ready:  # Django is set up only once the stack has started
            from django.db import connections

            connections.close_all()
        try:
            flush_broker()  # no task of this run is left for the next
        except Exception as exc:  # Redis gone: say so, but still clean up the rest
            print(f"could not flush {BROKER_URL}: {exc}", file=sys.stderr)
        if self._failed:
            print(f"logs kept in {self.home}", file=sys.stderr)
        else:
            shutil.rmtree(self.home, ignore_errors=True)
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time used so far by each started process group (gunicorn with its workers,
        Celery with its pool), this bench process, and the whole machine; differences of two
        readings show where a measurement's CPU went."""
        used = {process.bench_name: process_group_cpu(process.pid) for process in self.processes}
        # The PostgreSQL backends serving this database (persistent connections: CONN_MAX_AGE).
        used["postgres"] = sum(postgres_backends_cpu().values())
        own = os.times()
        used["bench process"] = own.user + own.system
        used["machine busy"] = machine_busy_seconds()
        return used

    def log_tail(self, name: str, chars: int = 3000) -> str:
        path = self.home / f"{name}.log"
        return path.read_text()[-chars:] if path.exists() else ""


def _raise_keyboard_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def postgres_backends_cpu() -> dict[int, float]:
    """CPU seconds so far of each PostgreSQL backend serving this process's database (the web
    workers', the Celery worker's and this process's own connection), by pid."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
        backends = [pid for (pid,) in cursor.fetchall()]
    ticks = os.sysconf("SC_CLK_TCK")
    used = {}
    for pid in backends:
        with contextlib.suppress(OSError, IndexError, ValueError):  # gone meanwhile
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            used[pid] = (int(fields[11]) + int(fields[12])) / ticks
    return used


def postgres_cpu() -> float:
    """CPU seconds so far of every process of the machine's PostgreSQL (user postgres), the
    backends that have exited included (their time is counted in the postmaster's reaped
    children's): what the database cost, connections opened and closed with it, which
    postgres_backends_cpu, reading the live backends, misses."""
    try:
        uid = pwd.getpwnam("postgres").pw_uid
    except KeyError:
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):  # gone meanwhile
            if entry.stat().st_uid != uid:
                continue
            # utime stime cutime cstime: fields 12-15 after the command name.
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(value) for value in fields[11:15])
    return total / ticks


def cpu_readings(stack: BenchStack) -> dict[str, float]:
    """CPU seconds so far of each started process group, of each PostgreSQL backend of the
    bench database (as "postgres/<pid>", on PostgreSQL), of this process and of the whole
    machine; cpu_spent turns two readings into what a measurement used."""
    from django.db import connection

    used = {p.bench_name: process_group_cpu(p.pid) for p in stack.processes}
    if connection.vendor == "postgresql":
        used |= {f"postgres/{pid}": cpu for pid, cpu in postgres_backends_cpu().items()}
    own = os.times()
    used["bench process"] = own.user + own.system
    used["machine busy"] = machine_busy_seconds()
    return used


def cpu_spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """What was used between two cpu_readings, the backends added up as "postgres". A backend
    that appeared meanwhile counts from zero; one that went away (a connection past
    CONN_MAX_AGE is replaced) is left out, so its last share is missed rather than the
    reading going negative."""
    spent: dict[str, float] = {}
    for name, value in after.items():
        if name.startswith("postgres/"):
            spent["postgres"] = spent.get("postgres", 0.0) + value - before.get(name, 0.0)
        else:
            spent[name] = value - before.get(name, 0.0)
    # "machine busy" last: the others are read before it.
    if "machine busy" in spent:
        spent["machine busy"] = spent.pop("machine busy")
    return spent


def process_group_cpu(pgid: int, *, leader: bool = True) -> float:
    """CPU seconds (user + system) so far of the live processes in one process group (as
    BenchStack starts them: gunicorn's arbiter and its workers, Celery and its pool);
    `leader=False` leaves the group's leader out (gunicorn's workers without the arbiter).
    Read from /proc, so it works whatever the database (postgres_backends_cpu asks PostgreSQL
    for its backends)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or (not leader and int(entry.name) == pgid):
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):  # gone meanwhile
            # Fields after the command name: state ppid pgrp ... utime(12) stime(13).
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid:
                total += int(fields[11]) + int(fields[12])
    return total / ticks


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has spent not idle (all cores, since boot): with the
    stack's own CPU taken out, what other work on a shared host used meanwhile."""
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    return (sum(map(int, cpu)) - int(cpu[3]) - int(cpu[4])) / ticks  # less idle and iowait


# --- the load generator ----------------------------------------------------------------------


@dataclass
class Request:
    method: str
    path: str
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    tag: str = ""


@dataclass
class Sample:
    tag: str
    status: int  # 0: no HTTP answer (connection error)
    latency_ms: float
    body: bytes
    thread: int


# next_request(thread index, that thread's previous sample) → the next request, or None: done.
NextRequest = Callable[[int, Sample | None], Request | None]


def fixed(requests: Iterable[Request]) -> NextRequest:
    """A fixed list, shared by all threads: each takes the next one not yet sent."""
    source = iter(requests)
    lock = threading.Lock()

    def next_request(thread: int, previous: Sample | None) -> Request | None:
        with lock:
            return next(source, None)

    return next_request


def request_once(base: str, method: str, path: str) -> tuple[int, bytes]:
    host, port = base.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        connection.request(method, path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def load(
    *,
    base: str,
    concurrency: int,
    next_request: NextRequest,
    seconds: float | None = None,
    timeout: float = 30.0,
) -> tuple[list[Sample], float]:
    """`concurrency` threads, each with one keep-alive connection, send requests until
    next_request says None (or `seconds` pass). Returns the samples and the wall time from the
    moment all threads were connected to the last answer."""
    host, port = base.removeprefix("http://").split(":")
    samples: list[Sample] = []
    samples_lock = threading.Lock()
    ready = threading.Barrier(concurrency + 1, timeout=timeout)

    def run(thread: int) -> None:
        connection = http.client.HTTPConnection(host, int(port), timeout=timeout)
        connection.connect()  # outside the timing: Lark keeps connections too
        mine: list[Sample] = []
        previous = None
        ready.wait()
        started = time.perf_counter()
        try:
            while seconds is None or time.perf_counter() - started < seconds:
                request = next_request(thread, previous)
                if request is None:
                    break
                t0 = time.perf_counter()
                try:
                    connection.request(
                        request.method, request.path, body=request.body, headers=request.headers
                    )
                    response = connection.getresponse()
                    body = response.read()
                    status = response.status
                    if response.will_close:
                        connection.close()  # http.client reconnects on the next request
                except (OSError, http.client.HTTPException) as exc:
                    connection.close()
                    body, status = repr(exc).encode(), 0
                previous = Sample(
                    request.tag, status, (time.perf_counter() - t0) * 1000, body, thread
                )
                mine.append(previous)
        finally:
            connection.close()
            with samples_lock:
                samples.extend(mine)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    ready.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    return samples, time.perf_counter() - started


def statuses(samples: Iterable[Sample]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for sample in samples:
        counts[sample.status] = counts.get(sample.status, 0) + 1
    return dict(sorted(counts.items()))


def cpu_note() -> str:
    """The load average when the measurement started: other work on the machine shows here."""
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) before the run"


def cpu_used(before: dict[str, float], after: dict[str, float], wall: float) -> str:
    """'gunicorn 2.5 s, celery 1.4 s, client 0.4 s, machine busy 6.1 of 6.7 s' for a run."""
    cores = os.cpu_count() or 1
    # A backend that appeared during the run counts from zero.
    parts = [f"{name} {after[name] - before.get(name, 0):.1f} s" for name in after]
    return f"CPU used: {', '.join(parts)} (of {wall * cores:.1f} core-seconds)"


def wait_until(predicate: Callable[[], Any], timeout: float, interval: float = 0.25) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())
