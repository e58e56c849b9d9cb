"""LoCoMo: does the memory that reaches the model hold the evidence for the question?

Each LoCoMo conversation becomes one owner's sessions (speaker_a as user, speaker_b as
assistant, session dates kept as the messages' times, read as UTC); consolidation and episodes
run as in production (offline model). Two modes, reported side by side (neither replaces the
other):

- observations (--observations): LoCoMo's own annotated observations loaded as facts whose
  provenance is their turn: what injection can do with facts as good as a person's notes;
- end-to-end (the default): only what Ethan kept itself: the facts its consolidator extracted
  (offline model), each linked to the messages it was said in (Fact.sources), the episodes,
  the messages. --warm-capacity N runs it with a smaller warm zone, a diagnostic of what
  limits it (the default warm zone of 20 rounds is larger than most LoCoMo sessions, so
  their facts are never extracted), never a tuned setting. Its chart is
  docs/locomo_recall_no_observations.png (give --chart that path). `--end-to-end offline`
  (the default) extracts with the offline model; `--end-to-end replay` with ReplayedExtractor,
  a loopback OpenAI-wire model that answers each extraction request with LoCoMo's own
  observations of exactly the turns it was shown: a language model's facts going Ethan's
  whole real path. Both print one line per half, `end-to-end injection recall (half B, …):`
  followed by the value.

Then, for every question, a fresh turn is built (full path) and we measure:

- injection recall: the share of the question's evidence turns reached by that turn's system
  prompt and context (a turn is reached when its text is there, or an injected fact came from
  it: reached_by_turn), for the design's `seed` order and the `relevance` default;
- memory_search recall@5/10/25 over messages (a question's relative times count from the
  conversation's last session);
- the same recall@5/10/25 for a plain BM25 over single turns, computed here (plain_ranked): each
  turn's own words, lower-cased, the stopwords dropped, nothing else (no stemming, no
  neighbours, no question words dropped, no time), with sessions_app.search.bm25's formula at
  the textbook k1 = 1.2, b = 0.75;
- context tokens of that turn against the whole conversation (the full-history baseline).

Categories 1-4 are reported and averaged; 5 (adversarial) apart. The dataset is read from
--data (evaluation only: it is never copied into this repository).

Honest tuning (--tune): the ten conversations are split into two fixed halves, HALVES (A: the
file's conversations 0-4, B: 5-9). The stemmer, the neighbours' weight and the time preference
(search.TUNING) are chosen on one half, a step at a time (STEPS), and measured on the other, in
both directions; the search defaults are those chosen on A, so half B is their held-back half
in the default run. k1 and b are the textbook ones, not tuned.

Two shapes of history: the dialogue (both speakers, as above) and single-speaker logs (each
speaker's turns alone as an owner of their own, every turn a user message, with the questions
whose evidence is all in that speaker's turns): --tune --single-speaker tunes on the latter;
--lengths compares BM25's length normalisations (LENGTH_OPTIONS) on both shapes and halves.

    python -m bench.locomo_recall --data ../shared/datasets/locomo/locomo10.json --observations
    python -m bench.locomo_recall --data ../shared/datasets/locomo/locomo10.json --tune
    python -m bench.locomo_recall --data ../shared/datasets/locomo/locomo10.json --lengths
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import ROOT, append_results, command_line, django_setup

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
RECALL_AT = (5, 10, 25)
# The fixed split for honest tuning: conversations 0-4 and 5-9 of locomo10.json, in file
# order (chosen before any number was seen; never reshuffled).
HALVES = {"A": range(0, 5), "B": range(5, 10)}
# The plain baseline's BM25 constants: the textbook ones (Ethan's b was tuned).
PLAIN_K1, PLAIN_B = 1.2, 0.75
_PLAIN_WORD = re.compile(r"[a-z0-9]+")


def session_keys(conversation: dict[str, Any]) -> list[str]:
    """session_N keys in order (not the date keys: some conversations have extra dates)."""
    keys = [k for k in conversation if re.fullmatch(r"session_\d+", k)]
    return sorted(keys, key=lambda k: int(k.split("_")[1]))


def parse_date(text: str) -> datetime:
    """LoCoMo's '1:56 pm on 8 May, 2023'."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def clean_evidence(evidence: list[str], known: set[str]) -> list[str]:
    """Split on ';' and whitespace, drop ids that match no turn (the dataset has a few)."""
    ids: list[str] = []
    for item in evidence:
        for part in re.split(r"[;\s]+", item or ""):
            part = part.strip()
            if part in known and part not in ids:
                ids.append(part)
    return ids


def turn_text(turn: dict[str, Any]) -> str:
    text = turn.get("text", "")
    if turn.get("blip_caption"):
        text = f"{text} [image: {turn['blip_caption']}]".strip()
    return text


def recall(found: set[str], evidence: list[str]) -> float:
    return len(found & set(evidence)) / len(evidence) if evidence else 0.0


def half_of(index: int) -> str:
    return next(name for name, indexes in HALVES.items() if index in indexes)


# --- the plain baseline ------------------------------------------------------------------------


def plain_tokens(text: str) -> list[str]:
    """A turn's words as the simplest BM25 sees them: lower-cased runs of letters and digits,
    the stopwords (ethan_llm.text.STOPWORDS) and single characters dropped; no stemming."""
    from ethan_llm.text import STOPWORDS

    return [w for w in _PLAIN_WORD.findall(text.lower()) if len(w) > 1 and w not in STOPWORDS]


