"""POST /api/chat (the turn) and GET /api/context (what the next turn would send)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

from django.db import DatabaseError
from django.http import StreamingHttpResponse
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from agent_app.memory_search import MAX_LIMIT, SCOPES, memory_search
from agent_app.modes import MODE_ALIASES
from agent_app.paths import PATHS
from agent_app.turn import (
    Done,
    Failed,
    TurnInputError,
    TurnStream,
    event_payload,
    turn_plan,
    turn_prompt,
    turn_start,
)
from ethan_site.limits import SEARCH_QUERY_MAX_CHARS
from sessions_app import services as session_services
from sessions_app.apis import session_or_404
from sessions_app.models import ChatSession
from sessions_app.services import SessionBusy

log = logging.getLogger(__name__)


def refused(exc: TurnInputError) -> Response:
    """A turn's input refused by turn_plan (the one validator), as this API's 400: the reason
    in `detail`, and under the field at fault as a serializer's error would be."""
    body: dict = {"detail": str(exc)}
    if exc.field:
        body[exc.field] = [str(exc)]
    return Response(body, status=status.HTTP_400_BAD_REQUEST)


ChatOutput = inline_serializer(
    "ChatOutput",
    fields={
        "session_id": serializers.CharField(),
        "reply": serializers.CharField(),
        "path": serializers.ChoiceField(choices=PATHS),
        "model": serializers.CharField(),
        "usage": inline_serializer(
            "Usage",
            fields={
                "input_tokens": serializers.IntegerField(),
                "output_tokens": serializers.IntegerField(),
            },
        ),
    },
)


STREAM_EVENTS = """With `"stream": true` (or `Accept: text/event-stream`) the answer is Server-Sent
Events, one per turn event, each a JSON `data:` line: `started` {session_id, path, model},
`delta` {text} (the reply as the model writes it), `tool_call` {name, arguments},
`tool_result` {name, ok, summary}, then `done` {session_id, reply, path, model, usage,
model_calls, tool_calls} or `error` {kind, detail, retryable, session_id}. A refused request
(400, 404, 409) is JSON, before any event."""


def failed_status(failed: Failed) -> tuple[int, str]:
    """The HTTP status and the words of a turn that stopped after its message was stored:
    /api/chat and /v1/chat/completions answer it alike."""
    if failed.kind == "database":
        return status.HTTP_503_SERVICE_UNAVAILABLE, (
            "a database error interrupted the reply; your message is stored and the step it "
            "interrupted was not kept: retry on this session"
        )
    if failed.retryable:
        return status.HTTP_503_SERVICE_UNAVAILABLE, (
            f"the model is unavailable right now ({failed.detail}); your message is stored: "
            "retry on this session"
        )
    return status.HTTP_502_BAD_GATEWAY, (
        f"the model could not answer ({failed.detail}); your message is stored"
    )


def _failed_answer(failed: Failed) -> Response:
    """The JSON answer of a turn that stopped after its message was stored."""
    code, detail = failed_status(failed)
    return Response(
        {"detail": detail, "session_id": failed.session_id, "retryable": failed.retryable},
        status=code,
    )


class EventStream:
    """A turn as Server-Sent Events. The server closes it when the response is over; a client
    that went away (even before the first event) does not stop the turn: closing runs the
    rest of it, so the reply is still written and stored."""

    def __init__(self, turn: TurnStream):
        self.turn = turn
        self.lines = self._lines()

    def _lines(self) -> Iterator[str]:
        for event in self.turn:
            payload = json.dumps(event_payload(event), ensure_ascii=False)
            yield f"event: {event.name}\ndata: {payload}\n\n"

    def __iter__(self) -> Iterator[str]:
        return self.lines

    def close(self) -> None:
        self.lines.close()
        self.turn.finish()  # nothing left to do when the client read to the end


