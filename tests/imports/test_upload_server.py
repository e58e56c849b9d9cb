"""The memory page's upload over a real socket, to `ethan serve` as a person runs it (embedded,
SQLite): a generated export nested 40,000 deep (80 KB) is refused with its one line and writes
nothing, the server keeps its memory (on the landed code a 40 KB file took it from 221 MB to
1.2 GB, and kept it there), and an upload after it is imported."""

from __future__ import annotations

import json
import re
import sqlite3
import time

import requests

from tests.conftest import run_manage
from tests.imports.exports import claude
from tests.web_server import migrated_home, web_server

# The longest a run may take to finish here: a bound for a loop, not a measure of speed.
FINISH_SECONDS = 120


def peak_memory_kb(pid: int) -> int:
    """The process's peak resident memory (VmHWM), in kB."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


def signed_in(base: str) -> requests.Session:
    http = requests.Session()
    http.get(f"{base}/accounts/login/", timeout=30)
    form = {"username": "ada", "password": "pw", "csrfmiddlewaretoken": http.cookies["csrftoken"]}
    answer = http.post(f"{base}/accounts/login/", data=form, allow_redirects=False, timeout=30)
    assert answer.status_code == 302, answer.text[:500]
    return http


def uploaded(http: requests.Session, base: str, name: str, data: bytes) -> dict:
    """Upload through the page's form, then follow the run's status until it has finished."""
    page = http.get(f"{base}/memory/import/", timeout=30)
    known = set(re.findall(r'id="import-(\d+)"', page.text))
    answer = http.post(
        f"{base}/memory/import/",
        data={"source": "claude", "csrfmiddlewaretoken": http.cookies["csrftoken"]},
        files={"export": (name, data, "application/json")},
        allow_redirects=False,
        timeout=30,
    )
    assert answer.status_code == 302, answer.text[:500]
    page = http.get(f"{base}/memory/import/", timeout=30)
    (run_id,) = set(re.findall(r'id="import-(\d+)"', page.text)) - known
    deadline = time.monotonic() + FINISH_SECONDS
    while True:
        status = http.get(f"{base}/memory/import/{run_id}/status/", timeout=30).json()
        if status["finished"] or time.monotonic() > deadline:
            return status
        time.sleep(0.2)


def test_a_deep_upload_over_the_socket_is_refused_and_the_server_keeps_its_memory(tmp_path):
    home = migrated_home(tmp_path / "home")
    made = run_manage(
        [
            "shell",
            "-c",
            "from django.contrib.auth import get_user_model; "
            "get_user_model().objects.create_user('ada', password='pw')",
        ],
        home,
    )
    assert made.returncode == 0, made.stderr
    good = claude("u-1", "Home", [("human", "I live in Lisbon"), ("assistant", "Lovely")])
    text = json.dumps([good])
    deep = (text[:-2] + ', "junk": ' + "[" * 40_000 + "]" * 40_000 + "}]").encode()
    assert len(deep) < 90_000
    with web_server(home, ETHAN_MODEL="offline") as server:
        base = f"http://127.0.0.1:{server.port}"
        http = signed_in(base)
        before = peak_memory_kb(server.process.pid)
        refused = uploaded(http, base, "deep.json", deep)
        assert (refused["status"], refused["error"]) == (
            "failed",
            "deep.json: refused: nested deeper than 64 levels (no real export has one)",
        )
        grown_mb = (peak_memory_kb(server.process.pid) - before) / 1024
        assert grown_mb < 100, f"the server's peak memory grew {grown_mb:.0f} MB"
        assert requests.get(f"{base}/healthz", timeout=30).status_code == 200
        done = uploaded(http, base, "conversations.json", text.encode())
        assert (done["status"], done["sessions_created"]) == ("done", 1)
    with sqlite3.connect(home / "ethan.sqlite3") as db:
        titles = db.execute("SELECT title FROM sessions_app_chatsession").fetchall()
    assert titles == [("Home",)]
