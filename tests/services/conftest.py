"""The services suite: real PostgreSQL, a real Redis broker and a real Celery worker process.

Run by `make test-services` (DATABASE_URL and CELERY_BROKER_URL set); `make test` deselects it.
Nothing here is skipped: run without the services, these tests fail and say why.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from ethan_site.celery import app as celery_app
from ethan_site.celery import worker_command

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
WORKER_START_SECONDS = 60


def pytest_collection_modifyitems(config, items):
    for item in items:
        if Path(str(item.fspath)).is_relative_to(HERE):
            item.add_marker(pytest.mark.services)


@pytest.fixture(scope="session")
def services_ready(django_db_setup, django_db_blocker):
    assert connection.vendor == "postgresql", (
        "the services suite runs on PostgreSQL: use `make test-services` (DATABASE_URL)"
    )
    assert not settings.ETHAN_EMBEDDED, (
        "the services suite needs a broker: use `make test-services` (CELERY_BROKER_URL)"
    )


def _database_url() -> str:
    """The test database pytest-django created, for the worker to share."""
    db = connection.settings_dict
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    return (
        f"postgres://{db['USER']}{password}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}"
        f"/{db['NAME']}"
    )


class Workers:
    """Start real `celery worker` processes on the test database and broker."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.started: list[subprocess.Popen] = []

    def start(self, name: str, pool: str = "solo", **extra_env: str) -> subprocess.Popen:
        """`pool="prefork"` runs the event loop that also hands back tasks of dead workers
        (Redis visibility timeout), as production workers do."""
        hostname = f"{name}-{uuid.uuid4().hex[:6]}@localhost"
        log_path = self.log_dir / f"{name}.log"
        env = {
            **os.environ,
            "DATABASE_URL": _database_url(),
            "ETHAN_LOG_LEVEL": "INFO",
            **extra_env,
        }
        with log_path.open("w") as log:
            worker = subprocess.Popen(
                worker_command(hostname=hostname, pool=pool, concurrency=1, loglevel="INFO"),
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Its own process group: a crash test kills the pool's children too.
                start_new_session=True,
            )
        worker.log_path = log_path
        worker.hostname = hostname
        self.started.append(worker)
        deadline = time.monotonic() + WORKER_START_SECONDS
        while not celery_app.control.ping(destination=[hostname], timeout=1.0):
            if worker.poll() is not None or time.monotonic() > deadline:
                worker.kill()
                pytest.fail(f"the Celery worker did not start:\n{log_path.read_text()[-3000:]}")
        return worker

    @staticmethod
    def crash(worker: subprocess.Popen) -> None:
        """SIGKILL the worker and its pool processes at once, like a machine going down."""
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=10)

    def stop_all(self) -> None:
        for worker in self.started:
            if worker.poll() is None:
                worker.terminate()
        for worker in self.started:
            try:
                worker.wait(timeout=20)
            except subprocess.TimeoutExpired:
                worker.kill()
        self.started.clear()


@pytest.fixture
def celery_worker_process(services_ready, tmp_path):
    """A real worker on the default settings, for one test: a worker left running would take
    the tasks meant for another test's workers."""
    celery_app.control.purge()  # nothing left over from an earlier run
    workers = Workers(tmp_path)
    worker = workers.start("default")
    yield worker
    workers.stop_all()
    celery_app.control.purge()


@pytest.fixture
def workers(services_ready, tmp_path):
    """Workers of a test's own (started on demand, stopped at the end)."""
    celery_app.control.purge()
    made = Workers(tmp_path)
    yield made
    made.stop_all()
    celery_app.control.purge()


def wait_for(predicate, timeout: float = 30.0, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def all_at_once(work, times: int) -> list:
    """Run `work()` in `times` threads released together (a barrier), each on its own database
    connection, closed afterwards; their results, in the order they finished."""
    barrier = threading.Barrier(times)
    results: list = []

    def run() -> None:
        try:
            barrier.wait()
            results.append(work())
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(times)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results
