"""The services suite: real PostgreSQL, a real Redis broker and a real Celery worker process.

Run by `make test-services` (DATABASE_URL and CELERY_BROKER_URL set); `make test` deselects it.
Nothing here is skipped: run without the services, these tests fail and say why.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from ethan_site.celery import app as celery_app

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


@pytest.fixture(scope="session")
def celery_worker_process(services_ready, tmp_path_factory):
    """A real `celery worker` process on the test database and the test broker."""
    name = f"test-{uuid.uuid4().hex[:8]}@localhost"
    log_path = tmp_path_factory.mktemp("worker") / "worker.log"
    celery_app.control.purge()  # nothing left over from an earlier run
    env = {**os.environ, "DATABASE_URL": _database_url(), "ETHAN_LOG_LEVEL": "INFO"}
    with log_path.open("w") as log:
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "ethan_site",
                "worker",
                "--pool",
                "solo",
                "--queues",
                "memory,channels",
                "--hostname",
                name,
                "--loglevel",
                "INFO",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + WORKER_START_SECONDS
    while not celery_app.control.ping(destination=[name], timeout=1.0):
        if worker.poll() is not None or time.monotonic() > deadline:
            worker.kill()
            pytest.fail(f"the Celery worker did not start:\n{log_path.read_text()[-3000:]}")
    yield worker
    worker.terminate()
    try:
        worker.wait(timeout=20)
    except subprocess.TimeoutExpired:
        worker.kill()


def wait_for(predicate, timeout: float = 30.0, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
