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
import re
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import replace

from django.contrib.auth.models import AbstractBaseUser
from django.http import Http404, HttpResponse, JsonResponse
from rest_framework import exceptions, serializers
from rest_framework.response import Response
from rest_framework.views import APIView

import ethan_llm
from agent_app.turn import (
    ClientPart,
    Delta,
    Done,
    Failed,
    Started,
    TurnEvent,
    TurnSuperseded,
    turn_plan,
)
from agent_app.turn_io import TurnIO
from channels_app.openai.conversations import (
    ClientChat,
    ConversationError,
    chat_read,
    conversation_claim,
    conversation_place,
    conversation_record,
    transcript_read,
)
from channels_app.openai.housekeeping import Housekeeping, housekeeping_of
from channels_app.openai.housekeeping_tally import housekeeping_count
from channels_app.openai.names import ModelName, UnknownModelName, model_name_parse, model_names
from channels_app.turns import (
    TURN_REFUSALS,
    Shown,
    drained_async,
    failure,
    refusal,
    turn_open,
)
from channels_app.web import Opened, TurnDoor
from ethan_llm.types import AUTO, Sampling, ToolCall, ToolChoice
from ethan_shared.api import exception_handler, openai_error
from ethan_shared.authentication import BearerTokenAuthentication
from sessions_app.apis import session_or_404
from sessions_app.models import ChatSession

log = logging.getLogger(__name__)

# A function's name as OpenAI takes it.
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")

# Pins a request to one of the person's sessions; every answer names its session in it too.
SESSION_HEADER = "X-Ethan-Session"

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
    """What Ethan reads of a request (docs/openai.md, "What Ethan takes of a request"). Any
    other field OpenAI defines is accepted and left out (the docs list them): a valid request
    is never refused for a parameter Ethan can pass on or ignore."""

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
    tools = serializers.ListField(child=serializers.DictField(), required=False, allow_null=True)
    tool_choice = serializers.JSONField(required=False, allow_null=True)
    parallel_tool_calls = serializers.BooleanField(required=False, allow_null=True)
    functions = serializers.ListField(
        child=serializers.DictField(), required=False, allow_null=True
    )
    function_call = serializers.JSONField(required=False, allow_null=True)
    temperature = serializers.FloatField(required=False, allow_null=True, min_value=0, max_value=2)
    top_p = serializers.FloatField(required=False, allow_null=True, min_value=0, max_value=1)
    max_tokens = serializers.IntegerField(required=False, allow_null=True, min_value=1)
    max_completion_tokens = serializers.IntegerField(required=False, allow_null=True, min_value=1)
    stop = serializers.JSONField(required=False, allow_null=True)
    seed = serializers.IntegerField(required=False, allow_null=True)
    response_format = serializers.DictField(required=False, allow_null=True)
    user = serializers.CharField(required=False, allow_null=True, allow_blank=True, max_length=256)


class ClientToolsError(ValueError):
    """The request's tools or tool choice are not what OpenAI's API takes (a 400)."""

    def __init__(self, message: str, *, param: str):
        super().__init__(message)
        self.param = param


def _tool_specs(params: dict) -> tuple[ethan_llm.ToolSpec, ...]:
    """The request's `tools` (or the older `functions`) as the model layer's ToolSpecs."""
    functions = [
        (f"tools[{index}].function", tool.get("function"))
        for index, tool in enumerate(params.get("tools") or ())
        if tool.get("type", "function") == "function"
    ]
    functions += [(f"functions[{i}]", f) for i, f in enumerate(params.get("functions") or ())]
    specs, names = [], set()
    for where, function in functions:
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
            raise ClientToolsError(
                f"{where}.name must be 1-64 letters, digits, underscores or dashes", param=where
            )
        if name in names:
            raise ClientToolsError(f"{where}.name: the tool {name!r} is given twice", param=where)
        names.add(name)
        parameters = function.get("parameters") or {"type": "object", "properties": {}}
        if not isinstance(parameters, dict):
            raise ClientToolsError(f"{where}.parameters must be a JSON schema", param=where)
        specs.append(ethan_llm.ToolSpec(name, str(function.get("description") or ""), parameters))
    return tuple(specs)


def _tool_choice(params: dict, names: set[str]) -> ToolChoice:
    """tool_choice (or the older function_call): auto, none, required, or a named function."""
    param = "tool_choice" if params.get("tool_choice") is not None else "function_call"
    raw = params.get(param)
    if raw is None or raw == "auto":
        return AUTO
    if raw in ("none", "required"):
        return ToolChoice(mode=raw)
    name = None
    if isinstance(raw, dict):
        name = (raw.get("function") or {}).get("name") if "function" in raw else raw.get("name")
    if not isinstance(name, str) or name not in names:
        raise ClientToolsError(
            f"{param} must be auto, none, required or one of the request's functions",
            param=param,
        )
    return ToolChoice(mode="function", name=name)