def plain_ranked(question: str, turns: list[tuple[str, str]]) -> list[str]:
    """The turn ids (of (dia_id, text) pairs) in the plain baseline's order, best first."""
    from sessions_app.search import bm25

    docs = [(dia_id, " ".join(plain_tokens(text))) for dia_id, text in turns]
    terms = list(dict.fromkeys(plain_tokens(question)))
    ranked = bm25(terms, docs, len(docs), k1=PLAIN_K1, b=PLAIN_B, context_weight=0.0)
    return [r.item for r in ranked]


# --- loading a conversation --------------------------------------------------------------------


@dataclass
class Loaded:
    owner: Any
    message_turn: dict[int, str] = field(default_factory=dict)  # message pk → dia_id
    turn_text: dict[str, str] = field(default_factory=dict)  # dia_id → text
    history_tokens: int = 0
    now: datetime | None = None  # the last session's time: when the questions are asked


def previous_turn_tokens(messages) -> dict[Any, str]:
    """The ablation --without-next-turn: each message's tokens as message_append writes them
    when it is appended (its own words and the previous turn's), without the words a turn
    gains from the next one (the UPDATE of the previous message on every append)."""
    from sessions_app.search import SPOKEN, message_search_tokens

    tokens: dict[Any, str] = {}
    last = ""
    for pk, role, content in messages:
        tokens[pk], _gained = message_search_tokens(role=role, content=content, previous=last)
        if role in SPOKEN and content != "":
            last = content
    return tokens


def speakers(sample: dict[str, Any]) -> list[str]:
    conversation = sample["conversation"]
    return [conversation["speaker_a"], conversation["speaker_b"]]


def load_conversation(
    sample: dict[str, Any],
    index: int,
    observations: bool,
    *,
    without_next_turn: bool = False,
    speaker: str | None = None,
) -> Loaded:
    """One conversation as one owner's sessions. With `speaker`, the single-speaker shape:
    only that speaker's turns, each a user message (the neighbours whose words a message
    carries are then the same person's previous and next messages), for an owner of its own."""
    from django.contrib.auth import get_user_model

    from ethan_llm.tokens import estimate_tokens
    from memory_app.models import Fact
    from memory_app.normalize import content_key
    from memory_app.services import fact_search_tokens
    from sessions_app.models import ChatSession, Message
    from sessions_app.search import session_message_tokens

    conversation = sample["conversation"]
    user_name = speaker or conversation["speaker_a"]
    username = f"locomo-{sample['sample_id']}" + (f"-{speaker}" if speaker else "")
    owner = get_user_model().objects.create(username=username)
    loaded = Loaded(owner=owner)
    # Session ids end in 4 digits: the conversation's, plus 10 or 20 for a single speaker's.
    tag = index + (10 * (1 + speakers(sample).index(speaker)) if speaker else 0)
    by_turn: dict[str, Message] = {}
    for n, key in enumerate(session_keys(conversation), start=1):
        when = parse_date(conversation[f"{key}_date_time"])
        loaded.now = max(loaded.now or when, when)
        turns = conversation[key]
        if speaker:
            turns = [turn for turn in turns if turn["speaker"] == speaker]
            if not turns:
                continue
        session = ChatSession.objects.create(
            id=f"s_{when:%Y%m%d_%H%M}_{tag:02d}{n:02d}",
            owner=owner,
            model="offline",
            title=turn_text(turns[0])[:40] if turns else "",
            channel="import",
            created_at=when,
            updated_at=when,
            ended_at=when,
        )
        texts = [turn_text(turn) for turn in turns]
        roles = ["user" if turn["speaker"] == user_name else "assistant" for turn in turns]
        # As message_append indexes them: the turn's words and its neighbours'.
        index_tokens = previous_turn_tokens if without_next_turn else session_message_tokens
        tokens = index_tokens(zip(range(len(turns)), roles, texts, strict=True))
        rows = [
            Message(
                session=session,
                seq=seq,
                role=roles[seq - 1],
                content=texts[seq - 1],
                search_tokens=tokens[seq - 1],
                created_at=when,
            )
            for seq in range(1, len(turns) + 1)
        ]
        for turn, text in zip(turns, texts, strict=True):
            loaded.turn_text[turn["dia_id"]] = text
            loaded.history_tokens += estimate_tokens(text)
        Message.objects.bulk_create(rows)
        ChatSession.objects.filter(pk=session.pk).update(
            last_seq=len(rows), round_count=sum(1 for r in rows if r.role == "user")
        )
        for turn, message in zip(
            turns, Message.objects.filter(session=session).order_by("seq"), strict=True
        ):
            by_turn[turn["dia_id"]] = message
            loaded.message_turn[message.pk] = turn["dia_id"]
    if observations:
        facts, seen = [], set()
        for per_speaker in (sample.get("observation") or {}).values():
            for items in per_speaker.values():
                for text, dia_id in items:
                    message = by_turn.get(dia_id if isinstance(dia_id, str) else "")
                    key_ = content_key(text)
                    if key_ in seen:
                        continue
                    seen.add(key_)
                    facts.append(
                        Fact(
                            owner=owner,
                            content=text,
                            content_key=key_,
                            # As fact_write indexes them: with their source turn's words.
                            search_tokens=fact_search_tokens(text, message),
                            category="knowledge",
                            confidence=0.8,
                            source="import",
                            message=message,
                            session=message.session if message else None,
                        )
                    )
        Fact.objects.bulk_create(facts)
    return loaded


