"""OpenAI Chat Completions on the wire: POST /v1/chat/completions, streamed (`"stream": true`:
`chat.completion.chunk` events, then `data: [DONE]`) or not; and POST /v1/embeddings, answered
with hashed_embedding vectors (as floats or base64, as asked) unless a reply is scripted."""

from __future__ import annotations

import base64
import json
import re
import struct
from typing import Any

from tests.fakes.base import (
    FakeServer,
    ProtocolError,
    Recorded,
    Reply,
    hashed_embedding,
    is_object_schema,
    schema_nodes,
    sse,
)

# Keywords strict structured output refuses ("Supported schemas" in OpenAI's guide): composition
# beyond anyOf, and the constraints it does not enforce.
NOT_IN_STRICT = frozenset(
    {
        "allOf",
        "oneOf",
        "not",
        "if",
        "then",
        "else",
        "dependentRequired",
        "dependentSchemas",
        "patternProperties",
        "unevaluatedProperties",
        "propertyNames",
        "minProperties",
        "maxProperties",
        "minLength",
        "maxLength",
        "unevaluatedItems",
        "contains",
        "minContains",
        "maxContains",
        "uniqueItems",
    }
)
SCHEMA_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


# The API's limits on one /embeddings request.
EMBEDDING_MAX_INPUTS = 2048
INPUT_INVALID = "'$.input' is invalid. Please check the API reference."


