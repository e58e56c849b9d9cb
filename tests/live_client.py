"""An HTTP client for tests against pytest-django's live server (httpx2, what the openai SDK
is built on) that waits, each time a response is closed, until the server has finished every
request it began.

After a response the server still works: it runs the embedded mode's deferred tasks
(consolidation) once the response is over. Waiting for that before the test reads the database
means the test reads what the server finished, not a state halfway through its work.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import httpx2 as httpx
from django.core.signals import request_finished, request_started

SETTLE_SECONDS = 30


class ServerActivity:
    """How many requests the in-process server has begun and not finished."""

    def __init__(self) -> None:
        self.busy = 0
        self.changed = threading.Condition()

    def started(self, **kwargs) -> None:
        with self.changed:
            self.busy += 1

    def finished(self, **kwargs) -> None:
        with self.changed:
            self.busy = max(0, self.busy - 1)
            self.changed.notify_all()

    def wait_idle(self) -> None:
        with self.changed:
            if not self.changed.wait_for(lambda: self.busy == 0, timeout=SETTLE_SECONDS):
                raise AssertionError("the live server did not finish its requests")


@contextlib.contextmanager
def server_activity() -> Iterator[ServerActivity]:
    activity = ServerActivity()
    request_started.connect(activity.started)
    # Connected after ethan_shared.queue's receiver, so it runs after the deferred tasks.
    request_finished.connect(activity.finished)
    try:
        yield activity
    finally:
        request_started.disconnect(activity.started)
        request_finished.disconnect(activity.finished)


class _SettlingStream(httpx.SyncByteStream):
    def __init__(self, inner: httpx.SyncByteStream, activity: ServerActivity):
        self.inner = inner
        self.activity = activity

    def __iter__(self) -> Iterator[bytes]:
        yield from self.inner

    def close(self) -> None:
        self.inner.close()
        self.activity.wait_idle()


class _SettlingTransport(httpx.BaseTransport):
    def __init__(self, activity: ServerActivity):
        self.inner = httpx.HTTPTransport()
        self.activity = activity

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        return httpx.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_SettlingStream(response.stream, self.activity),
            extensions=response.extensions,
        )

    def close(self) -> None:
        self.inner.close()


def settling_client(activity: ServerActivity, **options) -> httpx.Client:
    return httpx.Client(transport=_SettlingTransport(activity), **options)
