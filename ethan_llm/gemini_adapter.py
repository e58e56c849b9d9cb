"""Gemini through google-genai: system_instruction, function_call and function_response parts.

Gemini 3 signs its function calls (thought_signature) and refuses a follow-up request that does
not echo each signature on the part it came with. The signature travels in ToolCall.meta (base64),
which is stored with the message, so the loop works across turns and restarts.
"""

from __future__ import annotations

import base64
import functools
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import httpx2
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from ethan_llm import config
from ethan_llm.errors import ModelError, ModelUnavailable
from ethan_llm.loop_clients import loop_client
from ethan_llm.provider import Request, status_error
from ethan_llm.routing import GEMINI
from ethan_llm.types import (
    Attachment,
    Completion,
    Message,
    StreamEnd,
    StreamEvent,
    TextDelta,
    ToolCall,
    Usage,
)


@functools.lru_cache(maxsize=16)
def _client(api_key: str, base_url: str | None, timeout: float) -> genai.Client:
    options = types.HttpOptions(timeout=int(timeout * 1000))  # milliseconds
    if base_url:
        options.base_url = base_url
    return genai.Client(api_key=api_key, http_options=options)


def _call_part(call: ToolCall) -> types.Part:
    meta = call.meta or {}
    # Send the id back only when Gemini gave one; ours are local stand-ins.
    function_call = types.FunctionCall(
        id=call.id if meta.get("gemini_id") else None, name=call.name, args=call.arguments
    )
    signature = meta.get("thought_signature")
    return types.Part(
        function_call=function_call,
        thought_signature=base64.b64decode(signature) if signature else None,
    )


def _attachment_part(attachment: Attachment) -> types.Part:
    """An image, a sound or a file as inline bytes, or as a file URI the service fetches."""
    if attachment.data:
        return types.Part.from_bytes(
            data=base64.b64decode(attachment.data), mime_type=attachment.mime
        )
    return types.Part.from_uri(file_uri=attachment.url, mime_type=attachment.mime or None)


def to_wire_contents(messages: tuple[Message, ...]) -> list[types.Content]:
    """Roles user and model; tool results are function_response parts in a user turn, and
    consecutive tool results answering one model turn share that user turn."""
    calls_by_id: dict[str, ToolCall] = {}
    contents: list[types.Content] = []
    for message in messages:
        if message.role == "assistant":
            parts = [types.Part(text=message.content)] if message.content else []
            for call in message.tool_calls:
                calls_by_id[call.id] = call
                parts.append(_call_part(call))
            role = "model"
        elif message.role == "tool":
            call = calls_by_id.get(message.tool_call_id)
            name = message.name or (call.name if call else "")
            response = types.FunctionResponse(
                id=call.id if call and (call.meta or {}).get("gemini_id") else None,
                name=name,
                response={"result": message.content},
            )
            parts = [types.Part(function_response=response)]
            role = "user"
        else:
            parts = [types.Part(text=message.content)]
            parts += [_attachment_part(attachment) for attachment in message.attachments]
            role = "user"
        if not parts:
            continue
        if contents and contents[-1].role == role and message.role == "tool":
            contents[-1].parts.extend(parts)
        else:
            contents.append(types.Content(role=role, parts=parts))
    return contents


def _generate_config(request: Request) -> types.GenerateContentConfig:
    """The generate_content_stream config of a request (the same for both clients)."""
    generate_config = types.GenerateContentConfig(
        system_instruction=request.system or None,
        max_output_tokens=request.max_tokens,
        # The tool loop is ours: the SDK must not run Python functions by itself.
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        # Retries are ours too: the SDK would otherwise send the request again by itself
        # when a stream ends early, which after the first delta would repeat the answer.
        automatic_continuation=False,
    )
    if request.tools:
        generate_config.tools = [
            types.Tool(
                function_declarations=[
                    types.FunctionDeclaration(
                        name=t.name,
                        description=t.description,
                        parameters_json_schema=t.parameters,
                    )
                    for t in request.tools
                ]
            )
        ]
    _choices(request, generate_config)
    if request.json_schema is not None:
        # Structured output: JSON held to the schema (JSON Schema itself, not the OpenAPI
        # subset of response_schema).
        generate_config.response_mime_type = "application/json"
        generate_config.response_json_schema = request.json_schema.schema
    return generate_config


def _choices(request: Request, generate_config: types.GenerateContentConfig) -> None:
    """A caller's tool choice and sampling, in Gemini's words: function calling mode ANY
    (restricted to one name for a named function) or NONE; stop_sequences; a JSON answer for
    response_format json_object or json_schema. Gemini has no switch for parallel calls and
    no end-user id: those are left out (docs/openai.md)."""
    choice = request.tool_choice
    if request.tools and choice.mode != "auto":
        mode = {"none": "NONE", "required": "ANY", "function": "ANY"}[choice.mode]
        generate_config.tool_config = types.ToolConfig(
            function_calling_config=types.FunctionCallingConfig(
                mode=mode,
                allowed_function_names=[choice.name] if choice.mode == "function" else None,
            )
        )
    sampling = request.sampling
    generate_config.temperature = sampling.temperature
    generate_config.top_p = sampling.top_p
    generate_config.seed = sampling.seed
    generate_config.stop_sequences = list(sampling.stop) or None
    response_format = sampling.response_format or {}
    if response_format.get("type") in ("json_object", "json_schema"):
        generate_config.response_mime_type = "application/json"
        schema = (response_format.get("json_schema") or {}).get("schema")
        if schema:
            generate_config.response_json_schema = schema


