"""Chinese memory retrieval: does memory_search find the turns where a persona fact was said?

The data is DuLeMon (Baidu's long-term persona memory dialogues, Findings of ACL 2022): the 20
sample sessions published in the PaddlePaddle/Research repository
(NLP/ACL2022-DuLeMon/data/samples.json). The full DuLeMon set is a separate download that this
machine cannot reach; any file in the same format can be given to --data. Each session is a
user ("Usr") talking with a bot ("Bot", 小度); it lists the user's and the bot's persona
sentences (U1, U2, … and B1, B2, …), and every turn that draws on one is annotated with its
id by the dataset's authors ("Bot: 孩子 多 大 了 ？\tU3").

How the evaluation is built, by rule (nothing chosen by hand, nothing chosen on results):

- one owner holds every session of the file, in file order, one a day (session n on day n):
  a user's long-term history with the bot. "Usr" turns are user messages, "Bot" turns
  assistant messages, loaded through bench.locomo_recall.load_conversation (indexed as
  message_append indexes them);
- the text is the dataset's, with its word segmentation undone: a space is dropped unless it
  stands between two ASCII letters or digits ("在 IT 部门 工作" → "在IT部门工作");
- a question is a persona sentence, without its id and segmentation ("我喜欢运动"), for every
  persona sentence of a session that annotates at least one of that session's turns; its
  evidence is those annotated turns. Kinds: the user's persona (U ids) and the bot's (B ids);
- "no shared word": the questions none of whose search words (ethan_llm.text.tokenize, search mode)
  is in any of its evidence turns' own words ("我喜欢运动" against "下午一起去打球吗");
- the fixed split (HALVES, decided before any number was seen): the questions of the file's
  first half of sessions are half A (tuning), the rest half B (report); for the 20-session
  sample, sessions 0-9 and 10-19. Both halves search the same history.

Measured: recall@5/10/25 of agent_app.memory_search.memory_search(scope="messages") over the
question's evidence turns, per half, per kind and for the no-shared-word questions. With the
embedder on (--embedder default, or ETHAN_EMBEDDER), the messages' vectors are written first
with ethan_embed, as an upgrade would.

The data is read from --data; it is never copied into this repository. To fetch it (on a
machine with the internet; the run below was measured on a file with the SHA-256 in
SOURCE_SHA256):

    mkdir -p ~/.cache/ethan-bench/dulemon
    curl -L -o ~/.cache/ethan-bench/dulemon/samples.json https://raw.githubusercontent.com/\
PaddlePaddle/Research/b798736e9446ba160b579947afa8db4f7a99425e/NLP/ACL2022-DuLeMon/data/samples.json
    python -m bench.chinese_recall --data ~/.cache/ethan-bench/dulemon/samples.json --embedder off
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.common import append_results, command_line, django_setup
from bench.locomo_recall import RECALL_AT, Loaded, load_conversation, mean, recall_at

SOURCE = (
    "DuLeMon sample sessions (PaddlePaddle/Research, NLP/ACL2022-DuLeMon/data/samples.json at "
    "commit b798736e9446ba160b579947afa8db4f7a99425e)"
)
SOURCE_SHA256 = "763a8674bd6ccc55fa9fd2fbbee0987f2dff8c898c28de1ac5fc43f9b5080c3a"
USER, BOT = "Usr", "Bot"
# Session n's time: any fixed day will do (no question names a time), one day apart.
FIRST_DAY = datetime(2022, 3, 1, 20, 0, tzinfo=UTC)
_SPACE = re.compile(r"(?<![A-Za-z0-9]) +| +(?![A-Za-z0-9])")
_PERSONA_ID = re.compile(r"[UB]\d+")
PERSONA_LISTS = ("user_said_persona", "user_no_said_persona", "bot_persona")


def halves(sessions: int) -> dict[str, range]:
    """The fixed split: the file's first half of sessions (in file order) is A, the rest B."""
    middle = (sessions + 1) // 2
    return {"A": range(0, middle), "B": range(middle, sessions)}


def half_of(session: int, sessions: int) -> str:
    return next(name for name, indexes in halves(sessions).items() if session in indexes)


def desegment(text: str) -> str:
    """The dataset's words joined again: a space is kept only between two ASCII letters or
    digits."""
    return _SPACE.sub("", text).strip()


