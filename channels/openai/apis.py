"""POST /v1/chat/completions and GET /v1/models: Ethan behind the URL every chat app speaks.

A chat app configured with a base URL (`http://host:8000/v1`) and an Ethan API token as its key
talks to Ethan as it would to OpenAI: the person's memory is injected, the turn is stored, the
memory tools run here, consolidation is queued. Both answers (one `chat.completion`, or
`chat.completion.chunk` events ending in `data: [DONE]`) are the same turn's events
(agent_app.turn), and errors are OpenAI's `{"error": {message, type, param, code}}`, which the
openai SDKs raise from. docs/openai.md has the model names and the conversation rule.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import AsyncIterator

from django.contrib.auth.models import AbstractBaseUser
from django.http import Http404, HttpResponse, JsonResponse
from rest_framework import exceptions, serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from agent_app.turn import Delta, Done, Failed, Started, ToolCalled, TurnEvent, turn_plan
from agent_app.turn_io import TurnIO
from channels.openai.conversations import (
    ClientChat,
    ConversationError,
    chat_read,
    conversation_place,
    conversation_record,
)
from channels.openai.names import ModelName, UnknownModelName, model_name_parse, model_names
from channels.turns import TURN_REFUSALS, failure, refusal, turn_open
from channels.web import TurnAnswer
from ethan_site.api import BearerTokenAuthentication, exception_handler, openai_error
from sessions_app.apis import session_or_404
from sessions_app.models import ChatSession

log = logging.getLogger(__name__)

# Pins a request to one of the person's sessions; every answer names its session in it too.
SESSION_HEADER = "X-Ethan-Session"
# Between the text of two model steps of one reply (words, a memory tool, more words).
STEP_BREAK = "\n\n"

_AUTH_MESSAGES = {
    exceptions.NotAuthenticated: (
        "no API key: send Authorization: Bearer <Ethan API token> (`ethan token NAME` makes one)"
    ),
    exceptions.AuthenticationFailed: "the API key is not a valid Ethan API token",
}
_CODES = {401: "invalid_api_key", 405: "method_not_allowed", 429: "rate_limit_exceeded"}


def _error(
    code: int,
    message: str,
    *,
    kind: str | None = None,
    param: str | None = None,
    headers: dict | None = None,
) -> Response:
    return Response(
        openai_error(code, message, code=kind, param=param), status=code, headers=headers
    )


def openai_exception_handler(exc, context):
    """The REST API's error answers (statuses, Retry-After, WWW-Authenticate, the 503 of a
    database that fails), in OpenAI's shape."""
    response = exception_handler(exc, context)
    if response is None:
        return None
    data = response.data if isinstance(response.data, dict) else {}
    message = _AUTH_MESSAGES.get(type(exc)) or str(data.get("detail") or "error")
    fields = [key for key in data if key not in ("detail", "retryable", "non_field_errors")]
    response.data = openai_error(
        response.status_code,
        message,
        code=_CODES.get(response.status_code),
        param=fields[0] if fields else None,
    )
    return response


class OpenAIView(APIView):
    """Bearer tokens, OpenAI's error shape, and JSON whatever the client accepts. Not in
    /api/schema: OpenAI's own API reference describes these requests (docs/openai.md says
    what Ethan takes of them)."""

    authentication_classes = [BearerTokenAuthentication]
    schema = None

    def get_exception_handler(self):
        return openai_exception_handler

    def perform_content_negotiation(self, request, force=False):
        return super().perform_content_negotiation(request, force=True)


# --- GET /v1/models ----------------------------------------------------------------------------


def _model_object(name: str, owner: AbstractBaseUser) -> dict:
    return {
        "id": name,
        "object": "model",
        "created": int(owner.date_joined.timestamp()),
        "owned_by": "ethan",
    }


class ModelsApi(OpenAIView):
    def get(self, request):
        """The names a chat app can pick: docs/openai.md."""
        return Response(
            {
                "object": "list",
                "data": [_model_object(name, request.user) for name in model_names(request.user)],
            }
        )


