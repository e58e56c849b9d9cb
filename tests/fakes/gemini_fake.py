"""Gemini on the wire: POST /v1beta/models/{model}:generateContent (or /v1/), and
:streamGenerateContent?alt=sse, whose `data:` events are GenerateContentResponse chunks; and
:embedContent and :batchEmbedContents, answered with hashed_embedding vectors unless a reply
is scripted."""

from __future__ import annotations

import base64
import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes.base import (
    FakeServer,
    ProtocolError,
    Recorded,
    Reply,
    hashed_embedding,
    schema_nodes,
    sse,
)

PATH = re.compile(
    r"^/v1(?:beta)?/models/(?P<model>[^/:]+):(?P<method>generateContent|streamGenerateContent"
    r"|embedContent|batchEmbedContents)$"
)
EMBEDDING_METHODS = ("embedContent", "batchEmbedContents")
# The API's limit on one batchEmbedContents request.
EMBEDDING_MAX_REQUESTS = 100
TASK_TYPES = frozenset(
    {
        "TASK_TYPE_UNSPECIFIED",
        "RETRIEVAL_QUERY",
        "RETRIEVAL_DOCUMENT",
        "SEMANTIC_SIMILARITY",
        "CLASSIFICATION",
        "CLUSTERING",
        "QUESTION_ANSWERING",
        "FACT_VERIFICATION",
        "CODE_RETRIEVAL_QUERY",
    }
)


