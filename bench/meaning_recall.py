"""LoCoMo: memory found by meaning as well as words. Chooses the fusion's two weights
(sessions_app.meaning.TUNING: `weight`, the share of meaning in the fused score, and
`context_weight`, how much a message's neighbours count in its vector) on half A only, and
reports them on half B, on two shapes of history: the dialogue (both speakers) and single-speaker
logs (each speaker's turns alone, every one a user message), as bench.locomo_recall --tune does
for BM25's settings.

Message search only (memory_search over messages, recall@5/10/25 of the evidence turns, LoCoMo
categories 1-4). The baseline in the same run is the embedder off: BM25 alone, exactly what
Ethan searched with before. The settings are chosen on the dialogue's half A (recall@10) and
then read on everything else, so half B and the single-speaker logs are held back.

    python -m bench.meaning_recall --data ../shared/datasets/locomo/locomo10.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

from bench.common import append_results, command_line, django_setup
from bench.locomo_recall import HALVES, RECALL_AT, Tuner, mean, recall_at, search_ranked

CONTEXT_WEIGHTS = (0.0, 0.5, 1.0)
WEIGHTS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.8)
SHAPES = {"dialogue": False, "single speaker": True}


def remember_unchanged_parts() -> None:
    """What does not change from one setting to the next is computed once per question: its
    query vector, and BM25's ranking (the settings tried here change neither)."""
    import embedder
    from sessions_app import meaning, selectors

    vector_of = meaning.query_vector
    vectors: dict = {}

    def vector_remembered(text):
        key = (embedder.embedder_name(), text)  # none while the embedder is off
        if key not in vectors:
            vectors[key] = vector_of(text)
        return vectors[key]

    meaning.query_vector = vector_remembered
    ranked = selectors._messages_ranked
    memo: dict = {}

    def remembered(*, owner, terms, session_id=None, exclude_after=None):
        key = (owner.pk, tuple(terms), session_id, exclude_after)
        if key not in memo:
            memo[key] = ranked(
                owner=owner, terms=terms, session_id=session_id, exclude_after=exclude_after
            )
        return memo[key]

    selectors._messages_ranked = remembered


def embed_all(tuner: Tuner, context_weight: float) -> None:
    """Every message's vector written again with this neighbours' weight."""
    from agent_app.vectors import vectors_write_all
    from sessions_app import meaning
    from sessions_app.models import Message

    meaning.TUNING = replace(meaning.TUNING, context_weight=context_weight)
    for loaded in tuner.loaded:
        Message.objects.filter(session__owner=loaded.owner).update(
            embedding=None, embedding_model=None
        )
        vectors_write_all(owner_id=loaded.owner.pk)


def recalls(tuner: Tuner, weight: float | None) -> list[list[dict[str, float]]]:
    """search@k of every question, per log, with the fusion at `weight` (None: embedder off)."""
    import embedder
    from sessions_app import meaning

    saved = meaning.TUNING
    if weight is None:
        embedder.configure(embedder="off")
    else:
        meaning.TUNING = replace(meaning.TUNING, weight=weight)
    try:
        return [
            [
                recall_at("search", search_ranked(loaded, q.text), q.evidence)
                for q in tuner.questions[c]
            ]
            for c, loaded in enumerate(tuner.loaded)
        ]
    finally:
        embedder.configure(embedder="default")
        meaning.TUNING = replace(saved, context_weight=meaning.TUNING.context_weight)


def half_mean(tuner: Tuner, found: list[list[dict[str, float]]], half: str, column: str) -> float:
    return mean([row[column] for c in tuner.logs(half) for row in found[c]])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="locomo10.json")
    parser.add_argument("--no-record", action="store_true", help="do not append to docs/")
    args = parser.parse_args(argv)
    samples = json.loads(args.data.read_text(encoding="utf-8"))
    os.environ.setdefault("ETHAN_TIME_ZONE", "UTC")
    os.environ["ETHAN_EMBEDDER"] = "default"
    django_setup(fresh_home="ETHAN_HOME" not in os.environ)
    import embedder

    embedder.configure(embedder="default")
    remember_unchanged_parts()
    started = time.perf_counter()

    def say(text: str) -> None:
        print(f"  {text} ({time.perf_counter() - started:.0f} s)", file=sys.stderr)

    tuners = {shape: Tuner(samples, single_speaker=single) for shape, single in SHAPES.items()}
    say("loaded")
    # results[shape][(context_weight, weight)] = per-log rows; weight None: embedder off
    results: dict[str, dict[tuple, list]] = {shape: {} for shape in SHAPES}
    for shape, tuner in tuners.items():
        results[shape][(None, None)] = recalls(tuner, None)
    for context_weight in CONTEXT_WEIGHTS:
        for shape, tuner in tuners.items():
            embed_all(tuner, context_weight)
            for weight in WEIGHTS:
                results[shape][(context_weight, weight)] = recalls(tuner, weight)
            say(f"{shape}, neighbours {context_weight}")

    def value(shape: str, key: tuple, half: str, column: str = "search@10") -> float:
        return half_mean(tuners[shape], results[shape][key], half, column)

    settings = [key for key in results["dialogue"] if key != (None, None)]
    chosen = max(settings, key=lambda key: (round(value("dialogue", key, "A"), 6), -key[1]))
    lines = [
        "Chosen on the dialogue's half A (recall@10): "
        f"context_weight {chosen[0]}, weight {chosen[1]}.",
        "",
        "| shape | half | setting | questions | " + " | ".join(f"@{k}" for k in RECALL_AT) + " |",
        "|---|---|---|---|" + "---|" * len(RECALL_AT),
    ]
    for shape in SHAPES:
        for half in HALVES:
            count = sum(len(tuners[shape].questions[c]) for c in tuners[shape].logs(half))
            for name, key in (("BM25 alone (embedder off)", (None, None)), ("fused", chosen)):
                cells = " | ".join(
                    f"{value(shape, key, half, f'search@{k}'):.3f}" for k in RECALL_AT
                )
                lines.append(f"| {shape} | {half} | {name} | {count} | {cells} |")
    lines += [
        "",
        "Every setting's recall@10 (dialogue A / dialogue B / single speaker A / single "
        "speaker B); the baseline is BM25 alone:",
        "",
        "| neighbours | weight | dialogue A | dialogue B | single A | single B |",
        "|---|---|---|---|---|---|",
    ]
    for key in [(None, None), *settings]:
        label = ("off", "-") if key == (None, None) else key
        cells = " | ".join(f"{value(shape, key, half):.3f}" for shape in SHAPES for half in HALVES)
        lines.append(f"| {label[0]} | {label[1]} | {cells} |")
    text = "\n".join(lines)
    print(text)
    if not args.no_record:
        note = (
            f"Message search only; default embedder ({embedder.embedder_name()}); "
            f"{time.perf_counter() - started:.0f} s.\n\n"
        )
        append_results(
            "LoCoMo recall by meaning: fusion tuned on half A",
            command_line("bench.meaning_recall", argv),
            note + text,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
