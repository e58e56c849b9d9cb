"""Access logs hold paths, never query strings (what people search for is theirs): the server
as `make serve` and docker-compose run it, `ethan mcp --http` and Django's runserver, all of
which log through Python's logging. Each is a real server on a loopback port, its log read
after it stopped."""

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

from tests.conftest import ROOT, clean_env, end_group, start_in_group
from tests.web_server import api_token, free_port, migrated_home, web_server

SECRET = "secretword"


def serve_commands() -> dict[str, list[str]]:
    """The server command lines of `make serve` and docker-compose's web service."""
    recipe = re.search(r"^serve:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M)
    make = shlex.split(recipe.group(1).replace("\\\n", " ").replace("$(VENV)/bin/", ""))
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    web = shlex.split(compose["services"]["web"]["command"])[-1]  # sh -c "…"
    return {"make serve": make, "compose web": shlex.split(web.split("&&")[-1])}


def test_make_serve_and_compose_run_the_one_server():
    commands = serve_commands()
    assert commands["make serve"] == ["ethan", "serve"]
    assert commands["compose web"][:3] == ["python", "manage.py", "ethan_serve"]


def test_the_server_access_log_has_the_path_without_the_query(tmp_path):
    home = migrated_home(tmp_path / "home")
    token = api_token(home, "ada")
    with web_server(home) as server:
        search = server.request(
            "GET",
            f"/api/sessions?q={SECRET}",
            headers={"Authorization": f"Token {token}", "Referer": f"http://x/memory/?q={SECRET}"},
        )
        mcp = server.request("GET", f"/mcp?q={SECRET}")
    assert (search.status, mcp.status) == (200, 401)
    server.process.wait(timeout=30)  # stopped: its log is complete
    log = server.log()
    assert '"GET /api/sessions HTTP/1.1" 200' in log and '"GET /mcp HTTP/1.1" 401' in log, log
    assert SECRET not in log


@contextlib.contextmanager
def served(home: Path, argv: list[str], port: int):
    """A server process on `home`, its output in a file; yields the file's path once
    /healthz answers, and stops the server before the caller reads it."""
    log_path = home / f"server-{port}.log"
    with log_path.open("w") as log:
        process = start_in_group(
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
        end_group(process)


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
