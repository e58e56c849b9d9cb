"""How the turn (agent_app.turn._events, written once as an async generator) meets the database
and the model: the same code under three drivers, for where it is read.

- SYNC: every step runs in the caller's thread, as plain calls: the database directly, the
  model through ethan_llm.stream. Nothing ever suspends, so `driven` steps the async generator by
  hand with no event loop at all: Django's ORM sees an ordinary synchronous caller (the
  console, a Celery task, a WSGI view, a test in its transaction).
- ASYNC: for an event loop (an ASGI view). The model streams through its SDK's async client
  (ethan_llm.astream), so the loop is free while it writes; each database step runs on one of
  ETHAN_DB_THREADS threads kept for them (sync_to_async, not thread-sensitive: a step is one
  function, its transaction inside it), so a process holds at most that many database
  connections for its turns however many are streaming. They are few: every thread running
  Python takes the GIL from the loop that writes the open streams. The tasks a step deferred
  (embedded mode: a consolidation, which may wait on the model) run in the loop's default
  executor, so that they never hold up a turn's steps.
- CALLER: for an event loop made for one synchronous caller (asgiref's async_to_sync: Django's
  test client, a WSGI server such as runserver, calling an async view). Each database step runs
  in the caller's thread (its connection, a test's transaction), the model through the
  synchronous client: the loop ends with the call, and would leave an async client's
  connections open behind it.

`on_loop()` is ASYNC or CALLER, as the running loop is; every `async for` over a turn uses it.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from typing import Any, Protocol, TypeVar

from asgiref.sync import AsyncToSync, sync_to_async
from django.conf import settings

import ethan_llm
from ethan_llm.types import StreamEvent
from ethan_shared import queue
from ethan_shared.pooled import pooled_connection
from ethan_shared.threads import worker_threads

T = TypeVar("T")


class TurnIO(Protocol):
    # Whether the loop ends when the call it was made for returns (CALLER): a task started on
    # it does not outlive the call, so a door's stream is read whole before its view returns.
    ends_with_call: bool

    async def db(self, step: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run one database step (a function that opens its own transaction, if any)."""
        ...

    async def in_request_thread(self, step: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a door's admission (its checks, then turn_open), which may wait up to
        ETHAN_TURN_WAIT_SECONDS for the turn already running on the session: in Django's
        thread for the request (the caller's, under CALLER), never on the turns' database
        threads, whose steps the turn it waits for needs to end."""
        ...

    def model(self, **request: Any) -> AsyncIterator[StreamEvent]:
        """The model's answer as ethan_llm.stream gives it."""
        ...


class _SyncIO:
    ends_with_call = False

    async def db(self, step: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return step(*args, **kwargs)

    in_request_thread = db

    def model(self, **request: Any) -> AsyncIterator[StreamEvent]:
        return unsuspending(ethan_llm.stream(**request))


class _AsyncIO:
    ends_with_call = False

    async def db(self, step: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        # A step is never cut in half: a turn stopped while one runs (a shutdown's limit)
        # waits for it to end, then stops. The thread would finish it anyway; waiting lets
        # the turn know what it stored.
        running = asyncio.ensure_future(
            sync_to_async(_in_pool, thread_sensitive=False, executor=_db_threads())(
                step, *args, **kwargs
            )
        )
        try:
            result, deferred = await asyncio.shield(running)
        except asyncio.CancelledError:
            with suppress(Exception):
                await running
            raise
        if deferred:
            _in_background(deferred)
        return result

    async def in_request_thread(self, step: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        # Its connection is given back when it returns (pooled_connection), not held while the
        # answer streams.
        result, deferred = await sync_to_async(_in_pool, thread_sensitive=True)(
            step, *args, **kwargs
        )
        if deferred:
            _in_background(deferred)
        return result

    def model(self, **request: Any) -> AsyncIterator[StreamEvent]:
        return ethan_llm.astream(**request)


class _CallerIO:
    ends_with_call = True

    async def db(self, step: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await sync_to_async(step, thread_sensitive=True)(*args, **kwargs)

    in_request_thread = db

    async def model(self, **request: Any) -> AsyncIterator[StreamEvent]:
        # The loop serves this one call, so the synchronous client may block it; it is given a
        # turn after each event, so that a reader takes each delta as it comes.
        events = ethan_llm.stream(**request)
        try:
            for event in events:
                yield event
                await asyncio.sleep(0)
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                close()


@functools.cache
def _db_threads() -> ThreadPoolExecutor:
    """The threads for the turns' database steps, made at the first step (settings are read
    by then), for the life of the process: an executor is not bound to one event loop."""
    return worker_threads(settings.ETHAN_DB_THREADS, "turn-db")


def _in_pool(step: Callable[..., T], *args: Any, **kwargs: Any) -> tuple[T, list]:
    """A step on a database thread, and the tasks it deferred there (embedded mode defers a
    consolidation in the thread that queued it, for the request's end to run: no request ends
    in a database thread, so they are handed back to be run beside the rest of the turn)."""
    with pooled_connection():
        result = step(*args, **kwargs)
    return result, queue.deferred_take()


def _deferred_run(tasks: list) -> None:
    with pooled_connection():
        queue.deferred_run(tasks)
        # And what they queued in turn (a pass that found more than it takes queues the next):
        # no request's end runs this thread's queue.
        queue.run_deferred()


# Deferred tasks running in the loop's default executor: kept so that none is collected mid-run.
_background: set[asyncio.Future] = set()


def _in_background(tasks: list) -> None:
    running = asyncio.get_running_loop().run_in_executor(None, _deferred_run, tasks)
    _background.add(running)
    running.add_done_callback(_background.discard)


SYNC: TurnIO = _SyncIO()
ASYNC: TurnIO = _AsyncIO()
CALLER: TurnIO = _CallerIO()


def on_loop() -> TurnIO:
    """The driver for the running event loop: CALLER on a loop async_to_sync made for a
    synchronous caller (it keeps such loops in `loop_thread_executors`, where a thread-sensitive
    step finds its caller's thread), ASYNC on a server's."""
    if asyncio.get_running_loop() in AsyncToSync.loop_thread_executors:
        return CALLER
    return ASYNC


def unsuspending(events: Iterator[T]) -> AsyncIterator[T]:
    """A sync iterator seen as an async one whose steps never suspend (each __anext__ returns
    at once, after the blocking next()): async code reading it can be run by hand, with no
    event loop (driven, run_unsuspended)."""
    return _Unsuspending(events)


class _Unsuspending:
    def __init__(self, events: Iterator[StreamEvent]):
        self.events = events

    def __aiter__(self) -> _Unsuspending:
        return self

    async def __anext__(self) -> StreamEvent:
        try:
            return next(self.events)
        except StopIteration:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        close = getattr(self.events, "close", None)
        if close is not None:
            close()


def driven(events: AsyncIterator[T]) -> Iterator[T]:
    """An async generator that runs with SYNC, as a plain iterator: each step is run to its
    end by hand (it never suspends), with no event loop. Closing this iterator (a consumer
    that stops, Ctrl-C) closes the generator the same way, so its `finally` runs."""
    try:
        while True:
            try:
                event = run_unsuspended(events.__anext__())
            except StopAsyncIteration:
                return
            yield event
    finally:
        run_unsuspended(events.aclose())


def run_unsuspended(step: Any) -> Any:
    """Run a coroutine that never suspends (it awaits only SYNC's steps) to its result."""
    try:
        step.send(None)
    except StopIteration as done:
        return done.value
    step.close()
    raise RuntimeError("a synchronous turn step suspended: it awaited real I/O")
