"""Database work on a thread that no request's end tidies: the turns' database threads
(agent_app.turn_io), the event loop's default executor (tasks deferred there) and /healthz's
own thread (ethan_site.health). Django checks a thread's connection around each request it
serves; these threads serve none, so the check is made here, around each piece of work."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import close_old_connections


@contextmanager
def pooled_connection() -> Iterator[None]:
    """The thread's connection checked before (one that broke or outlived CONN_MAX_AGE is
    replaced) and after, as Django does around a request."""
    close_old_connections()
    try:
        yield
    finally:
        close_old_connections()
