"""POST /api/chat: a turn, answered as one JSON object or as Server-Sent Events."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from django.http import HttpResponse, JsonResponse
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response

from agent_app.modes import MODE_ALIASES
from agent_app.paths import PATHS
from agent_app.turn import Delta, Failed, TurnEvent, turn_plan
from channels_app.turns import (
    TURN_REFUSALS,
    Refusal,
    Shown,
    drained_async,
    event_payload,
    failure,
    refusal,
    turn_open,
)
from channels_app.web import Opened, TurnDoor
from sessions_app.apis import session_or_404
from sessions_app.models import ChatSession


def refusal_body(said: Refusal) -> dict:
    """A turn that did not answer (channels_app.turns' one wording), as this API's JSON: under
    the field at fault too, as a serializer's error would be."""
    body: dict = {"detail": said.detail, "session_id": said.session_id, "retryable": said.retryable}
    if said.field:
        body[said.field] = [said.detail]
    return body


def refusal_answer(said: Refusal) -> Response:
    headers = {"Retry-After": str(said.retry_after)} if said.retry_after else None
    return Response(refusal_body(said), status=said.status, headers=headers)


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


async def _event_lines(events: AsyncIterator[TurnEvent]) -> AsyncIterator[bytes]:
    """The turn as Server-Sent Events, one per event; a delta's text as the turn shows it
    (channels_app.turns.Shown: STEP_BREAK before the words after a tool step)."""
    shown = Shown()
    async for event in events:
        words = shown.add(event)
        if isinstance(event, Delta):
            event = Delta(text=words)
        payload = json.dumps(event_payload(event), ensure_ascii=False)
        yield f"event: {event.name}\ndata: {payload}\n\n".encode()


async def _json_answer(events: AsyncIterator[TurnEvent]) -> HttpResponse:
    answer = await drained_async(events)
    if isinstance(answer.end, Failed):
        said = failure(answer.end)
        return JsonResponse(refusal_body(said), status=said.status)
    done = answer.end
    return JsonResponse(
        {
            "session_id": done.session_id,
            "reply": answer.shown.text,
            "path": done.path,
            "model": done.model,
            "usage": {"input_tokens": done.input_tokens, "output_tokens": done.output_tokens},
        },
        json_dumps_params={"ensure_ascii": False},
    )


class ChatApi(TurnDoor):
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
            turn = turn_open(plan)
        except TURN_REFUSALS as exc:
            return refusal_answer(refusal(exc))
        wants_stream = params["stream"] or "text/event-stream" in request.headers.get("Accept", "")
        if wants_stream:
            return Opened(turn, lines=_event_lines)
        return Opened(turn, answer=_json_answer)
