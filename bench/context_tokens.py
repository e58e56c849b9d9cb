"""Context tokens: what a long conversation sends to the model on each round, against sending
the whole history verbatim.

A 300-round conversation runs through turn_run with the offline model in embedded mode; after
each turn the deferred consolidation runs (ethan_shared.queue.run_deferred()), so warm summaries
and cold facts form as they do in real use (MemoryConfig from settings: hot 10, batch 5, warm
capacity 20 by default). The user's messages are generated from templates with a seeded random:
Chinese and English, short and long, small talk, plans, preferences and memory instructions.
Tokens are the project's estimate (ethan_llm.estimate_tokens) of the system prompt and the messages
that ethan_llm.stream really receives on the round's first model call; the baseline is the same
system prompt and every message of the session so far, verbatim.

The offline model answers in a sentence or two, far shorter than a real model, which makes
the full history short too. `--replies model-length` keeps everything else (the offline model
still summarises and extracts) but has the chat answered by the loopback OpenAI fake
(tests/fakes) with replies of a real assistant's length, 3 to 10 sentences drawn from
templates in the user's language.

    python -m bench.context_tokens --quick --no-record     # 60 rounds, no chart
    python -m bench.context_tokens                         # 300 rounds, docs/context_tokens.png
    python -m bench.context_tokens --replies model-length  # docs/context_tokens_model_length.png
"""

from __future__ import annotations

import argparse
import random
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import ROOT, append_results, command_line, django_setup

REPORTED_ROUNDS = (1, 10, 20, 30, 50, 100, 150, 200, 250, 300)
# Rounds from which the context must stay flat: the warm zone (20 rounds) has filled and been
# extracted at least once by then with the default MemoryConfig.
FLAT_FROM = 50
# Flat: a least-squares line through the rounds from FLAT_FROM on rises by less than this share
# of their mean (the verbatim hot zone alone moves the count up and down by a round or two).
FLAT_GROWTH = 0.10
# The context at the last round is at most this share of the full history.
SHARE_TARGET = 0.10

TOPICS_ZH = ("季度报告", "新版本发布", "钢琴练习", "搬家", "体检", "团队周会", "预算", "旅行计划")
TOPICS_EN = (
    "the launch",
    "the quarterly report",
    "my running plan",
    "the budget review",
    "the trip to Lisbon",
    "the database migration",
    "the team offsite",
    "my Go service",
)
PEOPLE = ("张三", "李娜", "王伟", "Alice", "Bob", "Maria")
DAYS_ZH = ("周一", "周三", "周五", "下周二", "月底")
DAYS_EN = ("Monday", "Wednesday", "Friday", "next Tuesday", "the end of the month")
SHORT_ZH = ("好的", "嗯嗯，明白了", "谢谢！", "有道理", "那就这样吧", "哈哈，确实")
SHORT_EN = ("ok", "thanks!", "got it", "makes sense", "sounds good", "haha, true")
MEDIUM_ZH = (
    "{topic}的事情你怎么看？",
    "{day}要和{person}讨论{topic}，我该准备什么？",
    "我最近在忙{topic}，感觉时间不太够用。",
    "{person}说{topic}可能要推迟到{day}，我有点担心。",
    "我更喜欢先把{topic}的大框架定下来，再补细节。",
    "帮我想想{topic}有哪些风险。",
)
MEDIUM_EN = (
    "What do you think about {topic}?",
    "I'm meeting {person} on {day} about {topic}, what should I bring?",
    "I've been busy with {topic} and I'm running out of time.",
    "{person} says {topic} might slip to {day}, which worries me a bit.",
    "I prefer to settle the big picture of {topic} before the details.",
    "Can you list the risks of {topic}?",
)
LONG_ZH = (
    "首先，{topic}这周必须有进展；然后我还要和{person}对一下时间，{day}之前最好能定下来。"
    "另外预算方面也有点紧，你觉得应该先砍哪一块？我不想影响到团队的士气，但也不能一直拖着。",
    "今天有点累。早上开了两个会，下午又在改{topic}的方案，晚上还想练一会儿琴。"
    "有时候觉得事情太多，不知道该先做哪件，你能帮我排个优先级吗？",
)
LONG_EN = (
    "First I need to finish {topic} this week, then sync with {person} before {day}. "
    "The budget is tight too, and I am not sure which part to cut first without hurting the "
    "team. Could you help me think it through step by step?",
    "Long day. Two meetings in the morning, then I rewrote the plan for {topic}, and I still "
    "want to go for a run tonight. Sometimes there is just too much at once; can you help me "
    "decide what comes first?",
)
REMEMBER_ZH = ("记住：我每周{day}都要开{topic}的例会", "记住我喜欢简短的回答，别太啰嗦")
REMEMBER_EN = ("remember that {person} is my manager", "remember that I review {topic} on {day}")
# (weight, kind): mostly ordinary turns, a few long ones, some acknowledgements, rare memory
# instructions (each one makes the model call its memory tool).
KINDS = ((0.22, "short"), (0.55, "medium"), (0.17, "long"), (0.06, "remember"))


