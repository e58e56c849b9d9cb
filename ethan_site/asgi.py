"""The one ASGI application behind every door: Django (the pages, the admin, /api, /v1, the Lark
webhook, /healthz) and the MCP SDK's streamable HTTP app at /mcp, in one process.

`make serve` runs it under uvicorn (ethan_site.serve, `ethan serve`); any ASGI server can:
`uvicorn ethan_site.asgi:application`. Its lifespan starts the MCP session manager and, without
a broker, the periodic work (ethan_site.periodic); at shutdown it stops that and lets the turns
still running finish for up to ETHAN_DRAIN_SECONDS (channels_app.turns).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time

import django
from django.core.handlers.asgi import ASGIHandler

from ethan_shared.config import settings_or_exit

log = logging.getLogger(__name__)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ethan_site.settings")
# A bad setting stops the server with one line naming it, not an error on every request.
settings_or_exit("ethan (asgi)")
django.setup(set_prefix=False)

from ethan_site import serving  # noqa: E402

serving.middleware_in_one_hop()
# Django's own ASGI handler (what get_asgi_application() returns): the pages, the admin, /api and
# /v1, the turn doors among them as async views (channels_app.web).
django_application = ASGIHandler()

# Imported once Django is set up: they use its settings and models.
from django.conf import settings  # noqa: E402
from starlette.types import Message, Receive, Scope, Send  # noqa: E402

import embedder  # noqa: E402
import ethan_llm  # noqa: E402
from channels_app.mcp_server.server import http_app  # noqa: E402
from channels_app.turns import TURNS  # noqa: E402
from ethan_site.forwarded import forwarded_scope  # noqa: E402
from ethan_site.health import healthz_asgi  # noqa: E402
from ethan_site.periodic import PERIODIC  # noqa: E402

MCP_PATH = "/mcp"
HEALTH_PATH = "/healthz"


class Doors:
    """Routes each request to Django or to the MCP app (and /healthz to its own answer,
    ethan_site.health), and runs the lifespan of both."""

    def __init__(self) -> None:
        host, _, port = settings.ETHAN_BIND.rpartition(":")
        self.mcp = http_app(host=host.strip("[]") or "127.0.0.1", port=int(port or 8000))
        # Set when the server stops: MCP hosts' open event streams end (they reconnect to
        # the next server), so they do not hold the shutdown for its whole limit.
        self.stopping: asyncio.Event | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(scope, receive, send)
            return
        scope = forwarded_scope(scope)  # behind a trusted proxy, its scheme (https)
        path = scope.get("path", "")
        if path == MCP_PATH + "/":  # served as /mcp, never a redirect (to http, behind a proxy)
            scope = {**scope, "path": MCP_PATH, "raw_path": MCP_PATH.encode()}
            path = MCP_PATH
        if path == MCP_PATH or path.startswith(MCP_PATH + "/"):
            if scope["type"] == "http" and scope["method"] == "GET" and self.stopping:
                receive = self._until_stopping(receive)
            await self.mcp(scope, receive, send)
            return
        if path == HEALTH_PATH and scope["type"] == "http":
            await healthz_asgi(scope, receive, send)
            return
        async with serving.REQUEST_THREADS.lent() as lending:  # Django's thread for it, kept
            await django_application(scope, receive, lending.sending(send))

    def stop(self) -> None:
        """The server was told to stop (SIGTERM): no new turn is taken, open MCP event streams
        end. Safe to call from a signal handler."""
        TURNS.stop_admitting(time.monotonic() + settings.ETHAN_DRAIN_SECONDS)
        PERIODIC.halt()
        if self.loop is not None and self.stopping is not None:
            self.loop.call_soon_threadsafe(self.stopping.set)

    def _until_stopping(self, receive: Receive) -> Receive:
        stopping = self.stopping

        async def receive_or_stop() -> Message:
            asked = asyncio.ensure_future(receive())
            stop = asyncio.ensure_future(stopping.wait())
            await asyncio.wait({asked, stop}, return_when=asyncio.FIRST_COMPLETED)
            if asked.done():
                stop.cancel()
                return asked.result()
            asked.cancel()
            return {"type": "http.disconnect"}

        return receive_or_stop

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The MCP app's lifespan (its session manager), with the turns' drain before its
        shutdown."""
        self.loop = asyncio.get_running_loop()
        self.stopping = asyncio.Event()

        async def receive_then_drain() -> Message:
            message = await receive()
            if message["type"] == "lifespan.startup":
                # Before the first request: what a process's first turn would load otherwise
                # (the model's SDK, jieba's dictionary), over a second, in each process.
                await asyncio.to_thread(_preload)
                # The embedder's weights (seconds, 150 MB) load beside the first requests.
                embedder.preload_in_background()
                serving.tuning_apply()
                TURNS.admitting()
                PERIODIC.start()  # without a broker, the periodic tasks (ethan_site.periodic)
            elif message["type"] == "lifespan.shutdown":
                self.stop()
                await asyncio.to_thread(PERIODIC.stop)
                await TURNS.drain()
                # The model clients' connections, closed with the loop they belong to.
                await ethan_llm.aclose()
                serving.tuning_undo()  # for a process that goes on: a test's
            return message

        await self.mcp(scope, receive_then_drain, send)


def _preload() -> None:
    started = time.monotonic()
    try:
        provider = ethan_llm.preload()
    except ethan_llm.ModelError as exc:  # a model set wrong: every turn says so, in its own words
        log.warning("the model's SDK was not loaded ahead of the first turn: %s", exc)
        return
    log.info(
        "loaded ahead of the first turn: the %s SDK and jieba's dictionary (%.1f s)",
        provider,
        time.monotonic() - started,
    )


application = Doors()
