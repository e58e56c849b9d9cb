"""Django's synchronous part of a request runs on a thread kept for the next request
(ethan_site.serving.RequestThreads): one thread a request at a time, as Django has it, without
starting two threads for every request."""

from __future__ import annotations

import asyncio
import contextlib
import threading

import httpx
import pytest
from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.core.signals import request_started

from ethan_site import serving
from ethan_site.asgi import application
from ethan_site.serving import RequestThreads
from tests.mcp_client import app_in_thread, free_port


async def _thread_of_a_request(threads: RequestThreads, *, hold: float = 0.0) -> int:
    """The thread a request's synchronous part runs on, inside Django's own context as its
    handler enters it."""
    async with threads.lent(), ThreadSensitiveContext():
        ident = await sync_to_async(threading.get_ident)()
        await asyncio.sleep(hold)
        return ident


def test_requests_one_after_another_run_on_the_same_kept_thread():
    threads = RequestThreads(2)

    async def main():
        return [await _thread_of_a_request(threads) for _ in range(3)]

    first, second, third = asyncio.run(main())
    assert first == second == third != threading.get_ident()


def test_requests_at_once_each_have_a_thread_and_only_kept_ones_stay():
    threads = RequestThreads(1)

    async def main():
        return await asyncio.gather(*(_thread_of_a_request(threads, hold=0.1) for _ in range(3)))

    idents = asyncio.run(main())
    assert len(set(idents)) == 3  # none waits for another's thread
    assert len(threads._idle) == 1


def test_a_request_that_did_not_end_normally_gives_back_no_thread():
    threads = RequestThreads(2)

    async def main():
        kept = await _thread_of_a_request(threads)
        with contextlib.suppress(RuntimeError):
            async with threads.lent(), ThreadSensitiveContext():
                await sync_to_async(threading.get_ident)()
                raise RuntimeError("the client left")
        return kept, await _thread_of_a_request(threads)

    kept, after = asyncio.run(main())
    assert kept != after
    assert len(threads._idle) == 1


@pytest.mark.parametrize("kept", [8, 0])
def test_the_served_application_lends_djangos_thread_of_a_request(
    kept, transactional_db, monkeypatch
):
    """Three requests one after another: on one kept thread; with none kept, Django's own way,
    on a new thread each."""
    monkeypatch.setattr(serving, "REQUEST_THREADS", RequestThreads(kept))
    names: list[str] = []

    def started(**kwargs) -> None:
        names.append(threading.current_thread().name)

    request_started.connect(started, weak=False)
    try:
        # The server's one application (ethan_site.asgi), with no lifespan: Django's part is
        # what is asked for here.
        with app_in_thread(application, free_port(), lifespan="off") as url:
            answers = [httpx.get(f"{url}/v1/models").status_code for _ in range(3)]
    finally:
        request_started.disconnect(started)
    assert answers == [401, 401, 401]
    if kept:
        assert len(set(names)) == 1 and names[0].startswith("django-request"), names
    else:
        assert len(set(names)) == 3, names


def test_a_request_that_ended_with_a_call_still_running_gives_back_no_thread():
    """A task the request started goes on after it, inside its thread: the next request must
    not queue behind it."""
    threads = RequestThreads(2)
    release = threading.Event()

    async def main():
        async with threads.lent(), ThreadSensitiveContext():
            busy = await sync_to_async(threading.get_ident)()
            running = asyncio.ensure_future(sync_to_async(release.wait)())
            await asyncio.sleep(0.05)  # given to the request's thread, waiting there
        kept = list(threads._idle)
        after = await asyncio.wait_for(_thread_of_a_request(threads), 5)
        release.set()
        await running
        return busy, kept, after

    busy, kept, after = asyncio.run(main())
    assert kept == [] and after != busy


async def _sent(message) -> None:
    """The server's send, for a request that writes nowhere."""


async def _streamed(threads: RequestThreads, started: asyncio.Event, written: asyncio.Event):
    """A request whose response starts, then is written for as long as `written` is unset (a
    stream), then closed on the request's thread, as Django's handler closes it."""
    async with threads.lent() as lending, ThreadSensitiveContext():
        admitted = await sync_to_async(threading.get_ident)()
        send = lending.sending(_sent)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        started.set()
        await written.wait()
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        closed = await sync_to_async(threading.get_ident)()
        return admitted, closed


def test_a_response_under_way_gives_its_thread_to_the_next_request():
    """A stream holds no thread while it is written: the next request is admitted on the same
    kept thread, and the stream's close runs there afterwards."""
    threads = RequestThreads(1)

    async def main():
        started, written = asyncio.Event(), asyncio.Event()
        stream = asyncio.ensure_future(_streamed(threads, started, written))
        await started.wait()
        others = [await _thread_of_a_request(threads) for _ in range(2)]
        written.set()
        return await stream, others

    (admitted, closed), others = asyncio.run(main())
    assert admitted == closed == others[0] == others[1]
    assert len(threads._idle) == 1


def test_streams_at_once_are_admitted_on_the_kept_threads():
    threads = RequestThreads(2)

    async def main():
        written = asyncio.Event()
        streams, idents = [], set()
        for _ in range(6):  # one after another, each still written when the next arrives
            started = asyncio.Event()
            streams.append(asyncio.ensure_future(_streamed(threads, started, written)))
            await started.wait()
        written.set()
        for admitted, closed in await asyncio.gather(*streams):
            idents |= {admitted, closed}
        return idents

    assert len(asyncio.run(main())) == 1
    assert len(threads._idle) == 1


def test_a_thread_a_request_broke_off_on_is_shut_down_after_the_stream_that_shared_it():
    """A stream gave its thread back; the next request broke off on it (the client left
    before its answer): once the stream ends too, the thread is shut down, not kept."""
    threads = RequestThreads(1)

    async def main():
        started, written = asyncio.Event(), asyncio.Event()
        stream = asyncio.ensure_future(_streamed(threads, started, written))
        await started.wait()
        (shared,) = threads._idle
        with contextlib.suppress(RuntimeError):
            async with threads.lent(), ThreadSensitiveContext():
                await sync_to_async(threading.get_ident)()
                raise RuntimeError("the client left")
        written.set()
        await stream
        return shared

    shared = asyncio.run(main())
    assert threads._idle == [] and shared._shutdown