class _Chunks:
    """What a stream's chunks add up to, read one by one (from the sync or the async client):
    the text as it comes, then the whole Completion. Each chunk is a GenerateContentResponse
    with the next parts; function calls come whole, in one part each, with their signatures;
    usage is a running total."""

    def __init__(self, request: Request):
        self.request = request
        self.started = time.perf_counter()
        self.texts: list[str] = []
        self.calls: list[ToolCall] = []
        self.usage: types.GenerateContentResponseUsageMetadata | None = None
        self.finish: Any = None
        self.blocked = False

    def read(self, chunk: types.GenerateContentResponse) -> Iterator[TextDelta]:
        if chunk.usage_metadata is not None:
            self.usage = chunk.usage_metadata
        self.blocked = self.blocked or chunk.prompt_feedback is not None
        candidate = chunk.candidates[0] if chunk.candidates else None
        if candidate is None:
            return
        self.finish = candidate.finish_reason or self.finish
        for part in (candidate.content.parts or []) if candidate.content else []:
            if part.function_call is not None:
                self.calls.append(_tool_call(part))
            elif part.text and not part.thought:
                self.texts.append(part.text)
                yield TextDelta(part.text)

    def end(self) -> StreamEnd:
        latency = (time.perf_counter() - self.started) * 1000
        if self.finish is None and not self.blocked:
            raise ModelUnavailable(f"gemini {self.request.model!r}: the stream ended unfinished")
        usage = self.usage
        return StreamEnd(
            Completion(
                text="".join(self.texts),
                tool_calls=tuple(self.calls),
                usage=Usage(
                    input_tokens=(usage.prompt_token_count or 0) if usage else 0,
                    output_tokens=(usage.candidates_token_count or 0) if usage else 0,
                ),
                model=self.request.model,
                provider=GEMINI,
                latency_ms=latency,
                meta={"finish_reason": str(self.finish) if self.finish else None},
            )
        )


def _client_args(request: Request) -> tuple[str, str | None, float]:
    settings = config.current()
    return (
        config.api_key(GEMINI, request.model, settings.env),
        config.base_url(GEMINI, settings.env),
        request.timeout,
    )


def _client_for(request: Request) -> genai.Client:
    return _client(*_client_args(request))


class GeminiProvider:
    name = GEMINI

    def stream(self, request: Request) -> Iterator[StreamEvent]:
        chunks = _Chunks(request)
        response = _client_for(request).models.generate_content_stream(
            model=request.model,
            contents=to_wire_contents(request.messages),
            config=_generate_config(request),
        )
        for chunk in response:
            yield from chunks.read(chunk)
        yield chunks.end()

    async def astream(self, request: Request) -> AsyncIterator[StreamEvent]:
        # google-genai's `aio` side of the same client. It keeps an aiohttp session per event
        # loop itself; registered here so that a server's loop closes its session at its end.
        # Keyed by its settings, as _client is (an id could be a dropped client's, reused).
        args = _client_args(request)
        aio = loop_client((GEMINI, *args), lambda: _client(*args).aio)
        chunks = _Chunks(request)
        response = await aio.models.generate_content_stream(
            model=request.model,
            contents=to_wire_contents(request.messages),
            config=_generate_config(request),
        )
        async for chunk in response:
            for delta in chunks.read(chunk):
                yield delta
        yield chunks.end()

    def translate(self, exc: Exception, model: str) -> tuple[ModelError, float | None]:
        if isinstance(exc, genai_errors.APIError):
            detail = str(exc.message or exc.status or "")
            status = exc.code or 500
            # Gemini answers a bad key with 400 INVALID_ARGUMENT (reason API_KEY_INVALID).
            if status == 400 and "api key" in detail.lower():
                status = 401
            keys = "GOOGLE_API_KEY (or GEMINI_API_KEY)"
            return status_error("gemini", model, status, detail, keys), None
        # The sync client is httpx2's; the async one aiohttp's (google-genai's choice when
        # aiohttp is installed, as it is for the other SDKs: ethan_llm.openai_adapter).
        if isinstance(exc, httpx2.TimeoutException | TimeoutError):
            return ModelUnavailable(f"gemini {model!r}: the request timed out"), None
        if isinstance(exc, httpx2.TransportError | aiohttp.ClientError):
            return ModelUnavailable(
                f"gemini {model!r}: connection failed ({type(exc).__name__})"
            ), None
        raise exc


def _tool_call(part: types.Part) -> ToolCall:
    """A function call part as a ToolCall; its signature (base64) and whether Gemini gave the
    id travel in meta, to be sent back unchanged (see _call_part)."""
    call = part.function_call
    meta: dict[str, Any] = {}
    if call.id:
        meta["gemini_id"] = True
    if part.thought_signature:
        meta["thought_signature"] = base64.b64encode(part.thought_signature).decode()
    return ToolCall(
        id=call.id or f"call_{uuid.uuid4().hex[:12]}",
        name=call.name or "",
        arguments=dict(call.args or {}),
        meta=meta or None,
    )