def user_message(rng: random.Random) -> str:
    """One user message: Chinese or English, short, medium, long or a memory instruction."""
    chinese = rng.random() < 0.5
    kind = rng.choices([kind for _weight, kind in KINDS], [weight for weight, _ in KINDS])[0]
    pools = {
        "short": SHORT_ZH if chinese else SHORT_EN,
        "medium": MEDIUM_ZH if chinese else MEDIUM_EN,
        "long": LONG_ZH if chinese else LONG_EN,
        "remember": REMEMBER_ZH if chinese else REMEMBER_EN,
    }
    template = rng.choice(pools[kind])
    return template.format(
        topic=rng.choice(TOPICS_ZH if chinese else TOPICS_EN),
        person=rng.choice(PEOPLE),
        day=rng.choice(DAYS_ZH if chinese else DAYS_EN),
    )


REPLY_ZH = (
    "关于{topic}，我建议先把目标和截止时间写清楚，再拆成每周能完成的小步骤。",
    "如果{person}那边有顾虑，可以在{day}之前先发一份简短的提纲，让大家有时间准备。",
    "风险主要有三个：时间太紧、依赖别人的部分不确定、预算可能超支。",
    "你可以先列出必须做的和可以推迟的，把精力放在影响最大的那一两件事上。",
    "另外别忘了留一点缓冲时间，计划总会遇到意外。",
    "如果你愿意，我可以帮你把这些整理成一个清单，按优先级排好。",
    "从你之前说的情况看，先定框架再补细节的做法很适合{topic}。",
    "累的时候也要照顾好自己，事情多的时候更需要休息。",
)
REPLY_EN = (
    "For {topic}, I would start by writing down the goal and the deadline, then break it into "
    "steps you can finish each week.",
    "If {person} has concerns, send a short outline before {day} so everyone can prepare.",
    "The main risks are a tight schedule, parts that depend on other people, and the budget.",
    "List what must happen and what can wait, and spend your energy on the one or two things "
    "that matter most.",
    "Leave some slack in the plan as well; something unexpected always comes up.",
    "If it helps, I can turn this into a checklist ordered by priority.",
    "From what you said earlier, settling the big picture first suits {topic} well.",
    "And take care of yourself when things pile up; rest matters more on busy weeks.",
)


def model_length_reply(rng: random.Random, text: str) -> str:
    """A reply of a real assistant's length (3 to 10 sentences) in the user's language."""
    chinese = any("\u4e00" <= ch <= "\u9fff" for ch in text)
    sentences = rng.sample(REPLY_ZH if chinese else REPLY_EN, rng.randint(3, 8))
    if rng.random() < 0.3:  # some answers run longer: a second paragraph
        sentences += rng.sample(REPLY_ZH if chinese else REPLY_EN, 2)
    fill = {
        "topic": rng.choice(TOPICS_ZH if chinese else TOPICS_EN),
        "person": rng.choice(PEOPLE),
        "day": rng.choice(DAYS_ZH if chinese else DAYS_EN),
    }
    return ("" if chinese else " ").join(sentence.format(**fill) for sentence in sentences)


class ModelLengthReplies:
    """The chat model for `--replies model-length`: the OpenAI fake answering every chat call
    in words (no tool calls) with model_length_reply; memory work stays on the offline model."""

    model = "gpt-4o"

    def __init__(self, seed: int):
        from ethan_llm import config
        from tests.fakes.base import Reply
        from tests.fakes.openai_fake import FakeOpenAI

        rng = random.Random(seed + 1)
        self.fake = FakeOpenAI()

        def answer(recorded):
            last_user = next(
                m["content"] for m in reversed(recorded.body["messages"]) if m["role"] == "user"
            )
            return Reply(body=FakeOpenAI.text(model_length_reply(rng, str(last_user))))

        self.fake.responder = answer
        self.saved = config.current()
        config.configure(
            env={"OPENAI_API_KEY": "bench-key", "OPENAI_BASE_URL": f"{self.fake.url}/v1"},
            compression_model="offline",
        )

    def close(self) -> None:
        from ethan_llm import config

        config._settings = self.saved
        self.fake.close()


