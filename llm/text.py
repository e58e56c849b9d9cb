"""Small text helpers shared by the offline model: sentences, terms and overlap, both languages."""

from __future__ import annotations

import functools
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


# --- words, for keywords and search (jieba for Chinese) --------------------------------------

CJK_STOPWORDS = frozenset(
    "的 了 是 我 你 他 她 它 在 和 也 就 都 而 及 与 着 或 吗 呢 吧 啊 呀 "
    "哦 嗯 很 还 又 把 被 让 给 这 那 个 一 不 没 有 要 会 能 可以 一个 "
    "没有 我们 你们 他们 她们 这个 那个 什么 怎么 怎样 为什么 因为 所以 "
    "但是 如果 就是 还是 然后 已经 一下 一些 这样 那样 自己 现在 今天 "
    "时候 知道 觉得 可能 应该 其实 真的 非常 比较 东西 事情 用户 好的 "
    # Everyday verbs: they say little about what a conversation was about.
    "喜欢 想 说 做 去 来 看 用 聊 聊聊 帮 帮我 最 爱 先 再".split()
)
_CJK_CHAR = re.compile(r"[\u4e00-\u9fff]")
_TOKEN_SPLIT = re.compile(r"([\u4e00-\u9fff]+)")


@functools.cache
def _jieba():
    import logging

    import jieba

    jieba.setLogLevel(logging.WARNING)  # no "Building prefix dict" chatter on stderr
    return jieba


def tokenize(text: str, *, search: bool = False) -> list[str]:
    """Words in order, repeats kept (for term frequency): Chinese segmented by jieba, English
    lower-cased and lightly stemmed; stopwords, punctuation and numbers-only dropped.

    `search` uses jieba's search mode, which also yields the shorter words inside a long one
    (美式咖啡 → 美式, 咖啡, 美式咖啡), so 咖啡店 in a question meets 美式咖啡 in a fact."""
    tokens: list[str] = []
    for index, part in enumerate(_TOKEN_SPLIT.split(text or "")):
        if index % 2:  # a run of Chinese characters
            cut = _jieba().lcut_for_search if search else _jieba().lcut
            for word in cut(part):
                if word not in CJK_STOPWORDS and _CJK_CHAR.search(word):
                    tokens.append(word)
        else:
            for word in _WORD.findall(part.lower()):
                if word not in STOPWORDS and len(word) > 1 and not word.isdigit():
                    tokens.append(stem(word))
    return tokens
