"""`ethan serve` (and `make serve`): the ASGI application (ethan_site.asgi) under uvicorn, one
event loop holding every open conversation.

One process by default: one process on an event loop holds many streaming replies, since none
holds a thread while the model writes. More processes (--workers, WEB_CONCURRENCY) use more
cores: they share the listening socket and the kernel gives each connection to any of them, so
the server tells them how many they are (ETHAN_SERVE_PROCESSES) and /mcp is then stateless, each
request served whole by the process that gets it (an MCP session kept in one process's memory
would be unknown to the next request). The turn caps (ETHAN_TURNS_PER_PROCESS,
ETHAN_TURNS_PER_PERSON) are then per process; the throttles stay shared, in the cache
(docs/operations.md, "More than one process").

On SIGTERM (or Ctrl-C) the server stops listening, takes no new turn (503 with Retry-After on a
connection still open), ends MCP event streams, and lets the replies being written finish for up
to ETHAN_DRAIN_SECONDS; those still running then are stored as far as they were written, marked
interrupted. With several processes, uvicorn's supervisor passes the SIGTERM on to each, which
stops listening, lets its open requests finish (up to the same limit), then drains its turns.
"""

from __future__ import annotations

import os
from types import FrameType

import uvicorn
from django.conf import settings


class EthanServer(uvicorn.Server):
    """uvicorn's server, telling the application as soon as it is asked to stop (uvicorn tells
    it only after the connections have closed or the limit has passed)."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        from ethan_site.asgi import application

        application.stop()
        super().handle_exit(sig, frame)


def serve(*, host: str, port: int, workers: int = 1) -> None:
    config = uvicorn.Config(
        "ethan_site.asgi:application",
        host=host,
        port=port,
        workers=workers,
        lifespan="on",
        # The connections still open after a SIGTERM get the drain's limit; the turns whose
        # clients left are waited for in the application's lifespan, to the same deadline.
        timeout_graceful_shutdown=settings.ETHAN_DRAIN_SECONDS,
        # The client address is the socket's, as Django's throttles expect; a proxy in front
        # is counted by ETHAN_NUM_PROXIES (docs/operations.md).
        proxy_headers=False,
        server_header=False,
        # The path without its query string (ethan_site.access_log).
        access_log=True,
        log_level="info",
    )
    if workers > 1:
        from uvicorn.supervisors import Multiprocess

        # Read by the settings of each worker, which uvicorn spawns with this environment (a
        # fresh interpreter: they import the application, and read the settings, anew).
        os.environ["ETHAN_SERVE_PROCESSES"] = str(workers)
        # Each worker runs uvicorn's own server: it hears of the stop when the connections
        # have closed (the application's lifespan then drains its turns to the same limit).
        Multiprocess(config, sockets=[config.bind_socket()]).run()
        return
    EthanServer(config).run()
