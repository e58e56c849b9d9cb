"""Memory work: summarising rounds (warm zone), extracting facts from them (cold zone) and
folding summaries into the rolling summary; `consolidate` does the first two in one call (a
compress batch, a session's end), the way the consolidator asks.

Each step is a method of a MemoryModel, chosen by the compression model's provider through the
registry (ethan_llm.registry): a language model is asked (PromptedMemory: the prompts below, JSON
with
a stated schema for extraction, validated and repaired once by ethan_llm.structured); the offline
model computes the answer from the rounds themselves (ethan_llm.offline.OfflineMemory). Callers use
the three entry points at the end, which take the compression model's id.

Every prompt says to keep the conversation's language: a Chinese conversation gives Chinese
summaries and facts.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from ethan_llm.client import complete
from ethan_llm.offline import OfflineMemory
from ethan_llm.registry import provider_entry
from ethan_llm.routing import OFFLINE, provider_for
from ethan_llm.structured import complete_json
from ethan_llm.text import person_words, render_fold_input
from ethan_llm.types import (
    Consolidation,
    ExtractedFact,
    Extraction,
    Message,
    SessionsConsolidation,
    Turn,
)

log = logging.getLogger(__name__)

CATEGORIES = ("preference", "decision", "knowledge", "correction")
# Turn numbers an extraction named that were not in its transcript, per model, in this process:
# dropped (a fact is never tied to a message it was not shown).
turn_numbers_dropped: Counter[str] = Counter()
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

# What a fact may come from, said with every extraction prompt: the person's own statements
# (their turns carry no transcript markup: turns_of), not their questions or requests.
FACT_SOURCE_RULE = (
    " Facts come only from what the user states about themselves: never from a question or a "
    'request ("Tell me about my daughter" says nothing about her), and never the '
    "assistant's words, even when the user quotes them. Keep a relative date as the user said "
    "it ('next March', '下周'): the date it was said is added to the fact afterwards."
)

EXTRACT_SYSTEM = (
    "You extract long-term memories about the user from a conversation. A fact is one short, "
    "self-contained statement about the user, in the third person (who they are, what they "
    "prefer, what they decided, a correction of something said before). Do not invent "
    "anything; skip small talk. category is one of: preference, decision, knowledge, "
    "correction. importance is 0.8 for an ordinary fact, 0.9 to 0.95 when the user used a "
    "strong signal (记住, 纠正, 偏好, 'remember', 'correct that', 'I prefer'). "
    "Write every fact in the language of the conversation: Chinese for a Chinese conversation. "
    "The turns are numbered [1], [2], …: give each fact's turns, the numbers of the turns it "
    "comes from."
) + FACT_SOURCE_RULE

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
                    "turns": {"type": "array", "items": {"type": "integer"}},
                },
                "required": ["content", "category", "importance"],
            },
        },
        "psych": {"type": "array", "items": {"type": "string", "minLength": 1}},
    },
    "required": ["facts"],
}


CONSOLIDATE_SYSTEM = (
    "You do two things with a conversation between a user and an assistant. First, summary: "
    "compress it into a short summary for the assistant's working memory, keeping decisions, "
    "facts about the user, open questions and commitments, dropping greetings and filler, at "
    "most 120 words (or 200 Chinese characters). Second, facts: extract long-term memories "
    "about the user. A fact is one short, self-contained statement about the user, in the "
    "third person (who they are, what they prefer, what they decided, a correction of "
    "something said before). Do not invent anything; skip small talk. category is one of: "
    "preference, decision, knowledge, correction. importance is 0.8 for an ordinary fact, 0.9 "
    "to 0.95 when the user used a strong signal (记住, 纠正, 偏好, 'remember', 'correct that', "
    "'I prefer'). Write the summary and every fact in the language of the conversation: "
    "Chinese for a Chinese conversation. The turns are numbered [1], [2], …: give each fact's "
    "turns, the numbers of the turns it comes from."
) + FACT_SOURCE_RULE

# Said to the model when the first turns it is shown were extracted before (they are there for
# the summary and as context): facts come from turn {first} onwards only.
EXTRACT_FROM_ADDENDUM = (
    " Turns [1] to [{last_seen}] were already read for facts: take facts only from turn "
    "[{first}] onwards (the earlier turns are context)."
)

# Several short sessions that ended, consolidated in one call (their ends were batched:
# memory_app.working.ends_due): a summary of each for its episode, and the facts of all.
CONSOLIDATE_SESSIONS_SYSTEM = (
    "You do two things with several separate conversations between a user and an assistant, "
    "each under its own heading '## Conversation n'. First, summaries: one per conversation, "
    "in their order, each a short summary of that conversation alone, keeping decisions, facts "
    "about the user, open questions and commitments, dropping greetings and filler, at most 80 "
    "words (or 150 Chinese characters). Second, facts: extract long-term memories about the "
    "user from all of them. A fact is one short, self-contained statement about the user, in "
    "the third person (who they are, what they prefer, what they decided, a correction of "
    "something said before). Do not invent anything; skip small talk. category is one of: "
    "preference, decision, knowledge, correction. importance is 0.8 for an ordinary fact, 0.9 "
    "to 0.95 when the user used a strong signal (记住, 纠正, 偏好, 'remember', 'correct that', "
    "'I prefer'). When a later conversation changes something an earlier one said, the later "
    "one holds. Write each summary and fact in the language of its conversation. The turns are "
    "numbered [1], [2], … across all the conversations: give each fact's turns, the numbers of "
    "the turns it comes from."
) + FACT_SOURCE_RULE

CONSOLIDATE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "summary": {"type": "string"},
        **EXTRACT_SCHEMA["properties"],
    },
    "required": ["summary", "facts"],
}


def consolidate_sessions_schema(count: int) -> dict[str, Any]:
    """The answer to CONSOLIDATE_SESSIONS_SYSTEM: exactly `count` summaries (a wrong count is
    invalid JSON for the repair to fix, never a summary given to the wrong session)."""
    return {
        "type": "object",
        "properties": {
            "summaries": {
                "type": "array",
                "items": {"type": "string"},
                "minItems": count,
                "maxItems": count,
            },
            **EXTRACT_SCHEMA["properties"],
        },
        "required": ["summaries", "facts"],
    }


class MemoryModel(Protocol):
    """The memory work of one compression model."""

    def summarize(self, turns: Sequence[Turn]) -> str:
        """A short summary of the turns, in their language."""
        ...

    def extract(self, turns: Sequence[Turn], *, known: Sequence[str], psych: bool) -> Extraction:
        """Facts about the user in the turns (and, when `psych`, their feelings). `known` are
        stored facts a judging model is shown as 1..n for its UPDATE/SUPERSEDE/NONE targets."""
        ...

    def fold(self, *, rolling: str, summaries: Sequence[str]) -> str:
        """One rolling summary from the earlier one (maybe empty) and newer summaries."""
        ...

    def consolidate(
        self, turns: Sequence[Turn], *, known: Sequence[str], psych: bool, extract_from: int
    ) -> Consolidation:
        """summarize and extract in one call: the summary of all the turns, the facts of turns
        extract_from.. only (the earlier ones were extracted before); each fact's turns are
        numbers among all the turns, as extract gives them."""
        ...

    def consolidate_sessions(
        self, sessions: Sequence[Sequence[Turn]], *, known: Sequence[str], psych: bool
    ) -> SessionsConsolidation:
        """consolidate for several whole sessions at once: a summary of each, and the facts of
        all their turns, numbered 1.. across the sessions in their order."""
        ...


def turns_of(rounds: Iterable[Message]) -> tuple[Turn, ...]:
    """The user messages and assistant replies that say something, their text stripped; tool
    traffic is left out (its effect is in the reply). A user turn is what the person said
    (ethan_llm.text.person_words: no transcript markup, no quoted assistant, no app's task prompt),
    kept even when that is nothing, so turn n is still the n-th stored message that says
    something (memory_app.consolidator.SaidRounds)."""
    return tuple(
        Turn(
            role=message.role,
            text=(
                person_words(message.content).strip()
                if message.role == "user"
                else message.content.strip()
            ),
        )
        for message in rounds
        if message.role in ("user", "assistant") and message.content.strip()
    )


def render_transcript(turns: Iterable[Turn], *, numbered: bool = False, first: int = 1) -> str:
    """`user: …` / `assistant: …` lines, a turn's further lines indented by two spaces;
    `numbered` puts `[n] ` before each, from `first` (extraction asks for the numbers back)."""
    lines = []
    for number, turn in enumerate(turns, start=first):
        text = turn.text.replace("\n", "\n  ")
        prefix = f"[{number}] " if numbered else ""
        lines.append(f"{prefix}{turn.role}: {text}")
    return "\n".join(lines)


def valid_turns(numbers: Iterable[int], *, count: int, model: str) -> tuple[int, ...]:
    """The turn numbers that name a turn of the `count` given, each once, in order; any other
    is dropped, logged and counted (turn_numbers_dropped), never trusted."""
    kept: list[int] = []
    for number in numbers:
        if isinstance(number, int) and not isinstance(number, bool) and 1 <= number <= count:
            if number not in kept:
                kept.append(number)
        else:
            turn_numbers_dropped[model] += 1
            log.warning(
                "extraction by %s named turn %r of %d: dropped (%d so far)",
                model,
                number,
                count,
                turn_numbers_dropped[model],
            )
    return tuple(kept)


def render_sessions(sessions: Sequence[Sequence[Turn]]) -> str:
    """`## Conversation n` headings, each over its turns, numbered [1].. across them all."""
    parts, first = [], 1
    for number, turns in enumerate(sessions, start=1):
        transcript = render_transcript(turns, numbered=True, first=first)
        parts.append(f"## Conversation {number}\n{transcript}")
        first += len(turns)
    return "\n\n".join(parts)


class PromptedMemory:
    """Memory work by a language model: one prompt per step (two when an extraction's JSON has
    to be repaired). Model failures are raised typed (ethan_llm.errors), with the retries of
    ethan_llm.complete; an extraction still invalid after its repair raises ModelOutputError."""

    summary_max_tokens = 400
    extract_max_tokens = 1200
    fold_max_tokens = 600

    def __init__(self, model: str):
        self.model = model

    def summarize(self, turns: Sequence[Turn]) -> str:
        completion = complete(
            model=self.model,
            system=SUMMARY_SYSTEM,
            max_tokens=self.summary_max_tokens,
            messages=[Message.user(render_transcript(turns))],
        )
        return completion.text.strip()

    def extract(self, turns: Sequence[Turn], *, known: Sequence[str], psych: bool) -> Extraction:
        data = complete_json(
            model=self.model,
            system=self._system(EXTRACT_SYSTEM, known=known, psych=psych),
            prompt=render_transcript(turns, numbered=True),
            schema=EXTRACT_SCHEMA,
            label="extract_psych" if psych else "extract",
            max_tokens=self.extract_max_tokens,
        )
        return self._extraction(data, count=len(turns), known=known, psych=psych)

    def consolidate(
        self, turns: Sequence[Turn], *, known: Sequence[str], psych: bool, extract_from: int
    ) -> Consolidation:
        system = CONSOLIDATE_SYSTEM
        if extract_from > 1:
            system += EXTRACT_FROM_ADDENDUM.format(last_seen=extract_from - 1, first=extract_from)
        data = complete_json(
            model=self.model,
            system=self._system(system, known=known, psych=psych),
            prompt=render_transcript(turns, numbered=True),
            schema=CONSOLIDATE_SCHEMA,
            label="consolidate_psych" if psych else "consolidate",
            max_tokens=self.summary_max_tokens + self.extract_max_tokens,
        )
        extraction = self._extraction(data, count=len(turns), known=known, psych=psych)
        # A fact that names only turns read before was extracted then: not stored twice.
        kept = tuple(
            fact for fact in extraction.facts if not fact.turns or max(fact.turns) >= extract_from
        )
        return Consolidation(
            summary=data["summary"].strip(),
            extraction=Extraction(facts=kept, psych=extraction.psych, judged=True),
        )

    def consolidate_sessions(
        self, sessions: Sequence[Sequence[Turn]], *, known: Sequence[str], psych: bool
    ) -> SessionsConsolidation:
        data = complete_json(
            model=self.model,
            system=self._system(CONSOLIDATE_SESSIONS_SYSTEM, known=known, psych=psych),
            prompt=render_sessions(sessions),
            schema=consolidate_sessions_schema(len(sessions)),
            label="consolidate_sessions_psych" if psych else "consolidate_sessions",
            max_tokens=self.summary_max_tokens * len(sessions) + self.extract_max_tokens,
        )
        count = sum(len(turns) for turns in sessions)
        return SessionsConsolidation(
            summaries=tuple(text.strip() for text in data["summaries"]),
            extraction=self._extraction(data, count=count, known=known, psych=psych),
        )

    @staticmethod
    def _system(system: str, *, known: Sequence[str], psych: bool) -> str:
        system += PSYCH_ADDENDUM if psych else ""
        if known:
            system += KNOWN_FACTS_ADDENDUM + "\n".join(
                f"{n}. {text}" for n, text in enumerate(known, start=1)
            )
        return system

    def _extraction(
        self, data: dict[str, Any], *, count: int, known: Sequence[str], psych: bool
    ) -> Extraction:
        """The validated JSON answer as an Extraction: targets outside the list and turn
        numbers outside the transcript dropped."""
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
                        turns=valid_turns(item.get("turns") or (), count=count, model=self.model),
                    )
                )
        psych_items = (
            tuple(item.strip() for item in data.get("psych", []) if item.strip()) if psych else ()
        )
        return Extraction(facts=tuple(facts), psych=psych_items, judged=True)

    def fold(self, *, rolling: str, summaries: Sequence[str]) -> str:
        completion = complete(
            model=self.model,
            system=FOLD_SYSTEM,
            max_tokens=self.fold_max_tokens,
            messages=[Message.user(render_fold_input(rolling=rolling, summaries=summaries))],
        )
        return completion.text.strip()


# --- the entry points: the compression model's id picks the implementation ----------------------


def memory_model(model: str) -> MemoryModel:
    """The MemoryModel of `model`'s provider: a language model does memory work by being asked
    (PromptedMemory), the offline model does it directly on the rounds (ethan_llm.offline).
    ModelConfigError for an unknown model id; a missing key is reported by the first call that
    needs it."""
    provider = provider_for(model)
    provider_entry(provider)  # a provider nobody registered: ModelConfigError
    return OfflineMemory() if provider == OFFLINE else PromptedMemory(model)


def summarize(*, model: str, rounds: Sequence[Message]) -> str:
    """A short summary of the rounds (user messages and assistant replies; tool traffic is
    left out), in the conversation's language."""
    return memory_model(model).summarize(turns_of(rounds))


def extract(
    *,
    model: str,
    rounds: Sequence[Message],
    psych: bool = False,
    known: Sequence[str] = (),
) -> Extraction:
    """Facts (and, when `psych`, feelings) from the rounds. `known` are existing facts shown
    to a judging model as 1..n, so its UPDATE/SUPERSEDE/NONE targets can only name those.
    Each fact's `turns` number the rounds' turns as turns_of gives them (1-based)."""
    return memory_model(model).extract(turns_of(rounds), known=tuple(known), psych=psych)


def fold(*, model: str, rolling: str, summaries: Sequence[str]) -> str:
    """One rolling summary from the earlier one and the newer warm summaries."""
    return memory_model(model).fold(rolling=rolling, summaries=tuple(summaries))


def consolidate(
    *,
    model: str,
    rounds: Sequence[Message],
    psych: bool = False,
    known: Sequence[str] = (),
    extract_from: int = 1,
) -> Consolidation:
    """summarize and extract in one call to the compression model: the summary of the rounds,
    and the facts (and, when `psych`, feelings) of their turns from `extract_from` on (1-based,
    as turns_of numbers them; the turns before it were extracted before and are context).
    Each fact's `turns` number all the rounds' turns."""
    return memory_model(model).consolidate(
        turns_of(rounds), known=tuple(known), psych=psych, extract_from=max(1, extract_from)
    )


def consolidate_sessions(
    *,
    model: str,
    sessions: Sequence[Sequence[Message]],
    psych: bool = False,
    known: Sequence[str] = (),
) -> SessionsConsolidation:
    """consolidate for several whole sessions in one call to the compression model: a summary
    of each (for its episode) and the facts of all. Each fact's `turns` number the turns of all
    the sessions, 1.. across them in order (turns_of each session, one after the other)."""
    return memory_model(model).consolidate_sessions(
        tuple(turns_of(rounds) for rounds in sessions), known=tuple(known), psych=psych
    )
