"""The official mcp SDK's client against Ethan's MCP server, for tests: over streamable HTTP
(the server in a thread of this process, on the test database, or any URL) and over stdio (the
`ethan mcp` command spawned on a home of its own)."""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_types import Implementation

from tests.conftest import ROOT, clean_env

T = TypeVar("T")
CLIENT_NAME = "test-host"
# The handshake as raw JSON-RPC messages, for tests that speak the protocol by hand.
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def served_in_thread() -> Iterator[str]:
    """`ethan mcp --http`'s app under uvicorn in a thread of this process: its tools use the
    test's database. Yields the /mcp URL."""
    from channels_app.mcp_server.server import http_app

    port = free_port()
    with app_in_thread(http_app(host="127.0.0.1", port=port), port) as base:
        yield f"{base}/mcp"


@contextlib.contextmanager
def app_in_thread(app, port: int, **config) -> Iterator[str]:
    """An ASGI application under uvicorn in a thread of this process, on `port`, with uvicorn's
    `config`; yields its base URL. Stopped on the way out."""
    import uvicorn

    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", **config)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise AssertionError("the server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)


def over_http(
    url: str,
    token: str | None,
    use: Callable[[Client], Awaitable[T]],
    *,
    client_name: str = CLIENT_NAME,
    mode: str = "auto",
) -> T:
    """Connect with the SDK's Client (Bearer token in every request), run `use`, close."""

    async def session() -> T:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
            transport = streamable_http_client(url, http_client=http)
            info = Implementation(name=client_name, version="1.0")
            async with Client(transport, client_info=info, mode=mode) as client:
                return await use(client)

    return anyio.run(session)


def over_stdio(
    home: Path,
    user: str | None,
    use: Callable[[Client], Awaitable[T]],
    *,
    client_name: str = CLIENT_NAME,
    **env: str,
) -> T:
    """Spawn `ethan mcp --user USER` on `home`, as an MCP host does, and run `use`; with no
    USER, `ethan mcp`: the console's user."""

    async def session() -> T:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "ethan_site.cli", "mcp", *(["--user", user] if user else [])],
            env=clean_env(home, **env),
            cwd=str(ROOT),
        )
        info = Implementation(name=client_name, version="1.0")
        async with Client(params, client_info=info) as client:
            return await use(client)

    return anyio.run(session)


def structured(result: Any) -> Any:
    """A tool result's structured content; fails on an error result, showing its text."""
    assert not result.is_error, result.content[0].text
    return result.structured_content


def error_text(result: Any) -> str:
    assert result.is_error, result.structured_content
    return result.content[0].text
