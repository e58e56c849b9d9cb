"""Ethan's model layer: provider-neutral types, `stream()` (`astream()` for async callers) and
`complete()` (the same stream, drained), four providers (openai, anthropic, gemini, offline),
compression-model routing, structured output and a token estimate. Plain Python: nothing here
imports Django."""

from llm.client import astream, complete, preload, stream
from llm.config import check_model, compression_model, configure, default_model
from llm.errors import (
    ModelAuthError,
    ModelConfigError,
    ModelError,
    ModelOutputError,
    ModelRequestError,
    ModelUnavailable,
)
from llm.loop_clients import aclose
from llm.routing import compression_model_for, provider_for
from llm.tokens import estimate_tokens
from llm.types import (
    Completion,
    Message,
    StreamEnd,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolSpec,
    Usage,
)

__all__ = [
    "Completion",
    "Message",
    "ModelAuthError",
    "ModelConfigError",
    "ModelError",
    "ModelOutputError",
    "ModelRequestError",
    "ModelUnavailable",
    "StreamEnd",
    "StreamEvent",
    "TextDelta",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "aclose",
    "astream",
    "check_model",
    "complete",
    "compression_model",
    "compression_model_for",
    "configure",
    "default_model",
    "estimate_tokens",
    "preload",
    "provider_for",
    "stream",
]