@dataclass(frozen=True)
class RoundTokens:
    round: int
    sent: int  # system prompt + messages of the round's first model call
    baseline: int  # system prompt + every message of the session so far, verbatim
    messages_sent: int
    # The parts of `sent`: the system prompt, the cold block ([长期记忆] and its 好的。), the
    # warm block ([对话摘要] and its 好的。) and the verbatim hot rounds with the current input.
    system: int
    cold: int
    warm: int
    hot: int


def _tokens(messages) -> int:
    from ethan_llm.tokens import estimate_tokens

    return sum(estimate_tokens(message.content) for message in messages)


def _blocks(messages) -> tuple[int, int, int]:
    """(cold, warm, hot) tokens of a context as memory_app.working.context_assemble builds it."""
    from memory_app.working import LONG_TERM_LABEL, SUMMARY_LABEL

    messages = list(messages)
    cold = warm = 0
    while len(messages) >= 2 and messages[0].content.startswith((LONG_TERM_LABEL, SUMMARY_LABEL)):
        block = _tokens(messages[:2])  # the block and the assistant's 好的。
        if messages[0].content.startswith(LONG_TERM_LABEL):
            cold += block
        else:
            warm += block
        messages = messages[2:]
    return cold, warm, _tokens(messages)


def run_rounds(
    *, rounds: int, seed: int = 2026, username: str = "bench", model: str = "offline"
) -> list[RoundTokens]:
    """Chat `rounds` rounds in one new session and measure each round's first model call."""
    from django.contrib.auth import get_user_model

    import ethan_llm
    from channels_app.turns import turn_run
    from ethan_llm.tokens import estimate_tokens
    from ethan_shared.queue import run_deferred
    from sessions_app.models import Message

    owner = get_user_model().objects.create_user(username=username)
    rng = random.Random(seed)
    real_stream = ethan_llm.stream
    calls: list[dict] = []

    def capturing_stream(**kwargs):
        # agent_app.turn calls ethan_llm.stream through the module, so this sees the real arguments
        # of every chat call (the consolidator's memory work does not stream).
        calls.append(kwargs)
        return real_stream(**kwargs)

    measured: list[RoundTokens] = []
    stored = 0  # tokens of the messages stored before this round's user message
    stored_through = 0  # their last seq
    session = None
    ethan_llm.stream = capturing_stream
    try:
        for number in range(1, rounds + 1):
            text = user_message(rng)
            calls.clear()
            result = turn_run(owner=owner, session=session, text=text, model=model)
            run_deferred()  # the consolidation embedded mode runs after the reply
            session = result.session
            first = calls[0]
            system = estimate_tokens(first["system"])
            cold, warm, hot = _blocks(first["messages"])
            measured.append(
                RoundTokens(
                    round=number,
                    sent=system + cold + warm + hot,
                    baseline=system + stored + estimate_tokens(text),
                    messages_sent=len(first["messages"]),
                    system=system,
                    cold=cold,
                    warm=warm,
                    hot=hot,
                )
            )
            new = Message.objects.filter(session=session, seq__gt=stored_through)
            stored += sum(map(estimate_tokens, new.values_list("content", flat=True)))
            stored_through = session.last_seq
    finally:
        ethan_llm.stream = real_stream
    return measured


def flatness(measured: list[RoundTokens], start: int = FLAT_FROM) -> tuple[int, int, float]:
    """(min, max, fitted growth over the span as a share of the mean) of tokens sent from round
    `start` on."""
    span = [row for row in measured if row.round >= start]
    if len(span) < 2:
        return 0, 0, 0.0
    xs = [row.round for row in span]
    ys = [row.sent for row in span]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mean_x) ** 2 for x in xs
    )
    growth = slope * (xs[-1] - xs[0]) / mean_y if mean_y else 0.0
    return min(ys), max(ys), growth