def consolidate(loaded: Loaded) -> None:
    """What production does after the turns and at the end of each session (offline model)."""
    from agent_app.lifecycle import session_episode_write_task
    from memory_app.consolidator import consolidation_run
    from sessions_app.models import ChatSession

    for session in ChatSession.objects.filter(owner=loaded.owner).order_by("created_at"):
        consolidation_run(session_id=session.pk)
        session_episode_write_task(session.pk)


def write_vectors(loaded: Loaded) -> None:
    """The vectors the background writes after each turn (ETHAN_EMBEDDER; none when off)."""
    from agent_app.vectors import vectors_write_all

    vectors_write_all(owner_id=loaded.owner.pk)


def reached_by_turn(loaded: Loaded, question: str, mode: str) -> tuple[set[str], int]:
    """The turns a fresh full-path turn with `question` reaches, and its context tokens."""
    from django.test.utils import override_settings

    from agent_app.prompts import build_system
    from ethan_llm.tokens import estimate_tokens
    from memory_app.working import context_assemble, context_parts
    from sessions_app.services import session_start

    with override_settings(ETHAN_INJECTION=mode):
        system = build_system(owner=loaded.owner, mode="work", path="full", text=question)
    session = session_start(owner=loaded.owner)
    parts = context_parts(session=session, current_input=question)
    context = context_assemble(session=session, parts=parts)
    from memory_app.models import Fact

    # A fact reaches the turns it came from: its provenance (the observations' message, or the
    # messages Ethan's own extraction linked it to).
    said_in = {f.message_id for f in system.facts} | set(
        Fact.sources.through.objects.filter(fact_id__in=[f.pk for f in system.facts]).values_list(
            "message_id", flat=True
        )
    )
    reached = {loaded.message_turn[m] for m in said_in if m in loaded.message_turn}
    prompt = system.text
    reached |= {dia for dia, text in loaded.turn_text.items() if len(text) > 20 and text in prompt}
    tokens = estimate_tokens(prompt) + sum(estimate_tokens(m.content) for m in context)
    return reached, tokens


def search_ranked(loaded: Loaded, question: str) -> list[str | None]:
    """memory_search over messages (messages_search), as turn ids, best first."""
    from sessions_app.selectors import messages_search

    hits = messages_search(owner=loaded.owner, query=question, limit=max(RECALL_AT), now=loaded.now)
    return [loaded.message_turn.get(h.item.pk) for h in hits]


# --- scoring -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Question:
    conversation: int  # the index in the file (HALVES refers to it)
    category: int
    text: str
    evidence: list[str]


def questions(
    sample: dict[str, Any], index: int, known: set[str], *, speaker: str | None = None
) -> Iterator[Question]:
    """The sample's questions whose evidence names a known turn; with `speaker`, those whose
    every evidence turn is that speaker's (`known` then their turns alone)."""
    every = known
    if speaker:
        every = {turn["dia_id"] for key in session_keys(sample["conversation"])
                 for turn in sample["conversation"][key]}  # fmt: skip
    for qa in sample["qa"]:
        evidence = clean_evidence(qa.get("evidence") or [], every)
        if evidence and set(evidence) <= known:
            yield Question(index, int(qa["category"]), qa["question"], evidence)


@dataclass(frozen=True)
class Scored:
    question: Question
    values: dict[str, float]


class ReplayedExtractor:
    """The compression model of `--end-to-end replay`: a loopback server speaking the OpenAI
    wire protocol (tests/fakes) that answers each consolidating or extracting request with
    LoCoMo's own observations (written by a language model, each naming its dia_id) for exactly
    the turns shown in that request from the first it may take facts from, each with its turn
    number. It stands in for a real model's extraction, which cannot be called here: every fact
    still goes Ethan's real way (when extraction runs, provenance from the turn numbers, dedupe,
    reinforcement, supersession, capacity, injection ranking). Summaries are the observations
    of the turns shown, as a model's summary says what happened in its own words: never the
    turns' words, which would count as those turns reached once an episode is in the prompt
    (reached_by_turn). Folds join the summaries."""

    SUMMARY_WORDS = 60

    def __init__(self) -> None:
        from tests.fakes.openai_fake import FakeOpenAI

        self.fake = FakeOpenAI()
        self.fake.responder = self._answer
        self.by_text: dict[str, list[str]] = {}  # a turn's text → its dia_ids
        self.observed: dict[str, list[str]] = {}  # dia_id → its observations
        self.calls: dict[str, int] = {}

    @property
    def env(self) -> dict[str, str]:
        return {"OPENAI_API_KEY": "replay", "OPENAI_BASE_URL": f"{self.fake.url}/v1"}

    def use(self, sample: dict[str, Any], loaded: Loaded) -> None:
        """The conversation now being consolidated (dia_ids repeat across conversations)."""
        self.by_text, self.observed = {}, {}
        for dia_id, text in loaded.turn_text.items():
            self.by_text.setdefault(text.strip(), []).append(dia_id)
        for per_speaker in (sample.get("observation") or {}).values():
            for items in per_speaker.values():
                for text, dia_id in items:
                    if isinstance(dia_id, str):
                        self.observed.setdefault(dia_id, []).append(text)

    @staticmethod
    def turns(transcript: str) -> list[str]:
        """The texts of ethan_llm.memory.render_transcript's numbered turns, in order."""
        texts: list[str] = []
        for line in transcript.split("\n"):
            numbered = re.match(r"^\[\d+\] (?:user|assistant): (.*)$", line)
            if numbered:
                texts.append(numbered.group(1))
            elif texts and line.startswith("  "):
                texts[-1] += "\n" + line[2:]
        return texts

    def observations(self, text: str) -> list[str]:
        """The observations of a shown turn (of the first of equal turns)."""
        return [
            o
            for dia_id in self.by_text.get(text.strip(), [])[:1]
            for o in self.observed.get(dia_id, [])
        ]

    def summary(self, transcript: str) -> str:
        """The observations of every turn shown, in order, cut at SUMMARY_WORDS words."""
        said = " ".join(o for text in self.turns(transcript) for o in self.observations(text))
        return " ".join(said.split()[: self.SUMMARY_WORDS]) or "Small talk."

    def facts(self, system: str, transcript: str) -> list[dict[str, Any]]:
        first = re.search(r"take facts only from turn \[(\d+)\]", system)
        start = int(first.group(1)) if first else 1
        facts = []
        for number, text in enumerate(self.turns(transcript), start=1):
            if number < start:
                continue
            for observation in self.observations(text):
                facts.append(
                    {
                        "content": observation,
                        "category": "knowledge",
                        "importance": 0.8,
                        "turns": [number],
                    }
                )
        return facts

    def _answer(self, recorded):
        from tests.fakes.base import Reply
        from tests.fakes.openai_fake import FakeOpenAI

        body = recorded.body
        system, prompt = body["messages"][0]["content"], body["messages"][-1]["content"]
        words = self.summary(prompt)
        if "You do two things with a conversation" in system:
            kind, text = "consolidate", {"summary": words, "facts": self.facts(system, prompt)}
        elif "extract long-term memories" in system:
            kind, text = "extract", {"facts": self.facts(system, prompt)}
        elif "running summary" in system:
            kind, text = "fold", " ".join(prompt.split()[: self.SUMMARY_WORDS * 2])
        else:
            kind, text = "summarize", words
        self.calls[kind] = self.calls.get(kind, 0) + 1
        content = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False)
        return Reply(body=FakeOpenAI.text(content) | {"model": body["model"]})

    def close(self) -> None:
        self.fake.close()


