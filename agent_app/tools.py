"""The three memory tools the model sees, and how a call to one is carried out.

A bad call (unknown tool, missing or wrong arguments, an unknown profile section, a text
longer than ethan_shared.limits allows, a rule past ETHAN_PROCEDURE_CAPACITY) never raises: it
comes back to the model as a tool result starting with "error:", nothing written, so the model
can correct itself, and the conversation goes on. The limits are enforced by the services; the
schemas below only quote them (maxLength), as a model may ignore a schema.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.utils import timezone

from ethan_llm.text import dated
from ethan_llm.types import ToolCall, ToolSpec
from ethan_shared.limits import (
    FACT_MAX_CHARS,
    PROFILE_ENTRY_MAX_CHARS,
    PROFILE_MAX_CHARS,
    RULE_CONTEXT_MAX_CHARS,
    RULE_MAX_CHARS,
    too_long,
)
from memory_app import confidence
from memory_app import services as memory_services
from memory_app.models import Fact
from profile_app import services as profile_services
from profile_app.sections import SECTIONS
from sessions_app.models import ChatSession, Message
from sessions_app.selectors import question_latest, session_questions

MEMORY_WRITE = ToolSpec(
    name="memory_write",
    description=(
        "Store one lasting fact about the user in long-term memory (their name, job, a "
        "preference, a decision, a correction of something said before). Write it as a short, "
        "self-contained statement in the user's language, at most "
        f"{FACT_MAX_CHARS} characters. Not for small talk."
    ),
    parameters={
        "type": "object",
        "properties": {
            "content": {
                "type": "string",
                "maxLength": FACT_MAX_CHARS,
                "description": "the fact, e.g. 用户在 Acme 做后端工程师",
            },
            "category": {
                "type": "string",
                "enum": [c.value for c in Fact.Category],
                "description": "preference | decision | knowledge | correction",
            },
        },
        "required": ["content", "category"],
    },
)
PROCEDURE_WRITE = ToolSpec(
    name="procedure_write",
    description=(
        "Store a rule for how you should behave from now on, when the user asks for one "
        '("always reply in English", "以后不要用韩语"). It is shown to you on every turn. '
        f"One short instruction, at most {RULE_MAX_CHARS} characters. Only a limited number of "
        "rules can be active; when the list is full the result says so, and the user has to "
        "switch one off first."
    ),
    parameters={
        "type": "object",
        "properties": {
            "rule": {
                "type": "string",
                "maxLength": RULE_MAX_CHARS,
                "description": "the rule, as an instruction to yourself",
            },
            "context": {
                "type": "string",
                "maxLength": RULE_CONTEXT_MAX_CHARS,
                "description": "why or when it applies",
            },
        },
        "required": ["rule"],
    },
)
PROFILE_UPDATE = ToolSpec(
    name="profile_update",
    description=(
        "Update one section of the user's narrative profile (user_profile.md). mode append adds "
        "a bullet (default), merge replaces a bullet on the same subject or adds one, overwrite "
        f"replaces the whole section. An entry is at most {PROFILE_ENTRY_MAX_CHARS} "
        f"characters, the whole profile at most {PROFILE_MAX_CHARS}. Sections: "
        + "; ".join(f"{s.title} ({s.key}): {s.purpose}" for s in SECTIONS)
    ),
    parameters={
        "type": "object",
        "properties": {
            "section": {"type": "string", "description": "a section title or key"},
            "entry": {
                "type": "string",
                "maxLength": PROFILE_ENTRY_MAX_CHARS,
                "description": "the text to write",
            },
            "mode": {"type": "string", "enum": ["append", "overwrite", "merge"]},
        },
        "required": ["section", "entry"],
    },
)
MEMORY_SEARCH = ToolSpec(
    name="memory_search",
    description=(
        "Search what you remember about the user: stored facts, summaries of past "
        "conversations (episodes) and past messages. Use it when the user refers to something "
        "said before that is not in your context. Returns short snippets with their source "
        "(session id, date, role)."
    ),
    parameters={
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "words to look for, in any language"},
            "scope": {"type": "string", "enum": ["facts", "episodes", "messages", "all"]},
            "limit": {"type": "integer", "minimum": 1, "maximum": 20},
        },
        "required": ["query"],
    },
)
TOOL_SPECS: tuple[ToolSpec, ...] = (MEMORY_WRITE, PROCEDURE_WRITE, PROFILE_UPDATE, MEMORY_SEARCH)


class ToolArgumentError(ValueError):
    pass


def _text(arguments: dict[str, Any], name: str, required: bool = True) -> str:
    value = arguments.get(name, "")
    if not isinstance(value, str):
        raise ToolArgumentError(f"{name} must be a string")
    if required and not value.strip():
        raise ToolArgumentError(f"{name} is required and must not be empty")
    return value.strip()


def _memory_write(owner, session, message, arguments) -> str:
    content = _text(arguments, "content")
    category = _text(arguments, "category", required=False) or Fact.Category.KNOWLEDGE
    if category not in Fact.Category.values:
        raise ToolArgumentError(
            f"category must be one of {', '.join(Fact.Category.values)}, not {category!r}"
        )
    fact = memory_services.fact_write(
        owner=owner,
        # Said now: a relative date in it ("next week") gets the date it names, as an extracted
        # fact's does (memory_app.consolidator).
        content=dated(content, said_at=timezone.localtime()),
        category=category,
        confidence=confidence.AGENT_PROACTIVE,
        source=Fact.Source.AGENT_PROACTIVE,
        session=session,
        message=message,
        sources=_round_question(session, message),
    )
    if fact.hit_count > 1:
        return (
            f"ok: already known, reinforced fact {fact.pk} "
            f"(confidence {fact.confidence:.2f}, seen {fact.hit_count} times)"
        )
    return f"ok: stored fact {fact.pk} (confidence {fact.confidence:.2f})"


def _round_question(session: ChatSession, message: Message | None) -> list[Message]:
    """The user message of the round a tool was called in: what a memory written by the
    agent was said in (its provenance)."""
    if message is None or not session.is_persisted:
        return []
    question = session_questions(session=session).filter(seq__lt=message.seq).first()
    return [question] if question is not None else []


def _procedure_write(owner, session, message, arguments) -> str:
    rule = _text(arguments, "rule")
    procedure, created = memory_services.procedure_write(
        owner=owner,
        rule=rule,
        context=_text(arguments, "context", required=False),
    )
    if created:
        return f"ok: rule {procedure.pk} stored; it applies from the next turn on"
    return f"ok: rule {procedure.pk} already exists, nothing added"


def _profile_update(owner, session, message, arguments) -> str:
    mode = _text(arguments, "mode", required=False) or "append"
    entry = _text(arguments, "entry")
    # As PATCH /api/profile/sections/{key}: an overwrite from outside is an entry too.
    if len(entry) > PROFILE_ENTRY_MAX_CHARS:
        raise ToolArgumentError(too_long("an entry", PROFILE_ENTRY_MAX_CHARS, len(entry)))
    section = profile_services.profile_update(
        owner=owner,
        section=_text(arguments, "section"),
        entry=entry,
        mode=mode,
        actor="agent",
    )
    return f"ok: profile section {section.get_key_display()} updated ({mode})"


def _memory_search(owner, session, message, arguments) -> str:
    from agent_app.memory_search import memory_search

    limit = arguments.get("limit", 5)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 20:
        raise ToolArgumentError("limit must be a whole number from 1 to 20")
    # The current round is in the model's context already: search the rest of memory.
    current = question_latest(session=session, field="seq")
    hits = memory_search(
        owner=owner,
        query=_text(arguments, "query"),
        scope=_text(arguments, "scope", required=False) or "all",
        limit=limit,
        exclude_after=(session.pk, current) if current else None,
    )
    if not hits:
        return "ok: nothing in memory matches"
    return "\n".join(hit.cited() for hit in hits)


HANDLERS: dict[str, Callable[..., str]] = {
    "memory_write": _memory_write,
    "procedure_write": _procedure_write,
    "profile_update": _profile_update,
    "memory_search": _memory_search,
}


def refusal_text(exc: ValidationError) -> str:
    """A service's refusal (a limit, the rule capacity) in one line: "content: a fact is at
    most 2000 characters; this one is 2400"."""
    if hasattr(exc, "error_dict"):
        return "; ".join(
            f"{field}: {' '.join(errors)}" for field, errors in exc.message_dict.items()
        )
    return " ".join(exc.messages)


def run_tool(
    *, owner: AbstractBaseUser, session: ChatSession, message: Message | None, call: ToolCall
) -> str:
    """Carry out one tool call; the result text goes back to the model."""
    handler = HANDLERS.get(call.name)
    if handler is None:
        return f"error: there is no tool named {call.name!r}"
    if "_invalid_json" in call.arguments:
        return "error: the arguments were not valid JSON; send a JSON object"
    try:
        return handler(owner, session, message, call.arguments)
    except ToolArgumentError as exc:
        return f"error: {exc}"
    except ValidationError as exc:
        return f"error: {refusal_text(exc)}"
    except ValueError as exc:  # the profile service's unknown section or mode
        return f"error: {exc}"
