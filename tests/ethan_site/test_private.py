"""$ETHAN_HOME is one person's: the folder 0700 and every file Ethan writes in it 0600, checked on
the real console script and a real Django process, as a person's machine has them."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pexpect

from ethan_shared.private import home_tighten
from tests.channels.test_terminal import PROMPT, spawn
from tests.conftest import run_ethan, run_manage

# A Django process with its database connection open, so SQLite's -wal and -shm are there too,
# and an entry in the file cache (the throttles'), listing every entry of the home with its mode.
LIST_OPEN = (
    "import os, stat\n"
    "from django.conf import settings\n"
    "from django.core.cache import cache\n"
    "from django.db import connection\n"
    "cache.set('throttle', 1)\n"
    "with connection.cursor() as cursor:\n"
    "    cursor.execute('UPDATE auth_user SET last_name = last_name')\n"
    "    for root, dirs, files in os.walk(settings.ETHAN_HOME):\n"
    "        for name in [root, *(os.path.join(root, f) for f in files)]:\n"
    "            print(os.path.relpath(name, settings.ETHAN_HOME), "
    "oct(stat.S_IMODE(os.lstat(name).st_mode)))\n"
)


def modes(folder: Path) -> dict[str, int]:
    """Every folder and file under `folder` (itself as "."), with its permission bits."""
    found = {}
    for root, _dirs, files in os.walk(folder):
        for path in [Path(root), *(Path(root) / name for name in files)]:
            found[str(path.relative_to(folder))] = stat.S_IMODE(path.lstat().st_mode)
    return found


def test_a_fresh_home_is_private_after_a_turn(tmp_path):
    home = tmp_path / "home"
    turn = run_ethan(["--user", "ada"], home, stdin="remember the milk\n")
    assert turn.returncode == 0, turn.stderr
    assert "Ethan: made" not in turn.stderr  # created private: nothing to tighten
    listed = run_manage(["shell", "-v", "0", "-c", LIST_OPEN], home)
    assert listed.returncode == 0, listed.stderr
    seen = dict(line.split() for line in listed.stdout.splitlines())
    assert {"ethan.sqlite3", "ethan.sqlite3-wal", "ethan.sqlite3-shm", "secret_key"} <= set(seen)
    # One process's throttle counts are in its memory; the files of several processes' are
    # checked in tests/ethan_site/test_security.py.
    folders = {name for name in seen if (home / name).is_dir()}
    assert {seen[name] for name in folders} == {"0o700"}, seen
    assert {seen[name] for name in seen.keys() - folders} == {"0o600"}, seen


def test_the_console_history_is_owner_only(tmp_path):
    console = spawn(["--user", "ada"], tmp_path)
    console.expect(PROMPT)
    console.send("/exit\r")
    console.expect(pexpect.EOF)
    console.close()
    assert console.exitstatus == 0
    assert stat.S_IMODE((tmp_path / "history").stat().st_mode) == 0o600


def test_an_open_home_is_tightened_once_with_one_line(tmp_path):
    home = tmp_path / "home"
    assert run_ethan(["--user", "ada"], home, stdin="remember the milk\n").returncode == 0
    # As an older Ethan (or a hand) left it: readable by every account on the machine.
    for folder in ["memory", "cache"]:
        (home / folder).mkdir(exist_ok=True)  # the cache may be there already
    (home / "memory/facts.json").write_text("[]")
    (home / "cache/0a1b.djcache").write_bytes(b"")
    (home / "notes.txt").write_text("not Ethan's")
    for path in [home, home / "memory", home / "cache"]:
        path.chmod(0o755)
    for name in ["ethan.sqlite3", "secret_key", "memory/facts.json", "cache/0a1b.djcache"]:
        (home / name).chmod(0o644)
    (home / "notes.txt").chmod(0o644)

    first = run_ethan(["session", "--user", "ada", "list"], home)
    assert first.returncode == 0, first.stderr
    assert first.stderr.splitlines() == [
        f"Ethan: made {home} and 2 folders in it private (0700) and 4 files in it owner-only (0600)"
    ]
    found = modes(home)
    assert found.pop("notes.txt") == 0o644  # another program's file is left as it was
    assert {found[name] for name in [".", "memory", "cache"]} == {0o700}
    assert {mode for name, mode in found.items() if not (home / name).is_dir()} == {0o600}

    again = run_ethan(["session", "--user", "ada", "list"], home)
    assert again.returncode == 0 and again.stderr == ""


def test_home_tighten_names_the_files_of_a_private_home(tmp_path):
    (tmp_path / "history").write_text("hello\n")
    (tmp_path / "history").chmod(0o640)
    tmp_path.chmod(0o700)
    assert home_tighten(tmp_path) == f"Ethan: made 1 file in {tmp_path} owner-only (0600)"
    assert home_tighten(tmp_path) is None
    assert home_tighten(tmp_path / "missing") is None


def test_an_export_is_owner_only(tmp_path):
    home = tmp_path / "home"
    assert run_ethan(["--user", "ada"], home, stdin="I like flat whites\n").returncode == 0
    out = tmp_path / "out"
    exported = run_ethan(["export", "--home", str(out), "--user", "ada"], home)
    assert exported.returncode == 0, exported.stderr
    found = modes(out)
    assert {"sessions.db", "memory/facts.json", "memory/user_profile.md"} <= set(found)
    assert found.pop(".") == found.pop("memory") == 0o700
    assert set(found.values()) == {0o600}, found

    # --force over a layout file someone left readable: it is written owner-only again.
    (out / "memory/facts.json").chmod(0o644)
    forced = run_ethan(["export", "--home", str(out), "--user", "ada", "--force"], home)
    assert forced.returncode == 0, forced.stderr
    assert stat.S_IMODE((out / "memory/facts.json").stat().st_mode) == 0o600
    assert json.loads((out / "memory/facts.json").read_text()) is not None