class ChatApi(APIView):
    class ChatInput(serializers.Serializer):
        """Types only: what the values mean (an empty or too long message, an unknown mode,
        path or model, a model with no key) is turn_plan's to say."""

        message = serializers.CharField(trim_whitespace=True, allow_blank=True)
        session_id = serializers.CharField(required=False, max_length=32)
        mode = serializers.CharField(required=False, help_text=", ".join(MODE_ALIASES))
        path = serializers.CharField(required=False, help_text=", ".join(PATHS))
        model = serializers.CharField(required=False)
        stream = serializers.BooleanField(required=False, default=False)

    def perform_content_negotiation(self, request, force=False):
        # `Accept: text/event-stream` asks for events; every other answer (errors included)
        # is JSON whatever the client accepts.
        return super().perform_content_negotiation(request, force=True)

    @extend_schema(request=ChatInput, responses={200: ChatOutput}, description=STREAM_EVENTS)
    def post(self, request):
        data = self.ChatInput(data=request.data)
        data.is_valid(raise_exception=True)
        params = data.validated_data
        session = None
        if params.get("session_id"):
            session = session_or_404(request, params["session_id"])
        try:
            plan = turn_plan(
                owner=request.user,
                session=session,
                text=params["message"],
                mode=params.get("mode"),
                path=params.get("path"),
                model=params.get("model"),
                channel=ChatSession.Channel.API,
            )
            turn = turn_start(plan)
        except TurnInputError as exc:
            return refused(exc)
        except SessionBusy as exc:
            # An earlier turn on this session outlasted ETHAN_TURN_WAIT_SECONDS: this one
            # wrote nothing, so sending it again is safe.
            return Response(
                {
                    "detail": "another reply on this session is still being written; "
                    "nothing was stored: retry",
                    "session_id": exc.session_id,
                    "retryable": True,
                },
                status=status.HTTP_409_CONFLICT,
            )
        except DatabaseError as exc:
            log.error("database error before a turn: %s", type(exc).__name__)
            return Response(
                {
                    "detail": "the database is unavailable; nothing was stored: retry later",
                    "session_id": None,
                    "retryable": True,
                },
                status=status.HTTP_503_SERVICE_UNAVAILABLE,
            )
        wants_stream = params["stream"] or "text/event-stream" in request.headers.get("Accept", "")
        if wants_stream:
            return StreamingHttpResponse(
                EventStream(turn),
                content_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        for event in turn:
            if isinstance(event, Failed):
                return _failed_answer(event)
            if isinstance(event, Done):
                return Response(
                    {
                        "session_id": event.session_id,
                        "reply": event.reply,
                        "path": event.path,
                        "model": event.model,
                        "usage": {
                            "input_tokens": event.input_tokens,
                            "output_tokens": event.output_tokens,
                        },
                    }
                )
        raise RuntimeError("a turn ended without done or error")


class ContextApi(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("message", str, required=True, description="the next message"),
            OpenApiParameter("session_id", str, description="continue this session"),
            OpenApiParameter("mode", str),
            OpenApiParameter("path", str, enum=list(PATHS)),
        ],
        responses={
            200: inline_serializer(
                "ContextOutput",
                fields={
                    "path": serializers.CharField(),
                    "system": serializers.CharField(),
                    "messages": serializers.ListField(child=serializers.DictField()),
                },
            )
        },
    )
    def get(self, request):
        """Exactly what the next turn would send, without storing or changing anything."""
        session = None
        if request.query_params.get("session_id"):
            session = session_or_404(request, request.query_params["session_id"])
        try:
            plan = turn_plan(
                owner=request.user,
                session=session,
                text=request.query_params.get("message", ""),
                mode=request.query_params.get("mode"),
                path=request.query_params.get("path"),
                channel=ChatSession.Channel.API,
            )
        except TurnInputError as exc:
            return refused(exc)
        if session is None:  # not stored: lazy persistence writes a session with its message
            session = session_services.session_start(
                owner=request.user, mode=plan.mode, channel=ChatSession.Channel.API
            )
        prompt = turn_prompt(plan=plan, session=session, stored=False)
        system, context = prompt.system, prompt.context
        return Response(
            {
                "path": plan.path,
                "system": system.text,
                "messages": [{"role": m.role, "content": m.content} for m in context],
            }
        )


class SearchApi(APIView):
    class SearchQuery(serializers.Serializer):
        q = serializers.CharField(max_length=SEARCH_QUERY_MAX_CHARS)
        scope = serializers.ChoiceField(choices=list(SCOPES), default="all")
        limit = serializers.IntegerField(min_value=1, max_value=MAX_LIMIT, default=10)

    @extend_schema(
        parameters=[SearchQuery],
        responses=inline_serializer(
            "SearchHit",
            many=True,
            fields={
                "kind": serializers.ChoiceField(choices=["fact", "episode", "message"]),
                "id": serializers.IntegerField(),
                "session_id": serializers.CharField(allow_null=True),
                "seq": serializers.IntegerField(allow_null=True),
                "content": serializers.CharField(),
                "score": serializers.FloatField(),
                "created_at": serializers.DateTimeField(),
            },
        ),
    )
    def get(self, request):
        """Facts, episodes and past messages ranked by BM25 (Chinese and English)."""
        params = self.SearchQuery(data=request.query_params)
        params.is_valid(raise_exception=True)
        hits = memory_search(
            owner=request.user,
            query=params.validated_data["q"],
            scope=params.validated_data["scope"],
            limit=params.validated_data["limit"],
        )
        return Response(
            [
                {
                    "kind": h.kind,
                    "id": h.id,
                    "session_id": h.session_id,
                    "seq": h.seq,
                    "content": h.content,
                    "score": round(h.score, 4),
                    "created_at": h.created_at,
                }
                for h in hits
            ]
        )
