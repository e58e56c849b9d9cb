"""The model calls of memory work: summarising rounds (warm) and extracting facts (cold).

Both go through the compression model. Extraction asks for JSON with a stated schema and is
validated (llm.structured). Every prompt says to keep the conversation's language: a Chinese
conversation gives Chinese summaries and facts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from llm.client import complete
from llm.structured import complete_json
from llm.types import Message

CATEGORIES = ("preference", "decision", "knowledge", "correction")

SUMMARY_SYSTEM = (
    "You compress a conversation between a user and an assistant into a short summary for the "
    "assistant's working memory. Keep decisions, facts about the user, open questions and "
    "commitments; drop greetings and filler. At most 120 words (or 200 Chinese characters). "
    "Write in the language of the conversation: a Chinese conversation gets a Chinese summary. "
    "Answer with the summary only."
)

EXTRACT_SYSTEM = (
    "You extract long-term memories about the user from a conversation. A fact is one short, "
    "self-contained statement about the user (who they are, what they prefer, what they decided, "
    "a correction of something said before). Do not invent anything; skip small talk. "
    "category is one of: preference, decision, knowledge, correction. confidence is 0.8 for an "
    "ordinary fact, 0.9 to 0.95 when the user used a strong signal (记住, 纠正, 偏好, "
    "'remember', 'correct that', 'I prefer'). "
    "Write every fact in the language of the conversation: Chinese for a Chinese conversation."
)

PSYCH_ADDENDUM = (
    " Also list under psych the user's emotional patterns: emotions, worries, stressors, what "
    "soothes them, important inner feelings and values, as short statements (never their name, "
    "age or other basic traits)."
)

EXTRACT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "facts": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "content": {"type": "string", "minLength": 1},
                    "category": {"enum": list(CATEGORIES)},
                    "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                },
                "required": ["content", "category", "confidence"],
            },
        },
        "psych": {"type": "array", "items": {"type": "string", "minLength": 1}},
    },
    "required": ["facts"],
}


@dataclass(frozen=True)
class ExtractedFact:
    content: str
    category: str
    confidence: float


@dataclass(frozen=True)
class Extraction:
    facts: tuple[ExtractedFact, ...]
    psych: tuple[str, ...]


def render_transcript(messages: list[Message] | tuple[Message, ...]) -> str:
    """`user: …` / `assistant: …` lines; tool traffic is left out (its effect is in the reply)."""
    lines = []
    for message in messages:
        if message.role in ("user", "assistant") and message.content.strip():
            text = message.content.strip().replace("\n", "\n  ")
            lines.append(f"{message.role}: {text}")
    return "\n".join(lines)


def summarize(
    *, model: str, messages: list[Message] | tuple[Message, ...], max_tokens: int = 400
) -> str:
    completion = complete(
        model=model,
        system=SUMMARY_SYSTEM,
        task="summarize",
        max_tokens=max_tokens,
        messages=[Message.user(render_transcript(messages))],
    )
    return completion.text.strip()


def extract(
    *,
    model: str,
    messages: list[Message] | tuple[Message, ...],
    psych: bool = False,
    max_tokens: int = 1200,
) -> Extraction:
    system = EXTRACT_SYSTEM + (PSYCH_ADDENDUM if psych else "")
    data = complete_json(
        model=model,
        system=system,
        prompt=render_transcript(messages),
        schema=EXTRACT_SCHEMA,
        task="extract_psych" if psych else "extract",
        max_tokens=max_tokens,
    )
    facts = tuple(
        ExtractedFact(
            content=item["content"].strip(),
            category=item["category"],
            confidence=float(item["confidence"]),
        )
        for item in data["facts"]
        if item["content"].strip()
    )
    psych_items = (
        tuple(item.strip() for item in data.get("psych", []) if item.strip()) if psych else ()
    )
    return Extraction(facts=facts, psych=psych_items)


def schema_text(schema: dict[str, Any]) -> str:
    return json.dumps(schema, ensure_ascii=False)
