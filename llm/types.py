"""Provider-neutral chat types. Every adapter maps these to its SDK and back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True)
class ToolCall:
    """A call the model asked for. `meta` carries provider data that must be echoed back
    unchanged on the next request (Gemini's thought_signature, base64)."""

    id: str
    name: str
    arguments: dict[str, Any]
    meta: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"id": self.id, "name": self.name, "arguments": self.arguments}
        if self.meta:
            data["meta"] = self.meta
        return data


@dataclass(frozen=True)
class Message:
    """One message of the history: user, assistant (maybe with tool calls) or tool (a result)."""

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""
    # For a tool result: which tool produced it (Gemini wants the name back).
    name: str = ""

    @classmethod
    def user(cls, content: str) -> Message:
        return cls(role="user", content=content)

    @classmethod
    def assistant(cls, content: str = "", tool_calls: tuple[ToolCall, ...] = ()) -> Message:
        return cls(role="assistant", content=content, tool_calls=tuple(tool_calls))

    @classmethod
    def tool(cls, tool_call_id: str, content: str, name: str = "") -> Message:
        return cls(role="tool", content=content, tool_call_id=tool_call_id, name=name)


@dataclass(frozen=True)
class ToolSpec:
    """A tool the model may call: its name, what it is for, and a JSON schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class JsonSchema:
    """The shape a structured answer must have, sent with the request so the provider holds the
    model to it (OpenAI json_schema, Anthropic output_config, Gemini response_json_schema).

    `schema` must already be in the strict subset all three accept (`llm.structured.
    strict_schema`); `name` is what OpenAI calls it (letters, digits, _ and -, up to 64)."""

    name: str
    schema: dict[str, Any]


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    # True when the numbers are our estimate (offline model), not a provider's count.
    estimated: bool = False


@dataclass(frozen=True)
class Completion:
    text: str
    tool_calls: tuple[ToolCall, ...]
    usage: Usage
    model: str
    provider: str
    latency_ms: float
    # Anything else worth keeping: {"offline": True} for the offline model, stop reasons.
    meta: dict[str, Any] = field(default_factory=dict)

    def as_message(self) -> Message:
        """The assistant message to append to the history before running the tool calls."""
        return Message.assistant(self.text, self.tool_calls)


# --- a completion as a stream: text deltas, then exactly one StreamEnd ---------------------------


@dataclass(frozen=True)
class TextDelta:
    """The next piece of the answer's text, as the model wrote it."""

    text: str


@dataclass(frozen=True)
class StreamEnd:
    """The last event of a stream: the whole completion, the same `complete()` returns (its
    text is the concatenation of the deltas before it; tool calls arrive only here)."""

    completion: Completion


StreamEvent = TextDelta | StreamEnd
