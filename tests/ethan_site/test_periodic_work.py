"""The server's own periodic work without a broker (ethan_site.periodic): `ethan serve` in a
child process of its own process group, on an embedded home, its log read for the runs and
its SQLite file for what they did."""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import openai
import pytest
from django.test import override_settings
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from ethan_site.periodic import PeriodicWork, periodic_claim
from ethan_site.schedule import PERIODIC_TASKS, periodic_tasks_declare
from tests.conftest import ROOT, clean_env, run_manage
from tests.fakes.base import Reply
from tests.fakes.openai_fake import FakeOpenAI, MiniModel
from tests.web_server import START_SECONDS, Server, api_token, free_port, migrated_home

PERIODS = {periodic.task: periodic.every_seconds for periodic in PERIODIC_TASKS}
# "2026-12-06 07:16:44,145 INFO ethan_site.periodic: periodic task X started in process 17653"
RUN_LINE = re.compile(
    r"^(\S+ \S+) INFO ethan_site\.periodic: periodic task (\S+) (started|ran) .*in process (\d+)",
    re.MULTILINE,
)
# Idle after three seconds: close_idle then runs every half second (a sixth of it).
SHORT_IDLE = {"ETHAN_SESSION_IDLE_MINUTES": "0.05", "ETHAN_LOG_LEVEL": "INFO"}


@pytest.fixture(scope="module")
def migrated(tmp_path_factory) -> tuple[Path, str]:
    """One migrated embedded home with an API token for "ada", made once (a migrate is many
    seconds on a busy machine): (home, token). Each test serves a copy of it (home_copy)."""
    home = migrated_home(tmp_path_factory.mktemp("periodic") / "home")
    return home, api_token(home, "ada")


@pytest.fixture
def home_copy(migrated, tmp_path) -> tuple[Path, str]:
    home, token = migrated
    return Path(shutil.copytree(home, tmp_path / "home")), token


def wait_for(predicate, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@contextlib.contextmanager
def served(home: Path, *, workers: int = 1, **env: str) -> Iterator[Server]:
    """`ethan serve` on a free port, in a process group of its own (uvicorn's supervisor and
    its workers, those it starts again included), all ended at the end on every path."""
    port = free_port()
    log_path = home / f"server-{port}.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [
                *(sys.executable, "manage.py", "ethan_serve"),
                *("--bind", f"127.0.0.1:{port}", "--workers", str(workers)),
            ],
            cwd=ROOT,
            env=clean_env(home, **env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = Server(port=port, home=home, log_path=log_path, process=process)
    try:
        started = wait_for(
            lambda: process.poll() is not None or _accepts(port), timeout=START_SECONDS
        )
        assert started and process.poll() is None, server.log()[-3000:]
        yield server
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=20)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def runs(log: str) -> list[tuple[float, str, str, int]]:
    """(time, task, "started" or "ran", process) of every periodic run in the log."""
    found = []
    for stamp, task, what, pid in RUN_LINE.findall(log):
        when = time.mktime(time.strptime(stamp.split(",")[0], "%Y-%m-%d %H:%M:%S"))
        found.append((when + int(stamp.split(",")[1]) / 1000, task, what, int(pid)))
    return found


def in_progress(log: str) -> dict[int, str]:
    """The task each process has started and not finished, by the log."""
    running: dict[int, str] = {}
    for _, task, what, pid in runs(log):
        if what == "started":
            running[pid] = task
        else:
            running.pop(pid, None)
    return running


def query(home: Path, sql: str, *args) -> list[tuple]:
    with contextlib.closing(sqlite3.connect(home / "ethan.sqlite3", timeout=20)) as db:
        return db.execute(sql, args).fetchall()


def two_rounds(server: Server, token: str, model: str) -> None:
    """A conversation of two rounds from a chat app (the openai SDK over /v1)."""
    client = openai.OpenAI(
        base_url=f"http://127.0.0.1:{server.port}/v1", api_key=token, max_retries=0
    )
    messages = [{"role": "user", "content": "My favourite food is grilled sardines."}]
    first = client.chat.completions.create(model=model, messages=messages)
    messages += [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "I live in Porto."},
    ]
    client.chat.completions.create(model=model, messages=messages)


def episodes(home: Path) -> list[tuple]:
    return query(
        home,
        "SELECT s.ended_at IS NOT NULL, e.summary FROM sessions_app_chatsession s "
        "JOIN episodes_app_episode e ON e.session_ref = s.id",
    )


class EndOfSessionHangs(MiniModel):
    """MiniModel whose first call that ends a session (its episode and last facts) does not come
    back while the test lasts: the process that asked is mid-task."""

    def __init__(self) -> None:
        super().__init__()
        self.hung = False

    def __call__(self, recorded):
        system = recorded.body["messages"][0]["content"]
        if "You do two things" in system and not self.hung:
            self.hung = True
            self.calls.append("consolidate (hung)")
            return Reply(body=FakeOpenAI.text('{"summary": "", "facts": []}'), delay=120)
        return super().__call__(recorded)


@pytest.fixture
def hanging_model():
    fake = FakeOpenAI()
    fake.responder = EndOfSessionHangs()
    yield fake
    fake.close()


