"""What a conversation's turns cost in vectors: the texts the default embedder computes and the
CPU of writing a turn's message vectors (sessions_app.services.messages_embed, what runs after
every turn), with the vectors the process remembers (embedder.client.REMEMBERED) and with
none remembered (a new memory before each turn: a process that remembers nothing, as before it
did), in the same run, turns alternating between two sessions so that each mode meets the
same machine. The stored vectors of the two are compared.

python -m bench.conversation_vectors --data ../shared/datasets/locomo/locomo10.json

The conversations are LoCoMo's dialogues (conversation 0 by default), read at run time, their
two speakers taking the person's and the assistant's places: a round is two of their turns.

With --sessions 1,16,64: one pass over that many sessions at once (messages_embed_sessions, as
the turns that end together are written, agent_app.vectors), each session a LoCoMo conversation
of its own a round further on before every pass. The CPU of the pass is its database's part:
the texts' vectors are computed in a first pass, then cleared and written again, remembered.
With --before CHECKOUT the same passes run in that checkout too (its Python, its code, SQLite), in
the same run, the two taking turns.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import append_results, command_line, django_setup

MODES = ("remembered", "none remembered")


def dialogue(path: Path, conversation: int) -> list[str]:
    """The texts of one LoCoMo conversation's sessions, in order."""
    data = json.loads(path.read_text(encoding="utf-8"))[conversation]["conversation"]
    numbers = sorted(
        int(key.removeprefix("session_"))
        for key in data
        if key.startswith("session_") and not key.endswith("date_time")
    )
    return [turn["text"] for n in numbers for turn in data[f"session_{n}"] if turn.get("text")]


def measure(texts: list[str], rounds: int) -> dict:
    from django.contrib.auth import get_user_model

    import embedder
    from embedder import client
    from sessions_app import services
    from sessions_app.models import Message

    embedder.configure(embedder="default")
    embedder.preload()
    computed: dict[str, int] = dict.fromkeys(MODES, 0)
    current = {"mode": MODES[0]}
    real = client._computed

    def counted(choice, batch, kind):
        computed[current["mode"]] += len(batch)
        return real(choice, batch, kind)

    client._computed = counted
    kept = client.REMEMBERED
    remembered = client.Remembered(kept.size)
    owner = get_user_model().objects.create(username=f"vectors-{time.time_ns()}")
    sessions = {mode: services.session_start(owner=owner, channel="console") for mode in MODES}
    cpu: dict[str, list[float]] = {mode: [] for mode in MODES}
    pairs = [texts[i : i + 2] for i in range(0, 2 * rounds, 2)]
    for index, pair in enumerate(pairs):
        # Each round in both modes, the mode going first alternating.
        for mode in MODES if index % 2 == 0 else reversed(MODES):
            current["mode"] = mode
            session = sessions[mode]
            for role, text in zip((Message.Role.USER, Message.Role.ASSISTANT), pair, strict=False):
                services.message_append(session=session, role=role, content=text)
            # Each mode its own memory of vectors: the two sessions say the same texts.
            client.REMEMBERED = remembered if mode == "remembered" else client.Remembered(4096)
            started = time.thread_time()
            services.messages_embed(session_id=session.pk)
            cpu[mode].append((time.thread_time() - started) * 1000)
    client._computed, client.REMEMBERED = real, kept
    stored = {
        mode: [
            embedder.from_blob(blob, 512)
            for blob in Message.objects.filter(session=sessions[mode])
            .order_by("seq")
            .values_list("embedding", flat=True)
        ]
        for mode in MODES
    }
    differ = max(
        float(np.max(np.abs(a - b)))
        for a, b in zip(stored[MODES[0]], stored[MODES[1]], strict=True)
    )
    return {"rounds": len(pairs), "computed": computed, "cpu": cpu, "differ": differ}


def table(result: dict) -> str:
    rounds = result["rounds"]
    lines = [
        "| vectors | texts computed a round | CPU a round, p50 / mean ms | CPU in all, s |",
        "|---|---|---|---|",
    ]
    for mode in MODES:
        samples = result["cpu"][mode]
        lines.append(
            f"| {mode} | {result['computed'][mode] / rounds:.2f} | "
            f"{statistics.median(samples):.1f} / {statistics.fmean(samples):.1f} | "
            f"{sum(samples) / 1000:.2f} |"
        )
    return "\n".join(lines)


