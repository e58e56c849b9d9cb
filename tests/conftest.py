"""The cast shared by success and failure cases: an owner, a second owner, an outsider."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

from sessions_app import services
from sessions_app.models import ChatSession, Message
from tests.lark_helpers import lark  # noqa: F401
from tests.llm_fixtures import fakes, llm_config, provider  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent


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


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """An environment for a child process on an embedded home of its own."""
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
        }
    }
    env["ETHAN_HOME"] = str(home)
    env.update(extra)
    return env


def _run(argv: list[str], home: Path, stdin: str, extra: dict[str, str]):
    return subprocess.run(
        argv,
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=clean_env(home, **extra),
        timeout=60,
    )


def run_ethan(args: list[str], home: Path, stdin: str = "", **extra: str):
    """Run the `ethan` console script as a person would, in a child process."""
    return _run([sys.executable, "-m", "ethan_site.cli", *args], home, stdin, extra)


def run_manage(args: list[str], home: Path, stdin: str = "", **extra: str):
    return _run([sys.executable, "manage.py", *args], home, stdin, extra)


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
