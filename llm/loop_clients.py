"""The SDKs' async clients, one per event loop: an async client's connections belong to the
loop that opened them.

A loop closes its clients before it ends, `await aclose()` (the server does, at its lifespan's
end): the aiohttp transport the OpenAI and Anthropic clients use (their SDKs'
DefaultAioHttpClient) and google-genai's aio hold sockets that only a close gives back
cleanly. The clients of a loop that ended without it are dropped when the next loop asks (not
a weak key: a client refers to its loop, which would then never be collected)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Hashable
from typing import Any, TypeVar

T = TypeVar("T")

_clients: dict[asyncio.AbstractEventLoop, dict[Hashable, Any]] = {}


def loop_client(key: Hashable, make: Callable[[], T]) -> T:
    """The running loop's client for `key` (its provider and settings), made once by `make`."""
    loop = asyncio.get_running_loop()
    clients = _clients.get(loop)
    if clients is None:
        for ended in [other for other in _clients if other.is_closed()]:
            del _clients[ended]
        clients = _clients[loop] = {}
    client = clients.get(key)
    if client is None:
        client = clients[key] = make()
    return client


async def aclose() -> None:
    """Close the running loop's clients and their connections (each SDK's `close()`); the
    next call on this loop makes new ones."""
    clients = _clients.pop(asyncio.get_running_loop(), {})
    for client in clients.values():
        # AsyncOpenAI and AsyncAnthropic name it close(), google-genai's aio aclose().
        await (client.aclose() if hasattr(client, "aclose") else client.close())


def run(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run(main), the clients its loop opened closed before the loop ends (for a
    short-lived loop: a bench, a test)."""

    async def closing() -> T:
        try:
            return await main
        finally:
            await aclose()

    return asyncio.run(closing())
