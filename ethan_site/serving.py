"""The process-wide tuning of a serving process, in one place: what `ethan serve` (or any ASGI
server running ethan_site.asgi) changes in its process while it serves, each a documented
setting with the measurement that keeps it (docs/benchmarks/streams.md, bench.concurrent_streams),
applied at the lifespan's startup and undone at its shutdown (a process that goes on, a test's,
gets its own back).

- The garbage collector (ETHAN_GC_THRESHOLD): what the process loaded is frozen, and the
  passes come less often (_serving_gc).
- SQLite connections kept by the server's threads (ETHAN_SQLITE_KEEP_SECONDS), not reopened at
  every step (_threads_keep_connections).
- The vectors of the turns it answers written (embedded) or sent to a worker (under a broker)
  in batches (ETHAN_VECTORS_LINGER_MS, _vectors_in_batches).

Also per process, and kept where it acts: the turns' database threads' nice value
(ETHAN_THREAD_NICENESS, ethan_shared.threads).

And one applied before the handler is built, for the life of the process: Django's middleware
run in one hop to the request's thread (ETHAN_MIDDLEWARE_ONE_HOP, middleware_in_one_hop).

And one around each request Django serves (ethan_site.asgi.Doors): the thread for its
synchronous part lent from those kept (ETHAN_REQUEST_THREADS_KEPT, RequestThreads), until its
response starts (Lending).
"""

from __future__ import annotations

import gc
import logging
import sys
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass

from asgiref.sync import AsyncToSync, ThreadSensitiveContext
from django.conf import settings
from django.db import connections
from django.utils.deprecation import MiddlewareMixin
from django.utils.module_loading import import_string
from starlette.types import Message, Send

log = logging.getLogger(__name__)

# What serving changed, as it was before (tuning_undo).
_unserved: dict[str, object] = {}


def tuning_apply() -> None:
    _serving_gc(True)
    _threads_keep_connections(True)
    _vectors_in_batches(True)


def tuning_undo() -> None:
    _vectors_in_batches(False)
    _threads_keep_connections(False)
    _serving_gc(False)


def _vectors_in_batches(serving: bool) -> None:
    """While it serves, the vectors of the turns that ended are written or sent to a worker in
    batches, after ETHAN_VECTORS_LINGER_MS (agent_app.vectors.turns_batched)."""
    from agent_app.vectors import turns_batched

    turns_batched(settings.ETHAN_VECTORS_LINGER_MS / 1000 if serving else 0.0)


def _threads_keep_connections(serving: bool) -> None:
    """While it serves, the server's threads (the turns' database steps', /healthz's) live as
    long as it does: on SQLite each keeps its connection ETHAN_SQLITE_KEEP_SECONDS,
    where a new one at every step of every turn cost its PRAGMAs and SQL functions each time
    (10% of a process's CPU under 300 streams, bench.concurrent_streams). Set on the
    connections' own settings, which a thread's connection reads when it opens: `ethan serve`
    in one process has read the settings before it starts the server."""
    database = connections.settings["default"]
    if database["ENGINE"] == "django.db.backends.sqlite3":
        if serving:
            _unserved["CONN_MAX_AGE"] = database["CONN_MAX_AGE"]
            database["CONN_MAX_AGE"] = settings.ETHAN_SQLITE_KEEP_SECONDS
        elif "CONN_MAX_AGE" in _unserved:
            # Back to what ethan_site.settings has for every other process.
            database["CONN_MAX_AGE"] = _unserved.pop("CONN_MAX_AGE")


def _serving_gc(serving: bool) -> None:
    """The garbage collector while the server serves.

    What the process loaded to start (Django, the apps, the model's SDK, jieba's dictionary:
    about 240,000 objects) lives as long as it does: kept out of the collector's passes
    (gc.freeze), each full pass over it stopped the event loop, every stream with it, for about
    120 ms. Objects made from here on are collected as ever.

    And the passes come less often (ETHAN_GC_THRESHOLD objects between two young passes,
    Python's 700; each older generation after 20 passes of the one before, Python's 10). A
    pass stops every thread of the process, the event loop too, whichever thread started it.
    With a thousand streams open each full pass went over everything they hold: 3 to 5 of them
    while the streams arrived, each 20-250 ms, and 20-50 young and middle passes, up to
    70 ms; together 1.6-3 s of each process's CPU, which grew as turns queued (they hold more),
    and the probes that came during one waited for it (bench.concurrent_streams, docs/
    benchmarks.md). With these, the same run made no full pass and its young passes took
    0.4-0.7 s in all. Cycles still go: later, in larger passes."""
    if serving:
        gc.freeze()
        # Python 3.14's incremental collector reads the thresholds differently (the young
        # one, then increments of the old generation): the numbers above were measured on
        # 3.11 and are not applied there until measured again.
        if settings.ETHAN_GC_THRESHOLD and sys.version_info < (3, 14):
            _unserved["gc_threshold"] = gc.get_threshold()
            gc.set_threshold(settings.ETHAN_GC_THRESHOLD, 20, 20)
        log.info(
            "%d objects loaded at startup left out of garbage collection; its thresholds %s",
            gc.get_freeze_count(),
            gc.get_threshold(),
        )
        return
    # As it was before the server started (for a process that goes on: a test's).
    gc.unfreeze()
    if "gc_threshold" in _unserved:
        gc.set_threshold(*_unserved.pop("gc_threshold"))