def on_fake(fake: FakeOpenAI, **env: str) -> dict[str, str]:
    return {
        "OPENAI_API_KEY": "test-key",
        "OPENAI_BASE_URL": f"{fake.url}/v1",
        "ETHAN_COMPRESSION_MODEL": "gpt-4o-mini",
        # Two rounds are enough for a session's end to be written at once (no end wait).
        "ETHAN_MEMORY_END_BATCH_ROUNDS": "2",
        # The claim on a session's memory work that a process killed or stopped mid-call
        # leaves runs out in 2 s, not 300: the next run takes it within the test's wait.
        "ETHAN_MEMORY_CLAIM_SECONDS": "2",
        **SHORT_IDLE,
        **env,
    }


@pytest.mark.slow  # `ethan serve` in two processes for many seconds: make test-slow
def test_periodic_work_runs_each_task_once_per_period_across_two_workers(home_copy):
    """Two processes, each with its scheduler: every task runs, one run per period between
    them (each run claimed on its row: runs counted there as in the log), and SIGTERM stops
    both schedulers cleanly."""
    scale = 0.005  # close_idle every 1.5 s, the Lark sweep every 0.3 s
    home, _ = home_copy
    with served(home, workers=2, ETHAN_PERIODIC_SCALE=str(scale), ETHAN_LOG_LEVEL="INFO") as server:
        assert wait_for(
            lambda: (
                sum(
                    1
                    for _, task, what, _ in runs(server.log())
                    if (task, what) == ("sessions.close_idle", "ran")
                )
                >= 3
            )
        ), server.log()[-3000:]
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=30) == 0
    log = server.log()

    started = re.findall(r"periodic work started in process (\d+)", log)
    stopped = re.findall(r"periodic work stopped in process (\d+)$", log, re.MULTILINE)
    assert len(started) == 2 and sorted(started) == sorted(stopped), log[-3000:]
    assert "in progress" not in log

    by_task: dict[str, list[float]] = defaultdict(list)
    finished: dict[str, int] = defaultdict(int)
    for when, task, what, _ in runs(log):
        if what == "started":
            by_task[task].append(when)
        else:
            finished[task] += 1
    assert set(by_task) == set(PERIODS)  # every task ran, due at start
    counts = dict(query(home, "SELECT task, total_run_count FROM django_celery_beat_periodictask"))
    for task, times in by_task.items():
        # Claimed once per run, finished each time, never twice in one period (the log's
        # times lag the claims by a few milliseconds: half a period is far from a double run).
        assert counts[task] == len(times) == finished[task], (task, counts[task], times)
        gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
        assert all(gap >= PERIODS[task] * scale / 2 for gap in gaps), (task, gaps)
    assert len(by_task["sessions.close_idle"]) >= 3 and len(by_task["channels.lark_reclaim"]) >= 5


@pytest.mark.slow  # `ethan serve` in two processes for many seconds: make test-slow
def test_periodic_work_goes_on_after_a_worker_is_killed_mid_task(home_copy, hanging_model):
    """A chat app's session closed as idle: the process whose close_idle is writing its end is
    killed (SIGKILL) while the model answers. The task runs again the next period, in another
    process, and the session gets its episode and its facts once."""
    home, token = home_copy
    model = hanging_model.responder
    # close_idle every 2 s (half a second, times 4): a run claimed is held that long.
    with served(home, workers=2, **on_fake(hanging_model, ETHAN_PERIODIC_SCALE="4")) as server:
        two_rounds(server, token, "ethan/gpt-4o")
        assert wait_for(lambda: model.hung and len(in_progress(server.log())) == 1), server.log()[
            -3000:
        ]
        [(doomed, task)] = in_progress(server.log()).items()
        assert task == "sessions.close_idle"
        killed_at = len(server.log())
        os.kill(doomed, signal.SIGKILL)

        assert wait_for(lambda: len(episodes(home)) == 1), server.log()[-3000:]
        assert wait_for(
            lambda: any(
                (task, what) == ("sessions.close_idle", "ran") and pid != doomed
                for _, task, what, pid in runs(server.log()[killed_at:])
            )
        ), server.log()[-3000:]

    [(ended, summary)] = episodes(home)
    assert ended and summary == "摘要1"
    facts = query(home, "SELECT content FROM memory_app_fact ORDER BY id")
    assert facts == [
        ("用户说过：My favourite food is grilled sardines.",),
        ("用户说过：I live in Porto.",),
    ]
    assert model.calls == ["consolidate (hung)", "consolidate"]


