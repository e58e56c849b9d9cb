"""Hostile requests over a real socket (the web server, as `make serve` runs it), with debug on and
off: no secret in any answer, JSON errors on every machine-facing URL, nothing written."""

from __future__ import annotations

import json
import sqlite3
import stat

import pytest

from channels_app.lark.crypto import signature
from tests.web_server import api_token, migrated_home, web_server

# Every kind of secret the server holds, configured the way an operator would.
SECRETS = {
    "DJANGO_SECRET_KEY": "django-secret-key-for-the-test-0123456789abcdefghijklmnop",
    "LARK_APP_SECRET": "lark-app-secret-5b1e9c",
    "LARK_ENCRYPT_KEY": "lark-encrypt-key-77aa0f",
    "LARK_VERIFICATION_TOKEN": "lark-verify-token-31c4d2",
    "OPENAI_API_KEY": "sk-test-openai-key-9f8e7d6c",
    "ANTHROPIC_API_KEY": "sk-ant-test-key-1a2b3c4d",
    "GEMINI_API_KEY": "gemini-test-key-5e6f7a8b",
}
BROKER_PASSWORD = "broker-password-4242"
# Port 1: no broker listens, so nothing is published; the URL's password is what matters.
BROKER_URL = f"redis://:{BROKER_PASSWORD}@127.0.0.1:1/0"
SECRET_VALUES = [*SECRETS.values(), BROKER_PASSWORD]
DEEP = "[" * 50_000 + "]" * 50_000


def assert_no_secret(answer) -> None:
    seen = answer.text + json.dumps(dict(answer.headers))
    leaked = [value for value in SECRET_VALUES if value in seen]
    assert leaked == [], f"{answer.status}: leaked {leaked}"


def signed(body: str) -> dict[str, str]:
    """Headers that make `body` a request Lark itself signed, now."""
    import time

    stamp = str(int(time.time()))
    return {
        "Content-Type": "application/json",
        "X-Lark-Request-Timestamp": stamp,
        "X-Lark-Request-Nonce": "n1",
        "X-Lark-Signature": signature(stamp, "n1", SECRETS["LARK_ENCRYPT_KEY"], body.encode()),
    }


JSON = {"Content-Type": "application/json"}


@pytest.mark.parametrize("debug", ["1", "0"])
def test_no_secret_in_any_error_answer_with_debug_on_and_off(tmp_path, debug):
    """A database without its tables makes real 500s (the login form) and 503s (the API);
    the webhook gets the shapes that used to reach Django's debug page."""
    env = {**SECRETS, "CELERY_BROKER_URL": BROKER_URL, "DJANGO_DEBUG": debug}
    with web_server(tmp_path / "home", **env) as server:
        login_page = server.request("GET", "/accounts/login/")
        cookie = login_page.headers["Set-Cookie"].split(";", 1)[0]
        csrf = cookie.split("=", 1)[1]
        crashed = server.request(
            "POST",
            "/accounts/login/",
            f"username=ada&password=pw&csrfmiddlewaretoken={csrf}",
            {"Content-Type": "application/x-www-form-urlencoded", "Cookie": cookie},
        )
        answers = {
            "login": crashed,
            "header x": server.request("POST", "/lark/webhook", '{"header":"x"}', JSON),
            "header x signed": server.request(
                "POST", "/lark/webhook", '{"header":"x"}', signed('{"header":"x"}')
            ),
            "deep": server.request("POST", "/lark/webhook", DEEP, JSON),
            "deep signed": server.request("POST", "/lark/webhook", DEEP, signed(DEEP)),
            "get webhook": server.request("GET", "/lark/webhook"),
            "api db down": server.request(
                "POST", "/api/chat", '{"message":"hi"}', {**JSON, "Authorization": "Token x"}
            ),
            "api unknown id": server.request("GET", "/api/facts/abc"),
            "api 10 MB": server.request("POST", "/api/chat", b"{" + b" " * 10_000_000 + b"}", JSON),
            "not found": server.request("GET", "/no/such/page"),
        }
    # The 500 is real and is the page debug asks for: the test cannot pass by not crashing.
    assert crashed.status == 500
    if debug == "1":
        assert "OperationalError" in crashed.text and "Traceback" in crashed.text
        assert "CELERY_BROKER_URL" in crashed.text  # the settings are listed, masked
    for name, answer in answers.items():
        assert_no_secret(answer)
        if name not in ("login", "not found"):
            assert answer.headers["Content-Type"] == "application/json", name
            assert isinstance(answer.json()["detail"], str), name
    statuses = {name: answer.status for name, answer in answers.items()}
    assert statuses == {
        "login": 500,
        "header x": 401,
        "header x signed": 400,
        "deep": 401,
        "deep signed": 400,
        "get webhook": 405,
        "api db down": 503,
        "api unknown id": 404,
        "api 10 MB": 413,
        "not found": 404,
    }
    assert answers["get webhook"].headers["Allow"] == "POST"