def split_id(line: str) -> tuple[str, str]:
    """'U1: 我 喜欢 运动' → ('U1', '我喜欢运动')."""
    head, _colon, rest = line.replace("：", ":").partition(":")
    return head.strip(), desegment(rest)


def parse_turn(line: str) -> tuple[str, str, list[str]]:
    """'Usr: 当然 是 篮球 啊\tU1' → ('Usr', '当然是篮球啊', ['U1'])."""
    said, _tab, annotation = line.partition("\t")
    speaker, text = split_id(said)
    return speaker, text, _PERSONA_ID.findall(annotation)


def read_sessions(path: Path) -> list[dict[str, Any]]:
    """DuLeMon's format: one JSON object (a session) a line."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def as_locomo(sessions: list[dict[str, Any]], sample_id: str = "dulemon") -> dict[str, Any]:
    """The sessions as one LoCoMo-shaped conversation (load_conversation's input): session n
    (from 1) on day n, its turns D{n}:{i}."""
    conversation: dict[str, Any] = {"speaker_a": USER, "speaker_b": BOT}
    for n, session in enumerate(sessions, start=1):
        when = FIRST_DAY + timedelta(days=n - 1)
        # LoCoMo's "8:00 pm on 1 March, 2022" (bench.locomo_recall.parse_date reads it).
        conversation[f"session_{n}_date_time"] = (
            f"{when.hour % 12 or 12}:{when:%M} {'am' if when.hour < 12 else 'pm'} on "
            f"{when.day} {when:%B}, {when.year}"
        )
        turns = []
        for i, line in enumerate(session["conversation"], start=1):
            speaker, text, _ids = parse_turn(line)
            turns.append({"speaker": speaker, "dia_id": f"D{n}:{i}", "text": text})
        conversation[f"session_{n}"] = turns
    return {"sample_id": sample_id, "conversation": conversation, "qa": []}


@dataclass(frozen=True)
class Question:
    session: int  # the index in the file (halves() refers to it)
    persona: str  # its id in the session: U3, B1
    kind: str  # "user" or "bot"
    text: str
    evidence: list[str]  # dia_ids
    shares_word: bool  # a search word of the question is in an evidence turn's own words


def questions(sessions: list[dict[str, Any]]) -> list[Question]:
    """Every persona sentence that annotates at least one turn of its session, with those
    turns as its evidence, in file order."""
    from ethan_llm.text import tokenize

    found: list[Question] = []
    for index, session in enumerate(sessions):
        n = index + 1
        annotated: dict[str, list[str]] = {}
        turn_words: dict[str, set[str]] = {}
        for i, line in enumerate(session["conversation"], start=1):
            _speaker, text, ids = parse_turn(line)
            turn_words[f"D{n}:{i}"] = set(tokenize(text, search=True))
            for persona_id in ids:
                annotated.setdefault(persona_id, []).append(f"D{n}:{i}")
        for key in PERSONA_LISTS:
            for line in session.get(key) or []:
                persona_id, text = split_id(line)
                evidence = annotated.get(persona_id)
                if not evidence or not text:
                    continue
                words = set(tokenize(text, search=True))
                found.append(
                    Question(
                        session=index,
                        persona=persona_id,
                        kind="bot" if persona_id.startswith("B") else "user",
                        text=text,
                        evidence=evidence,
                        shares_word=any(words & turn_words[d] for d in evidence),
                    )
                )
    return found


def search_ranked(loaded: Loaded, question: str) -> list[str | None]:
    """memory_search over messages, as turn ids, best first."""
    from agent_app.memory_search import memory_search

    hits = memory_search(owner=loaded.owner, query=question, scope="messages", limit=max(RECALL_AT))
    return [loaded.message_turn.get(hit.id) for hit in hits]


def vectors_write() -> str:
    """With the embedder on, the messages' vectors (load_conversation writes rows directly, as
    an import of old data would): what an upgrade runs. The embedder's name, or 'off'."""
    from django.core.management import CommandError, call_command

    from embedder import embedder_name

    name = embedder_name()
    if name is None:
        return "off"
    try:
        call_command(
            "ethan_embed", "--only", "messages", stdout=io.StringIO(), stderr=io.StringIO()
        )
    except CommandError as exc:  # an older checkout has no ethan_embed: say so, measure nothing
        raise SystemExit(
            f"the embedder is {name}, but its vectors could not be written: {exc}"
        ) from exc
    return name


