"""Plain-text views of sessions for the terminal (ethan_session and the console's /sessions)."""

from __future__ import annotations

from django.utils import timezone

from sessions_app.models import ChatSession, Message

SNIPPET_LENGTH = 160


def _when(moment) -> str:
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M")


def one_line(text: str, length: int = SNIPPET_LENGTH) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= length else flat[: length - 1] + "…"


def session_row(session: ChatSession) -> str:
    title = session.title or "(untitled)"
    return f"{session.id}  {_when(session.updated_at)}  {session.last_seq:>4} msgs  {title}"


def session_table(sessions: list[ChatSession]) -> str:
    if not sessions:
        return "No sessions yet."
    return "\n".join(session_row(session) for session in sessions)


def search_results(sessions: list[ChatSession]) -> str:
    lines = []
    for session in sessions:
        lines.append(session_row(session))
        if getattr(session, "match", None):
            lines.append(f"    … {one_line(session.match)}")
    return "\n".join(lines)


def session_detail(session: ChatSession, messages: list[Message], full: bool = False) -> str:
    lines = [
        f"id:       {session.id}",
        f"title:    {session.title or '(untitled)'}",
        f"model:    {session.model or '-'}",
        f"mode:     {session.mode}",
        f"channel:  {session.channel}",
        f"created:  {_when(session.created_at)}",
        f"updated:  {_when(session.updated_at)}",
        f"messages: {len(messages)}",
        "",
    ]
    for message in messages:
        text = message.content if full else one_line(message.content)
        if message.tool_calls:
            names = ", ".join(str(call.get("name", "?")) for call in message.tool_calls)
            text = f"{text} [tool calls: {names}]".strip()
        lines.append(f"[{message.seq}] {message.role}: {text}")
    return "\n".join(lines)
