"""The two conversation modes and the words people use for them."""

from __future__ import annotations

from sessions_app.models import ChatSession

MODE_ALIASES = {
    "work": ChatSession.Mode.WORK,
    "companion": ChatSession.Mode.COMPANION,
    # The design's name for the listening-companion mode (persona 苏念).
    "陪伴": ChatSession.Mode.COMPANION,
}


def mode_parse(value: str | None) -> str:
    if value is None or value == "":
        return ChatSession.Mode.WORK
    try:
        return MODE_ALIASES[value.strip().lower()]
    except KeyError:
        raise ValueError(f"unknown mode {value!r}: use one of {', '.join(MODE_ALIASES)}") from None
