"""Anthropic Messages on the wire: POST /v1/messages, streamed (`"stream": true`: message_start,
content_block_start/delta/stop per block, message_delta, message_stop) or not."""

from __future__ import annotations

import json
from typing import Any

from tests.fakes.base import (
    FakeServer,
    ProtocolError,
    Recorded,
    is_object_schema,
    schema_nodes,
    sse,
)

# Keywords structured outputs refuse ("JSON Schema limitations" in Anthropic's guide): numeric
# and string-length constraints, array constraints beyond minItems 0 or 1, and composition
# beyond anyOf/allOf.
NOT_IN_JSON_OUTPUTS = frozenset(
    {
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "maxItems",
        "uniqueItems",
        "contains",
        "not",
        "if",
        "then",
        "else",
        "patternProperties",
    }
)


class FakeAnthropic(FakeServer):
    def check(self, recorded: Recorded) -> None:
        if recorded.path != "/v1/messages":
            raise ProtocolError(f"unknown path {recorded.path}")
        headers = recorded.headers
        if not (headers.get("x-api-key") or headers.get("authorization")):
            raise ProtocolError("missing credentials")
        if not headers.get("anthropic-version"):
            raise ProtocolError("missing anthropic-version header")
        body = recorded.body
        if not isinstance(body.get("max_tokens"), int):
            raise ProtocolError("max_tokens: Field required")
        if "system" in body and not isinstance(body["system"], str | list):
            raise ProtocolError("system must be a string or text blocks")
        messages = body.get("messages") or []
        expected = "user"
        open_tool_uses: set[str] = set()
        for index, message in enumerate(messages):
            role = message.get("role")
            if role == "system":
                raise ProtocolError("messages: system is a top-level parameter, not a role")
            if role != expected:
                raise ProtocolError(f"messages.{index}: roles must alternate user/assistant")
            blocks = message["content"] if isinstance(message["content"], list) else []
            if role == "user":
                answered = {b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"}
                if answered != open_tool_uses:
                    raise ProtocolError(
                        f"messages.{index}: tool_result blocks must answer exactly the tool_use "
                        f"ids of the previous assistant message ({sorted(open_tool_uses)})"
                    )
                open_tool_uses = set()
            else:
                open_tool_uses = {b["id"] for b in blocks if b.get("type") == "tool_use"}
            for block in blocks:
                if block.get("type") == "text" and not block.get("text"):
                    raise ProtocolError(f"messages.{index}: text content blocks must be non-empty")
                if block.get("type") in ("image", "document"):
                    self.check_source(block, f"messages.{index}")
            expected = "assistant" if role == "user" else "user"
        for tool in body.get("tools", []):
            if set(tool) - {"name", "description", "input_schema"} or "input_schema" not in tool:
                raise ProtocolError("tools take name, description and input_schema")
        if "tool_choice" in body:
            self.check_tool_choice(body["tool_choice"], body.get("tools", []))
        if "output_config" in body:
            self.check_output_config(body["output_config"])

    @staticmethod
    def check_source(block: dict[str, Any], where: str) -> None:
        """An image or document block's source: base64 with its media type, or a URL. Images
        are JPEG, PNG, GIF or WebP; documents PDF (or plain text)."""
        source = block.get("source") or {}
        kind = source.get("type")
        if kind == "url":
            if not str(source.get("url", "")).startswith("https://"):
                raise ProtocolError(f"{where}: source.url must be an https URL")
            return
        if kind != "base64" or not source.get("data"):
            raise ProtocolError(f"{where}: source must be base64 (with data) or url")
        allowed = (
            {"image/jpeg", "image/png", "image/gif", "image/webp"}
            if block["type"] == "image"
            else {"application/pdf", "text/plain"}
        )
        if source.get("media_type") not in allowed:
            raise ProtocolError(f"{where}: source.media_type must be one of {sorted(allowed)}")

    @staticmethod
    def check_tool_choice(choice: Any, tools: list[dict[str, Any]]) -> None:
        """auto, any, none, or one named tool (forced), which must be among the tools."""
        kind = choice.get("type") if isinstance(choice, dict) else None
        if kind not in ("auto", "any", "tool", "none"):
            raise ProtocolError(f"tool_choice.type: invalid value {kind!r}")
        if kind in ("any", "tool") and not tools:
            raise ProtocolError("tool_choice any or tool needs tools")
        if kind == "tool" and choice.get("name") not in {t["name"] for t in tools}:
            raise ProtocolError(
                f"tool_choice names a tool that is not offered: {choice.get('name')!r}"
            )

    @staticmethod
    def check_output_config(config: Any) -> None:
        """output_config.format is {type: json_schema, schema}: every object closed
        (additionalProperties: false), and none of the keywords JSON outputs refuse."""
        if not isinstance(config, dict):
            raise ProtocolError("output_config must be an object")
        fmt = config.get("format")
        if fmt is None:
            return
        if fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
            raise ProtocolError("output_config.format: expected {type: json_schema, schema}")
        for path, node in schema_nodes(fmt["schema"]):
            where = "/".join(path) or "the top level"
            refused = sorted(NOT_IN_JSON_OUTPUTS & set(node))
            if node.get("minItems") not in (None, 0, 1):
                refused.append("minItems")
            if refused:
                raise ProtocolError(
                    f"output_config.format.schema: '{refused[0]}' is not supported ({where})"
                )
            if is_object_schema(node) and node.get("additionalProperties") is not False:
                raise ProtocolError(
                    "output_config.format.schema: For 'object' type, 'additionalProperties' "
                    f"must be explicitly set to false ({where})"
                )

    def wants_stream(self, recorded: Recorded) -> bool:
        return isinstance(recorded.body, dict) and recorded.body.get("stream") is True

    def stream_events(self, body: Any, recorded: Recorded) -> list[bytes]:
        """A message as Anthropic streams it. The input count comes in message_start, the final
        output count in message_delta (cumulative); a tool_use block starts with an empty input
        that input_json_delta events fill with the pieces of its JSON."""
        usage = body.get("usage") or {}
        start = {
            **body,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": usage.get("input_tokens", 0),
                "output_tokens": min(1, usage.get("output_tokens", 0)),
            },
        }
        frames = [
            sse({"type": "message_start", "message": start}, "message_start"),
            sse({"type": "ping"}, "ping"),
        ]
        for index, block in enumerate(body.get("content") or []):
            if block["type"] == "text":
                opening = {"type": "text", "text": ""}
                deltas = [{"type": "text_delta", "text": p} for p in self.split(block["text"])]
            else:
                opening = {**block, "input": {}}
                raw = json.dumps(block["input"], ensure_ascii=False)
                deltas = [
                    {"type": "input_json_delta", "partial_json": p} for p in ["", *self.split(raw)]
                ]
            frames.append(
                sse(
                    {"type": "content_block_start", "index": index, "content_block": opening},
                    "content_block_start",
                )
            )
            for delta in deltas:
                frames.append(
                    sse(
                        {"type": "content_block_delta", "index": index, "delta": delta},
                        "content_block_delta",
                    )
                )
            frames.append(sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
        frames.append(
            sse(
                {
                    "type": "message_delta",
                    "delta": {
                        "stop_reason": body.get("stop_reason"),
                        "stop_sequence": body.get("stop_sequence"),
                    },
                    "usage": {"output_tokens": usage.get("output_tokens", 0)},
                },
                "message_delta",
            )
        )
        frames.append(sse({"type": "message_stop"}, "message_stop"))
        return frames

    def stream_error_event(self) -> bytes:
        return sse(
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            "error",
        )

    @staticmethod
    def message(*blocks: dict[str, Any], stop_reason: str = "end_turn") -> dict[str, Any]:
        return {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "fake",
            "content": list(blocks),
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {"input_tokens": 13, "output_tokens": 5},
        }

    @classmethod
    def text(cls, content: str) -> dict[str, Any]:
        return cls.message({"type": "text", "text": content})

    @classmethod
    def tool_use(cls, call_id: str, name: str, args: dict[str, Any], text: str = "") -> dict:
        blocks = [{"type": "text", "text": text}] if text else []
        blocks.append({"type": "tool_use", "id": call_id, "name": name, "input": args})
        return cls.message(*blocks, stop_reason="tool_use")

    def error_body(self, status: int, message: str) -> Any:
        kind = {
            400: "invalid_request_error",
            401: "authentication_error",
            429: "rate_limit_error",
            529: "overloaded_error",
        }
        return {
            "type": "error",
            "error": {"type": kind.get(status, "api_error"), "message": message},
        }