def recall_at(prefix: str, ranked: list, evidence: list[str]) -> dict[str, float]:
    return {f"{prefix}@{k}": recall(set(ranked[:k]), evidence) for k in RECALL_AT}


def evaluate(
    samples: list[dict[str, Any]],
    observations: bool,
    progress=None,
    *,
    first: int = 0,
    without_next_turn: bool = False,
    extractor: ReplayedExtractor | None = None,
) -> list[Scored]:
    """Every question of `samples` (the file's conversations first, first + 1, …) scored.
    With `extractor`, consolidation's compression model is that replay of the conversation's
    observations (else the offline model)."""
    scored: list[Scored] = []
    for offset, sample in enumerate(samples):
        index = first + offset
        loaded = load_conversation(sample, index, observations, without_next_turn=without_next_turn)
        if extractor is not None:
            extractor.use(sample, loaded)
        consolidate(loaded)
        write_vectors(loaded)
        turns = list(loaded.turn_text.items())
        for question in questions(sample, index, set(loaded.turn_text)):
            values: dict[str, float] = {}
            for mode in ("seed", "relevance"):
                reached, tokens = reached_by_turn(loaded, question.text, mode)
                values[f"inject_{mode}"] = recall(reached, question.evidence)
            values["tokens_ratio"] = tokens / max(1, loaded.history_tokens)
            values |= recall_at("search", search_ranked(loaded, question.text), question.evidence)
            values |= recall_at("plain", plain_ranked(question.text, turns), question.evidence)
            scored.append(Scored(question, values))
        if progress:
            progress(offset + 1, len(samples))
    return scored


COLUMNS = [
    "inject_seed",
    "inject_relevance",
    "search@5",
    "search@10",
    "search@25",
    "plain@5",
    "plain@10",
    "plain@25",
    "tokens_ratio",
]


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def summarise(scored: list[Scored]) -> dict[str, dict[str, float]]:
    """A row per category, then categories 1-4 together, over all and per half."""

    def row(items: list[Scored]) -> dict[str, float]:
        return {
            "questions": len(items),
            **{c: mean([s.values[c] for s in items if c in s.values]) for c in COLUMNS},
        }

    table: dict[str, dict[str, float]] = {}
    for category in sorted({s.question.category for s in scored}):
        name = f"{category} {CATEGORIES.get(category, '')}"
        table[name] = row([s for s in scored if s.question.category == category])
    answerable = [s for s in scored if s.question.category != 5]
    table["overall (1-4)"] = row(answerable)
    for half in HALVES:
        mine = [s for s in answerable if half_of(s.question.conversation) == half]
        if mine and len(mine) < len(answerable):
            table[f"overall (1-4), half {half}"] = row(mine)
    return table


