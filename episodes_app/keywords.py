"""Keywords of an episode: the most frequent words of what the person said, and the summary."""

from __future__ import annotations

from collections import Counter

from llm.text import tokenize

KEYWORD_COUNT = 8


def keywords_for(texts: list[str], limit: int = KEYWORD_COUNT) -> list[str]:
    """The `limit` most frequent words (Chinese by jieba, English without stopwords); ties go to
    the word seen first."""
    counts: Counter[str] = Counter()
    first_seen: dict[str, int] = {}
    for text in texts:
        for word in tokenize(text):
            counts[word] += 1
            first_seen.setdefault(word, len(first_seen))
    ranked = sorted(counts, key=lambda word: (-counts[word], first_seen[word]))
    return ranked[:limit]
