"""The server's worker threads: Django's part of a request (ethan_site.asgi) and the turns'
database steps (agent_app.turn_io).

Both run Python, and each such thread takes the GIL and a core from the event loop that writes
every open stream and answers /healthz. Under a thousand arriving streams on two cores, the loop
stalled for a second and more behind them (bench.concurrent_streams, docs/benchmarks.md): the
CPU was full, and the loop waited its turn among the threads starting new turns. So on Linux
the worker threads run at a lower priority (a higher nice value, ETHAN_THREAD_NICENESS, per
thread there): when the CPU is short, the streams already open and the probes go first, and a
new turn waits a little longer to start. With CPU to spare nothing changes: niceness only
orders who runs when not all can."""

from __future__ import annotations

import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings


def worker_threads(count: int, name: str) -> ThreadPoolExecutor:
    """`count` threads named `name`-N, each at ETHAN_THREAD_NICENESS."""
    return ThreadPoolExecutor(max_workers=count, thread_name_prefix=name, initializer=_nicer)


class CountedThread(ThreadPoolExecutor):
    """One worker thread that knows how many calls it has queued or running (`pending`), so
    that the next request can go to the least busy of a few (ethan_site.asgi)."""

    def __init__(self, name: str):
        super().__init__(max_workers=1, thread_name_prefix=name, initializer=_nicer)
        self._lock = threading.Lock()
        self.pending = 0

    def submit(self, fn, /, *args, **kwargs):
        with self._lock:
            self.pending += 1
        future = super().submit(fn, *args, **kwargs)
        future.add_done_callback(self._done)
        return future

    def _done(self, _future) -> None:
        with self._lock:
            self.pending -= 1


def _nicer() -> None:
    niceness = settings.ETHAN_THREAD_NICENESS
    # Elsewhere (macOS) the nice value is the whole process's, the event loop's with it.
    if niceness and sys.platform == "linux":
        # Raising one's own nice value needs no privilege; it is never lowered again.
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), niceness)
