"""Fixtures of the doors' tests that talk to the live server through the openai SDK."""

from __future__ import annotations

import openai
import pytest
from rest_framework.authtoken.models import Token

from tests.live_client import server_activity, settling_client


@pytest.fixture
def activity(live_server):
    with server_activity() as activity:
        yield activity


@pytest.fixture
def client_for(live_server, activity):
    """An openai SDK client on the live server with the person's Ethan API token as its key
    (its HTTP client waits for the server to finish each request: tests.live_client)."""

    def make(user, **options) -> openai.OpenAI:
        token, _ = Token.objects.get_or_create(user=user)
        options.setdefault("max_retries", 0)
        return openai.OpenAI(
            base_url=f"{live_server.url}/v1",
            api_key=token.key,
            http_client=settling_client(activity, timeout=30),
            **options,
        )

    return make
