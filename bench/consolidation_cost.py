"""Consolidation cost: compression-model calls and tokens per 100 rounds, for Ethan's schedule
against two others, on the same conversations.

- **Ethan**: the real code. Each round is stored through sessions_app's services; the
  consolidator runs whenever the turn would queue it (memory_app.working.consolidation_due),
  and each session ends through agent_app.lifecycle.session_finish (its episode and the facts
  of the rounds not yet extracted), the deferred work run as embedded mode runs it: short
  chats' ends wait for each other (memory_app.working.ends_due) and share a call; what still
  waits after the last session is finished as the sweep would, once it has waited.
- **design**: the design document's schedule, replayed through the same ethan_llm.memory calls: a
  summary per 5 rounds once they leave the 10-round hot zone, one extraction and one fold once
  the warm zone covers 20 rounds, and an episode summary per session of 2 rounds or more.
- **per message pair**: an extractor called once for every user message and its reply, with
  the facts it already holds, as mem0 documents `add` (mem0 then makes a second call to decide
  ADD/UPDATE/DELETE against the stored memories; that call is not counted, so this is a lower
  bound).

Every call goes over the OpenAI wire protocol to the loopback fake of tests/fakes (gpt-4o-mini,
the compression model gpt-4o routes to), which answers with short summaries and one fact per
user turn. Tokens are the project's estimate (ethan_llm.estimate_tokens) of what each request sends
(system prompt and messages) and of what comes back. The conversations are generated with a
seeded random, in three shapes: short chats (2–4 rounds), sessions the length of LoCoMo's
(8–15 rounds) and one long session.

    python -m bench.consolidation_cost --no-record     # print only
    python -m bench.consolidation_cost                 # and append to docs/benchmarks/memory.md
"""

from __future__ import annotations

import argparse
import random
from collections import Counter
from dataclasses import dataclass, field

from bench.common import append_results, command_line, django_setup

SHAPES = {"short chats (2-4 rounds)": (2, 4), "LoCoMo-length (8-15)": (8, 15), "one long": None}
ROUNDS = 300  # per shape; reported per 100
SENTENCES = (
    "I live in Lisbon and work as a backend engineer at Acme.",
    "My daughter Mia starts school next week, I need to buy her books.",
    "Can you help me plan the database migration for Friday?",
    "I prefer short answers, bullet points are fine.",
    "我下周要去东京出差，帮我列一下要带的东西。",
    "我对花生过敏，推荐餐厅时注意一下。",
    "The quarterly report is due at the end of the month.",
    "My dog Max needs a walk every evening, so I leave at six.",
    "我们团队决定下个版本改用 PostgreSQL。",
    "Remind me what we said about the budget review?",
)
REPLY = "Sure. Here is what I suggest: start with the list, then check it again tomorrow."


@dataclass
class Tally:
    calls: Counter = field(default_factory=Counter)
    tokens_in: int = 0
    tokens_out: int = 0

    def per_hundred(self, rounds: int) -> tuple[float, float, float]:
        scale = 100 / rounds
        return (
            sum(self.calls.values()) * scale,
            self.tokens_in * scale,
            self.tokens_out * scale,
        )


class CountingModel:
    """The fake's responder: tests' MiniModel answers; each request is counted for the schedule
    being measured."""

    def __init__(self) -> None:
        from tests.fakes.openai_fake import MiniModel

        self.mini = MiniModel()
        self.tally = Tally()

    def __call__(self, recorded):
        from ethan_llm.tokens import estimate_tokens

        reply = self.mini(recorded)
        body = recorded.body
        self.tally.calls[self.mini.calls[-1] if self.mini.calls else "chat"] += 1
        self.tally.tokens_in += sum(
            estimate_tokens(m["content"] if isinstance(m["content"], str) else str(m["content"]))
            for m in body["messages"]
        )
        choices = reply.body.get("choices") or [{}]
        self.tally.tokens_out += estimate_tokens(choices[0].get("message", {}).get("content", ""))
        return reply


def conversation(shape: tuple[int, int] | None, rng: random.Random) -> list[list[str]]:
    """Sessions of user messages, ROUNDS in all."""
    sessions, left = [], ROUNDS
    while left > 0:
        size = left if shape is None else min(left, rng.randint(*shape))
        sessions.append([rng.choice(SENTENCES) for _ in range(size)])
        left -= size
    return sessions


