"""Small text helpers shared by the offline model: sentences, terms and overlap, both languages."""

from __future__ import annotations

import re

from llm.tokens import is_chinese

_SENTENCE_END = re.compile(r"(?<=[。！？!?；;])\s*|(?<=\.)\s+")
_CJK_RUN = re.compile(r"[\u4e00-\u9fff]+")
_WORD = re.compile(r"[a-z0-9][a-z0-9'-]*")

STOPWORDS = frozenset(
    (
        "a an and are as at be but by can could did do does for from had has have how i i'm in "
        "is it its me my of on or our please so that the their them then there these they this "
        "to was we what when where which who why will with would you your about any some tell "
        "know remember"
    ).split()
)


# Function characters: a bigram with one of these says little about the topic.
CJK_STOP_CHARS = frozenset(
    "的了吗呢吧啊呀是我你他她它们这那什么怎哪谁在有和与就也都还很个吧请记得知道"
)


def sentences(text: str) -> list[str]:
    return [part.strip() for part in _SENTENCE_END.split(text) if part and part.strip()]


def stem(word: str) -> str:
    """A light English stemmer: enough for 'likes'/'liked'/'liking' to meet 'like'."""
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def terms(text: str) -> set[str]:
    """English content words (stemmed), and Chinese character bigrams (single characters for a
    one-character run), so '咖啡' in a question meets '我喜欢喝咖啡' in a fact."""
    lowered = text.lower()
    found = {stem(w) for w in _WORD.findall(lowered) if w not in STOPWORDS and len(w) > 1}
    for run in _CJK_RUN.findall(text):
        if len(run) == 1 and run not in CJK_STOP_CHARS:
            found.add(run)
        for i in range(len(run) - 1):
            bigram = run[i : i + 2]
            if not (set(bigram) & CJK_STOP_CHARS):
                found.add(bigram)
    return found


def overlap(a: str, b: str) -> int:
    return len(terms(a) & terms(b))


def language_of(text: str) -> str:
    return "zh" if is_chinese(text) else "en"
