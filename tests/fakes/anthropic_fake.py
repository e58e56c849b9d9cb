"""Anthropic Messages on the wire: POST /v1/messages."""

from __future__ import annotations

from typing import Any

from tests.fakes.base import FakeServer, ProtocolError, Recorded


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
            expected = "assistant" if role == "user" else "user"
        for tool in body.get("tools", []):
            if set(tool) - {"name", "description", "input_schema"} or "input_schema" not in tool:
                raise ProtocolError("tools take name, description and input_schema")

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
