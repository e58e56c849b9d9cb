"""The first hour as the README walks it: the console, `ethan token` for a chat app,
`ethan password` for the pages, `ethan mcp` for an MCP host. With no name given anywhere,
every door is the same person (the console's user: ETHAN_USER, else the OS login name) and
sees the same memory."""

from __future__ import annotations

import re
import sqlite3
import sys
import urllib.parse

import openai
import pexpect
import pytest

from tests.conftest import ROOT, clean_env, run_ethan
from tests.mcp_client import over_stdio, structured
from tests.web_server import Server, migrated_home, web_server

# Who the OS says is logged in (getpass reads LOGNAME first): no ETHAN_USER, no --user.
LOGIN = {"LOGNAME": "ada"}
PASSWORD = "a flat white every morning"


def sign_in(server: Server, username: str, password: str) -> str:
    """/accounts/login/ as a browser fills it in; the session cookie it sets."""
    form = server.request("GET", "/accounts/login/")
    csrf_cookie = form.headers["Set-Cookie"].split(";", 1)[0]
    fields = urllib.parse.urlencode(
        {
            "username": username,
            "password": password,
            "csrfmiddlewaretoken": csrf_cookie.split("=", 1)[1],
        }
    )
    answer = server.request(
        "POST",
        "/accounts/login/",
        fields,
        {"Content-Type": "application/x-www-form-urlencoded", "Cookie": csrf_cookie},
    )
    assert answer.status == 302, answer.text
    return re.search(r"sessionid=[^;]+", answer.headers["Set-Cookie"])[0]


@pytest.mark.slow  # many `ethan` processes, 15-20 s: make test-slow (make test under 10 min)
def test_the_quickstart_is_one_person_at_every_door(tmp_path):
    home = migrated_home(tmp_path / "home", **LOGIN)
    console = run_ethan(
        [], home, stdin="remember that my favourite coffee is a flat white\n", **LOGIN
    )
    assert console.returncode == 0, console.stderr
    token = run_ethan(["token"], home, **LOGIN)
    assert token.returncode == 0, token.stderr
    password = run_ethan(["password"], home, stdin=f"{PASSWORD}\n", **LOGIN)
    assert (password.returncode, password.stdout) == (
        0,
        "Password set. Sign in at /accounts/login/ as ada.\n",
    )

    with web_server(home) as server:
        # A chat app: the /v1 base URL and that token.
        chat_app = openai.OpenAI(
            base_url=f"http://127.0.0.1:{server.port}/v1",
            api_key=token.stdout.strip(),
            max_retries=0,
        )
        answer = chat_app.chat.completions.create(
            model="ethan", messages=[{"role": "user", "content": "which coffee do I like?"}]
        )
        # 我的记忆, signed in with that password.
        cookie = sign_in(server, "ada", PASSWORD)
        memory_page = server.request("GET", "/memory/", headers={"Cookie": cookie})

    async def search(client):
        return await client.call_tool("memory_search", {"query": "flat white"})

    hits = structured(over_stdio(home, None, search, **LOGIN))["hits"]

    assert "flat white" in answer.choices[0].message.content
    assert memory_page.status == 200 and "flat white" in memory_page.text
    [fact] = [hit["content"] for hit in hits if hit["kind"] == "fact"]
    assert "favourite coffee is a flat white" in fact
    with sqlite3.connect(home / "ethan.sqlite3") as db:
        assert db.execute("SELECT username FROM auth_user").fetchall() == [("ada",)]


def password_prompt(args: list[str], home) -> pexpect.spawn:
    return pexpect.spawn(
        sys.executable,
        ["-m", "ethan_site.cli", "password", *args],
        cwd=str(ROOT),
        env=clean_env(home, **LOGIN),
        encoding="utf-8",
        timeout=30,
    )


def stored_password(home, username: str) -> str:
    with sqlite3.connect(home / "ethan.sqlite3") as db:
        [(password,)] = db.execute(
            "SELECT password FROM auth_user WHERE username = ?", (username,)
        ).fetchall()
    return password


def test_password_on_a_terminal_is_asked_twice_unseen(tmp_path):
    home = migrated_home(tmp_path / "home")
    differ = password_prompt(["--user", "grace"], home)
    differ.expect_exact("New password for grace: ")
    differ.sendline(PASSWORD)
    differ.expect_exact("The same again: ")
    differ.sendline(PASSWORD + "!")
    differ.expect(pexpect.EOF)
    differ.close()
    assert differ.exitstatus == 1
    # One line (red on a terminal), after the two prompts.
    shown = re.sub(r"\x1b\[[0-9;]*m", "", differ.before)
    assert shown.strip() == "ethan password: the two passwords differ; nothing changed"
    assert stored_password(home, "grace").startswith("!")  # still unusable: no password

    agreed = password_prompt(["--user", "grace"], home)
    agreed.expect_exact("New password for grace: ")
    agreed.sendline(PASSWORD)
    agreed.expect_exact("The same again: ")
    agreed.sendline(PASSWORD)
    agreed.expect(pexpect.EOF)
    agreed.close()
    assert agreed.exitstatus == 0
    assert agreed.before.strip() == "Password set. Sign in at /accounts/login/ as grace."
    assert PASSWORD not in differ.before + agreed.before  # never echoed
    assert stored_password(home, "grace").startswith("pbkdf2_sha256$")


def test_a_refused_password_is_one_line_and_changes_nothing(tmp_path):
    home = migrated_home(tmp_path / "home", **LOGIN)
    assert run_ethan(["password"], home, stdin=f"{PASSWORD}\n", **LOGIN).returncode == 0
    before = stored_password(home, "ada")
    refusals = {
        "": "the password is empty; nothing changed",
        "\n": "the password is empty; nothing changed",
        "short\n": "This password is too short. It must contain at least 8 characters. "
        "Nothing changed.",
        "password123\n": "This password is too common. Nothing changed.",
    }
    for stdin, message in refusals.items():
        refused = run_ethan(["password"], home, stdin=stdin, **LOGIN)
        assert (refused.returncode, refused.stdout, refused.stderr) == (
            1,
            "",
            f"ethan password: {message}\n",
        ), stdin
    assert stored_password(home, "ada") == before