def middleware_in_one_hop() -> None:
    """Django's own middleware (MiddlewareMixin's: security, sessions, common, CSRF, auth,
    messages, clickjacking) are marked synchronous only, before ethan_site.asgi builds Django's
    handler.

    They say they are both synchronous and asynchronous, and on an async stack Django's handler
    then sends each of their hooks to the request's thread and back: thirteen round trips for
    one request here. Marked synchronous (`async_capable`, the documented flag), they run as
    Django runs any synchronous middleware on an async stack: the handler adapts the block
    once, one call on the request's thread, and calls the view back on the event loop from
    there (a turn door's async view runs there as before). Their paths in MIDDLEWARE stay
    Django's, so its checks (check --deploy) still find them. Measured against Django's way
    with bench.concurrent_streams, 300 streams spread (docs/benchmarks/streams.md): 6-8% less
    server CPU, and a much shorter tail before the first delta. Hybrid middleware written for
    both (ethan_site.errors, ethan_site.static_files) are left as they are."""
    if not settings.ETHAN_MIDDLEWARE_ONE_HOP:
        return
    for path in settings.MIDDLEWARE:
        middleware = import_string(path)
        if isinstance(middleware, type) and issubclass(middleware, MiddlewareMixin):
            middleware.async_capable = False


class RequestThreads:
    """The threads Django's synchronous part of a request runs on (its request_started and
    request_finished signals, the middleware, a synchronous view, a turn door's admission),
    each lent to one request at a time, until its response starts (Lending), and kept for
    the next.

    Django's ASGI handler gives every request a ThreadSensitiveContext of its own, for which
    asgiref makes a one-thread executor, starts its thread and, when the request ends, starts
    another thread to join it: two threads started and ended a request, `Thread.start` blocking
    the event loop until each runs, and on SQLite a new database connection in each (its
    PRAGMAs, its SQL functions). Here the context is entered first, with an executor lent from
    `kept` idle ones (asgiref 3.13's `ThreadSensitiveContext(executor=…)`: Django's own
    context inside it then changes nothing), so a request has a thread to itself until its
    response starts, and that thread and its connection serve the next one. More requests
    admitted at once than are kept get a new executor each; past `kept`, one given back is
    shut down. So is one whose request broke off before its response started, or ended with a
    call still given to its thread (a task the request started, going on after it): it would
    hold up the next request."""

    def __init__(self, kept: int) -> None:
        self.kept = kept
        self._idle: list[_RequestThread] = []

    @asynccontextmanager
    async def lent(self) -> AsyncIterator[Lending]:
        # Off: Django's own way, a thread for each request. And a synchronous caller's call
        # (a test's async_to_sync) keeps the caller's thread, its connection and transaction,
        # as Django's handler has it there.
        if not self.kept or getattr(AsyncToSync.executors, "current", None) is not None:
            yield Lending(None, None)
            return
        try:
            executor = self._idle.pop()
        except IndexError:
            executor = _RequestThread()
        executor.holders += 1
        lending = Lending(self, executor)
        ended = False
        try:
            async with ThreadSensitiveContext(executor=executor):
                yield lending
            ended = True
        finally:
            executor.holders -= 1
            if lending.released is None:  # still held: given back now, unless it broke off
                executor.spoiled |= not ended
                self.release(lending)
            if not executor.holders and executor not in self._idle:
                self._dismissed(executor)

    def release(self, lending: Lending) -> None:
        """A lending's thread given back, once: when its response starts (Lending.sending), or
        at the request's end if it never started one."""
        if lending.released is None:
            lending.released = self._given_back(lending.executor)

    def _given_back(self, executor: _RequestThread) -> bool:
        """Back among the idle ones, if no call is still to run on it, no request broke off
        on it, and there is room."""
        if executor.busy or executor.spoiled or len(self._idle) >= self.kept:
            return False
        self._idle.append(executor)
        return True

    def _dismissed(self, executor: _RequestThread) -> None:
        """The last request holding a thread ended, and it is not among the idle ones: kept
        if it can be, else shut down."""
        if not self._given_back(executor):
            executor.shutdown(wait=False)


@dataclass
class Lending:
    """One request's hold on its thread. The thread is given back when the response starts,
    not when the request ends: what is left of a request then is its body, written from the
    event loop (a stream: for as long as the model writes), and the response's close at the
    end, one call, which Django makes on the request's thread (the request_finished signal).
    That call then runs on the thread as it serves another request, between two of that one's
    calls: a call runs whole, and none leaves a transaction open for the next. So 300 streams
    at once are admitted on the kept threads and their connections, where each held a thread
    of its own, new, with a new SQLite connection, for its whole length (docs/benchmarks/
    streams.md)."""

    threads: RequestThreads | None
    executor: _RequestThread | None
    released: bool | None = None  # None: still held; else whether it went back among the idle

    def sending(self, send: Send) -> Send:
        """`send`, giving the thread back at the response's start."""
        if self.threads is None:
            return send

        async def sent(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.threads.release(self)
            await send(message)

        return sent


class _RequestThread(ThreadPoolExecutor):
    """One thread, and whether a call given to it is still queued or running: a request that
    ended while one was (a task it started, still running after it) gives it back to no one."""

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="django-request")
        self.holders = 0  # the requests under way that hold it (one, but for a response's end)
        self.spoiled = False  # a request that held it broke off (the client left, say)
        self._calls = 0
        self._calls_lock = threading.Lock()

    @property
    def busy(self) -> bool:
        return self._calls > 0

    def submit(self, fn, /, *args, **kwargs):
        with self._calls_lock:
            self._calls += 1
        try:
            future = super().submit(fn, *args, **kwargs)
        except BaseException:
            self._call_done()
            raise
        future.add_done_callback(self._call_done)
        return future

    def _call_done(self, _future=None) -> None:
        with self._calls_lock:
            self._calls -= 1


REQUEST_THREADS = RequestThreads(settings.ETHAN_REQUEST_THREADS_KEPT)
