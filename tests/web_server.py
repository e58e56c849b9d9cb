"""Ethan's web server in a child process, as `make serve` runs it (`ethan serve`: the ASGI
application under uvicorn), for tests that must go over a real socket (hostile bodies, error
pages, throttling shared by several workers, streams cut off, a shutdown)."""

from __future__ import annotations

import atexit
import contextlib
import http.client
import json
import os
import shutil
import socket
import sqlite3
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from subprocess import STDOUT, Popen

from requests.structures import CaseInsensitiveDict

from tests.conftest import (
    ROOT,
    clean_env,
    end_group,
    run_ethan,
    run_in_group,
    run_manage,
    start_in_group,
)

START_SECONDS = 60


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Answer:
    status: int
    headers: CaseInsensitiveDict
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self):
        return json.loads(self.body)


@dataclass
class Server:
    port: int
    home: Path
    log_path: Path
    process: Popen

    def request(
        self,
        method: str,
        path: str,
        body: bytes | str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        if isinstance(body, str):
            body = body.encode()
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            # Refused before the body was all sent (413): its answer is waiting all the same.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                connection.request(method, path, body=body, headers=headers or {})
            response = connection.getresponse()
            # Header names as sent (uvicorn sends them in lower case), found whatever their case.
            headers = CaseInsensitiveDict(response.getheaders())
            return Answer(response.status, headers, response.read())
        finally:
            connection.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


# A database `migrate` made once in this test run, for each environment it was made with.
_MIGRATED: dict[frozenset[tuple[str, str]], Path] = {}


def migrated_home(home: Path, **env: str) -> Path:
    """An embedded home whose SQLite database has every table: a copy of one that `migrate`
    made once in this test run (with the same `env`), as migrating each home anew took about
    6 s of CPU a served test. The copy is made 0600 in a 0700 home, as Ethan makes them; the
    home's secret key is its own, made when its first process starts."""
    key = frozenset(env.items())
    if key not in _MIGRATED:
        template = Path(tempfile.mkdtemp(prefix="ethan-migrated-"))
        atexit.register(shutil.rmtree, template, ignore_errors=True)
        result = run_manage(["migrate", "--noinput", "-v", "0"], template, **env)
        assert result.returncode == 0, result.stderr
        _MIGRATED[key] = template / "ethan.sqlite3"
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.close(os.open(home / "ethan.sqlite3", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    # SQLite's backup: a consistent copy whatever the source's write-ahead log still holds.
    with (
        contextlib.closing(sqlite3.connect(_MIGRATED[key])) as source,
        contextlib.closing(sqlite3.connect(home / "ethan.sqlite3")) as copy,
    ):
        source.backup(copy)
    return home


def api_token(home: Path, name: str, **env: str) -> str:
    result = run_ethan(["token", name], home, **env)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


# What `ethan token NAME` does for each name (ethan_token), in one process.
_TOKENS = """
import json, sys
import django
django.setup()
from rest_framework.authtoken.models import Token
from sessions_app.services import local_user_get_or_create
users = [local_user_get_or_create(username=name) for name in sys.argv[1:]]
print(json.dumps([Token.objects.get_or_create(user=user)[0].key for user in users]))
"""


def api_tokens(home: Path, names: list[str], **env: str) -> list[str]:
    """The API tokens of several people on a migrated home, made in one process: a Django start
    each (`ethan token`) was most of a many-stream test's time on a busy machine."""
    result = run_in_group(
        [sys.executable, "-c", _TOKENS, *names],
        cwd=ROOT,
        env=clean_env(home, DJANGO_SETTINGS_MODULE="ethan_site.settings", **env),
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@contextlib.contextmanager
def web_server(home: Path, *, workers: int = 1, **env: str) -> Iterator[Server]:
    """`ethan serve` on a free loopback port, on `home`; stopped with SIGTERM at the end."""
    port = free_port()
    log_path = home / f"server-{port}.log"
    home.mkdir(parents=True, exist_ok=True)
    with log_path.open("w") as log:
        # A process group of its own: with --workers, uvicorn's supervisor and its workers are
        # all ended at the end, whatever the test did (end_group).
        process = start_in_group(
            [
                sys.executable,
                "manage.py",
                "ethan_serve",
                "--bind",
                f"127.0.0.1:{port}",
                "--workers",
                str(workers),
            ],
            cwd=ROOT,
            env=clean_env(home, **env),
            stdout=log,
            stderr=STDOUT,
        )
    server = Server(port=port, home=home, log_path=log_path, process=process)
    try:
        deadline = time.monotonic() + START_SECONDS
        while True:
            if process.poll() is not None:
                raise AssertionError(f"the server exited:\n{server.log()[-3000:]}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"the server did not start:\n{server.log()[-3000:]}"
                    ) from None
                time.sleep(0.1)
        yield server
    finally:
        end_group(process)  # SIGTERM, its graceful stop, then anything left is killed


@contextlib.contextmanager
def served_on_openai_fake(home: Path, fake, **env: str) -> Iterator[tuple[Server, str]]:
    """The web server on a migrated home of its own, its model the OpenAI fake `fake`, and an
    API token for the person "ada": (server, token)."""
    migrated_home(home)
    token = api_token(home, "ada")
    env = {"OPENAI_API_KEY": "test-key", "OPENAI_BASE_URL": f"{fake.url}/v1", **env}
    with web_server(home, **env) as server:
        yield server, token


def stored_contents(home: Path, role: str) -> list[str]:
    """The contents of a served home's messages with this role, in the order they were stored."""
    import sqlite3

    with sqlite3.connect(home / "ethan.sqlite3") as db:
        rows = db.execute(
            "SELECT content FROM sessions_app_message WHERE role = ? ORDER BY id", (role,)
        ).fetchall()
    return [content for (content,) in rows]