def sessions_pass(conversations: list[list[str]], rounds: int) -> dict:
    """The CPU (ms, median over the rounds after the first two) and the statements of one pass
    over len(conversations) sessions, each a round further on before every pass."""
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    import embedder
    from sessions_app import services
    from sessions_app.models import Message

    embedder.configure(embedder="default")
    embedder.preload()
    owner = get_user_model().objects.create(username=f"vectors-{time.time_ns()}")
    sessions = [services.session_start(owner=owner, channel="console") for _ in conversations]
    ids = [session.pk for session in sessions]
    cpu, statements = [], 0
    for index in range(rounds):
        for session, texts in zip(sessions, conversations, strict=True):
            pair = texts[2 * index : 2 * index + 2]
            for role, text in zip((Message.Role.USER, Message.Role.ASSISTANT), pair, strict=False):
                services.message_append(session=session, role=role, content=text)
        services.messages_embed_sessions(session_ids=ids)  # the vectors computed, remembered
        Message.objects.filter(session_id__in=ids, seq__gt=2 * index).update(
            embedding=None, embedding_model=None
        )
        with CaptureQueriesContext(connection) as captured:
            started = time.thread_time()
            services.messages_embed_sessions(session_ids=ids)
            cpu.append((time.thread_time() - started) * 1000)
        statements = len(captured.captured_queries)
    return {"cpu_ms": statistics.median(cpu[2:] or cpu), "statements": statements}


def sessions_run(args) -> dict:
    """{code: {sessions: pass}}: this checkout's passes, and --before's, each number of
    sessions in turn."""
    texts = [dialogue(args.data, n % 10) for n in range(max(args.sessions))]
    found: dict[str, dict[int, dict]] = {"this checkout": {}}
    before = f"before ({args.before})"
    if args.before:
        from django.db import connection

        if connection.vendor != "sqlite":
            raise SystemExit("--before compares on SQLite: run without DATABASE_URL")
        found[before] = {}
    home = tempfile.mkdtemp(prefix="ethan-vectors-before-")
    try:
        for count in args.sessions:
            found["this checkout"][count] = sessions_pass(texts[:count], args.rounds)
            if args.before:
                found[before][count] = before_pass(args, count, home)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return found


def before_pass(args, count: int, home: str) -> dict:
    """The same pass, by --before's Python and code, on an embedded home of its own (`home`):
    SQLite, as this process's must be then (sessions_run)."""
    # Here, not at the top: --before's checkout runs this file with its own bench.common.
    from bench.common import in_checkout

    return in_checkout(
        args.before,
        __file__,
        [
            *("--data", str(args.data.resolve()), "--sessions", str(count)),
            *("--rounds", str(args.rounds), "--child"),
        ],
        home,
    )


def sessions_table(found: dict) -> str:
    lines = [
        "| code | sessions in the pass | CPU of the pass, ms (median) | a session, ms "
        "| statements |",
        "|---|---|---|---|---|",
    ]
    for label, passes in found.items():
        for count, one in passes.items():
            lines.append(
                f"| {label} | {count} | {one['cpu_ms']:.2f} | {one['cpu_ms'] / count:.2f} | "
                f"{one['statements']} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="LoCoMo's locomo10.json")
    parser.add_argument("--conversation", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=150)
    parser.add_argument(
        "--sessions", type=lambda v: [int(n) for n in v.split(",")], help="e.g. 1,16,64"
    )
    parser.add_argument("--before", type=Path, help="a checkout to run --sessions in too")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-record", action="store_true", help="do not append to docs/")
    args = parser.parse_args(argv)
    django_setup(fresh_home=not args.child)
    if args.child:  # one pass of --before's: its result as JSON
        texts = [dialogue(args.data, n % 10) for n in range(args.sessions[0])]
        print(json.dumps(sessions_pass(texts, args.rounds)))
        return
    if args.sessions:
        rows = sessions_table(sessions_run(args))
        print(rows)
        if not args.no_record:
            append_results(
                "Conversation vectors: one pass over many sessions",
                command_line("bench.conversation_vectors", argv),
                f"{args.rounds} rounds, each session LoCoMo's conversation (its number modulo "
                "10) a round further on before every pass; the CPU of the pass with the texts' "
                f"vectors remembered: the database's part.\n\n{rows}",
            )
        return
    texts = dialogue(args.data, args.conversation)
    result = measure(texts, min(args.rounds, len(texts) // 2))
    rows = table(result)
    note = (
        f"LoCoMo conversation {args.conversation}, {result['rounds']} rounds of two turns, "
        "each followed by its message vectors' pass (messages_embed), in two sessions, the "
        "mode going first alternating. The largest difference between the two sessions' "
        f"stored vectors, element by element: {result['differ']:.4f} (int8 steps are 1/127)."
    )
    print(rows)
    print(note)
    if not args.no_record:
        append_results(
            "Conversation vectors: remembered and not",
            command_line("bench.conversation_vectors", argv),
            f"{note}\n\n{rows}",
        )


if __name__ == "__main__":
    main()
