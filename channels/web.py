"""The web doors' turn (POST /api/chat, POST /v1/chat/completions): a DRF view checks the
request and starts the turn, then the answer is written without holding a thread while the
model writes.

A door's DRF view returns a TurnAnswer once its turn has started; `turn_view` turns that into
the real answer. Under ASGI (ethan_site.asgi, `make serve`) the view runs in the loop's bounded
thread pool and the turn on the event loop (channels.turns.consumed): one JSON answer, or
Server-Sent Events as they come. Under WSGI (Django's test client, a WSGI server) the same door
code runs in the request's thread with the turn's synchronous driver. A door writes its answer
once, as async code that reads the turn's events and does its own database work through `io`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from functools import wraps
from typing import Any

from asgiref.sync import markcoroutinefunction, sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpResponse, StreamingHttpResponse

from agent_app import turn_io
from agent_app.turn import TurnEvent, TurnStream
from channels.turns import consumed

# A door's step over the turn's events that runs whether or not the client reads them (what
# /v1 records of a conversation), with the io for its database work.
Through = Callable[[AsyncIterator[TurnEvent], turn_io.TurnIO], AsyncIterator[TurnEvent]]
# A door's JSON answer: the events → the response.
Answer = Callable[[AsyncIterator[TurnEvent]], Awaitable[HttpResponse]]
# A door's stream: the events → the lines of its Server-Sent Events.
Lines = Callable[[AsyncIterator[TurnEvent]], AsyncIterator[str]]

EVENT_STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class TurnAnswer(HttpResponse):
    """A started turn, returned by a door's view in place of its answer (never sent as is):
    `answer` makes one JSON answer of it, or `lines` the events of a stream."""

    def __init__(
        self,
        turn: TurnStream,
        *,
        answer: Answer | None = None,
        lines: Lines | None = None,
        through: Through | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(status=202)
        assert (answer is None) != (lines is None), "a turn is answered once or streamed"
        self.turn = turn
        self.answer = answer
        self.lines = lines
        self.through = through
        self.answer_headers = headers or {}

    async def on_loop(self) -> HttpResponse:
        through = self.through
        events = consumed(
            self.turn, (lambda e: through(e, turn_io.ASYNC)) if through is not None else None
        )
        if self.lines is not None:
            return self._stream(self.lines(events))
        return self._headed(await self.answer(events))

    def in_thread(self) -> HttpResponse:
        events = turn_io.unsuspending(iter(self.turn))
        if self.through is not None:
            events = self.through(events, turn_io.SYNC)
        if self.lines is not None:
            return self._stream(_Finishing(turn_io.driven(self.lines(events)), events))
        return self._headed(turn_io.run_unsuspended(self.answer(events)))

    def _stream(self, lines: Any) -> StreamingHttpResponse:
        return self._headed(
            StreamingHttpResponse(
                lines, content_type="text/event-stream", headers=EVENT_STREAM_HEADERS
            )
        )

    def _headed(self, response: HttpResponse) -> HttpResponse:
        for name, value in self.answer_headers.items():
            response[name] = value
        return response


class _Finishing:
    """A stream read in a thread. The server closes it when the response is over; a client
    that went away (even before the first line) does not stop the turn: closing runs the rest
    of its events (the door's own step over them included), so the reply is still written and
    stored."""

    def __init__(self, lines: Iterator[str], events: AsyncIterator[TurnEvent]):
        self.lines = lines
        self.events = events

    def __iter__(self) -> Iterator[str]:
        return self.lines

    def close(self) -> None:
        self.lines.close()
        for _ in turn_io.driven(self.events):  # nothing left when the client read to the end
            pass


def turn_view(view: Callable[..., HttpResponse]) -> Callable[..., Awaitable[HttpResponse]]:
    """A door's DRF view (as_view()) as an async view whose TurnAnswer is answered on the event
    loop under ASGI, or in the request's thread under WSGI."""

    @wraps(view)
    async def door(request, *args: Any, **kwargs: Any) -> HttpResponse:
        if isinstance(request, ASGIRequest):
            # The loop's bounded pool, not a thread per request: at most that many database
            # connections however many requests arrive at once.
            response = await turn_io.ASYNC.db(view, request, *args, **kwargs)
            if isinstance(response, TurnAnswer):
                return await response.on_loop()
            return response
        response = await sync_to_async(view)(request, *args, **kwargs)
        if isinstance(response, TurnAnswer):
            return await sync_to_async(response.in_thread)()
        return response

    markcoroutinefunction(door)
    return door
