"""LoCoMo: does the memory that reaches the model hold the evidence for the question?

Each LoCoMo conversation becomes one owner's sessions (speaker_a as user, speaker_b as
assistant, session dates kept), optionally with its observations as facts whose provenance is
their turn; consolidation and episodes run as in production (offline model). Then, for every
question, a fresh turn is built (full path) and we measure:

- injection recall: the share of the question's evidence turns reached by that turn's system
  prompt and context (a turn is reached when its text is there, or an injected fact came from
  it), for the design's `seed` order and the `relevance` default;
- memory_search recall@5/10/25 over messages;
- context tokens of that turn against the whole conversation (the full-history baseline).

Categories 1-4 are reported and averaged; 5 (adversarial) apart. The dataset is read from
--data (evaluation only: it is never copied into this repository).

    python -m bench.locomo_recall --data ../shared/datasets/locomo/locomo10.json --observations
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import ROOT, append_results, command_line, django_setup

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
RECALL_AT = (5, 10, 25)


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


@dataclass
class Loaded:
    owner: Any
    message_turn: dict[int, str] = field(default_factory=dict)  # message pk → dia_id
    turn_text: dict[str, str] = field(default_factory=dict)  # dia_id → text
    history_tokens: int = 0


def load_conversation(sample: dict[str, Any], index: int, observations: bool) -> Loaded:
    from django.contrib.auth import get_user_model

    from llm.tokens import estimate_tokens
    from memory_app.models import Fact
    from memory_app.normalize import content_key
    from memory_app.services import fact_search_tokens
    from sessions_app.models import ChatSession, Message
    from sessions_app.search import search_tokens, with_context

    conversation = sample["conversation"]
    user_name = conversation["speaker_a"]
    owner = get_user_model().objects.create(username=f"locomo-{sample['sample_id']}")
    loaded = Loaded(owner=owner)
    by_turn: dict[str, Message] = {}
    for n, key in enumerate(session_keys(conversation), start=1):
        when = parse_date(conversation[f"{key}_date_time"])
        turns = conversation[key]
        session = ChatSession.objects.create(
            id=f"s_{when:%Y%m%d_%H%M}_{index:02d}{n:02d}",
            owner=owner,
            model="offline",
            title=turn_text(turns[0])[:40] if turns else "",
            channel="import",
            created_at=when,
            updated_at=when,
            ended_at=when,
        )
        rows = []
        texts = [turn_text(turn) for turn in turns]
        for seq, turn in enumerate(turns, start=1):
            text = texts[seq - 1]
            role = "user" if turn["speaker"] == user_name else "assistant"
            # As message_append indexes them: the turn's words and its neighbours'.
            around = (
                f"{texts[seq - 2] if seq > 1 else ''}\n{texts[seq] if seq < len(texts) else ''}"
            )
            rows.append(
                Message(
                    session=session,
                    seq=seq,
                    role=role,
                    content=text,
                    search_tokens=with_context(search_tokens(text), around),
                    created_at=when,
                )
            )
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
    from agent_app.lifecycle import write_episode
    from memory_app.consolidator import consolidation_run
    from sessions_app.models import ChatSession

    for session in ChatSession.objects.filter(owner=loaded.owner).order_by("created_at"):
        consolidation_run(session_id=session.pk)
        write_episode(session.pk)


def reached_by_turn(loaded: Loaded, question: str, mode: str) -> tuple[set[str], int]:
    """The turns a fresh full-path turn with `question` reaches, and its context tokens."""
    from django.test.utils import override_settings

    from agent_app.prompts import build_system
    from llm.tokens import estimate_tokens
    from memory_app.working import build_context
    from sessions_app.services import session_start

    with override_settings(ETHAN_INJECTION=mode):
        system = build_system(owner=loaded.owner, mode="work", path="full", text=question)
    context = build_context(session=session_start(owner=loaded.owner), current_input=question)
    reached = {
        loaded.message_turn[f.message_id]
        for f in system.facts
        if f.message_id in loaded.message_turn
    }
    prompt = system.text
    reached |= {dia for dia, text in loaded.turn_text.items() if len(text) > 20 and text in prompt}
    tokens = estimate_tokens(prompt) + sum(estimate_tokens(m.content) for m in context)
    return reached, tokens


def evaluate(
    samples: list[dict[str, Any]], observations: bool, progress=None
) -> dict[int, dict[str, list[float]]]:
    from sessions_app.selectors import messages_search

    scores: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for index, sample in enumerate(samples):
        loaded = load_conversation(sample, index, observations)
        consolidate(loaded)
        known = set(loaded.turn_text)
        for qa in sample["qa"]:
            evidence = clean_evidence(qa.get("evidence") or [], known)
            if not evidence:
                continue
            category = int(qa["category"])
            row = scores[category]
            for mode in ("seed", "relevance"):
                reached, tokens = reached_by_turn(loaded, qa["question"], mode)
                row[f"inject_{mode}"].append(recall(reached, evidence))
            row["tokens_ratio"].append(tokens / max(1, loaded.history_tokens))
            hits = messages_search(owner=loaded.owner, query=qa["question"], limit=max(RECALL_AT))
            ranked = [loaded.message_turn.get(h.item.pk) for h in hits]
            for k in RECALL_AT:
                row[f"search@{k}"].append(recall(set(ranked[:k]), evidence))
        if progress:
            progress(index + 1, len(samples))
    return scores


COLUMNS = ["inject_seed", "inject_relevance", "search@5", "search@10", "search@25", "tokens_ratio"]


def summarise(scores: dict[int, dict[str, list[float]]]) -> dict[str, dict[str, float]]:
    def mean(values: list[float]) -> float:
        return sum(values) / len(values) if values else 0.0

    table: dict[str, dict[str, float]] = {}
    overall: dict[str, list[float]] = defaultdict(list)
    for category in sorted(scores):
        row = scores[category]
        table[f"{category} {CATEGORIES.get(category, '')}"] = {
            "questions": len(row["inject_seed"]),
            **{c: mean(row[c]) for c in COLUMNS},
        }
        if category != 5:
            for column in COLUMNS:
                overall[column] += row[column]
    table["overall (1-4)"] = {
        "questions": len(overall["inject_seed"]),
        **{c: mean(overall[c]) for c in COLUMNS},
    }
    return table


def markdown(table: dict[str, dict[str, float]]) -> str:
    lines = [
        "| category | questions | injection recall (seed) | injection recall (relevance) "
        "| search recall@5 | @10 | @25 | context / full history |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, row in table.items():
        lines.append(
            f"| {name} | {int(row['questions'])} | {row['inject_seed']:.3f} | "
            f"{row['inject_relevance']:.3f} | {row['search@5']:.3f} | {row['search@10']:.3f} | "
            f"{row['search@25']:.3f} | {row['tokens_ratio'] * 100:.1f}% |"
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
    ]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.27
    for offset, (key, label) in enumerate(series):
        ax.bar(
            [i + (offset - 1) * width for i in range(len(names))],
            [table[n][key] for n in names],
            width,
            label=label,
        )
    ax.set_xticks(range(len(names)), names, rotation=15)
    ax.set_ylim(0, 1)
    ax.set_ylabel("share of evidence turns reached")
    ax.set_title("LoCoMo: evidence that reaches the model")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="locomo10.json")
    parser.add_argument(
        "--observations", action="store_true", help="load each conversation's observations as facts"
    )
    parser.add_argument("--conversations", type=int, default=None, help="only the first N")
    parser.add_argument("--quick", action="store_true", help="the first two conversations")
    parser.add_argument("--chart", type=Path, default=ROOT / "docs" / "locomo_recall.png")
    parser.add_argument("--no-record", action="store_true", help="do not append to docs/")
    args = parser.parse_args(argv)
    samples = json.loads(args.data.read_text(encoding="utf-8"))
    limit = 2 if args.quick else args.conversations
    samples = samples[:limit] if limit else samples
    django_setup()
    started = time.perf_counter()

    def progress(done: int, total: int) -> None:
        print(
            f"  conversation {done}/{total} ({time.perf_counter() - started:.0f} s)",
            file=sys.stderr,
        )

    table = summarise(evaluate(samples, args.observations, progress))
    text = markdown(table)
    print(text)
    if not args.no_record:
        chart(table, args.chart)
        command = command_line("bench.locomo_recall", argv)
        note = (
            f"{len(samples)} conversations, observations "
            f"{'loaded as facts' if args.observations else 'not loaded'}; "
            f"{time.perf_counter() - started:.0f} s. Chart: {args.chart.name}.\n\n"
        )
        append_results("LoCoMo recall", command, note + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