class FakeOpenAI(FakeServer):
    # The length of the vectors /embeddings answers with when `dimensions` is not asked for.
    embedding_dim = 64

    def check(self, recorded: Recorded) -> None:
        if not recorded.path.endswith(("/chat/completions", "/embeddings")):
            raise ProtocolError(f"unknown path {recorded.path}")
        if not recorded.headers.get("authorization", "").startswith("Bearer "):
            raise ProtocolError("missing bearer token")
        if recorded.path.endswith("/embeddings"):
            self.check_embeddings(recorded.body)
            return
        body = recorded.body
        if not isinstance(body, dict) or not body.get("model") or not body.get("messages"):
            raise ProtocolError("model and messages are required")
        pending: set[str] = set()
        for message in body["messages"]:
            role = message.get("role")
            if role not in ("system", "developer", "user", "assistant", "tool"):
                raise ProtocolError(f"invalid role {role!r}")
            if role == "tool":
                if message.get("tool_call_id") not in pending:
                    raise ProtocolError("a tool message must answer a preceding tool_calls id")
                pending.discard(message["tool_call_id"])
                continue
            if pending:
                raise ProtocolError(f"tool_calls without answers: {sorted(pending)}")
            if isinstance(message.get("content"), list):
                self.check_parts(message["content"], role)
            for call in message.get("tool_calls") or []:
                json.loads(call["function"]["arguments"])  # must be a JSON string
                pending.add(call["id"])
        for tool in body.get("tools", []):
            if tool.get("type") != "function" or "parameters" not in tool.get("function", {}):
                raise ProtocolError("tools must be {type: function, function: {name, parameters}}")
        if "stream_options" in body and not body.get("stream"):
            raise ProtocolError("stream_options is only allowed when stream is true")
        if "response_format" in body:
            self.check_response_format(body["response_format"])

    @staticmethod
    def check_embeddings(body: Any) -> None:
        """model, and input as one non-empty string or a list of at most 2048 of them (or token
        arrays); encoding_format float or base64; dimensions a positive integer."""
        if not isinstance(body, dict) or not isinstance(body.get("model"), str):
            raise ProtocolError("you must provide a model parameter")
        given = body.get("input")
        inputs = [given] if isinstance(given, str) else given
        if not isinstance(inputs, list) or not 0 < len(inputs) <= EMBEDDING_MAX_INPUTS:
            raise ProtocolError(INPUT_INVALID)
        for item in inputs:
            text_ok = isinstance(item, str) and item != ""
            tokens_ok = isinstance(item, list) and item and all(isinstance(t, int) for t in item)
            if not (text_ok or tokens_ok or isinstance(item, int)):
                raise ProtocolError(INPUT_INVALID)
        if body.get("encoding_format", "float") not in ("float", "base64"):
            raise ProtocolError("encoding_format must be float or base64")
        dimensions = body.get("dimensions")
        if dimensions is not None and not (isinstance(dimensions, int) and dimensions > 0):
            raise ProtocolError("dimensions must be a positive integer")

    def answer(self, recorded: Recorded) -> Reply | None:
        if not recorded.path.endswith("/embeddings"):
            return None
        return Reply(body=self.embeddings(recorded.body))

    def embeddings(self, request: dict[str, Any]) -> dict[str, Any]:
        """The /embeddings answer to `request`: one vector per input, in the encoding asked."""
        given = request["input"]
        inputs = [given] if isinstance(given, str) else given
        dim = request.get("dimensions") or self.embedding_dim
        base64_wanted = request.get("encoding_format") == "base64"
        data = []
        for index, item in enumerate(inputs):
            vector = hashed_embedding(item if isinstance(item, str) else str(item), dim)
            if base64_wanted:
                packed = struct.pack(f"<{dim}f", *vector)
                embedding: Any = base64.b64encode(packed).decode()
            else:
                embedding = vector
            data.append({"object": "embedding", "index": index, "embedding": embedding})
        tokens = sum(len(str(item).split()) for item in inputs)
        return {
            "object": "list",
            "data": data,
            "model": request["model"],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    @staticmethod
    def check_parts(parts: list[Any], role: str) -> None:
        """Content parts: text everywhere; image_url, input_audio and file in user messages,
        each with what the API requires of it."""
        for part in parts:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text" and isinstance(part.get("text"), str):
                continue
            if role != "user" or kind not in ("image_url", "input_audio", "file"):
                raise ProtocolError(f"invalid content part {kind!r} in a {role} message")
            if kind == "image_url" and not str(part["image_url"].get("url", "")).startswith(
                ("https://", "http://", "data:image/")
            ):
                raise ProtocolError("image_url.url must be a URL or a data:image/ URL")
            if kind == "input_audio" and part["input_audio"].get("format") not in ("wav", "mp3"):
                raise ProtocolError("input_audio.format must be wav or mp3")
            if kind == "file" and not (
                part["file"].get("file_data") or part["file"].get("file_id")
            ):
                raise ProtocolError("file needs file_data or file_id")

    @staticmethod
    def check_response_format(response_format: Any) -> None:
        """json_object, or json_schema with a name and a schema; a strict schema must close
        every object (additionalProperties: false), list every property in required, and use
        only the keywords strict mode supports, as the real API insists."""
        kind = response_format.get("type") if isinstance(response_format, dict) else None
        if kind not in ("text", "json_object", "json_schema"):
            raise ProtocolError(f"response_format.type: invalid value {kind!r}")
        if kind != "json_schema":
            return
        spec = response_format.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("schema"), dict):
            raise ProtocolError("response_format.json_schema needs a schema object")
        name = spec.get("name")
        if not isinstance(name, str) or not SCHEMA_NAME.match(name):
            raise ProtocolError(f"response_format.json_schema.name: invalid value {name!r}")
        if not spec.get("strict"):
            return
        schema = spec["schema"]
        prefix = f"Invalid schema for response_format '{name}'"
        if schema.get("type") != "object" or "anyOf" in schema:
            raise ProtocolError(f"{prefix}: schema must be a JSON Schema of 'type: \"object\"'")
        for path, node in schema_nodes(schema):
            where = f"In context={path}"
            refused = sorted(NOT_IN_STRICT & set(node))
            if refused:
                raise ProtocolError(f"{prefix}: {where}, '{refused[0]}' is not permitted.")
            if "$ref" in node and set(node) - {"$ref"}:
                raise ProtocolError(f"{prefix}: {where}, $ref cannot have keywords beside it.")
            if not is_object_schema(node):
                continue
            if node.get("additionalProperties") is not False:
                raise ProtocolError(
                    f"{prefix}: {where}, 'additionalProperties' is required to be supplied "
                    "and to be false."
                )
            missing = [
                key for key in node.get("properties") or {} if key not in node.get("required", [])
            ]
            if missing:
                raise ProtocolError(
                    f"{prefix}: {where}, 'required' is required to be supplied and to be an "
                    f"array including every key in properties. Missing '{missing[0]}'."
                )

    def wants_stream(self, recorded: Recorded) -> bool:
        return isinstance(recorded.body, dict) and recorded.body.get("stream") is True

    def stream_events(self, body: Any, recorded: Recorded) -> list[bytes]:
        """A chat.completion as the chunks OpenAI streams: the role, the content in pieces, each
        tool call's id and name then its arguments in pieces, the finish reason, and (with
        stream_options.include_usage) a last chunk with no choices and the usage."""
        include_usage = bool((recorded.body.get("stream_options") or {}).get("include_usage"))
        head = {
            "id": body.get("id", "chatcmpl-1"),
            "object": "chat.completion.chunk",
            "created": body.get("created", 0),
            "model": body.get("model", "fake"),
            "system_fingerprint": None,
        }

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            data = {
                **head,
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
                ],
            }
            if include_usage:
                data["usage"] = None  # every chunk but the last says so
            return sse(data)

        choice = body["choices"][0]
        message = choice["message"]
        content = message.get("content") or ""
        calls = message.get("tool_calls") or []
        first: dict[str, Any] = {"role": "assistant", "content": "" if content else None}
        frames = []
        for piece in self.split(content):
            frames.append(chunk({"content": piece}))
        for index, call in enumerate(calls):
            opening = {
                "index": index,
                "id": call["id"],
                "type": "function",
                "function": {"name": call["function"]["name"], "arguments": ""},
            }
            if index == 0 and not content:
                first["tool_calls"] = [opening]  # the role comes with the first call
            else:
                frames.append(chunk({"tool_calls": [opening]}))
            for piece in self.split(call["function"]["arguments"]):
                frames.append(
                    chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                )
        frames.insert(0, chunk({**first, "refusal": None}))
        frames.append(chunk({}, choice.get("finish_reason") or "stop"))
        if include_usage:
            frames.append(sse({**head, "choices": [], "usage": body.get("usage")}))
        frames.append(sse("[DONE]"))
        return frames

    def stream_error_event(self) -> bytes:
        return sse(
            {
                "error": {
                    "message": "The server had an error while processing your request.",
                    "type": "server_error",
                    "param": None,
                    "code": None,
                }
            }
        )

    @staticmethod
    def text(content: str, prompt_tokens: int = 11, completion_tokens: int = 7) -> dict[str, Any]:
        return {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": "fake",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": content},
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    @staticmethod
    def tool_calls(*calls: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": "chatcmpl-2",
            "object": "chat.completion",
            "created": 0,
            "model": "fake",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": call_id,
                                "type": "function",
                                "function": {
                                    "name": name,
                                    "arguments": json.dumps(args, ensure_ascii=False),
                                },
                            }
                            for call_id, name, args in calls
                        ],
                    },
                }
            ],
            "usage": {"prompt_tokens": 20, "completion_tokens": 9, "total_tokens": 29},
        }

    def error_body(self, status: int, message: str) -> Any:
        kind = {400: "invalid_request_error", 401: "invalid_api_key", 429: "rate_limit_exceeded"}
        return {
            "error": {
                "message": message,
                "type": kind.get(status, "server_error"),
                "code": None,
                "param": None,
            }
        }


