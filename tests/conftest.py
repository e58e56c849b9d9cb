"""The cast shared by success and failure cases: an owner, a second owner, an outsider."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from sessions_app import services
from sessions_app.models import ChatSession, Message
from tests.lark_helpers import lark  # noqa: F401
from tests.llm_fixtures import fakes, llm_config, provider  # noqa: F401
from tests.signin_helpers import sign_in_clock  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True, scope="session")
def _keyword_search_by_default():
    """Tests search by words alone (the embedder off), in this process and in every process a
    test starts: loading the default embedder's weights takes seconds in each server process,
    and a ranking test should not change with it. Tests of memory found by meaning turn it on
    (the `embedder_on` fixture)."""
    import embedder

    os.environ["ETHAN_EMBEDDER"] = "off"
    embedder.configure(embedder="off")
    yield


@pytest.fixture
def embedder_on(settings):
    """The default embedder on, with its real weights (loaded once per test process, about
    2.5 s), for this test; off again afterwards."""
    import embedder
    from sessions_app import meaning

    settings.ETHAN_EMBEDDER = "default"
    embedder.configure(embedder="default")
    embedder.preload()
    meaning.messages_forget()  # vectors another test's owner (the same id) left held
    yield
    embedder.configure(embedder="off")
    meaning.messages_forget()


@pytest.fixture(scope="session")
def django_db_modify_db_settings():
    """On SQLite the tests' database is a file, as the product's is, not Django's default of a
    shared-cache database in memory. There a write by one thread fails at once, with "database
    table is locked", while another connection's statement is open on that table: a server's
    background thread (an import, the periodic work, consolidation after a response) racing the
    test's own reads failed at random. A file takes turns by its lock and waits (the `timeout`
    option), as it does for people. In memory's filesystem where there is one: a file's lock
    without a disk's writes. Each pytest-xdist worker has its own folder."""
    from django.conf import settings

    database = settings.DATABASES["default"]
    if database["ENGINE"] != "django.db.backends.sqlite3":
        yield
        return
    shm = Path("/dev/shm")
    folder = Path(tempfile.mkdtemp(prefix="ethan-tests-", dir=shm if shm.is_dir() else None))
    database.setdefault("TEST", {})["NAME"] = str(folder / "test.sqlite3")
    yield
    shutil.rmtree(folder, ignore_errors=True)  # with SQLite's -wal and -shm files


@pytest.fixture(autouse=True)
def _fresh_throttle_counts():
    """The throttles count in a shared cache (files under ETHAN_HOME, or Redis): each test
    starts with none of another test's requests counted."""
    from django.core.cache import cache

    cache.clear()


@pytest.fixture(autouse=True)
def _no_vectors_remembered():
    """Each test embeds as a new process does: none of the vectors another test's texts left
    remembered (embedder.client.REMEMBERED), which would spare its calls to a fake provider."""
    import embedder

    embedder.forget()


@pytest.fixture(autouse=True)
def _turns_admitted():
    """The process's turns (channels_app.turns.TURNS) as a server starting has them: admitting,
    none counted. A server a test ran in this process (the ASGI application under uvicorn in a
    thread) stops admitting when it shuts down, as a real one does before it exits."""
    from channels_app.turns import TURNS

    TURNS.admitting()
    yield


@pytest.fixture
def owner(db):
    return get_user_model().objects.create_user(username="ada")


@pytest.fixture
def other_owner(db):
    return get_user_model().objects.create_user(username="grace")


@pytest.fixture
def outsider(db):
    return get_user_model().objects.create_user(username="mallory")


@pytest.fixture
def make_session():
    """A persisted session with the given user/assistant lines, alternating from the user."""

    def make(owner, *lines: str, channel: str = ChatSession.Channel.CONSOLE) -> ChatSession:
        session = services.session_start(owner=owner, channel=channel)
        for index, line in enumerate(lines):
            role = Message.Role.USER if index % 2 == 0 else Message.Role.ASSISTANT
            services.message_append(session=session, role=role, content=line)
        return session

    return make


