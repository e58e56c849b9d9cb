import os
import re
import shlex
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from ethan_site.cli import SUBCOMMANDS, USAGE, route
from tests.conftest import ROOT, clean_env, run_ethan, run_in_group
from tests.web_server import migrated_home


def test_route_speaks_the_original_cli():
    assert route([]) == ["ethan_chat"]
    assert route(["-r", "last"]) == ["ethan_chat", "-r", "last"]
    assert route(["-r", "d139", "--mode", "陪伴"]) == ["ethan_chat", "-r", "d139", "--mode", "陪伴"]
    assert route(["chat", "--model", "offline"]) == ["ethan_chat", "--model", "offline"]
    assert route(["session", "list"]) == ["ethan_session", "list"]
    assert route(["session", "delete", "d139", "--yes"]) == [
        "ethan_session",
        "delete",
        "d139",
        "--yes",
    ]
    assert route(["import", "--home", "/x"]) == ["ethan_import", "--home", "/x"]
    assert route(["manage", "migrate"]) == ["migrate"]


def test_ethan_migrates_a_fresh_home_and_resumes(tmp_path):
    first = run_ethan(["--user", "ada"], tmp_path, stdin="remember the milk\n")
    assert first.returncode == 0, first.stderr
    assert (tmp_path / "ethan.sqlite3").exists()
    again = run_ethan(["-r", "last", "--user", "ada"], tmp_path, stdin="/exit\n")
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("Resumed s_")
    assert "  user: remember the milk" in again.stdout
    unknown = run_ethan(["-r", "nope", "--user", "ada"], tmp_path)
    assert (unknown.returncode, unknown.stderr) == (1, "ethan: no session matches 'nope'\n")


def test_ethan_help_lists_every_subcommand_on_a_line_of_its_own(tmp_path):
    shown = run_ethan(["--help"], tmp_path)
    assert (shown.returncode, shown.stderr) == (0, "")
    assert shown.stdout.splitlines()[0] == USAGE
    listed = {}
    for line in shown.stdout.splitlines():
        # "    ethan import|export [--home DIR]   from or to …": each word, and what it does.
        found = re.match(r"\s+ethan ([a-z|-]+)\s.*?\s{3,}(\S.*)", line)
        if found:
            listed.update(dict.fromkeys(found[1].split("|"), found[2]))
    assert set(listed) >= {*SUBCOMMANDS, "manage", "--version"}
    assert "--user NAME" in shown.stdout


def test_ethan_version_is_the_installed_packages(tmp_path):
    shown = run_ethan(["--version"], tmp_path)
    assert (shown.returncode, shown.stdout, shown.stderr) == (0, f"ethan {version('ethan')}\n", "")


# The `ethan` script this interpreter's environment installed (.venv/bin/ethan).
SCRIPT = Path(sys.executable).parent / "ethan"
NO_VENV_PATH = os.pathsep.join(
    folder for folder in os.environ["PATH"].split(os.pathsep) if Path(folder) != SCRIPT.parent
)


def at_the_shell(command: list[str], home: Path, stdin: str, cwd: Path = ROOT, **env: str):
    """Run a command as typed at a shell whose person is "ada" (ETHAN_USER), on `home`."""
    environment = clean_env(home, ETHAN_USER="ada", **env)
    return run_in_group(command, input=stdin, cwd=cwd, env=environment)


def resume_hint(home: Path, **env: str) -> str:
    """Start the console through the `ethan` script, say one thing, and return the command
    its goodbye line gives for coming back."""
    ran = at_the_shell([str(SCRIPT)], home, "hello\n", **env)
    assert ran.returncode == 0, ran.stderr
    return ran.stdout.splitlines()[-1].split("Resume with: ", 1)[1]


def resumes(home: Path, command: str, **env: str) -> bool:
    ran = at_the_shell(shlex.split(command), home, "/exit\n", **env)
    return ran.returncode == 0 and ran.stdout.startswith("Resumed s_")


def test_the_resume_hint_is_a_command_that_works_here(tmp_path):
    migrated_home(tmp_path)  # a fresh home's preparation is test_ethan_migrates_a_fresh_home…
    # The venv is not on PATH: the script's own path.
    hint = resume_hint(tmp_path, PATH=NO_VENV_PATH)
    session_id = hint.rsplit(" ", 1)[1]
    assert hint == f"{SCRIPT.resolve()} -r {session_id}"
    assert resumes(tmp_path, hint, PATH=NO_VENV_PATH)
    # It is (an activated venv, or pipx): the short command.
    on_path = f"{SCRIPT.parent}{os.pathsep}{NO_VENV_PATH}"
    hint = resume_hint(tmp_path, PATH=on_path)
    assert hint == f"ethan -r {hint.rsplit(' ', 1)[1]}"
    assert resumes(tmp_path, hint, PATH=on_path)


