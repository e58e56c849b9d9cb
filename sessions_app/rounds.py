"""Rounds of a session as the model sees them: user messages and the assistant's replies.

A round starts at a user message (round n is the session's n-th user message) and runs up to the
next one; what comes before the first user message (the assistant opened: a chat app's greeting,
an imported conversation) is round 1's too, so memory reads it with the answer to it. The tool
traffic inside a round (assistant tool-call steps, tool results) stays in the database: its
effect is in the reply and in memory. A round answered more than once (a chat
app's "regenerate") keeps every reply stored; the model sees the last one, the one the person
kept.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from ethan_llm.types import Message as LLMMessage
from sessions_app.models import ChatSession, Message

T = TypeVar("T")


def _said(rows: Iterable[tuple[str, str, object, T]]) -> list[tuple[str, str, T]]:
    """(role, content, tool_calls, item) → (role, content, item) of the user messages and
    final assistant replies (of a round answered again, the latest reply)."""
    kept: list[tuple[str, str, T]] = []
    for role, content, tool_calls, item in rows:
        if role == Message.Role.ASSISTANT and (tool_calls or not content):
            continue  # an intermediate step of a tool loop, not a reply
        if role == Message.Role.ASSISTANT and kept and kept[-1][0] == role:
            kept[-1] = (role, content, item)  # answered again
        elif role in (Message.Role.USER, Message.Role.ASSISTANT):
            kept.append((role, content, item))
    return kept


def conversation(rows: Iterable[tuple[str, str, object]]) -> list[LLMMessage]:
    """(role, content, tool_calls) rows → user messages and final assistant replies (of a
    round answered again, the latest reply)."""
    said = _said((role, content, calls, None) for role, content, calls in rows)
    return [LLMMessage(role=role, content=content) for role, content, _ in said]


def round_start_seqs(*, session: ChatSession, first: int, count: int) -> list[int]:
    """The seqs of the user messages that open rounds first, first+1, … (count of them)."""
    return list(
        Message.objects.filter(session=session, role=Message.Role.USER)
        .order_by("seq")
        .values_list("seq", flat=True)[first - 1 : first - 1 + count]
    )


def _rounds_query(*, session: ChatSession, first: int, last: int):
    """The messages of rounds first..last (1-based, inclusive), in order; None when there are
    none. One query to find where they start and end."""
    starts = round_start_seqs(session=session, first=first, count=last - first + 2)
    if not starts:
        return None
    rows = Message.objects.filter(session=session).order_by("seq")
    if first > 1:
        rows = rows.filter(seq__gte=starts[0])
    if len(starts) > last - first + 1:  # the round after `last` exists: stop before it
        rows = rows.filter(seq__lt=starts[-1])
    return rows


def rounds_messages(*, session: ChatSession, first: int, last: int) -> list[LLMMessage]:
    """Rounds first..last (1-based, inclusive). Two queries."""
    rows = _rounds_query(session=session, first=first, last=last)
    if rows is None:
        return []
    return conversation(rows.values_list("role", "content", "tool_calls"))


def rounds_rows(*, session: ChatSession, first: int, last: int) -> list[Message]:
    """Rounds first..last as rounds_messages gives them, as the stored messages themselves
    (for a fact's provenance: which message a memory came from). Two queries."""
    rows = _rounds_query(session=session, first=first, last=last)
    if rows is None:
        return []
    rows = rows.only("id", "session_id", "seq", "role", "content", "tool_calls")
    return [row for _, _, row in _said((r.role, r.content, r.tool_calls, r) for r in rows)]
