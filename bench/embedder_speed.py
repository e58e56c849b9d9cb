"""The default embedder on this machine: load time, memory, throughput by batch size, a single
query's latency, and what each storage format keeps of recall (docs/embeddings.md).

python -m bench.embedder_speed --data ../shared/datasets/locomo/locomo10.json

No Django: the embedder layer alone. Recall is recall@10 of LoCoMo's evidence turns among the
messages of conversations 0-4 (the tuning half), by the embedder alone, one message a vector.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

import embedder
from embedder import local

CHINESE = (
    "周末我在家玩游戏，看漫画，然后和朋友去吃拉面。",
    "我今年二十二岁，刚从大学毕业，在杭州找了份工作。",
    "上周家里换了新的空调和洗碗机，电费好像高了一点。",
    "明天上午十点要和老板讨论下个季度的项目计划。",
    "她最近在学吉他，每天晚上练习一个小时。",
)


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def conversations(path: Path, first: int, last: int) -> list[tuple[list[str], list[str], list]]:
    """(dia_ids, texts, qa with evidence) of conversations first..last-1."""
    out = []
    for sample in json.loads(path.read_text(encoding="utf-8"))[first:last]:
        ids, texts = [], []
        for key, turns in sample["conversation"].items():
            if key.startswith("session_") and isinstance(turns, list):
                for turn in turns:
                    ids.append(turn["dia_id"])
                    texts.append(turn["text"])
        out.append((ids, texts, [q for q in sample["qa"] if q.get("evidence")]))
    return out


def throughput(texts: list[str], batch: int, limit: int) -> float:
    texts = texts[:limit]
    started = time.perf_counter()
    for i in range(0, len(texts), batch):
        embedder.embed(texts[i : i + batch])
    return len(texts) / (time.perf_counter() - started)


def recall_by_format(data: list) -> dict[str, float]:
    formats = {
        "float32": lambda m: m,
        "float16": lambda m: m.astype(np.float16).astype(np.float32),
        "int8 blob": lambda m: embedder.from_blobs([embedder.to_blob(r) for r in m], m.shape[1]),
    }
    found: dict[str, list[float]] = {name: [] for name in formats}
    for ids, texts, questions in data:
        matrix = embedder.embed(texts).vectors
        asked = embedder.embed([q["question"] for q in questions], kind="query").vectors
        for name, stored in formats.items():
            kept = stored(matrix)
            for question, vector in zip(questions, asked, strict=True):
                top = np.argsort(-embedder.similarities(vector, kept))[:10]
                evidence = set(question["evidence"])
                found[name].append(len(evidence & {ids[j] for j in top}) / len(evidence))
    return {name: float(np.mean(values)) for name, values in found.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="locomo10.json")
    args = parser.parse_args()
    embedder.configure(embedder="default")

    before = rss_mb()
    started = time.perf_counter()
    embedder.preload()
    print(f"load: {time.perf_counter() - started:.2f} s, RSS +{rss_mb() - before:.0f} MB")

    data = conversations(args.data, 0, 5)
    english = [text for _ids, texts, _qa in data for text in texts]
    chinese = [f"{line}（{n}）" for n in range(400) for line in CHINESE][:2000]
    for name, texts in (("English (LoCoMo)", english), ("Chinese", chinese)):
        for batch in (1, 16, 64, 256):
            rate = throughput(texts, batch, 200 if batch == 1 else 2000)
            print(f"{name}, batch {batch}: {rate:.0f} messages/s")

    latencies = []
    for question in [q["question"] for _i, _t, qa in data for q in qa][:200]:
        started = time.perf_counter()
        embedder.embed([question], kind="query")
        latencies.append((time.perf_counter() - started) * 1000)
    latencies.sort()
    p95 = latencies[int(0.95 * len(latencies)) - 1]
    print(f"one query: p50 {statistics.median(latencies):.1f} ms, p95 {p95:.1f} ms")
    print(f"RSS after: +{rss_mb() - before:.0f} MB; blob {embedder.blob_size(local.DIM)} bytes")

    messages = sum(len(texts) for _ids, texts, _qa in data)
    questions = sum(len(qa) for _ids, _texts, qa in data)
    print(f"recall@10, embedder alone, {messages} messages, {questions} questions:")
    for name, value in recall_by_format(data).items():
        print(f"  {name}: {value:.4f}")


if __name__ == "__main__":
    main()
