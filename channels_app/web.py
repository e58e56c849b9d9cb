"""The web doors' turn (POST /api/chat, POST /v1/chat/completions): a DRF view checks the
request and starts the turn, then the answer is written without holding a thread while the
model writes.

A door's DRF view returns a TurnAnswer once its turn has started, in place of the real answer.
Under ASGI (ethan_site.asgi, `make serve`) the view runs in one of the server's threads and
returns the TurnAnswer, which the server answers on the event loop, the turn running there
(channels_app.turns.consumed): one JSON answer, or Server-Sent Events as they come. Under WSGI
(Django's test client, a WSGI server) the same door code runs in the request's thread with the
turn's synchronous driver. A door writes its answer once, as async code that reads the turn's
events and does its own database work through `io`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from functools import wraps
from typing import Any

from django.http import HttpResponse, StreamingHttpResponse

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

# A TurnAnswer's own headers, which say nothing of the answer that replaces it.
BODY_HEADERS = ("content-type", "content-length")

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

    async def answered(self) -> HttpResponse:
        """The answer, on the loop, with what the middleware gave this stand-in on its way out
        (their headers, such as X-Frame-Options and Vary, and cookies), but not the stand-in's
        own body headers."""
        response = await self.on_loop()
        for name, value in self.items():
            if name.lower() not in BODY_HEADERS and name not in response:
                response[name] = value
        response.cookies.update(self.cookies)
        if not response.streaming and "Content-Length" not in response:
            # As CommonMiddleware gives every other answer (this one came after it).
            response["Content-Length"] = str(len(response.content))
        return response

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
        try:
            return self._headed(turn_io.run_unsuspended(self.answer(events)))
        finally:
            # The answer stops reading at the turn's last event: its end (the place under the
            # caps given back) runs now, not whenever the collector finds the generator.
            for _ in turn_io.driven(events):
                pass

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


def turn_view(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """A door's DRF view (as_view()) whose TurnAnswer is answered on the event loop by the
    server's handler (ethan_site.asgi, which marks its requests), or in the request's thread by
    any other (a WSGI server, Django's test clients)."""

    @wraps(view)
    def door(request, *args: Any, **kwargs: Any) -> HttpResponse:
        response = view(request, *args, **kwargs)
        if isinstance(response, TurnAnswer) and not getattr(request, "turn_on_loop", False):
            return response.in_thread()
        return response

    return door