def test_the_resume_hint_after_make_chat_is_make_chat(tmp_path):
    migrated_home(tmp_path)
    make = {"PATH": NO_VENV_PATH, "ETHAN_STARTED_BY": "make"}
    hint = resume_hint(tmp_path, PWD=str(ROOT), **make)
    session_id = hint.split('"-r ', 1)[1].rstrip('"')
    assert hint == f'make chat ARGS="-r {session_id}"'
    # make would run the console with those words (-n: say it, do not run it).
    # Outside the make running this suite (its MAKELEVEL would add "Entering directory").
    outside = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    planned = subprocess.run(
        [*shlex.split(hint.replace("make", "make -n", 1))],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=outside,
    )
    assert (
        planned.stdout.splitlines()[-1] == f"ETHAN_STARTED_BY=make .venv/bin/ethan -r {session_id}"
    )
    # `make -C ~/ethan chat` from another folder: the hint says which folder.
    hint = resume_hint(tmp_path, PWD=str(tmp_path), **make)
    assert hint == f'make -C {ROOT} chat ARGS="-r {hint.split(chr(34) + "-r ", 1)[1]}'


def test_ethan_import_and_export_from_the_console_script(tmp_path):
    import json

    source = tmp_path / "old"
    (source / "memory").mkdir(parents=True)
    (source / "memory/facts.json").write_text(json.dumps([{"content": "用户喜欢美式咖啡"}]))
    home = migrated_home(tmp_path / "home")
    imported = run_ethan(["import", "--home", str(source), "--user", "ada"], home)
    assert imported.returncode == 0, imported.stderr
    assert "facts: 1 new" in imported.stdout
    exported = run_ethan(["export", "--home", str(tmp_path / "out"), "--user", "ada"], home)
    assert exported.returncode == 0, exported.stderr
    facts = json.loads((tmp_path / "out/memory/facts.json").read_text())
    assert [f["content"] for f in facts] == ["用户喜欢美式咖啡"]
    refused = run_ethan(["import", "--home", str(tmp_path / "nowhere")], home)
    assert refused.returncode == 1 and "is not a folder" in refused.stderr


# What only Django's manage.py should show: its options and its name for an error.
DJANGO_WORDS = ("--settings", "--pythonpath", "--traceback", "--skip-checks", "CommandError")


def test_ethan_usage_errors_read_as_one_program_and_write_nothing(tmp_path):
    home = tmp_path / "home"  # a fresh install: no ~/.ethan yet
    mistakes = {
        ("bogus",): f"{USAGE}\nethan: error: 'bogus' is not a command (ethan --help lists them)\n",
        ("--bogus",): "usage: ethan [-h] [-r ID] [--model MODEL] [--mode MODE] [--user USER]\n"
        "ethan: error: unrecognized arguments: --bogus\n",
        ("serve", "--workers", "two"): "usage: ethan serve [-h] [--bind BIND] [--workers WORKERS]\n"
        "ethan serve: error: argument --workers: invalid int value: 'two'\n",
        ("serve", "--workers", "0"): "usage: ethan serve [-h] [--bind BIND] [--workers WORKERS]\n"
        "ethan serve: error: argument --workers: must be at least 1\n",
        (
            "serve",
            "--bind",
            "nonsense",
        ): "usage: ethan serve [-h] [--bind BIND] [--workers WORKERS]\n"
        "ethan serve: error: argument --bind: must be HOST:PORT, not 'nonsense'\n",
        ("session", "bogus"): "usage: ethan session [-h] [--user USER] ACTION ...\n"
        "ethan session: error: argument ACTION: invalid choice: 'bogus' "
        "(choose from 'list', 'show', 'delete', 'search')\n",
    }
    for argv, message in mistakes.items():
        shown = run_ethan(list(argv), home)
        assert (shown.returncode, shown.stdout, shown.stderr) == (2, "", message), argv
    assert not home.exists()


@pytest.mark.slow  # many `ethan` processes, 15-20 s: make test-slow (make test under 10 min)
def test_ethan_command_help_is_its_own_and_writes_nothing(tmp_path):
    home = tmp_path / "home"
    for word in ("chat", "serve", "session", "token", "import", "mcp"):
        shown = run_ethan([word, "--help"], home)
        assert (shown.returncode, shown.stderr) == (0, ""), word
        assert shown.stdout.startswith(f"usage: ethan {word} [-h]"), shown.stdout
        assert not any(django in shown.stdout for django in DJANGO_WORDS), shown.stdout
    shown = run_ethan(["serve", "--version"], home)
    assert (shown.returncode, shown.stdout) == (0, f"ethan {version('ethan')}\n")
    assert not home.exists()
    # The same words do their work once they are right: the home is made and migrated then.
    made = run_ethan(["token", "ada"], home)
    assert made.returncode == 0, made.stderr
    assert {"ethan.sqlite3", "secret_key"} <= {path.name for path in home.iterdir()}
