"""The web doors' turn (POST /api/chat, POST /v1/chat/completions): an async view on Django's own
ASGI handler, from the socket to the turn and back in one path.

A door is a DRF view (TurnDoor) whose `post` admits a turn: it checks the request and opens the
turn (channels_app.turns.turn_open), and returns an Opened, or a DRF Response that refuses. Its
async view runs DRF's checks (authentication, permissions, throttles) and that `post` as one
synchronous call in Django's thread for the request (TurnIO.in_request_thread: not
the turns' database threads, since turn_open may wait for another turn), starts the turn in a
task of its own, then answers on the event loop: one JSON answer once the turn is over, or a
StreamingHttpResponse of Server-Sent Events as they come. No thread waits while the model
writes, and a client that leaves stops reading, not the turn.

Under a synchronous caller (Django's test client, a WSGI server) the same view runs on a loop
made for the call (turn_io.CALLER), which ends when the view returns: a stream is written whole
before it does.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.template.response import SimpleTemplateResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework.views import APIView

from agent_app import turn_io
from agent_app.turn import TurnEvent, TurnStream
from channels_app.turns import consumed

# A door's step over the turn's events that runs whether or not the client reads them (what
# /v1 records of a conversation), with the io for its database work.
Through = Callable[[AsyncIterator[TurnEvent], turn_io.TurnIO], AsyncIterator[TurnEvent]]
# A door's JSON answer: the events → the response.
Answer = Callable[[AsyncIterator[TurnEvent]], Awaitable[HttpResponse]]
# A door's stream: the events → the lines of its Server-Sent Events, as bytes.
Lines = Callable[[AsyncIterator[TurnEvent]], AsyncIterator[bytes]]

EVENT_STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


@dataclass
class Opened:
    """A turn a door admitted, and how it is answered: `answer` makes one JSON answer of its
    events, `lines` the lines of a stream; `headers` go on either."""

    turn: TurnStream
    answer: Answer | None = None
    lines: Lines | None = None
    through: Through | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        assert (self.answer is None) != (self.lines is None), "a turn is answered once or streamed"


class TurnDoor(APIView):
    """A DRF view whose `post` admits a turn (an Opened) or refuses it (a Response), served as
    an async view: `as_view()` is the door's one path."""

    @classmethod
    def as_view(cls, **initkwargs: Any) -> Callable[..., Awaitable[HttpResponseBase]]:
        async def door(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            view = cls(**initkwargs)
            io = turn_io.on_loop()
            # Shielded: a turn opened is started, even when the client left meanwhile (Django
            # then cancels the view), so its place under the caps is given back at its end.
            admitted = await asyncio.shield(view._opened(io, request, args, kwargs))
            if isinstance(admitted, HttpResponseBase):
                return admitted
            return await _answered(*admitted, io)

        # What DRF's as_view() gives its view, read by the schema (drf-spectacular).
        door.cls = cls
        door.initkwargs = initkwargs
        # DRF's authentication enforces CSRF itself, for a session's cookie only.
        return csrf_exempt(door)

    async def _opened(
        self, io: turn_io.TurnIO, request: HttpRequest, args, kwargs
    ) -> HttpResponseBase | tuple[Opened, AsyncIterator[TurnEvent]]:
        """The door's refusal, or the turn it opened and the turn's events, started."""
        admitted = await io.in_request_thread(self._admission, request, args, kwargs)
        if not isinstance(admitted, Opened):
            return admitted
        through = admitted.through
        return admitted, consumed(
            admitted.turn, (lambda e: through(e, io)) if through is not None else None
        )

    def _admission(self, request: HttpRequest, args, kwargs) -> HttpResponseBase | Opened:
        """DRF's dispatch (APIView.dispatch, through its documented hooks) up to the handler's
        answer: an Opened as it is, any other answer finalized and rendered here, so that
        nothing of the request is left for a thread of its own."""
        self.args, self.kwargs = args, kwargs
        drf_request = self.initialize_request(request, *args, **kwargs)
        self.request = drf_request
        self.headers = self.default_response_headers
        try:
            self.initial(drf_request, *args, **kwargs)
            method = drf_request.method.lower()
            if method in self.http_method_names:
                handler = getattr(self, method, self.http_method_not_allowed)
            else:
                handler = self.http_method_not_allowed
            result = handler(drf_request, *args, **kwargs)
        except Exception as exc:
            result = self.handle_exception(exc)
        if isinstance(result, Opened):
            return result
        response = self.finalize_response(drf_request, result, *args, **kwargs)
        if isinstance(response, SimpleTemplateResponse):  # DRF's Response
            response.render()
        return response


async def _answered(
    opened: Opened, events: AsyncIterator[TurnEvent], io: turn_io.TurnIO
) -> HttpResponseBase:
    if opened.lines is not None:
        lines = opened.lines(events)
        if io.ends_with_call:
            lines = [line async for line in lines]
        response: HttpResponseBase = StreamingHttpResponse(
            lines, content_type="text/event-stream", headers=EVENT_STREAM_HEADERS
        )
    else:
        response = await opened.answer(events)
    for name, value in opened.headers.items():
        response[name] = value
    return response