@pytest.mark.slow  # `ethan serve` in two processes for many seconds: make test-slow
def test_sigterm_leaves_a_task_in_progress_to_the_next_run(home_copy, hanging_model):
    """SIGTERM while close_idle waits on the model: the server does not wait for it (it exits,
    saying which task it left), nothing half-done is stored, and the next start does it."""
    home, token = home_copy
    with served(home, **on_fake(hanging_model)) as server:
        two_rounds(server, token, "ethan/gpt-4o")
        assert wait_for(lambda: hanging_model.responder.hung), server.log()[-3000:]
        server.process.send_signal(signal.SIGTERM)
        # The model would answer in two minutes; the server is gone long before (uvicorn's
        # one process ends by the signal it was sent, once it has shut down).
        assert server.process.wait(timeout=60) == -signal.SIGTERM
    assert re.search(
        r"periodic work stopped in process \d+ with sessions\.close_idle in progress", server.log()
    ), server.log()[-3000:]
    assert query(home, "SELECT ended_at IS NOT NULL FROM sessions_app_chatsession") == [(1,)]
    assert episodes(home) == [] and query(home, "SELECT * FROM memory_app_fact") == []

    with served(home, **on_fake(hanging_model)) as again:
        assert wait_for(lambda: len(episodes(home)) == 1), again.log()[-3000:]
    assert query(home, "SELECT count(*) FROM memory_app_fact") == [(2,)]


def test_a_chat_apps_conversation_is_learnt_from_by_the_server_alone(home_copy):
    """The embedded server as a new user runs it (the offline model, no console, no worker): a
    conversation of two rounds over /v1 is closed once idle and gets its episode."""
    home, token = home_copy
    with served(home, ETHAN_MEMORY_END_BATCH_ROUNDS="2", **SHORT_IDLE) as server:
        two_rounds(server, token, "ethan")
        assert wait_for(lambda: len(episodes(home)) == 1), server.log()[-3000:]
    [(ended, summary)] = episodes(home)
    assert ended and summary
    assert query(home, "SELECT channel FROM sessions_app_chatsession") == [("openai",)]


@pytest.mark.slow  # `ethan serve` in two processes for many seconds: make test-slow
def test_the_server_leaves_periodic_work_to_beat_when_a_broker_is_configured(home_copy):
    """With a broker (none listening here: nothing is sent to it), the server starts no
    scheduler: beat runs the periodic tasks. Startup is over once the server accepts."""
    home, _ = home_copy
    broker = f"redis://127.0.0.1:{free_port()}/0"
    with served(home, CELERY_BROKER_URL=broker, ETHAN_LOG_LEVEL="INFO") as server:
        log = server.log()
    assert "periodic work left to celery beat: a broker is configured" in log, log[-3000:]
    assert "periodic work started" not in log and not runs(log)
    assert query(home, "SELECT count(*) FROM django_celery_beat_periodictask") == [
        (len(PERIODIC_TASKS),)
    ]
    assert query(
        home, "SELECT count(*) FROM django_celery_beat_periodictask WHERE last_run_at IS NOT NULL"
    ) == [(0,)]


@pytest.mark.django_db
def test_periodic_claim_gives_each_period_to_one_process():
    close_idle = next(p for p in PERIODIC_TASKS if p.task == "sessions.close_idle")
    assert periodic_claim(close_idle, period=300)
    assert not periodic_claim(close_idle, period=300)  # claimed: the others find it taken
    row = PeriodicTask.objects.get(name=close_idle.name)
    assert row.total_run_count == 1
    # A period later (the claimer may have died mid-task: its claim holds no longer).
    PeriodicTask.objects.filter(pk=row.pk).update(
        last_run_at=timezone.now() - timedelta(seconds=301)
    )
    assert periodic_claim(close_idle, period=300)
    assert not periodic_claim(close_idle, period=300)
    # Switched off in the admin: never claimed.
    row.refresh_from_db()
    row.enabled = False
    row.save()
    assert not periodic_claim(close_idle, period=0.001)
    assert PeriodicTask.objects.get(pk=row.pk).total_run_count == 2


@pytest.mark.django_db
def test_periodic_work_is_left_to_beat_when_a_broker_is_configured():
    work = PeriodicWork()
    with override_settings(ETHAN_EMBEDDED=False):
        assert work.start() is False
    work.stop()  # nothing to stop
    assert not PeriodicTask.objects.filter(last_run_at__isnull=False).exists()


@pytest.mark.django_db
def test_close_idle_runs_six_times_per_idle_time_at_most_every_five_minutes():
    close_idle = next(p for p in PERIODIC_TASKS if p.task == "sessions.close_idle")
    assert close_idle.seconds() == 300  # the default idle time, 30 minutes
    with override_settings(ETHAN_SESSION_IDLE_MINUTES=6):
        assert close_idle.seconds() == 60
        periodic_tasks_declare()  # beat runs it at that period too
        assert PeriodicTask.objects.get(name=close_idle.name).interval.every == 60
    with override_settings(ETHAN_SESSION_IDLE_MINUTES=120):
        assert close_idle.seconds() == 300
    assert all(p.seconds() == p.every_seconds for p in PERIODIC_TASKS if p is not close_idle)


def test_periodic_settings_must_be_above_zero(tmp_path):
    for name in ("ETHAN_PERIODIC_SCALE", "ETHAN_SESSION_IDLE_MINUTES"):
        refused = run_manage(["check"], tmp_path, **{name: "0"})
        assert refused.returncode == 1
        assert refused.stderr.splitlines()[-1] == (
            f"ethan: configuration error: {name} from environment variable {name}: must be "
            "above 0, not 0.0"
        )
