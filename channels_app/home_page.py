"""The home page (/): where a signed-in person finds their memory, the API docs, and what to
give a chat app or an MCP host (the URL and their API token). Everyone else is sent to sign in.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import get_script_prefix
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from ethan_shared.api import api_token_get_or_create


@dataclass(frozen=True)
class Connections:
    """What a person pastes into their clients; every value is shown escaped."""

    token: str
    token_reset_command: str
    chat_base_url: str  # the OpenAI-compatible endpoint, as this request reached the site
    mcp_url: str
    mcp_http_command: str  # Claude Code, over streamable HTTP with the token
    mcp_stdio_command: str  # Claude Code, starting `ethan mcp` on this machine


def mcp_url(request: HttpRequest) -> str:
    """The MCP server's URL as the person reaches this site: /mcp on the same origin, which
    the one server serves beside the pages (ethan_site.asgi)."""
    return request.build_absolute_uri(f"{get_script_prefix()}mcp")


def ethan_command() -> str:
    """The `ethan` that works on this machine: the one beside the Python serving this page
    (a venv's bin/, which need not be on PATH), else the name alone."""
    beside = Path(sys.executable).with_name("ethan")
    return str(beside) if beside.exists() else "ethan"


def connections_for(request: HttpRequest) -> Connections:
    token = api_token_get_or_create(owner=request.user)
    url = mcp_url(request)
    name = request.user.get_username()
    ethan = shlex.quote(ethan_command())
    return Connections(
        token=token,
        token_reset_command=f"{ethan} token {shlex.quote(name)} --reset",
        chat_base_url=request.build_absolute_uri(f"{get_script_prefix()}v1"),
        mcp_url=url,
        mcp_http_command=(
            f"claude mcp add --transport http ethan {shlex.quote(url)} "
            f"--header {shlex.quote(f'Authorization: Bearer {token}')}"
        ),
        mcp_stdio_command=(f"claude mcp add ethan -- {ethan} mcp --user {shlex.quote(name)}"),
    )


# never_cache: the page holds the person's token, which no cache (nor the back button of a
# shared browser after signing out) should keep.
@never_cache
@login_required
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    return render(request, "channels_app/home.html", {"connect": connections_for(request)})
