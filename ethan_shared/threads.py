"""The server's worker threads for the turns' database steps (agent_app.turn_io).

They run Python, and each such thread takes the GIL and a core from the event loop that writes
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
    return ThreadPoolExecutor(max_workers=count, thread_name_prefix=name, initializer=nicer)


def nicer() -> None:
    """This thread at ETHAN_THREAD_NICENESS (Linux; a no-op elsewhere or at 0)."""
    niceness = settings.ETHAN_THREAD_NICENESS
    # Elsewhere (macOS) the nice value is the whole process's, the event loop's with it.
    if niceness and sys.platform == "linux":
        # Raising one's own nice value needs no privilege; it is never lowered again.
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), niceness)