def clean_env(home: Path, **extra: str | None) -> dict[str, str]:
    """An environment for a child process on an embedded home of its own; an `extra` of None
    removes that variable (ETHAN_EMBEDDER=None: the product's default embedder)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key
        not in {
            "DATABASE_URL",
            "CELERY_BROKER_URL",
            "DJANGO_SETTINGS_MODULE",
            "DJANGO_DEBUG",
            "DJANGO_SECRET_KEY",
            "ETHAN_USER",
            "ETHAN_CACHE_URL",
        }
    }
    env["ETHAN_HOME"] = str(home)
    env.update((key, value) for key, value in extra.items() if value is not None)
    for key in [key for key, value in extra.items() if value is None]:
        env.pop(key, None)
    return env


def start_in_group(argv: list[str], **popen: Any) -> subprocess.Popen:
    """A child process in a process group (a session) of its own: end_group ends it with every
    process it started, so a test that fails or times out leaves nothing running."""
    return subprocess.Popen(argv, start_new_session=True, **popen)


def end_group(process: subprocess.Popen, *, grace_seconds: float = 20) -> None:
    """SIGTERM to `process` (its own way to stop, as a service manager would ask) and up to
    `grace_seconds` for it to exit, then SIGKILL to whatever is left of its group (a server's
    workers, a child a shell started) and of the processes it had started, however far down:
    a benchmark's servers and model run in sessions of their own, out of its group."""
    started_under = _descendants(process.pid)  # found now, while their parent is alive
    if process.poll() is None:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace_seconds)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    for pid in started_under:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    process.wait()
    # A signal is delivered when the kernel next runs its process: wait until each has ended
    # (gone, or a zombie for its new parent to reap), a guard of 30 s in case one cannot be.
    deadline = time.monotonic() + 30
    while any(process_running(pid) for pid in started_under) and time.monotonic() < deadline:
        time.sleep(0.01)


def process_running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _descendants(pid: int) -> list[int]:
    """The processes started under `pid`, children and theirs (Linux's /proc; none elsewhere)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()  # after "pid (command)"
        except OSError:
            continue  # it has just exited
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found: list[int] = []
    waiting = [pid]
    while waiting:
        for child in children.get(waiting.pop(), []):
            found.append(child)
            waiting.append(child)
    return found


def run_in_group(
    argv: list[str], *, input: str | None = None, timeout: float = 60, **popen: Any
) -> subprocess.CompletedProcess:
    """subprocess.run(capture_output=True, text=True) in a process group of its own, ended
    (children too) when it returns, fails or times out."""
    process = start_in_group(
        argv,
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )
    try:
        stdout, stderr = process.communicate(input, timeout=timeout)
    finally:
        end_group(process, grace_seconds=0)
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


def _run(argv: list[str], home: Path, stdin: str, extra: dict[str, str]):
    return run_in_group(argv, input=stdin, cwd=ROOT, env=clean_env(home, **extra))


def run_ethan(args: list[str], home: Path, stdin: str = "", **extra: str):
    """Run the `ethan` console script as a person would, in a child process."""
    return _run([sys.executable, "-m", "ethan_site.cli", *args], home, stdin, extra)


def run_manage(args: list[str], home: Path, stdin: str = "", **extra: str):
    return _run([sys.executable, "manage.py", *args], home, stdin, extra)


@pytest.fixture
def paced_openai():
    """An OpenAI fake of its own, for a served home (tests.web_server) to call."""
    from tests.fakes.openai_fake import FakeOpenAI

    fake = FakeOpenAI()
    yield fake
    fake.close()


@pytest.fixture
def api_for(db):
    """An API client that authenticates as `user` with a real token."""
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    def make(user):
        client = APIClient()
        token, _ = Token.objects.get_or_create(user=user)
        client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
        return client

    return make


@pytest.fixture
def tool_results_refused():
    """The database refuses to store a tool result (a trigger raising, as a full disk or a
    broken constraint would): a real database error in the middle of a tool step, after the
    tool itself has written its fact. Call it to lift the fault. SQLite and PostgreSQL."""
    if connection.vendor == "postgresql":
        install = [
            "CREATE FUNCTION ethan_test_refuse() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'the disk is full'; END $$",
            "CREATE TRIGGER ethan_test_refuse BEFORE INSERT ON sessions_app_message "
            "FOR EACH ROW WHEN (NEW.role = 'tool') EXECUTE FUNCTION ethan_test_refuse()",
        ]
        remove = [
            "DROP TRIGGER IF EXISTS ethan_test_refuse ON sessions_app_message",
            "DROP FUNCTION IF EXISTS ethan_test_refuse()",
        ]
    else:
        install = [
            "CREATE TRIGGER ethan_test_refuse BEFORE INSERT ON sessions_app_message "
            "WHEN NEW.role = 'tool' BEGIN SELECT RAISE(ABORT, 'the disk is full'); END"
        ]
        remove = ["DROP TRIGGER IF EXISTS ethan_test_refuse"]

    def run(statements: list[str]) -> None:
        with connection.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)

    run(remove)
    run(install)
    yield lambda: run(remove)
    run(remove)  # a trigger outlives a transactional test's flush: it must go
