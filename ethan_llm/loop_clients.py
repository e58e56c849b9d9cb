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
from types import ModuleType
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


def aiohttp_client(
    sdk: ModuleType, name: str, *, api_key: str, base_url: str | None, timeout: float
):
    """The running loop's `sdk.<name>` (openai's AsyncOpenAI, anthropic's AsyncAnthropic: the
    two SDKs' async clients take the same arguments) on aiohttp, the SDK's DefaultAioHttpClient,
    its documented choice for many requests at once: reading a stream costs less than half the
    CPU of the default httpx2 transport, whose HTTP parsing is pure Python
    (bench.chunk_reading). Retries are ours (ethan_llm.retry), the same for every provider: the
    SDK's
    are switched off."""
    return loop_client(
        (sdk.__name__, api_key, base_url, timeout),
        lambda: getattr(sdk, name)(
            api_key=api_key,
            base_url=base_url,
            max_retries=0,
            timeout=timeout,
            http_client=sdk.DefaultAioHttpClient(timeout=timeout),
        ),
    )


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