def _counts(home) -> dict[str, int]:
    with sqlite3.connect(home / "ethan.sqlite3") as db:
        return {
            table: db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in (
                "sessions_app_chatsession",
                "sessions_app_message",
                "memory_app_fact",
                "memory_app_procedure",
                "profile_app_profilesection",
            )
        }


@pytest.mark.parametrize("debug", ["1", "0"])
def test_deeply_nested_json_on_every_write_endpoint_is_400_and_writes_nothing(tmp_path, debug):
    home = migrated_home(tmp_path / "home")
    token = api_token(home, "ada")
    auth = {**JSON, "Authorization": f"Token {token}"}
    with web_server(home, DJANGO_DEBUG=debug) as server:
        fact = server.request("POST", "/api/facts", '{"content": "likes tea"}', auth).json()
        before = _counts(home)
        answers = [
            server.request(method, path, DEEP, auth)
            for method, path in [
                ("POST", "/api/chat"),
                ("POST", "/api/facts"),
                ("PATCH", f"/api/facts/{fact['id']}"),
                ("POST", "/api/procedures"),
                ("PUT", "/api/profile"),
                ("PATCH", "/api/profile/sections/goals"),
            ]
        ]
    assert [(a.status, a.json()) for a in answers] == [
        (400, {"detail": "the JSON is nested too deeply"})
    ] * 6
    assert _counts(home) == before


def test_the_api_throttle_is_shared_by_every_server_process(tmp_path):
    """Three workers at 10/min: 10 requests through, not 10 per worker (the file cache
    here; the services suite runs the same on Redis)."""
    home = migrated_home(tmp_path / "home")
    token = api_token(home, "ada")
    with web_server(home, workers=3, ETHAN_API_RATE="10/min") as server:
        statuses = [
            server.request("GET", "/api/facts", headers={"Authorization": f"Token {token}"}).status
            for _ in range(40)
        ]
    assert (statuses.count(200), statuses.count(429)) == (10, 30)
    # The counts' files are the owner's alone, as everything in the home.
    cache = home / "cache"
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert {stat.S_IMODE(f.stat().st_mode) for f in cache.iterdir()} == {0o600}


def test_one_server_process_counts_the_api_rate_in_its_memory(tmp_path):
    """`ethan serve`'s default, one process: the counts are the process's own, exact, and no
    file is written for them."""
    home = migrated_home(tmp_path / "home")
    token = api_token(home, "ada")
    with web_server(home, ETHAN_API_RATE="10/min") as server:
        statuses = [
            server.request("GET", "/api/facts", headers={"Authorization": f"Token {token}"}).status
            for _ in range(15)
        ]
    assert (statuses.count(200), statuses.count(429)) == (10, 5)
    assert not (home / "cache").exists()


@pytest.mark.parametrize(
    ("processes", "backend"),
    [("1", "LocMemCache"), ("2", "HomeFileCache"), ("3", "HomeFileCache")],
)
def test_the_embedded_cache_is_the_process_when_it_serves_alone(tmp_path, processes, backend):
    """Counts shared by every process that serves the port: in memory with one, in files with
    more (the test above this one's neighbour counts across three)."""
    import subprocess
    import sys

    from tests.conftest import ROOT, clean_env

    shown = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings; "
            "print(settings.CACHES['default']['BACKEND'])",
        ],
        cwd=ROOT,
        env=clean_env(
            tmp_path,
            DJANGO_SETTINGS_MODULE="ethan_site.settings",
            ETHAN_SERVE_PROCESSES=processes,
        ),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert shown.stdout.strip().endswith(f".{backend}")


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("ETHAN_API_RATE", "lots", "expected a rate such as 600/min"),
        ("ETHAN_LOGIN_RATE", "5/fortnight", "expected a rate such as 600/min"),
        ("ETHAN_MEMORY_HOT_SIZE", "0", "must be at least 1"),
        ("ETHAN_TIME_ZONE", "Mars/Olympus", "unknown time zone"),
        ("ETHAN_LOG_LEVEL", "loud", "use DEBUG or INFO"),
        ("ETHAN_MODEL", "llama-7b", "unknown model"),
        ("ETHAN_CACHE_URL", "memcached://x", "use a redis:// URL"),
    ],
)
def test_a_bad_setting_stops_the_server_with_one_line(tmp_path, name, value, says):
    import sys

    from tests.conftest import ROOT, clean_env, run_in_group

    result = run_in_group(
        [sys.executable, "manage.py", "ethan_serve", "--bind", "127.0.0.1:0"],
        cwd=ROOT,
        env=clean_env(tmp_path, **{name: value}),
    )
    assert result.returncode == 1
    [line] = [line for line in result.stderr.splitlines() if "configuration error" in line]
    assert line.startswith(f"ethan: configuration error: {name} from environment variable")
    assert says in line
    assert "Traceback" not in result.stderr
