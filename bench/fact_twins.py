"""Facts deduplicated by meaning, on LoCoMo's replayed facts: how many a new fact's twin removes,
and whether any of them differ.

Each conversation is consolidated as in production with the replayed extractor
(bench.locomo_recall.ReplayedExtractor: a loopback OpenAI-wire model answering each extraction
request with LoCoMo's own observations of the turns it was shown), the default embedder on.
Every comparison the consolidator makes (memory_app.normalize.same_in_other_words: a new fact
against the nearest stored ones) is recorded, so the report shows:

- the active facts kept with the rule and without it (TWIN_COSINE above any cosine), in the same
  run;
- how many comparisons fall in each band of cosine, and how many of them the guards (numbers,
  names, negation) refuse;
- every pair merged, and the pairs nearest below the threshold, to read: a merge of facts that
  differ is a defect (docs/memory.md, "Facts deduplicated by meaning").

    python -m bench.fact_twins --data ../shared/datasets/locomo/locomo10.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from pathlib import Path

from bench.common import append_results, command_line, django_setup

BANDS = (0.80, 0.83, 0.85, 0.87, 0.90, 0.93, 1.01)
SHOWN_BELOW = 15


def run(samples: list, *, dedup: bool) -> tuple[dict[str, int], list[tuple]]:
    """Consolidate every conversation; (active facts per half, the comparisons made: cosine,
    verdict, the new fact, the held one, the half)."""
    from bench.locomo_recall import ReplayedExtractor, consolidate, half_of, load_conversation
    from ethan_llm import config
    from memory_app import normalize, selectors
    from memory_app.models import Fact

    compared: list[tuple] = []
    half = ["A"]
    same = normalize.same_in_other_words
    saved = normalize.TWIN_COSINE

    def recorded(a: str, b: str, cosine: float) -> bool:
        verdict = same(a, b, cosine)
        compared.append((cosine, verdict, a, b, half[0]))
        return verdict

    selectors.same_in_other_words = recorded
    normalize.TWIN_COSINE = saved if dedup else 2.0
    extractor = ReplayedExtractor()
    config.configure(env=extractor.env, compression_model="gpt-4o-mini")
    from django.contrib.auth import get_user_model

    get_user_model().objects.all().delete()  # the run before this one's owners
    kept = {"A": 0, "B": 0}
    try:
        for index, sample in enumerate(samples):
            half[0] = half_of(index)
            loaded = load_conversation(sample, index, observations=False)
            extractor.use(sample, loaded)
            consolidate(loaded)
            kept[half[0]] += Fact.objects.filter(
                owner=loaded.owner, status=Fact.Status.ACTIVE
            ).count()
            print(f"  {'on' if dedup else 'off'}: {index + 1}/{len(samples)}", file=sys.stderr)
    finally:
        extractor.close()
        selectors.same_in_other_words = same
        normalize.TWIN_COSINE = saved
    return kept, compared


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="locomo10.json")
    parser.add_argument("--conversations", type=int, default=None, help="only the first N")
    parser.add_argument("--no-record", action="store_true", help="do not append to docs/")
    args = parser.parse_args(argv)
    samples = json.loads(args.data.read_text(encoding="utf-8"))[: args.conversations]
    os.environ.setdefault("ETHAN_TIME_ZONE", "UTC")
    os.environ["ETHAN_EMBEDDER"] = "default"
    django_setup(fresh_home="ETHAN_HOME" not in os.environ)
    import embedder
    from memory_app.normalize import TWIN_COSINE

    embedder.configure(embedder="default")
    started = time.perf_counter()
    without, _ = run(samples, dedup=False)
    with_rule, compared = run(samples, dedup=True)
    merged = [pair for pair in compared if pair[1]]
    lines = [
        f"{len(samples)} conversations; threshold {TWIN_COSINE} (chosen on half A: no merge of "
        "different facts there from 0.86 up; B held back).",
        "",
        "| half | active facts without the rule | with it | fewer | merges |",
        "|---|---|---|---|---|",
    ]
    for half in ("A", "B"):
        merges = sum(1 for pair in merged if pair[4] == half)
        lines.append(
            f"| {half} | {without[half]} | {with_rule[half]} | "
            f"{without[half] - with_rule[half]} | {merges} |"
        )
    lines += [
        "",
        "| cosine | comparisons | refused by the guards | merged |",
        "|---|---|---|---|",
    ]
    for low, high in itertools.pairwise(BANDS):
        band = [pair for pair in compared if low <= pair[0] < high]
        refused = [p for p in band if not p[1] and p[0] >= TWIN_COSINE]
        lines.append(
            f"| {low:.2f}-{min(high, 1.0):.2f} | {len(band)} | {len(refused)} | "
            f"{sum(1 for p in band if p[1])} |"
        )

    def listed(pairs):
        return [f"- {p[4]} {p[0]:.3f}: {p[2]} ⟶ {p[3]}" for p in sorted(pairs, reverse=True)]

    lines += ["", "Merged (half, cosine, the new fact ⟶ the fact it reinforced):", ""]
    lines += listed(merged)
    lines += ["", "Refused by the guards above the threshold:", ""]
    lines += listed(p for p in compared if not p[1] and p[0] >= TWIN_COSINE)
    below = sorted((p for p in compared if p[0] < TWIN_COSINE), reverse=True)[:SHOWN_BELOW]
    lines += ["", f"The {SHOWN_BELOW} nearest below the threshold (not merged):", ""]
    lines += listed(below)
    text = "\n".join(lines)
    print(text)
    if not args.no_record:
        append_results(
            "Facts deduplicated by meaning (LoCoMo, replayed extractor)",
            command_line("bench.fact_twins", argv),
            f"Default embedder; {time.perf_counter() - started:.0f} s.\n\n" + text,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