def _sampling(params: dict) -> Sampling:
    stop = params.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    if stop is not None and not (isinstance(stop, list) and all(isinstance(s, str) for s in stop)):
        raise ClientToolsError("stop must be a string or a list of strings", param="stop")
    return Sampling(
        temperature=params.get("temperature"),
        top_p=params.get("top_p"),
        stop=tuple(stop or ()),
        seed=params.get("seed"),
        response_format=params.get("response_format"),
        user=params.get("user") or "",
    )


def client_part_read(params: dict, chat: ClientChat | None = None) -> ClientPart:
    """The request's own part of the turn: its tools, choices, length limit and (with `chat`)
    what its question brings and the tool results it carries."""
    tools = _tool_specs(params)
    return ClientPart(
        tools=tools,
        tool_choice=_tool_choice(params, {tool.name for tool in tools}) if tools else AUTO,
        parallel_tool_calls=params.get("parallel_tool_calls"),
        sampling=_sampling(params),
        max_tokens=params.get("max_completion_tokens") or params.get("max_tokens"),
        attachments=chat.attachments if chat else (),
        step=chat.step if chat else None,
    )


async def _sent(
    events: AsyncIterator[TurnEvent],
    io: TurnIO,
    *,
    owner: AbstractBaseUser,
    session: ChatSession,
    chat: ClientChat,
) -> AsyncIterator[TurnEvent]:
    """The turn's events, and the conversation recorded at its end: what the client was shown
    (channels_app.turns.Shown: every model step's words, STEP_BREAK between them), since it
    is what the client will send back as history."""
    shown = Shown()
    async for event in events:
        shown.add(event)
        if isinstance(event, Done):
            await io.db(
                conversation_record,
                owner=owner,
                session=session,
                chat=chat,
                shown=shown.text,
                calls=event.client_tool_calls,
            )
        elif isinstance(event, Failed):
            await io.db(conversation_record, owner=owner, session=session, chat=chat, shown=None)
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

    def __init__(self, *, name: ModelName, include_usage: bool, legacy: bool = False):
        self.name = name
        self.include_usage = include_usage
        self.legacy = legacy  # the request named `functions`: calls as `function_call`
        self.id = f"chatcmpl-{secrets.token_hex(12)}"
        self.created = int(time.time())
        self.label = ""
        self._around_words: tuple[bytes, bytes] | None = None

    def _words_chunk(self, words: str) -> bytes:
        """_chunk({"content": words}), the same bytes, from the rest of the chunk encoded once:
        a stream's deltas differ only by their words (encoding the whole chunk for each took
        5.5 µs, the words alone 1.1)."""
        if self._around_words is None:
            marker = "\u0000words\u0000"
            whole = self._chunk({"content": marker})
            head, _, tail = whole.partition(json.dumps(marker).encode())
            self._around_words = (head, tail)
        head, tail = self._around_words
        return head + json.dumps(words, ensure_ascii=False).encode() + tail

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
        shown = Shown()
        async for event in events:
            words = shown.add(event)
            if isinstance(event, Started):
                self.label = self.name.label(event.model)
                yield self._chunk({"role": "assistant", "content": ""})
            elif isinstance(event, Delta):
                yield self._words_chunk(words)
            elif isinstance(event, Done):
                if words:  # a last step that streamed nothing: its reply whole
                    yield self._chunk({"content": words})
                calls = event.client_tool_calls
                if calls and self.legacy:
                    function = _function(calls[0])
                    yield self._chunk({"function_call": function})
                elif calls:
                    # As OpenAI streams them: each call by its index, its id and name first.
                    for index, call in enumerate(calls):
                        yield self._chunk({"tool_calls": [{"index": index, **_tool_call(call)}]})
                yield self._chunk({}, finish_reason=_finish_reason(event, self.legacy))
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


def _function(call: ToolCall) -> dict:
    return {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)}


def _tool_call(call: ToolCall) -> dict:
    return {"id": call.id, "type": "function", "function": _function(call)}


def _finish_reason(done: Done, legacy: bool) -> str:
    if not done.client_tool_calls:
        return "stop"
    return "function_call" if legacy else "tool_calls"


def _message(done: Done, text: str, legacy: bool) -> dict:
    """The assistant message of a chat.completion: its text, and the calls of the chat
    app's own tools (content null when there is no text, as OpenAI sends it)."""
    calls = done.client_tool_calls
    message: dict = {
        "role": "assistant",
        "content": text or (None if calls else ""),
        "refusal": None,
    }
    if calls and legacy:
        message["function_call"] = _function(calls[0])
    elif calls:
        message["tool_calls"] = [_tool_call(call) for call in calls]
    return message


