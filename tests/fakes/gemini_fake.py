"""Gemini generateContent on the wire: POST /v1beta/models/{model}:generateContent (or /v1/)."""

from __future__ import annotations

import base64
import re
from typing import Any

from tests.fakes.base import FakeServer, ProtocolError, Recorded

PATH = re.compile(r"^/v1(?:beta)?/models/(?P<model>[^/:]+):generateContent$")


class FakeGemini(FakeServer):
    def __init__(self) -> None:
        super().__init__()
        # Signatures this fake handed out, by function name: Gemini 3 refuses a history whose
        # function call parts come back without their signature.
        self.signatures: dict[str, str] = {}

    def check(self, recorded: Recorded) -> None:
        if not PATH.match(recorded.path.split("?")[0]):
            raise ProtocolError(f"unknown path {recorded.path}")
        if not recorded.headers.get("x-goog-api-key"):
            raise ProtocolError("API key not valid. Please pass a valid API key.")
        body = recorded.body
        contents = body.get("contents") or []
        if not contents:
            raise ProtocolError("contents is not specified")
        open_calls: list[str] = []
        for index, content in enumerate(contents):
            role = content.get("role")
            if role not in ("user", "model"):
                raise ProtocolError(f"contents[{index}]: role must be user or model")
            parts = content.get("parts") or []
            responses = [p["functionResponse"]["name"] for p in parts if "functionResponse" in p]
            if responses and (role != "user" or sorted(responses) != sorted(open_calls)):
                raise ProtocolError(
                    f"contents[{index}]: function responses must answer the previous turn's "
                    f"function calls {open_calls}"
                )
            open_calls = []
            for part in parts:
                call = part.get("functionCall")
                if call is None:
                    continue
                open_calls.append(call["name"])
                issued = self.signatures.get(call["name"])
                if issued and part.get("thoughtSignature") != issued:
                    raise ProtocolError(
                        f"Function call `{call['name']}` in contents[{index}] is missing a "
                        "thought_signature"
                    )
        for tool in body.get("tools", []):
            for declaration in tool.get("functionDeclarations", []):
                if "name" not in declaration:
                    raise ProtocolError("function declarations need a name")

    @staticmethod
    def response(*parts: dict[str, Any], finish: str = "STOP") -> dict[str, Any]:
        return {
            "candidates": [
                {
                    "content": {"role": "model", "parts": list(parts)},
                    "finishReason": finish,
                    "index": 0,
                }
            ],
            "usageMetadata": {
                "promptTokenCount": 17,
                "candidatesTokenCount": 6,
                "totalTokenCount": 23,
            },
            "modelVersion": "fake",
        }

    @classmethod
    def text(cls, content: str) -> dict[str, Any]:
        return cls.response({"text": content})

    def function_call(
        self,
        name: str,
        args: dict[str, Any],
        signature: bytes | None = None,
        call_id: str | None = None,
    ) -> dict[str, Any]:
        part: dict[str, Any] = {"functionCall": {"name": name, "args": args}}
        if call_id:
            part["functionCall"]["id"] = call_id
        if signature:
            encoded = base64.b64encode(signature).decode()
            part["thoughtSignature"] = encoded
            self.signatures[name] = encoded
        return self.response(part)

    def error_body(self, status: int, message: str) -> Any:
        names = {
            400: "INVALID_ARGUMENT",
            401: "UNAUTHENTICATED",
            403: "PERMISSION_DENIED",
            429: "RESOURCE_EXHAUSTED",
            500: "INTERNAL",
            503: "UNAVAILABLE",
        }
        return {
            "error": {"code": status, "message": message, "status": names.get(status, "UNKNOWN")}
        }
