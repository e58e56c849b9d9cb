"""Middleware for a synchronous and an asynchronous stack alike: Django's documented hybrid
middleware ("Asynchronous support": both flags, and marked a coroutine function when the next
one is asynchronous, which Django tells by `get_response`). Under ASGI such a middleware runs on
the event loop, where a synchronous one would send each of its hooks to a thread and back.
"""

from __future__ import annotations

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest


class HybridMiddleware:
    """A subclass calls hybrid_init(get_response) from its __init__ and writes `_call`, the
    synchronous path, and `_acall`, the asynchronous one."""

    sync_capable = True
    async_capable = True

    def hybrid_init(self, get_response) -> None:
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest):
        if self.is_async:
            return self._acall(request)
        return self._call(request)