async def _completion(
    events: AsyncIterator[TurnEvent], name: ModelName, legacy: bool = False
) -> HttpResponse:
    answer = await drained_async(events)
    if isinstance(answer.end, Failed):
        code, body = _failure(answer.end)
        return JsonResponse(body, status=code)
    done = answer.end
    return JsonResponse(
        {
            "id": f"chatcmpl-{secrets.token_hex(12)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": name.label(answer.started.model) if answer.started else "",
            "system_fingerprint": None,
            "choices": [
                {
                    "index": 0,
                    "message": _message(done, answer.shown.text, legacy),
                    "logprobs": None,
                    "finish_reason": _finish_reason(done, legacy),
                }
            ],
            "usage": _usage(done),
        },
        json_dumps_params={"ensure_ascii": False},
    )


def _data(body: dict) -> bytes:
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n".encode()


class ChatCompletionsApi(OpenAIView, TurnDoor):
    def post(self, request):
        """A turn, answered as OpenAI's chat completions API answers (docs/openai.md)."""
        data = CompletionInput(data=request.data)
        data.is_valid(raise_exception=True)
        params = data.validated_data
        try:
            name = model_name_parse(params["model"])
        except UnknownModelName as exc:
            return _error(404, str(exc), kind="model_not_found", param="model")
        chore = None if name.plain else housekeeping_of(params["messages"])
        try:
            if name.plain or chore is not None:
                return self._plain(request, params, name, chore)
            chat = chat_read(params["messages"])
            client = client_part_read(params, chat)
        except ConversationError as exc:
            return _error(400, str(exc), kind=exc.code, param=exc.param)
        except ClientToolsError as exc:
            return _error(400, str(exc), param=exc.param)
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
        # Twice at most: the same conversation's first message sent twice at once is stored
        # by one request; the other gives way (TurnSuperseded) and goes to its session.
        for _ in range(2):
            placement = conversation_place(owner=request.user, chat=chat, pinned=pinned)
            try:
                turn = self._start(request, chat, client, name, placement)
                break
            except TurnSuperseded:
                continue
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
        else:
            return _error(
                409, "the same conversation is being started elsewhere: retry", kind="session_busy"
            )
        owner, session = request.user, turn.session

        def sent(events: AsyncIterator[TurnEvent], io: TurnIO) -> AsyncIterator[TurnEvent]:
            return _sent(events, io, owner=owner, session=session, chat=chat)

        return _answer(turn, params, name, through=sent, headers={SESSION_HEADER: session.pk})

    @staticmethod
    def _start(request, chat, client, name, placement):
        """Plan and start the turn where the conversation rule placed it. A new session's
        first write is fenced (conversation_claim): TurnSuperseded when another request of
        the same conversation started it first."""
        new = placement.session is None
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
            client=client,
            fence=conversation_claim(owner=request.user, chat=chat) if new else None,
        )
        return turn_open(plan)

    def _plain(
        self, request, params: dict, name: ModelName, chore: Housekeeping | None
    ) -> HttpResponse:
        """A request answered with no memory (ethan-plain, or a chat app's housekeeping):
        the person's model answers its messages as they are, and nothing is stored."""
        instructions, transcript = transcript_read(params["messages"])
        client = replace(client_part_read(params), transcript=transcript)
        question = next((m.content for m in reversed(transcript) if m.role == "user"), "")
        try:
            plan = turn_plan(
                owner=request.user,
                session=None,
                text=question or "(no question)",
                mode=name.mode,
                model=name.model,
                channel=ChatSession.Channel.OPENAI,
                instructions=instructions,
                client=client,
            )
            turn = turn_open(plan)
        except TURN_REFUSALS as exc:
            said = refusal(exc)
            headers = {"Retry-After": str(said.retry_after)} if said.retry_after else {}
            kind = None if said.status == 400 else said.code
            param = "messages" if said.field else None
            return _error(said.status, said.detail, kind=kind, param=param, headers=headers)
        if chore is not None:
            housekeeping_count(app=chore.app, kind=chore.kind)
        return _answer(turn, params, name)


def _answer(turn, params: dict, name: ModelName, *, through=None, headers=None) -> Opened:
    """The turn answered as the request asked: streamed chunks, or one chat.completion."""
    legacy = bool(params.get("functions")) and not params.get("tools")
    if params["stream"]:
        options = params.get("stream_options") or {}
        chunks = _Chunks(
            name=name, include_usage=options.get("include_usage", False), legacy=legacy
        )
        return Opened(turn, through=through, lines=chunks.lines, headers=headers or {})
    return Opened(
        turn,
        through=through,
        answer=lambda events: _completion(events, name, legacy),
        headers=headers or {},
    )