def chart(measured: list[RoundTokens], path: Path, replies: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rounds = [row.round for row in measured]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    ax.plot(rounds, [row.baseline for row in measured], label="full history, verbatim")
    ax.plot(rounds, [row.sent for row in measured], label="sent by Ethan (hot + warm + cold)")
    ax.set_xlabel("round")
    ax.set_ylabel("estimated tokens per model call")
    ax.set_title(
        f"Context tokens over a {len(measured)}-round conversation "
        + ("(offline model)" if replies == "offline" else "(replies of a real model's length)")
    )
    ax.set_xlim(1, rounds[-1])
    ax.set_ylim(0)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=300, help="rounds in the conversation")
    parser.add_argument("--quick", action="store_true", help="60 rounds, no chart")
    parser.add_argument("--seed", type=int, default=2026, help="seed of the user messages")
    parser.add_argument(
        "--replies",
        choices=("offline", "model-length"),
        default="offline",
        help="who answers the chat: the offline model, or replies of a real model's length",
    )
    parser.add_argument("--chart", type=Path, default=None, help="where the PNG goes")
    parser.add_argument("--no-record", action="store_true", help="do not append to docs/")
    args = parser.parse_args(argv)
    rounds = 60 if args.quick else args.rounds

    django_setup()
    from memory_app.working import memory_config

    config = memory_config()
    started = time.perf_counter()
    replier = ModelLengthReplies(args.seed) if args.replies == "model-length" else None
    try:
        measured = run_rounds(
            rounds=rounds, seed=args.seed, model=replier.model if replier else "offline"
        )
    finally:
        if replier:
            replier.close()
    took = time.perf_counter() - started
    suffix = "" if args.replies == "offline" else "_model_length"
    chart_path = args.chart or ROOT / "docs" / f"context_tokens{suffix}.png"
    low, high, growth = flatness(measured)
    last = measured[-1]
    share = last.sent / last.baseline
    flat = growth < FLAT_GROWTH
    rows = [
        f"| {row.round} | {row.messages_sent} | {row.system:,} | {row.cold:,} | {row.warm:,} "
        f"| {row.hot:,} | {row.sent:,} | {row.baseline:,} | {row.sent / row.baseline * 100:.1f}% |"
        for row in measured
        if row.round in REPORTED_ROUNDS or row is last
    ]
    table = "\n".join(
        [
            f"One {rounds}-round conversation through turn_run ("
            + (
                '`model="offline"`'
                if args.replies == "offline"
                else "chat answered by the OpenAI fake with replies of a real model's length, "
                "3-10 template sentences; summaries and extraction on the offline model"
            )
            + ", path by the router, embedded mode), the deferred consolidation run after every "
            f"turn; "
            f"MemoryConfig hot {config.hot_size}, batch {config.compress_batch}, warm capacity "
            f"{config.warm_capacity}. User messages from seeded templates (seed {args.seed}): "
            f"half Chinese, half English; acknowledgements, ordinary turns, long multi-step "
            f"ones and a few memory instructions. Tokens: ethan_llm.estimate_tokens of the system "
            f"prompt plus the messages the round's first ethan_llm.stream call received; full "
            f"history: the same system prompt plus every stored message of the session so far "
            f"(tool steps included), verbatim. {took:.0f} s.",
            "",
            "System: the system prompt (persona, rules, <memory_context>, profile); cold: the "
            "[长期记忆] block; warm: the [对话摘要] block (rolling summary and warm summaries); "
            "hot: the verbatim rounds and the current input.",
            "",
            "| round | messages sent | system | cold | warm | hot | tokens sent "
            "| full history tokens | sent / full |",
            "|---|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            f"- flat after the warm zone fills (rounds {FLAT_FROM}–{last.round}: min {low:,}, "
            f"max {high:,}, max/min {high / low if low else 0:.2f}, fitted growth "
            f"{growth * 100:+.1f}% of the mean; target under {FLAT_GROWTH * 100:.0f}%): "
            f"{'met' if flat else 'NOT met'}",
            f"- at most {SHARE_TARGET * 100:.0f}% of the full history at round {last.round} "
            f"({share * 100:.1f}%): {'met' if share <= SHARE_TARGET else 'NOT met'}",
        ]
    )
    print(table)
    if not args.quick:
        chart(measured, chart_path, args.replies)
        print(f"chart: {chart_path}")
    if not args.no_record:
        command = command_line("bench.context_tokens", argv)
        title = "Context tokens" + ("" if not replier else " (model-length replies)")
        append_results(title, command, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
