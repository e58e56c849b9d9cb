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


# Said beside an attachment's placeholder where the model does not get it (one that refused it,
# the offline model, sound to Anthropic): the model then tells the person it cannot see it.
CANNOT_SEE = "attached, but this model cannot take it: say so"


@dataclass(frozen=True)
class Attachment:
    """An image, a sound or a file sent with a user message, for the models that take it.

    Either `data` (base64, with its `mime` type) or `url` (an https or data: URL the provider
    fetches itself). Never stored: the session keeps `placeholder` in the message's text."""

    kind: Literal["image", "audio", "file"]
    mime: str = ""
    data: str = ""
    url: str = ""
    name: str = ""

    @property
    def placeholder(self) -> str:
        """What a transcript says in its place: `[image]`, `[audio]`, `[file: report.pdf]`."""
        return f"[{self.kind}: {self.name}]" if self.name else f"[{self.kind}]"


@dataclass(frozen=True)
class Message:
    """One message of the history: user, assistant (maybe with tool calls) or tool (a result)."""

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""
    # For a tool result: which tool produced it (Gemini wants the name back).
    name: str = ""
    # What a user message brings beside its text (a chat app's images and files); a model
    # that cannot take one gets its placeholder instead (Message.without_attachments).
    attachments: tuple[Attachment, ...] = ()

    def without_attachments(self, note: str) -> Message:
        """This message with each attachment replaced by its placeholder and `note` (why the
        model does not see it), for a model that cannot take them."""
        if not self.attachments:
            return self
        said = " ".join(attachment.placeholder for attachment in self.attachments)
        text = f"{self.content}\n\n{said} ({note})".strip()
        return Message(role=self.role, content=text, name=self.name)

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
class ToolChoice:
    """Which tools the model may or must call (OpenAI's tool_choice, which each adapter says
    in its provider's terms): `auto`, `none`, `required`, or `function` with `name`."""

    mode: Literal["auto", "none", "required", "function"] = "auto"
    name: str = ""


@dataclass(frozen=True)
class Sampling:
    """A caller's own sampling settings, sent to the provider where it takes them (the
    adapters say which; docs/openai.md lists what is left out). None: the provider's default."""

    temperature: float | None = None
    top_p: float | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None
    # OpenAI's response_format as the caller sent it ({"type": "json_object"}, json_schema…).
    response_format: dict[str, Any] | None = None
    # The caller's id of its own end user (OpenAI's `user`, Anthropic's metadata.user_id).
    user: str = ""


# The defaults: any tool the model likes, the provider's own sampling.
AUTO = ToolChoice()
NO_SAMPLING = Sampling()


@dataclass(frozen=True)
class JsonSchema:
    """The shape a structured answer must have, sent with the request so the provider holds the
    model to it (OpenAI json_schema, Anthropic output_config, Gemini response_json_schema).

    `schema` must already be in the strict subset all three accept (`ethan_llm.structured.
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


# --- memory work's results (ethan_llm.memory, ethan_llm.offline) ----------------------------------


@dataclass(frozen=True)
class Turn:
    """One thing said in the rounds, as memory work reads it."""

    role: Literal["user", "assistant"]
    text: str


@dataclass(frozen=True)
class ExtractedFact:
    content: str
    category: str
    importance: float
    action: str = "ADD"
    # 1-based index into the `known` facts the call was shown (never a database id).
    target: int | None = None
    # The 1-based numbers of the turns it comes from, among the turns the call was given:
    # the caller maps them back to stored messages (the fact's provenance).
    turns: tuple[int, ...] = ()


@dataclass(frozen=True)
class Extraction:
    facts: tuple[ExtractedFact, ...]
    psych: tuple[str, ...]
    # True when the model decided each fact's action against the known facts it was shown.
    # False (the offline model): every fact is an ADD, and the caller's rules decide.
    judged: bool = True


@dataclass(frozen=True)
class Consolidation:
    """What one consolidating call gives: the summary of every turn it was shown, and the facts
    (and feelings) of the turns from its `extract_from` on."""

    summary: str
    extraction: Extraction


@dataclass(frozen=True)
class SessionsConsolidation:
    """What one call over several sessions gives: a summary per session, in their order, and
    the facts of all of them (each fact's turns numbered across all the sessions' turns)."""

    summaries: tuple[str, ...]
    extraction: Extraction
