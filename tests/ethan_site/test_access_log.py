"""Access logs hold paths, never query strings (what people search for is theirs): gunicorn as
`make serve` and docker-compose run it, and the servers that log through Python's logging
(uvicorn under `ethan mcp --http`, Django's runserver). Each is a real server on a loopback
port, its log read after it stopped."""

from __future__ import annotations

import contextlib
import http.client
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, clean_env
from tests.gunicorn_server import api_token, free_port, gunicorn, migrated_home

SECRET = "secretword"


def gunicorn_argv(command: str) -> list[str]:
    argv = shlex.split(command)
    return argv[argv.index("gunicorn") :]


def serve_commands() -> dict[str, list[str]]:
    """The gunicorn command lines of `make serve` and docker-compose's web service."""
    recipe = re.search(r"^serve:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M)
    make = gunicorn_argv(recipe.group(1).replace("\\\n", " ").replace("$(VENV)/bin/", ""))
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    web = shlex.split(compose["services"]["web"]["command"])[-1]  # sh -c "…"
    return {"make serve": make, "compose web": gunicorn_argv(web.split("&&")[-1])}


def test_make_serve_and_compose_run_gunicorn_on_the_project_config():
    for name, argv in serve_commands().items():
        assert argv[argv.index("--config") + 1] == "gunicorn.conf.py", name
        assert argv[argv.index("--access-logfile") + 1] == "-", name
    # The image holds the file, where compose's command (in WORKDIR /app) finds it.
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^COPY .*\bgunicorn\.conf\.py\b.* \./$", dockerfile, re.M)


def test_gunicorn_access_log_has_the_path_without_the_query(tmp_path):
    home = migrated_home(tmp_path / "home")
    token = api_token(home, "ada")
    # The flag `make serve` and compose add to the config both use (checked above).
    with gunicorn(home, GUNICORN_CMD_ARGS="--access-logfile -") as server:
        search = server.request(
            "GET",
            f"/api/sessions?q={SECRET}",
            headers={"Authorization": f"Token {token}", "Referer": f"http://x/memory/?q={SECRET}"},
        )
    assert search.status == 200
    log = server.log()
    assert re.search(r'"GET /api/sessions HTTP/1\.1" 200 \d+ \d+ms', log), log[-2000:]
    assert SECRET not in log


@contextlib.contextmanager
def served(home: Path, argv: list[str], port: int):
    """A server process on `home`, its output in a file; yields the file's path once
    /healthz answers, and stops the server before the caller reads it."""
    log_path = home / f"server-{port}.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            argv, cwd=ROOT, env=clean_env(home), stdout=log, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                get(port, "/healthz")
                break
            except OSError:
                assert process.poll() is None, log_path.read_text()[-3000:]
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.2)
        yield log_path
    finally:
        process.terminate()
        process.wait(timeout=20)


def get(port: int, path: str) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", path, headers={"Host": "localhost"})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


@pytest.mark.parametrize("server", ["ethan mcp --http", "runserver"])
def test_python_logged_access_log_has_the_path_without_the_query(tmp_path, server):
    home = migrated_home(tmp_path / "home")
    port = free_port()
    address = f"127.0.0.1:{port}"
    argv = {
        "ethan mcp --http": ["-m", "ethan_site.cli", "mcp", "--http", "--bind", address],
        "runserver": ["manage.py", "runserver", "--noreload", address],
    }[server]
    with served(home, [sys.executable, *argv], port) as log_path:
        statuses = [get(port, f"/healthz?q={SECRET}"), get(port, f"/mcp?q={SECRET}&x=1")]
    log = log_path.read_text()
    assert statuses[0] == 200
    assert "GET /healthz HTTP/1.1" in log and "GET /mcp HTTP/1.1" in log, log[-2000:]
    assert SECRET not in log
