"""Which provider serves a model id, and which cheaper model compresses for it.

Model ids are configuration strings, never hard-validated: a new claude-* or gemini-* name
works the day it ships.
"""

from __future__ import annotations

import re

OPENAI, ANTHROPIC, GEMINI, OFFLINE = "openai", "anthropic", "gemini", "offline"

# The design's routing table ("压缩模型路由"), first match wins. In a target, each `*` is
# replaced by what the pattern's `*` at the same position matched, so gemini-2.5-pro maps to
# gemini-2.5-flash-lite. A model that matches nothing compresses with itself.
DEFAULT_COMPRESSION_ROUTES: tuple[tuple[str, str], ...] = (
    ("claude-opus-*", "claude-haiku-4-5"),
    ("claude-sonnet-*", "claude-haiku-4-5"),
    ("gemini-*-pro", "gemini-*-flash-lite"),
    ("gemini-*-flash", "gemini-*-flash-lite"),
    ("gpt-4o", "gpt-4o-mini"),
    ("gpt-5*", "gpt-4o-mini"),
    ("openai:*", "openai:*"),
    ("offline", "offline"),
)


def provider_for(model: str) -> str:
    """claude-* → anthropic; gemini-* → gemini; gpt-*, o<digit>*, openai:* → openai; offline."""
    name = model.strip()
    if name == OFFLINE:
        return OFFLINE
    if name.startswith("claude-"):
        return ANTHROPIC
    if name.startswith("gemini-"):
        return GEMINI
    if name.startswith(("gpt-", "openai:")) or re.match(r"o\d", name):
        return OPENAI
    from ethan_llm.errors import ModelConfigError

    raise ModelConfigError(
        f"unknown model {model!r}: use claude-*, gemini-*, gpt-*, o1/o3/o4-*, "
        "openai:<name> (any OpenAI-compatible server) or offline"
    )


def wire_model_name(model: str) -> str:
    """The name sent to the provider: `openai:llama3.1` is `llama3.1` on the wire."""
    return model.removeprefix("openai:")


def _glob(pattern: str) -> re.Pattern[str]:
    """A glob with `*` only, each `*` a capture group."""
    return re.compile("".join("(.*)" if ch == "*" else re.escape(ch) for ch in pattern))


def parse_routes(text: str) -> tuple[tuple[str, str], ...]:
    """`pattern=target, pattern=target` (ETHAN_COMPRESSION_ROUTES) → routes."""
    routes = []
    for item in text.split(","):
        if not item.strip():
            continue
        pattern, sep, target = item.partition("=")
        if not sep or not pattern.strip() or not target.strip():
            raise ValueError(f"compression route {item.strip()!r} is not pattern=model")
        routes.append((pattern.strip(), target.strip()))
    return tuple(routes)


def compression_model_for(
    model: str,
    *,
    override: str = "",
    routes: tuple[tuple[str, str], ...] = DEFAULT_COMPRESSION_ROUTES,
) -> str:
    """The model that summarises and extracts for `model` (ETHAN_COMPRESSION_MODEL wins)."""
    if override:
        return override
    for pattern, target in routes:
        match = _glob(pattern).fullmatch(model)
        if match:
            return _fill(target, list(match.groups()))
    return model


def _fill(target: str, captured: list[str]) -> str:
    """Replace each `*` of `target` with the next captured text."""
    pieces = target.split("*")
    out = [pieces[0]]
    for index, piece in enumerate(pieces[1:]):
        out.append(captured[index] if index < len(captured) else "")
        out.append(piece)
    return "".join(out)
