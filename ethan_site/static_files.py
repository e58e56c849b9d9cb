"""WhiteNoise for an async middleware chain (ASGI, ethan_site.asgi).

WhiteNoise's own middleware is synchronous only. In an ASGI process Django would then run the
whole rest of the chain for every request through a thread, the view included: a turn's JSON
answer would hold that thread while the model writes. This one is both: a static file is
served as WhiteNoise serves it (opening the file in a thread), everything else passes on.
"""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse
from whitenoise.middleware import WhiteNoiseMiddleware

from ethan_site.hybrid import HybridMiddleware


class StaticFilesMiddleware(HybridMiddleware, WhiteNoiseMiddleware):
    def __init__(self, get_response=None, **kwargs):
        super().__init__(get_response, **kwargs)
        self.hybrid_init(get_response)

    def _call(self, request: HttpRequest) -> HttpResponse:
        return WhiteNoiseMiddleware.__call__(self, request)

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        static_file = (
            self.find_file(request.path_info)
            if self.autorefresh
            else self.files.get(request.path_info)
        )
        if static_file is not None:
            return await sync_to_async(self.serve, thread_sensitive=False)(static_file, request)
        return await self.get_response(request)