def markdown(table: dict[str, dict[str, float]]) -> str:
    lines = [
        "| category | questions | injection recall (seed) | injection recall (relevance) "
        "| memory_search recall@5 | @10 | @25 | plain BM25 recall@5 | @10 | @25 "
        "| context / full history |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in table.items():
        lines.append(
            f"| {name} | {int(row['questions'])} | {row['inject_seed']:.3f} | "
            f"{row['inject_relevance']:.3f} | {row['search@5']:.3f} | {row['search@10']:.3f} | "
            f"{row['search@25']:.3f} | {row['plain@5']:.3f} | {row['plain@10']:.3f} | "
            f"{row['plain@25']:.3f} | {row['tokens_ratio'] * 100:.1f}% |"
        )
    return "\n".join(lines)


def chart(table: dict[str, dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(table)
    series = [
        ("inject_seed", "injection, seed order"),
        ("inject_relevance", "injection, relevance"),
        ("search@10", "memory_search recall@10"),
        ("plain@10", "plain BM25 recall@10"),
    ]
    fig, ax = plt.subplots(figsize=(11, 4.8))
    width = 0.2
    for offset, (key, label) in enumerate(series):
        ax.bar(
            [i + (offset - 1.5) * width for i in range(len(names))],
            [table[n][key] for n in names],
            width,
            label=label,
        )
    ax.set_xticks(range(len(names)), names, rotation=15, fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_ylabel("share of evidence turns reached")
    ax.set_title("LoCoMo: evidence that reaches the model")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# --- honest tuning -----------------------------------------------------------------------------


def suffix_stem(word: str) -> str:
    """The hand-written suffix stripper ethan_llm.text.stem was before Snowball, kept here only to
    measure against."""
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


@contextmanager
def stemming(name: str) -> Iterator[None]:
    """Tokenize with the stemmer `name` ("snowball", the one ethan_llm.text has, or "suffix")."""
    import ethan_llm.text

    snowball = ethan_llm.text.stem
    ethan_llm.text.stem = {"snowball": snowball, "suffix": suffix_stem}[name]
    try:
        yield
    finally:
        ethan_llm.text.stem = snowball


@contextmanager
def tuned(tuning: Any) -> Iterator[None]:
    from sessions_app import search

    before, search.TUNING = search.TUNING, tuning
    try:
        yield
    finally:
        search.TUNING = before


@dataclass(frozen=True)
class Setting:
    stemmer: str
    tuning: Any  # sessions_app.search.Tuning


def start_setting() -> Setting:
    """Search as it was before this tuning, but for b (textbook, not tuned): the suffix
    stripper, the neighbours' words at about half weight (they were stored once beside the
    turn's own words stored twice), no time preference."""
    from sessions_app.search import Tuning

    return Setting("suffix", Tuning(context_weight=0.5, time_boost=0.0, time_after_days=0))


# Each step varies one thing of the setting; its first option is the simpler or earlier one,
# which a tie keeps. Time: the boost of a message from the named time, and the days after the
# named span that still count as "then".
TIME_BOOSTS = (0.25, 0.5, 1.0, 2.0)
TIME_AFTER_DAYS = (0, 7, 30)


def step_options(step: str, setting: Setting) -> list[tuple[str, Setting]]:
    t = setting.tuning

    def with_(**changes: Any) -> Setting:
        return replace(setting, tuning=replace(t, **changes))

    if step == "stemmer":
        return [("suffix stripper", replace(setting, stemmer="suffix")),
                ("Snowball", replace(setting, stemmer="snowball"))]  # fmt: skip
    if step == "context weight":
        return [(f"{w:g}", with_(context_weight=w)) for w in (0.0, 0.25, 0.5, 0.75, 1.0)]
    if step == "time":
        options = [("off", with_(time_boost=0.0, time_after_days=0))]
        for boost in TIME_BOOSTS:
            for after in TIME_AFTER_DAYS:
                options.append(
                    (f"×{1 + boost:g}, +{after} d", with_(time_boost=boost, time_after_days=after))
                )
        return options
    raise ValueError(step)


STEPS = ("stemmer", "context weight", "time")


def describe(setting: Setting) -> str:
    t = setting.tuning
    time_part = (
        f"time ×{1 + t.time_boost:g} up to {t.time_after_days} d after"
        if t.time_boost
        else "no time preference"
    )
    return (
        f"{'Snowball' if setting.stemmer == 'snowball' else 'suffix stripper'}, context weight "
        f"{t.context_weight:g}, {time_part}"
    )


class Tuner:
    """All ten conversations' messages loaded once (no facts, no consolidation: message search
    needs neither); each setting's recall computed once for every question of categories 1-4,
    so choosing on one half and measuring on the other are two reads of the same numbers."""

    def __init__(
        self,
        samples: list[dict[str, Any]],
        progress: Callable | None = None,
        *,
        single_speaker: bool = False,
    ):
        from ethan_llm.text import time_named

        self.loaded: list[Loaded] = []
        self.questions: list[list[Question]] = []
        self.plain: list[list[dict[str, float]]] = []
        self.halves: list[str] = []  # each log's half (two logs a conversation: single speaker)
        logs = [
            (index, sample, speaker)
            for index, sample in enumerate(samples)
            for speaker in (speakers(sample) if single_speaker else [None])
        ]
        for index, sample, speaker in logs:
            loaded = load_conversation(sample, index, observations=False, speaker=speaker)
            known = set(loaded.turn_text)
            asked = [q for q in questions(sample, index, known, speaker=speaker) if q.category != 5]
            turns = list(loaded.turn_text.items())
            self.loaded.append(loaded)
            self.questions.append(asked)
            self.halves.append(half_of(index))
            self.plain.append(
                [recall_at("plain", plain_ranked(q.text, turns), q.evidence) for q in asked]
            )
        self.names_time = [
            [time_named(q.text, now=loaded.now) is not None for q in asked]
            for loaded, asked in zip(self.loaded, self.questions, strict=True)
        ]
        self.indexed = "snowball"  # load_conversation tokenized with ethan_llm.text's stemmer
        self.cache: dict[Setting, list[list[dict[str, float]]]] = {}
        self.progress = progress

    def index(self, stemmer: str) -> None:
        """Re-tokenize every message with `stemmer`, as ethan_reindex does."""
        from sessions_app.models import ChatSession
        from sessions_app.search import messages_reindex

        if stemmer == self.indexed:
            return
        with stemming(stemmer):
            for loaded in self.loaded:
                messages_reindex(
                    list(
                        ChatSession.objects.filter(owner=loaded.owner).values_list("pk", flat=True)
                    )
                )
        self.indexed = stemmer

    def scores(self, setting: Setting) -> list[list[dict[str, float]]]:
        """search@k of every question, per conversation."""
        t = setting.tuning
        if not t.time_boost:  # the window means nothing then: one entry for all of them
            setting = replace(setting, tuning=replace(t, time_after_days=0))
        if setting in self.cache:
            return self.cache[setting]
        # A time preference changes only the questions that name a time.
        base = (
            self.scores(replace(setting, tuning=replace(t, time_boost=0.0)))
            if t.time_boost
            else None
        )
        self.index(setting.stemmer)
        found = []
        with stemming(setting.stemmer), tuned(setting.tuning):
            for c, (loaded, asked) in enumerate(zip(self.loaded, self.questions, strict=True)):
                found.append(
                    [
                        base[c][n]
                        if base and not self.names_time[c][n]
                        else recall_at("search", search_ranked(loaded, q.text), q.evidence)
                        for n, q in enumerate(asked)
                    ]
                )
        self.cache[setting] = found
        if self.progress:
            self.progress(len(self.cache), describe(setting))
        return found

    def mean(
        self, setting: Setting | None, half: str, column: str = "search@10", timed: bool = False
    ) -> float:
        """The mean of `column` over a half's questions (setting None: the plain baseline),
        only those naming a time when `timed`."""
        if setting is None:
            values, column = self.plain, column.replace("search@", "plain@")
        else:
            values = self.scores(setting)
        return mean(
            [
                row[column]
                for c in self.logs(half)
                for n, row in enumerate(values[c])
                if not timed or self.names_time[c][n]
            ]
        )

    def logs(self, half: str) -> list[int]:
        return [c for c, of in enumerate(self.halves) if of == half]


def choose(
    measure: Callable[[Setting, str], float], tuning_half: str
) -> tuple[Setting, list[tuple[str, str, float, float, bool]]]:
    """The setting chosen a step at a time by `measure` (recall@10 of a setting on a half) on
    `tuning_half` alone, from start_setting; and every option seen, as (step, option, recall@10
    on the tuning half, on the other, chosen)."""
    held = other_half(tuning_half)
    setting, trail = start_setting(), []
    for step in STEPS:
        options = [
            (label, option, measure(option, tuning_half), measure(option, held))
            for label, option in step_options(step, setting)
        ]
        best = max(options, key=lambda o: o[2])  # the first of equals: the simpler one
        setting = best[1]
        trail += [(step, label, a, b, label == best[0]) for label, _o, a, b in options]
    return setting, trail


def other_half(half: str) -> str:
    return next(name for name in HALVES if name != half)


def without(setting: Setting, feature: str) -> Setting:
    """`setting` with one feature undone: the stemmer as in start_setting, or off."""
    if feature == "stemmer":
        return replace(setting, stemmer=start_setting().stemmer)
    changes = {"context weight": {"context_weight": 0.0}, "time": {"time_boost": 0.0}}[feature]
    return replace(setting, tuning=replace(setting.tuning, **changes))


ABLATED = {
    "stemmer": "suffix stripper instead of Snowball",
    "context weight": "no neighbours' words (weight 0)",
    "time": "no time preference",
}


def tune_report(tuner: Tuner) -> tuple[str, dict[str, Setting]]:
    """The tables of a --tune run, and the setting chosen on each half."""
    chosen: dict[str, Setting] = {}
    lines: list[str] = []
    summary = [
        "| tuned on → measured on | chosen | recall@10 on the tuning half | held back: "
        "memory_search recall@5 | @10 | @25 | plain BM25 recall@5 | @10 | @25 | @10 gap |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for half in HALVES:
        held = other_half(half)
        setting, trail = choose(tuner.mean, half)
        chosen[half] = setting
        ours = [tuner.mean(setting, held, f"search@{k}") for k in RECALL_AT]
        plain = [tuner.mean(None, held, f"plain@{k}") for k in RECALL_AT]
        summary.append(
            f"| {half} → {held} | {describe(setting)} | {tuner.mean(setting, half):.3f} | "
            + " | ".join(f"{v:.3f}" for v in ours + plain)
            + f" | {ours[1] - plain[1]:+.3f} |"
        )
        lines += [
            f"\nChosen on half {half}, a step at a time; recall@10 of every option on both "
            f"halves (✓ the option chosen, on {half} alone):\n",
            f"| step | option | recall@10 on {half} (tuning) | on {held} (held back) | |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {step} | {label} | {a:.3f} | {b:.3f} | {'✓' if best else ''} |"
            for step, label, a, b, best in trail
        ]
    spread = abs(
        tuner.mean(chosen["A"], "B") - tuner.mean(chosen["B"], "A")
    )  # the two held-back numbers
    ablation = [
        "\nEach feature undone, one at a time, from the setting chosen on one half; recall@10 "
        "on the other (held-back) half, over all its questions and over those that name a "
        "time:\n",
        "| setting | A → B: @10 on B | on B's timed questions | B → A: @10 on A "
        "| on A's timed questions |",
        "|---|---|---|---|---|",
    ]
    for feature in ["", *ABLATED]:
        cells = []
        for half in HALVES:
            setting = chosen[half] if not feature else without(chosen[half], feature)
            held = other_half(half)
            cells += [tuner.mean(setting, held), tuner.mean(setting, held, timed=True)]
        name = ABLATED.get(feature, "as chosen")
        lines_ = " | ".join(f"{v:.3f}" for v in cells)
        ablation.append(f"| {name} | {lines_} |")
    plain_row = [tuner.mean(None, h, timed=t) for h in ("B", "A") for t in (False, True)]
    ablation.append("| plain BM25 | " + " | ".join(f"{v:.3f}" for v in plain_row) + " |")
    counts = {h: sum(len(tuner.questions[c]) for c in tuner.logs(h)) for h in HALVES}
    timed = {h: sum(sum(tuner.names_time[c]) for c in tuner.logs(h)) for h in HALVES}
    note = (
        f"Halves: A = conversations 0-4 ({counts['A']} questions of categories 1-4, "
        f"{timed['A']} naming a time), B = 5-9 ({counts['B']}, {timed['B']}). Spread of the "
        f"held-back recall@10 between the two directions: {spread:.3f}.\n\n"
    )
    text = note + "\n".join(summary) + "\n" + "\n".join(lines) + "\n" + "\n".join(ablation)
    return text, chosen


# --- length normalisation on two shapes ---------------------------------------------------------

# BM25's length normalisation, each option from the shipped setting (search.TUNING) with these
# changes: whose mean length (the query's candidates, or the owner's messages), b, and a lower
# bound on a matching term's weight (BM25+, BM25L).
LENGTH_OPTIONS: list[tuple[str, dict[str, Any]]] = [
    ("candidates' mean, b 0.75", {"avgdl": "candidates", "b": 0.75, "delta": 0.0}),
    ("candidates' mean, b 0.5", {"avgdl": "candidates", "b": 0.5, "delta": 0.0}),
    ("candidates' mean, b 0.3", {"avgdl": "candidates", "b": 0.3, "delta": 0.0}),
    ("candidates' mean, b 0.75, BM25+ δ 1", {"avgdl": "candidates", "b": 0.75, "delta": 1.0}),
    ("collection's mean, b 0.75", {"avgdl": "collection", "b": 0.75, "delta": 0.0}),
    ("collection's mean, b 0.5", {"avgdl": "collection", "b": 0.5, "delta": 0.0}),
    ("collection's mean, b 0.3", {"avgdl": "collection", "b": 0.3, "delta": 0.0}),
    ("collection's mean, b 0.75, BM25+ δ 0.5", {"avgdl": "collection", "b": 0.75, "delta": 0.5}),
    ("collection's mean, b 0.75, BM25+ δ 1", {"avgdl": "collection", "b": 0.75, "delta": 1.0}),
    ("candidates' mean, b 0.75, BM25L δ 0.5",
     {"avgdl": "candidates", "b": 0.75, "delta": 0.5, "lower_bound": "L"}),
    ("collection's mean, b 0.75, BM25L δ 0.5",
     {"avgdl": "collection", "b": 0.75, "delta": 0.5, "lower_bound": "L"}),
]  # fmt: skip
SHAPES = {"dialogue": False, "single speaker": True}


def lengths_report(tuners: dict[str, Tuner]) -> str:
    """recall@10 of every LENGTH_OPTIONS option on both shapes and both halves; the option
    chosen on half A (the mean of the two shapes' A), measured on B."""
    from sessions_app.search import TUNING

    header = " | ".join(f"{shape} {half}" for shape in tuners for half in HALVES)
    lines = [
        f"| length normalisation | {header} | A, both shapes | |",
        "|---|" + "---|" * (len(tuners) * len(HALVES) + 2),
    ]
    rows = []
    for label, changes in LENGTH_OPTIONS:
        setting = Setting("snowball", replace(TUNING, **changes))
        cells = [tuner.mean(setting, half) for tuner in tuners.values() for half in HALVES]
        rows.append((label, cells, mean([tuner.mean(setting, "A") for tuner in tuners.values()])))
    best = max(rows, key=lambda row: row[2])[0]  # the first of equals
    for label, cells, on_a in rows:
        shown = " | ".join(f"{v:.3f}" for v in cells)
        lines.append(f"| {label} | {shown} | {on_a:.3f} | {'✓' if label == best else ''} |")
    plain = [tuner.mean(None, half) for tuner in tuners.values() for half in HALVES]
    lines.append("| plain BM25 | " + " | ".join(f"{v:.3f}" for v in plain) + " | | |")
    counts = ", ".join(
        f"{shape}: A {sum(len(t.questions[c]) for c in t.logs('A'))}, "
        f"B {sum(len(t.questions[c]) for c in t.logs('B'))}"
        for shape, t in tuners.items()
    )
    return f"Questions of categories 1-4: {counts}.\n\n" + "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="locomo10.json")
    parser.add_argument(
        "--observations", action="store_true", help="load each conversation's observations as facts"
    )
    parser.add_argument(
        "--end-to-end",
        choices=("offline", "replay"),
        default="offline",
        help="without --observations, what extracts Ethan's own facts: the offline model, or a "
        "replay of LoCoMo's observations for the turns each request shows (ReplayedExtractor)",
    )
    parser.add_argument("--conversations", type=int, default=None, help="only the first N")
    parser.add_argument("--quick", action="store_true", help="the first two conversations")
    parser.add_argument(
        "--tune",
        action="store_true",
        help="choose the search settings on one half, measure them on the other (message "
        "search only; needs all ten conversations)",
    )
    parser.add_argument(
        "--lengths",
        action="store_true",
        help="compare BM25 length normalisations on both shapes, dialogue and single speaker "
        "(message search only; needs all ten conversations)",
    )
    parser.add_argument(
        "--single-speaker",
        action="store_true",
        help="with --tune: each speaker's turns alone, as their own log, with the questions "
        "whose evidence is all in them",
    )
    parser.add_argument(
        "--warm-capacity",
        type=int,
        default=None,
        help="end-to-end diagnostic: extract once the warm zone covers N rounds (default 20)",
    )
    parser.add_argument(
        "--without-next-turn",
        action="store_true",
        help="ablation: messages indexed without the next turn's words (no chart is drawn)",
    )
    parser.add_argument("--chart", type=Path, default=ROOT / "docs" / "locomo_recall.png")
    parser.add_argument("--no-record", action="store_true", help="do not append to docs/")
    args = parser.parse_args(argv)
    samples = json.loads(args.data.read_text(encoding="utf-8"))
    if args.tune and args.without_next_turn:
        parser.error("--without-next-turn is an ablation of the default run, not of --tune")
    if args.single_speaker and not args.tune:
        parser.error("--single-speaker is a shape for --tune (--lengths runs both shapes)")
    whole = args.tune or args.lengths
    if whole and len(samples) != sum(len(h) for h in HALVES.values()):
        parser.error(
            f"--tune and --lengths need the ten conversations of locomo10.json, not {len(samples)}"
        )
    limit = 2 if args.quick else args.conversations
    samples = samples[:limit] if limit and not whole else samples
    # LoCoMo's times have no zone: read as UTC, and so are the days that questions name.
    os.environ.setdefault("ETHAN_TIME_ZONE", "UTC")
    # With ETHAN_HOME given, that (fresh) home is used as it is: .bench-home, which another
    # benchmark may be using at the same time, is left alone.
    django_setup(fresh_home="ETHAN_HOME" not in os.environ)
    started = time.perf_counter()

    def progress(done: int, total: Any) -> None:
        print(f"  {done}/{total} ({time.perf_counter() - started:.0f} s)", file=sys.stderr)

    if args.tune:
        text, _chosen = tune_report(Tuner(samples, progress, single_speaker=args.single_speaker))
        print(text)
        if not args.no_record:
            shape = ", single-speaker logs" if args.single_speaker else ""
            note = f"Message search only{shape}; {time.perf_counter() - started:.0f} s.\n\n"
            append_results(
                "LoCoMo recall: tuned on one half, measured on the other",
                command_line("bench.locomo_recall", argv),
                note + text,
            )
        return 0
    if args.lengths:
        tuners = {
            shape: Tuner(samples, progress, single_speaker=single)
            for shape, single in SHAPES.items()
        }
        text = lengths_report(tuners)
        print(text)
        if not args.no_record:
            note = f"Message search only; {time.perf_counter() - started:.0f} s.\n\n"
            append_results(
                "LoCoMo recall: length normalisation on two shapes",
                command_line("bench.locomo_recall", argv),
                note + text,
            )
        return 0

    if args.warm_capacity:
        os.environ["ETHAN_MEMORY_WARM_CAPACITY"] = str(args.warm_capacity)
        from django.conf import settings

        settings.ETHAN_MEMORY_WARM_CAPACITY = args.warm_capacity
    extractor = None
    if args.end_to_end == "replay" and not args.observations:
        from ethan_llm import config

        extractor = ReplayedExtractor()
        config.configure(env=extractor.env, compression_model="gpt-4o-mini")
    try:
        table = summarise(
            evaluate(
                samples,
                args.observations,
                progress,
                without_next_turn=args.without_next_turn,
                extractor=extractor,
            )
        )
    finally:
        if extractor is not None:
            extractor.close()
    text = markdown(table)
    print(text)
    if not args.observations:
        who = "replayed extractor" if extractor is not None else "offline"
        for half in HALVES:
            row = table.get(f"overall (1-4), half {half}")
            if row is not None:
                print(
                    f"end-to-end injection recall (half {half}, {who}): "
                    f"{row['inject_relevance']:.3f}"
                )
        if extractor is not None:
            print(f"compression-model calls: {extractor.calls}")
    if not args.no_record:
        if not args.without_next_turn:  # the charts show the shipped indexing only
            chart(table, args.chart)
        command = command_line("bench.locomo_recall", argv)
        mode = (
            "observations loaded as facts"
            if args.observations
            else "end-to-end: Ethan's own facts ("
            + (
                "LoCoMo's observations replayed as the extractor's answers"
                if extractor is not None
                else "offline extraction"
            )
            + ", provenance), no observations"
            + (f", warm zone {args.warm_capacity} rounds" if args.warm_capacity else "")
        ) + (
            "; ablation: messages indexed without the next turn's words (each keeps its own "
            "and the previous turn's), no chart"
            if args.without_next_turn
            else ""
        )
        note = (
            f"{len(samples)} conversations, {mode}; "
            f"{time.perf_counter() - started:.0f} s."
            + ("" if args.without_next_turn else f" Chart: {args.chart.name}.")
            + " Half B "
            "(conversations 5-9) is held back: the search settings were chosen on half A.\n\n"
        )
        append_results("LoCoMo recall", command, note + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