class FakeGemini(FakeServer):
    # The length of the vectors answered when outputDimensionality is not asked for.
    embedding_dim = 48

    def __init__(self) -> None:
        super().__init__()
        # Signatures this fake handed out, by function name: Gemini 3 refuses a history whose
        # function call parts come back without their signature.
        self.signatures: dict[str, str] = {}

    def check(self, recorded: Recorded) -> None:
        url = urlsplit(recorded.path)
        match = PATH.match(url.path)
        if not match:
            raise ProtocolError(f"unknown path {recorded.path}")
        if match["method"] == "streamGenerateContent" and parse_qs(url.query).get("alt") != ["sse"]:
            # Without alt=sse Gemini streams one JSON array; the SDK always asks for SSE.
            raise ProtocolError("this fake streams with alt=sse only")
        if not recorded.headers.get("x-goog-api-key"):
            raise ProtocolError("API key not valid. Please pass a valid API key.")
        body = recorded.body
        if match["method"] in EMBEDDING_METHODS:
            self.check_embedding(match["model"], match["method"], body)
            return
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
                inline = part.get("inlineData") or part.get("inline_data")
                mime = inline and (inline.get("mimeType") or inline.get("mime_type"))
                if inline is not None and not (mime and inline.get("data")):
                    raise ProtocolError(f"contents[{index}]: inlineData needs mimeType and data")
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
        self.check_generation_config(body.get("generationConfig") or {})

    @staticmethod
    def check_embedding(model: str, method: str, body: Any) -> None:
        """embedContent: one request (content with text parts, an optional taskType and
        outputDimensionality); batchEmbedContents: {requests: [...]}, at most 100, each naming
        the model of the URL as models/<model>."""
        if not isinstance(body, dict):
            raise ProtocolError("the request body must be a JSON object")
        if method == "embedContent":
            requests = [body]
        else:
            requests = body.get("requests")
            if not isinstance(requests, list) or not requests:
                raise ProtocolError("* BatchEmbedContentsRequest.requests: cannot be empty")
            if len(requests) > EMBEDDING_MAX_REQUESTS:
                raise ProtocolError(
                    "* BatchEmbedContentsRequest.requests: at most 100 requests can be in one batch"
                )
        for index, request in enumerate(requests):
            if method == "batchEmbedContents" and request.get("model") != f"models/{model}":
                raise ProtocolError(
                    f"requests[{index}].model: must be models/{model}, the model of the URL"
                )
            parts = (request.get("content") or {}).get("parts") or []
            if not parts or not all(isinstance(part.get("text"), str) for part in parts):
                raise ProtocolError(f"requests[{index}].content: needs text parts")
            task = request.get("taskType")
            if task is not None and task not in TASK_TYPES:
                raise ProtocolError(f"requests[{index}].taskType: invalid value {task!r}")
            size = request.get("outputDimensionality")
            if size is not None and not (isinstance(size, int) and size > 0):
                raise ProtocolError(f"requests[{index}].outputDimensionality must be positive")

    def answer(self, recorded: Recorded) -> Reply | None:
        match = PATH.match(urlsplit(recorded.path).path)
        if not match or match["method"] not in EMBEDDING_METHODS:
            return None
        body = recorded.body
        if match["method"] == "embedContent":
            return Reply(body={"embedding": self.embedding(body)})
        return Reply(body={"embeddings": [self.embedding(item) for item in body["requests"]]})

    def embedding(self, request: dict[str, Any]) -> dict[str, Any]:
        """The ContentEmbedding of one request: its text parts' words, hashed."""
        text = " ".join(part["text"] for part in request["content"]["parts"])
        dim = request.get("outputDimensionality") or self.embedding_dim
        return {"values": hashed_embedding(text, dim)}

    @staticmethod
    def check_generation_config(config: dict[str, Any]) -> None:
        """A response schema goes with responseMimeType application/json, in responseSchema
        (OpenAPI subset) or responseJsonSchema (JSON Schema), never both; a $ref in the JSON
        Schema stands alone (only $-keywords beside it)."""
        schema = config.get("responseJsonSchema")
        if schema is None and "responseSchema" not in config:
            return
        if config.get("responseMimeType") != "application/json":
            raise ProtocolError("a response schema needs responseMimeType application/json")
        if schema is not None and "responseSchema" in config:
            raise ProtocolError("responseSchema and responseJsonSchema cannot both be set")
        for path, node in schema_nodes(schema):
            if "$ref" in node and any(not key.startswith("$") for key in node):
                raise ProtocolError(
                    f"responseJsonSchema {'/'.join(path)}: a $ref allows only $-keywords beside it"
                )

    def wants_stream(self, recorded: Recorded) -> bool:
        return ":streamGenerateContent" in recorded.path

    def stream_events(self, body: Any, recorded: Recorded) -> list[bytes]:
        """A GenerateContentResponse as Gemini streams it: text in pieces, each function call
        whole in a chunk of its own (with its thoughtSignature), the finish reason and the final
        usage in the last chunk; every chunk before carries the running usage."""
        candidate = body["candidates"][0]
        usage = body.get("usageMetadata") or {}
        running = {
            "promptTokenCount": usage.get("promptTokenCount", 0),
            "totalTokenCount": usage.get("promptTokenCount", 0),
        }
        parts: list[dict[str, Any]] = []
        for part in candidate["content"]["parts"]:
            if "text" in part and len(part["text"]) > self.piece_chars:
                pieces = self.split(part["text"])
                parts += [{"text": piece} for piece in pieces[:-1]]
                parts.append({**part, "text": pieces[-1]})  # a signature stays on the last
            else:
                parts.append(part)
        parts = parts or [{"text": ""}]
        frames = []
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            chunk_candidate: dict[str, Any] = {
                "content": {"role": "model", "parts": [part]},
                "index": 0,
            }
            if last:
                chunk_candidate["finishReason"] = candidate.get("finishReason", "STOP")
            chunk = {
                "candidates": [chunk_candidate],
                "usageMetadata": usage if last else running,
                "modelVersion": body.get("modelVersion", "fake"),
                "responseId": "fake-response",
            }
            frames.append(sse(chunk, newline="\r\n"))
        return frames

    def stream_error_event(self) -> bytes:
        return sse(
            {
                "error": {
                    "code": 503,
                    "message": "The model is overloaded. Please try again later.",
                    "status": "UNAVAILABLE",
                }
            },
            newline="\r\n",
        )

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
