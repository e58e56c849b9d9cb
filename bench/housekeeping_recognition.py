"""What recognising a chat app's housekeeping request costs a /v1 turn:
channels_app.openai.housekeeping.housekeeping_of timed on the requests Open WebUI 0.12.4 really sent
(tests/fixtures/clients/open-webui-0.12.4: its title, tags, follow-up and autocomplete prompts and
its chats), and on long requests: a chat of 100 messages of 2,000 characters, a title prompt
pasting such a chat, one message of a megabyte. The goal (issue 40): under 1 ms p95.

Each request is classified `--rounds` times, each call timed alone (perf_counter_ns); the table
gives, per group, the p50, p95 and maximum of all those calls in microseconds, and the answer
(so a wrong answer cannot pass for a fast one). Pure Python on the raw request body: no Django.

    python -m bench.housekeeping_recognition              # 2,000 rounds
    python -m bench.housekeeping_recognition --rounds 200
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

from bench.common import ROOT, machine, percentile
from channels_app.openai.housekeeping import housekeeping_of

RECORDED = ROOT / "tests" / "fixtures" / "clients" / "open-webui-0.12.4"
LONG_MESSAGES = 100
LONG_CHARS = 2_000


def recorded() -> list[tuple[str, list]]:
    """(kind, messages) of every recorded request, in the order the app sent them."""
    requests = []
    for path in sorted(Path(RECORDED).glob("*.json")):
        data = json.loads(path.read_text())
        requests.append((data["kind"], data["body"]["messages"]))
    return requests


def long_text(seed: int) -> str:
    line = f"({seed}) I went to the market in Lisbon and bought sardines for the grill. "
    return (line * (LONG_CHARS // len(line) + 1))[:LONG_CHARS]


def long_chat() -> list[dict]:
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": long_text(i)}
        for i in range(LONG_MESSAGES)
    ]


def title_prompt_of(chat: list[dict], template: str) -> list[dict]:
    """Open WebUI's title prompt (the recorded template) pasting `chat` as its history."""
    head, _, _ = template.partition("<chat_history>\n")
    pasted = "\n".join(f"{m['role'].upper()}: {m['content']}" for m in chat)
    return [{"role": "user", "content": f"{head}<chat_history>\n{pasted}\n</chat_history>"}]


def groups() -> list[tuple[str, list[list], object]]:
    """(group, its requests, what each must be recognised as: a kind, or None for a chat)."""
    requests = recorded()
    tasks = [messages for kind, messages in requests if kind not in ("chat", "chat_with_tools")]
    chats = [messages for kind, messages in requests if kind in ("chat", "chat_with_tools")]
    title = next(messages for kind, messages in requests if kind == "title")
    chat = long_chat()
    return [
        (f"recorded task requests ({len(tasks)})", tasks, "task"),
        (f"recorded chats ({len(chats)})", chats, None),
        (f"chat of {LONG_MESSAGES} messages × {LONG_CHARS:,} chars", [chat], None),
        (
            f"title prompt pasting {LONG_MESSAGES} messages × {LONG_CHARS:,} chars",
            [title_prompt_of(chat, title[0]["content"])],
            "title",
        ),
        ("one message of 1 MB", [[{"role": "user", "content": long_text(0) * 500}]], None),
    ]


def timed(requests: list[list], rounds: int, expected: object) -> list[float]:
    """Microseconds of each call, every request `rounds` times, the answer checked."""
    samples = []
    clock = time.perf_counter_ns
    for messages in requests:
        found = housekeeping_of(messages)
        if (found is None) != (expected is None) or (
            isinstance(expected, str) and expected != "task" and found.kind != expected
        ):
            raise SystemExit(f"wrong answer: {found!r}, expected {expected!r}")
    for _ in range(rounds):
        for messages in requests:
            started = clock()
            housekeeping_of(messages)
            samples.append((clock() - started) / 1_000)
    return samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2_000)
    args = parser.parse_args(argv)
    # The collector's passes would land in whichever call runs then; this measures the
    # classifier, so they are kept out (a server's are its own business: ETHAN_GC_THRESHOLD).
    gc.disable()
    rows = []
    for name, requests, expected in groups():
        samples = timed(requests, args.rounds, expected)
        answer = {None: "chat (None)", "task": "each its kind"}.get(expected, expected)
        rows.append(
            f"| {name} | {answer} | {len(samples):,} | {percentile(samples, 0.5):.1f} "
            f"| {percentile(samples, 0.95):.1f} | {max(samples):.1f} |"
        )
    gc.enable()
    print(f"housekeeping_of, {args.rounds:,} rounds; {machine()}")
    print()
    print("| requests | answer | calls | p50 µs | p95 µs | max µs |")
    print("|---|---|---:|---:|---:|---:|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