class ModelApi(OpenAIView):
    def get(self, request, name: str):
        try:
            model_name_parse(name)
        except UnknownModelName as exc:
            return _error(404, str(exc), kind="model_not_found", param="model")
        return Response(_model_object(name, request.user))


# --- POST /v1/chat/completions ----------------------------------------------------------------


class CompletionInput(serializers.Serializer):
    """What Ethan reads of a request. Sampling parameters (temperature, max_tokens, …),
    `user` and `metadata` are accepted and left to Ethan's own settings."""

    class StreamOptions(serializers.Serializer):
        include_usage = serializers.BooleanField(required=False, default=False)

    model = serializers.CharField(max_length=200)
    messages = serializers.JSONField()  # read by conversations.chat_read
    stream = serializers.BooleanField(required=False, default=False)
    stream_options = StreamOptions(required=False, allow_null=True)
    n = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=1,
        error_messages={"max_value": "Ethan writes one reply per request: n must be 1"},
    )
    tools = serializers.JSONField(required=False, allow_null=True)
    functions = serializers.JSONField(required=False, allow_null=True)


async def _sent(
    events: AsyncIterator[TurnEvent],
    io: TurnIO,
    *,
    owner: AbstractBaseUser,
    session: ChatSession,
    chat: ClientChat,
) -> AsyncIterator[TurnEvent]:
    """The turn's events as the client gets them, and the conversation recorded at its end.

    What the client is sent is the text of every model step, joined by STEP_BREAK (a reply
    may have words before a memory tool and after it); that text, as sent, is what the
    conversation rule remembers, since it is what the client will send back as history."""
    sent: list[str] = []
    step_break = False
    async for event in events:
        if isinstance(event, Delta):
            text = STEP_BREAK + event.text if step_break and sent else event.text
            step_break = False
            sent.append(text)
            yield Delta(text=text)
        elif isinstance(event, ToolCalled):
            step_break = True
        elif isinstance(event, Done):
            if not sent and event.reply:  # a model that streamed nothing: its reply whole
                sent.append(event.reply)
                yield Delta(text=event.reply)
            await io.db(
                conversation_record, owner=owner, session=session, chat=chat, shown="".join(sent)
            )
            yield event
        elif isinstance(event, Failed):
            await io.db(conversation_record, owner=owner, session=session, chat=chat, shown=None)
            yield event
        elif isinstance(event, Started):
            yield event


def _usage(done: Done) -> dict:
    return {
        "prompt_tokens": done.input_tokens,
        "completion_tokens": done.output_tokens,
        "total_tokens": done.input_tokens + done.output_tokens,
    }


def _failure(failed: Failed) -> tuple[int, dict]:
    """A turn that stopped after its message was stored: the status /api/chat gives it, and
    the session that holds the message."""
    said = failure(failed)
    body = openai_error(said.status, said.detail, code=said.code)
    body["error"]["session_id"] = said.session_id
    return said.status, body


class _Chunks:
    """The turn as `chat.completion.chunk` Server-Sent Events, `data: [DONE]` at the end; a
    turn that fails after the stream began ends with an `{"error": …}` event instead, which
    the openai SDK raises from."""

    def __init__(self, *, name: ModelName, include_usage: bool):
        self.name = name
        self.include_usage = include_usage
        self.id = f"chatcmpl-{secrets.token_hex(12)}"
        self.created = int(time.time())
        self.label = ""

    def _chunk(self, delta: dict, finish_reason: str | None = None) -> bytes:
        body = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.label,
            "system_fingerprint": None,
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            ],
        }
        if self.include_usage:
            body["usage"] = None  # as OpenAI sends it: only the last chunk carries usage
        return _data(body)

    async def lines(self, events: AsyncIterator[TurnEvent]) -> AsyncIterator[bytes]:
        async for event in events:
            if isinstance(event, Started):
                self.label = self.name.label(event.model)
                yield self._chunk({"role": "assistant", "content": ""})
            elif isinstance(event, Delta):
                yield self._chunk({"content": event.text})
            elif isinstance(event, Done):
                yield self._chunk({}, finish_reason="stop")
                if self.include_usage:
                    yield _data(
                        {
                            "id": self.id,
                            "object": "chat.completion.chunk",
                            "created": self.created,
                            "model": self.label,
                            "system_fingerprint": None,
                            "choices": [],
                            "usage": _usage(event),
                        }
                    )
                yield b"data: [DONE]\n\n"
            elif isinstance(event, Failed):
                yield _data(_failure(event)[1])
                return


