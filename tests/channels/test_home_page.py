"""The home page (/) through Django's test client: a signed-in person's links, URLs and own
token; everyone else sent to sign in; the header every page shares."""

from __future__ import annotations

import html
import re
import shlex

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.authtoken.models import Token

from channels_app.home_page import ethan_command

pytestmark = pytest.mark.django_db


def client_for(user) -> Client:
    client = Client()
    client.force_login(user, backend="django.contrib.auth.backends.ModelBackend")
    return client


def shown(page: str, element_id: str) -> str:
    """The text of the element with this id, unescaped (as the browser shows it)."""
    found = re.search(rf'id="{element_id}"[^>]*>(.*?)</', page, re.S)
    assert found, element_id
    return html.unescape(found[1])


def test_home_page_shows_the_places_and_how_to_connect(owner, settings):
    settings.ETHAN_MCP_BIND = "127.0.0.1:8123"  # `ethan mcp --http`, not the site's /mcp
    page = client_for(owner).get("/")

    assert page.status_code == 200
    assert page.templates[0].name == "channels_app/home.html"
    text = page.text
    assert 'id="link-memory" href="/memory/"' in text
    assert 'id="link-profile" href="/profile/"' in text
    assert 'id="link-api-docs" href="/api/docs"' in text
    token = Token.objects.get(user=owner).key  # made on first use
    ethan = shlex.quote(ethan_command())
    assert {
        name: shown(text, name)
        for name in (
            "token",
            "token-reset-command",
            "chat-base-url",
            "mcp-url",
            "mcp-http-command",
            "mcp-stdio-command",
        )
    } == {
        "token": token,
        "token-reset-command": f"{ethan} token ada --reset",
        "chat-base-url": "http://testserver/v1",
        "mcp-url": "http://testserver/mcp",
        "mcp-http-command": (
            "claude mcp add --transport http ethan http://testserver/mcp "
            f"--header 'Authorization: Bearer {token}'"
        ),
        "mcp-stdio-command": f"claude mcp add ethan -- {ethan} mcp --user ada",
    }
    assert "<code>ethan</code>" in text  # the model to choose


def test_home_page_urls_follow_the_host_the_person_came_by(owner, settings):
    settings.ALLOWED_HOSTS = ["ethan.example"]
    page = client_for(owner).get("/", HTTP_HOST="ethan.example:8000", secure=True).text
    assert shown(page, "chat-base-url") == "https://ethan.example:8000/v1"
    assert shown(page, "mcp-url") == "https://ethan.example:8000/mcp"


def test_home_page_shows_each_person_their_own_token(owner, other_owner):
    theirs = Token.objects.create(user=other_owner).key
    mine = Token.objects.create(user=owner).key
    client = client_for(owner)

    first, again = client.get("/").text, client.get("/").text

    assert shown(first, "token") == mine and shown(again, "token") == mine
    assert theirs not in first
    assert Token.objects.filter(user=owner).count() == 1  # kept, not made again
    assert shown(client_for(other_owner).get("/").text, "token") == theirs


def test_home_page_is_never_cached(owner):
    response = client_for(owner).get("/")
    assert "no-store" in response["Cache-Control"] and "private" in response["Cache-Control"]


def test_home_page_sends_everyone_else_to_sign_in(client):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/"
    assert not Token.objects.exists()


def test_signing_in_lands_on_the_home_page(client):
    get_user_model().objects.create_user("ada", password="a-long-pass-phrase")
    response = client.post(
        "/accounts/login/", {"username": "ada", "password": "a-long-pass-phrase"}
    )
    assert response.status_code == 302 and response["Location"] == "/"


def test_home_page_escapes_the_name_in_the_page_and_the_commands(db):
    odd = get_user_model().objects.create_user("<b>o'hara</b> & co")
    page = client_for(odd).get("/").text

    assert "<b>o'hara</b>" not in page
    assert "&lt;b&gt;o&#x27;hara&lt;/b&gt; &amp; co" in page
    # Quoted for the shell, then escaped for the page: pasted, it names exactly this person.
    command = shown(page, "mcp-stdio-command")
    assert shlex.split(command)[-2:] == ["--user", "<b>o'hara</b> & co"]
    assert shlex.split(shown(page, "token-reset-command"))[-3:] == [
        "token",
        "<b>o'hara</b> & co",
        "--reset",
    ]


def test_the_header_names_who_is_signed_in_with_no_dangling_separator(owner):
    page = client_for(owner).get("/memory/").text
    header = page[page.index("<header>") : page.index("</header>")]
    assert 'id="home-link" href="/"' in header
    assert "已登录 / Signed in as <strong>ada</strong>" in header
    assert "·" not in header
    assert 'id="logout"' in header
