"""Rounds of a session as the model sees them: user messages and the assistant's replies.

A round starts at a user message (round n is the session's n-th user message) and runs up to the
next one. The tool traffic inside a round (assistant tool-call steps, tool results) stays in the
database: its effect is in the reply and in memory. A round answered more than once (a chat
app's "regenerate") keeps every reply stored; the model sees the last one, the one the person
kept.
"""

from __future__ import annotations

from collections.abc import Iterable

from llm.types import Message as LLMMessage
from sessions_app.models import ChatSession, Message


def conversation(rows: Iterable[tuple[str, str, object]]) -> list[LLMMessage]:
    """(role, content, tool_calls) rows → user messages and final assistant replies (of a
    round answered again, the latest reply)."""
    messages: list[LLMMessage] = []
    for role, content, tool_calls in rows:
        if role == Message.Role.ASSISTANT and (tool_calls or not content):
            continue  # an intermediate step of a tool loop, not a reply
        if role == Message.Role.ASSISTANT and messages and messages[-1].role == role:
            messages[-1] = LLMMessage(role=role, content=content)  # answered again
        elif role in (Message.Role.USER, Message.Role.ASSISTANT):
            messages.append(LLMMessage(role=role, content=content))
    return messages


def round_start_seqs(*, session: ChatSession, first: int, count: int) -> list[int]:
    """The seqs of the user messages that open rounds first, first+1, … (count of them)."""
    return list(
        Message.objects.filter(session=session, role=Message.Role.USER)
        .order_by("seq")
        .values_list("seq", flat=True)[first - 1 : first - 1 + count]
    )


def rounds_messages(*, session: ChatSession, first: int, last: int) -> list[LLMMessage]:
    """Rounds first..last (1-based, inclusive). Two queries."""
    starts = round_start_seqs(session=session, first=first, count=last - first + 2)
    if not starts:
        return []
    rows = Message.objects.filter(session=session, seq__gte=starts[0]).order_by("seq")
    if len(starts) > last - first + 1:  # the round after `last` exists: stop before it
        rows = rows.filter(seq__lt=starts[-1])
    return conversation(rows.values_list("role", "content", "tool_calls"))