def ethan(sessions: list[list[str]], owner) -> None:
    from agent_app.lifecycle import session_finish, sessions_end_write
    from ethan_shared.queue import run_deferred
    from memory_app.consolidator import consolidation_run
    from memory_app.models import WorkingState
    from memory_app.working import consolidation_due
    from sessions_app import services

    for said in sessions:
        session = services.session_start(owner=owner, channel="api", model="gpt-4o")
        for text in said:
            services.message_append(session=session, role="user", content=text)
            services.message_append(session=session, role="assistant", content=REPLY)
            state = WorkingState.objects.filter(session=session).first()
            if consolidation_due(session=session, state=state):
                consolidation_run(session_id=session.pk)
        session_finish(session=session)
        run_deferred()
    # The last short ends may still wait for more (ends_due): the sweep finishes them once they
    # have waited, as it would an hour later.
    sessions_end_write(owner_id=owner.pk, now=True)


def design(sessions: list[list[str]]) -> None:
    from ethan_llm import memory
    from ethan_llm.types import Message

    hot, batch, warm = 10, 5, 20
    model = "gpt-4o-mini"
    for said in sessions:
        rounds = [(Message.user(text), Message.assistant(REPLY)) for text in said]
        compressed = extracted = 0
        summaries: list[str] = []
        rolling = ""
        for count in range(1, len(rounds) + 1):
            while count - hot - compressed >= batch:
                part = rounds[compressed : compressed + batch]
                summaries.append(memory.summarize(model=model, rounds=[m for r in part for m in r]))
                compressed += batch
            if compressed - extracted >= warm:
                part = rounds[extracted:compressed]
                memory.extract(model=model, rounds=[m for r in part for m in r])
                rolling = memory.fold(model=model, rolling=rolling, summaries=summaries)
                summaries, extracted = [], compressed
        if len(rounds) >= 2:
            memory.summarize(model=model, rounds=[m for r in rounds for m in r])  # the episode


def per_message_pair(sessions: list[list[str]]) -> None:
    from ethan_llm import memory
    from ethan_llm.types import Message

    known: list[str] = []
    for said in sessions:
        for text in said:
            found = memory.extract(
                model="gpt-4o-mini",
                rounds=[Message.user(text), Message.assistant(REPLY)],
                known=known[-10:],
            )
            known.extend(fact.content for fact in found.facts)


def measure(shape_name: str, shape, seed: int, counting: CountingModel) -> dict[str, Tally]:
    from django.contrib.auth import get_user_model

    rng = random.Random(seed)
    sessions = conversation(shape, rng)
    results = {}
    for name, run in (
        ("Ethan", lambda: ethan(sessions, get_user_model().objects.create(username=shape_name))),
        ("design document", lambda: design(sessions)),
        ("per message pair (mem0-style)", lambda: per_message_pair(sessions)),
    ):
        counting.tally = Tally()
        run()
        results[name] = counting.tally
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-record", action="store_true", help="print only")
    args = parser.parse_args(argv)

    django_setup()
    from ethan_llm import config
    from tests.fakes.openai_fake import FakeOpenAI

    fake = FakeOpenAI()
    counting = CountingModel()
    fake.responder = counting
    config.configure(env={"OPENAI_API_KEY": "bench-key", "OPENAI_BASE_URL": f"{fake.url}/v1"})
    lines = [
        f"{ROUNDS} rounds per shape, reported per 100 rounds. Calls to the compression model "
        "(by kind) and estimated tokens sent and received.",
        "",
        "| conversations | schedule | calls / 100 rounds | rounds per call | by kind | tokens in "
        "| tokens out |",
        "|---|---|---|---|---|---|---|",
    ]
    try:
        for shape_name, shape in SHAPES.items():
            for name, tally in measure(shape_name, shape, args.seed, counting).items():
                calls, tokens_in, tokens_out = tally.per_hundred(ROUNDS)
                kinds = ", ".join(f"{k} {v}" for k, v in sorted(tally.calls.items()))
                lines.append(
                    f"| {shape_name} | {name} | {calls:.1f} | {100 / calls:.1f} | {kinds} "
                    f"| {tokens_in:,.0f} | {tokens_out:,.0f} |"
                )
    finally:
        fake.close()
    table = "\n".join(lines)
    print(table)
    if not args.no_record:
        append_results(
            "Consolidation cost: compression-model calls per 100 rounds",
            command_line("bench.consolidation_cost", argv),
            table,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