@dataclass(frozen=True)
class Scored:
    question: Question
    half: str
    values: dict[str, float]


def evaluate(sessions: list[dict[str, Any]]) -> tuple[list[Scored], Loaded, str]:
    loaded = load_conversation(as_locomo(sessions), 0, observations=False)
    embedder = vectors_write()
    scored = [
        Scored(
            q,
            half_of(q.session, len(sessions)),
            recall_at("search", search_ranked(loaded, q.text), q.evidence),
        )
        for q in questions(sessions)
    ]
    return scored, loaded, embedder


ROWS = {
    "all": lambda q: True,
    "user's persona": lambda q: q.kind == "user",
    "bot's persona": lambda q: q.kind == "bot",
    "no shared word": lambda q: not q.shares_word,
}


def summarise(scored: list[Scored]) -> dict[str, dict[str, float]]:
    """A row per half and ROWS entry: questions and memory_search recall@5/10/25."""
    table: dict[str, dict[str, float]] = {}
    for half in ("A", "B"):
        for name, keep in ROWS.items():
            items = [s for s in scored if s.half == half and keep(s.question)]
            table[f"{half}: {name}"] = {
                "questions": len(items),
                **{f"@{k}": mean([s.values[f"search@{k}"] for s in items]) for k in RECALL_AT},
            }
    return table


def markdown(table: dict[str, dict[str, float]]) -> str:
    lines = [
        "| half: questions | questions | memory_search recall@5 | @10 | @25 |",
        "|---|---|---|---|---|",
    ]
    for name, row in table.items():
        cells = " | ".join(f"{row[f'@{k}']:.3f}" for k in RECALL_AT)
        lines.append(f"| {name} | {int(row['questions'])} | {cells} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="DuLeMon samples.json")
    parser.add_argument(
        "--embedder",
        choices=("off", "default"),
        default=None,
        help="ETHAN_EMBEDDER for this run: off (BM25 alone) or default (the product's "
        "embedder); without it, the environment's ETHAN_EMBEDDER or the product's default",
    )
    parser.add_argument("--no-record", action="store_true", help="do not append to docs/")
    args = parser.parse_args(argv)
    raw = args.data.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    sessions = read_sessions(args.data)
    if args.embedder:
        os.environ["ETHAN_EMBEDDER"] = args.embedder
    os.environ.setdefault("ETHAN_TIME_ZONE", "UTC")
    scratch = None
    if "ETHAN_HOME" not in os.environ:
        # A home of its own: .bench-home may be another benchmark's at the same time.
        scratch = tempfile.TemporaryDirectory(prefix="ethan-chinese-recall-")
        os.environ["ETHAN_HOME"] = scratch.name
    started = time.perf_counter()
    try:
        django_setup(fresh_home=False)
        scored, loaded, embedder = evaluate(sessions)
        report(args, argv, digest, sessions, scored, loaded, embedder, started)
    finally:
        if scratch is not None:
            scratch.cleanup()
    return 0


def report(
    args: argparse.Namespace,
    argv: list[str] | None,
    digest: str,
    sessions: list[dict[str, Any]],
    scored: list[Scored],
    loaded: Loaded,
    embedder: str,
    started: float,
) -> None:
    table = summarise(scored)
    split = halves(len(sessions))
    note = (
        f"{SOURCE if digest == SOURCE_SHA256 else args.data.name}, SHA-256 {digest[:12]}; "
        f"{len(sessions)} sessions, {len(loaded.turn_text)} messages, one owner; "
        f"half A = sessions {split['A'].start}-{split['A'].stop - 1}, half B = "
        f"{split['B'].start}-{split['B'].stop - 1}; embedder: {embedder}; "
        f"{time.perf_counter() - started:.0f} s.\n\n"
    )
    if digest != SOURCE_SHA256:
        print(f"note: {args.data} is not the file measured in docs/search.md", file=sys.stderr)
    text = note + markdown(table)
    print(text)
    if not args.no_record:
        append_results("Chinese recall (DuLeMon)", command_line("bench.chinese_recall", argv), text)


if __name__ == "__main__":
    raise SystemExit(main())