async def _completion(events: AsyncIterator[TurnEvent], name: ModelName) -> HttpResponse:
    text: list[str] = []
    label = ""
    async for event in events:
        if isinstance(event, Started):
            label = name.label(event.model)
        elif isinstance(event, Delta):
            text.append(event.text)
        elif isinstance(event, Failed):
            code, body = _failure(event)
            return JsonResponse(body, status=code)
        elif isinstance(event, Done):
            return JsonResponse(
                {
                    "id": f"chatcmpl-{secrets.token_hex(12)}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": label,
                    "system_fingerprint": None,
                    "choices": [
                        {
                            "index": 0,
                            "message": {
                                "role": "assistant",
                                "content": "".join(text),
                                "refusal": None,
                            },
                            "logprobs": None,
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": _usage(event),
                },
                json_dumps_params={"ensure_ascii": False},
            )
    raise RuntimeError("a turn ended without done or error")


def _data(body: dict) -> bytes:
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n".encode()


class ChatCompletionsApi(OpenAIView):
    def post(self, request):
        """A turn, answered as OpenAI's chat completions API answers (docs/openai.md)."""
        data = CompletionInput(data=request.data)
        data.is_valid(raise_exception=True)
        params = data.validated_data
        if params.get("tools") or params.get("functions"):
            return _error(
                400,
                "Ethan runs its own memory tools and answers in words; a request's own tools "
                "are not supported: leave out `tools`",
                kind="tools_not_supported",
                param="tools" if params.get("tools") else "functions",
            )
        try:
            name = model_name_parse(params["model"])
        except UnknownModelName as exc:
            return _error(404, str(exc), kind="model_not_found", param="model")
        try:
            chat = chat_read(params["messages"])
        except ConversationError as exc:
            return _error(400, str(exc), kind=exc.code, param=exc.param)
        pinned = None
        if request.headers.get(SESSION_HEADER):
            try:
                pinned = session_or_404(request, request.headers[SESSION_HEADER])
            except Http404:
                return _error(
                    404,
                    f"no session {request.headers[SESSION_HEADER]!r} (the {SESSION_HEADER} "
                    "header names one of your sessions)",
                    kind="session_not_found",
                )
        placement = conversation_place(owner=request.user, chat=chat, pinned=pinned)
        try:
            plan = turn_plan(
                owner=request.user,
                session=placement.session,
                text=chat.question,
                mode=name.mode,
                model=name.model,
                channel=ChatSession.Channel.OPENAI,
                again=placement.again,
                history=placement.history,
                instructions=chat.instructions,
            )
            turn = turn_open(plan)
        except TURN_REFUSALS as exc:
            said = refusal(exc)
            headers = {SESSION_HEADER: said.session_id} if said.session_id else {}
            if said.retry_after:
                headers["Retry-After"] = str(said.retry_after)
            # turn_plan's fields are all read from `messages`.
            param = "messages" if said.field else None
            # OpenAI's own invalid requests carry no code.
            kind = None if said.status == 400 else said.code
            return _error(said.status, said.detail, kind=kind, param=param, headers=headers)
        owner, session = request.user, turn.session

        def sent(events: AsyncIterator[TurnEvent], io: TurnIO) -> AsyncIterator[TurnEvent]:
            return _sent(events, io, owner=owner, session=session, chat=chat)

        headers = {SESSION_HEADER: session.pk}
        if params["stream"]:
            options = params.get("stream_options") or {}
            chunks = _Chunks(name=name, include_usage=options.get("include_usage", False))
            return TurnAnswer(turn, through=sent, lines=chunks.lines, headers=headers)
        return TurnAnswer(
            turn, through=sent, answer=lambda events: _completion(events, name), headers=headers
        )
