"""The model calls of memory work: summarising rounds (warm) and extracting facts (cold).

Both go through the compression model. Extraction asks for JSON with a stated schema and is
validated (llm.structured). Every prompt says to keep the conversation's language: a Chinese
conversation gives Chinese summaries and facts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llm.client import complete
from llm.structured import complete_json
from llm.types import Message

CATEGORIES = ("preference", "decision", "knowledge", "correction")
ACTIONS = ("ADD", "UPDATE", "SUPERSEDE", "NONE")

FOLD_SYSTEM = (
    "You keep the running summary of a long conversation. Merge the earlier summary and the "
    "newer summaries below into one summary of at most 200 words (or 300 Chinese characters), "
    "keeping decisions, facts about the user, open questions and commitments, newest details "
    "winning over older ones. Write in the language of the conversation. Answer with the "
    "summary only."
)

SUMMARY_SYSTEM = (
    "You compress a conversation between a user and an assistant into a short summary for the "
    "assistant's working memory. Keep decisions, facts about the user, open questions and "
    "commitments; drop greetings and filler. At most 120 words (or 200 Chinese characters). "
    "Write in the language of the conversation: a Chinese conversation gets a Chinese summary. "
    "Answer with the summary only."
)

EXTRACT_SYSTEM = (
    "You extract long-term memories about the user from a conversation. A fact is one short, "
    "self-contained statement about the user, in the third person (who they are, what they "
    "prefer, what they decided, a correction of something said before). Do not invent "
    "anything; skip small talk. category is one of: preference, decision, knowledge, "
    "correction. importance is 0.8 for an ordinary fact, 0.9 to 0.95 when the user used a "
    "strong signal (记住, 纠正, 偏好, 'remember', 'correct that', 'I prefer'). "
    "Write every fact in the language of the conversation: Chinese for a Chinese conversation."
)

KNOWN_FACTS_ADDENDUM = (
    " Facts already stored are listed below with numbers. For each fact you extract, say what "
    "to do: ADD (new), UPDATE (the same as known fact `target`, possibly more precise), "
    "SUPERSEDE (contradicts known fact `target`, which is now outdated) or NONE (already known "
    "as `target`, nothing new). target is the number of a listed fact, or null for ADD. "
    "Known facts:\n"
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
                    "importance": {"type": "number", "minimum": 0, "maximum": 1},
                    "action": {"enum": list(ACTIONS)},
                    "target": {"type": ["integer", "null"], "minimum": 1},
                },
                "required": ["content", "category", "importance"],
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
    importance: float
    action: str = "ADD"
    # 1-based index into the `known` facts the call was shown (never a database id).
    target: int | None = None


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
    known: list[str] | tuple[str, ...] = (),
    max_tokens: int = 1200,
) -> Extraction:
    """Facts (and, when `psych`, feelings) from a transcript. `known` are existing facts shown
    to the model as 1..n, so its UPDATE/SUPERSEDE/NONE targets can only name those."""
    system = EXTRACT_SYSTEM + (PSYCH_ADDENDUM if psych else "")
    if known:
        system += KNOWN_FACTS_ADDENDUM + "\n".join(
            f"{n}. {text}" for n, text in enumerate(known, start=1)
        )
    data = complete_json(
        model=model,
        system=system,
        prompt=render_transcript(messages),
        schema=EXTRACT_SCHEMA,
        task="extract_psych" if psych else "extract",
        max_tokens=max_tokens,
    )
    facts = []
    for item in data["facts"]:
        target = item.get("target")
        if target is not None and not 1 <= target <= len(known):
            target = None  # a number outside the list: the fact is treated as new
        action = item.get("action") or "ADD"
        if action != "ADD" and target is None:
            action = "ADD"
        if item["content"].strip():
            facts.append(
                ExtractedFact(
                    content=item["content"].strip(),
                    category=item["category"],
                    importance=float(item["importance"]),
                    action=action,
                    target=target,
                )
            )
    psych_items = (
        tuple(item.strip() for item in data.get("psych", []) if item.strip()) if psych else ()
    )
    return Extraction(facts=tuple(facts), psych=psych_items)


def fold(*, model: str, rolling: str, summaries: list[str], max_tokens: int = 600) -> str:
    """One rolling summary from the earlier one and the newer warm summaries."""
    parts = [f"Earlier summary:\n{rolling.strip()}"] if rolling.strip() else []
    parts += [f"Newer summary {n}:\n{text.strip()}" for n, text in enumerate(summaries, 1)]
    completion = complete(
        model=model,
        system=FOLD_SYSTEM,
        task="fold",
        max_tokens=max_tokens,
        messages=[Message.user("\n\n".join(parts))],
    )
    return completion.text.strip()