class MiniModel:
    """The OpenAI fake's answers: gpt-4o chats, gpt-4o-mini (the routed compression model)
    summarises, extracts, consolidates and folds. Counts what it was asked.

    Consolidating (a compress batch, a session's end: summary and facts in one call), it
    answers "摘要n" and one fact per user turn it may take facts from, "用户说过：<the turn>"
    with that turn's number, so a test sees which message each fact came from. Several
    sessions' ends in one call get "会话摘要1", "会话摘要2", … and the same facts."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, recorded):
        body = recorded.body
        system = body["messages"][0]["content"]
        if body["model"] == "gpt-4o":
            return Reply(body=FakeOpenAI.text(f"好的{len(self.calls)}"))
        if "You do two things with several separate conversations" in system:
            kind = "consolidate_sessions"
            self.calls.append(kind)
            transcript = body["messages"][-1]["content"]
            count = len(re.findall(r"^## Conversation \d+$", transcript, re.MULTILINE))
            text = json.dumps(
                {
                    "summaries": [f"会话摘要{n}" for n in range(1, count + 1)],
                    "facts": self.facts_said(system, transcript),
                },
                ensure_ascii=False,
            )
            return Reply(body={**FakeOpenAI.text(text), "model": body["model"]})
        if "You do two things with a conversation" in system:
            kind = "consolidate"
            self.calls.append(kind)
            text = json.dumps(
                {
                    "summary": f"摘要{self.calls.count(kind)}",
                    "facts": self.facts_said(system, body["messages"][-1]["content"]),
                },
                ensure_ascii=False,
            )
            return Reply(body={**FakeOpenAI.text(text), "model": body["model"]})
        if "compress a conversation" in system:
            kind, text = "summarize", f"摘要{self.calls.count('summarize') + 1}"
        elif "extract long-term memories" in system:
            kind = "extract"
            text = json.dumps(
                {
                    "facts": [
                        {"content": "用户是后端工程师", "category": "knowledge", "importance": 0.8},
                        {
                            "content": "用户更喜欢简短的回答",
                            "category": "preference",
                            "importance": 0.9,
                        },
                    ]
                },
                ensure_ascii=False,
            )
        else:
            assert "running summary" in system
            kind, text = "fold", "滚动摘要"
        self.calls.append(kind)
        return Reply(body={**FakeOpenAI.text(text), "model": body["model"]})

    @staticmethod
    def facts_said(system: str, transcript: str) -> list[dict[str, Any]]:
        """One fact per numbered user turn of `transcript` from the first the system prompt
        lets it take facts from."""
        first = re.search(r"take facts only from turn \[(\d+)\]", system)
        facts = []
        for number, text in re.findall(r"^\[(\d+)\] user: (.*)$", transcript, re.MULTILINE):
            if int(number) >= (int(first.group(1)) if first else 1):
                facts.append(
                    {
                        "content": f"用户说过：{text}",
                        "category": "knowledge",
                        "importance": 0.8,
                        "turns": [int(number)],
                    }
                )
        return facts
