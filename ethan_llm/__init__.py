"""Ethan's model layer: provider-neutral types, `stream()` (`astream()` for async callers) and
`complete()` (the same stream, drained), four providers (openai, anthropic, gemini, offline),
compression-model routing, structured output and a token estimate. Plain Python: nothing here
imports Django."""

from ethan_llm.client import astream, complete, preload, stream
from ethan_llm.config import check_model, compression_model, configure, default_model
from ethan_llm.errors import (
    ModelAuthError,
    ModelConfigError,
    ModelError,
    ModelOutputError,
    ModelRequestError,
    ModelUnavailable,
)
from ethan_llm.loop_clients import aclose
from ethan_llm.routing import compression_model_for, provider_for
from ethan_llm.tokens import estimate_tokens
from ethan_llm.types import (
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
