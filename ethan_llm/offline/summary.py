"""The offline model's summaries: an extractive summary of the user's turns (summarize) and the
merge of summaries into a rolling one (fold)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ethan_llm.offline.facts import SIGNAL, clean
from ethan_llm.text import (
    language_of,
    sentences,
)

SUMMARY_ITEMS = 6
SUMMARY_SENTENCE_CHARS = 80


def summarize(user_texts: Sequence[str]) -> str:
    """Extractive: signal sentences (preferences, decisions, facts) first, then each turn's
    first sentence; SUMMARY_ITEMS at most, in the language the user wrote in."""
    zh = language_of(" ".join(user_texts)) == "zh"
    picked: list[str] = []
    candidates = [s for t in user_texts for s in sentences(t) if SIGNAL.search(s)]
    candidates += [sentences(t)[0] for t in user_texts if sentences(t)]
    for sentence in candidates:
        sentence = clean(sentence)[:SUMMARY_SENTENCE_CHARS]
        if sentence and sentence not in picked:
            picked.append(sentence)
        if len(picked) == SUMMARY_ITEMS:
            break
    if not picked:
        return "（没有需要记录的内容）" if zh else "(nothing worth keeping)"
    return (
        ("用户提到：" + "；".join(picked) + "。")
        if zh
        else ("The user said: " + "; ".join(picked) + ".")
    )


FOLD_ITEMS = 10
SUMMARY_PREFIX = re.compile(r"^(?:用户提到：|The user said: )")


def fold(summaries: Sequence[str], *, zh: bool) -> str:
    """Merge summaries extractively: their items, oldest first, duplicates dropped, the newest
    FOLD_ITEMS kept (newer details win)."""
    items: list[str] = []
    for text in (text.strip() for text in summaries):
        for paragraph in re.split(r"\n\s*\n", text):
            body = SUMMARY_PREFIX.sub("", paragraph.strip())
            for item in re.split(r"[；;]\s*", body):
                item = clean(item)
                if item and item not in items:
                    items.append(item)
    kept = items[-FOLD_ITEMS:]
    if not kept:
        return ""
    return (
        ("用户提到：" + "；".join(kept) + "。")
        if zh
        else ("The user said: " + "; ".join(kept) + ".")
    )
