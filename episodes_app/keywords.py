"""Keywords of an episode: the most frequent words of what the person said, and the summary.

Words are counted by their search token (the stem: "story" and "stories" are one word) but
kept as they were said, for people to read (the API, the pages, MCP, an export); search reads
them through the episode's search tokens, stemmed again there."""

from __future__ import annotations

from collections import Counter, defaultdict

from ethan_llm.text import sentences, words

KEYWORD_COUNT = 8
# What may come before a sentence's first word.
_OPENING_MARKS = " \t\n\"'“‘([*-"

# A word as said, and whether its case says how it is written (not a capital that only
# starts a sentence).
Said = tuple[str, bool]


def _said(texts: list[str]) -> dict[str, list[Said]]:
    """Each token of `texts`, in the order first seen, with every word said for it."""
    said: defaultdict[str, list[Said]] = defaultdict(list)
    for text in texts:
        for sentence in sentences(text):
            opening = sentence.lstrip(_OPENING_MARKS)
            for token, word in words(sentence):
                starts = opening.startswith(word) and word[:1].isupper() and word[1:].islower()
                said[token].append((word, not starts))
                opening = ""
    return said


def keywords_for(texts: list[str], limit: int = KEYWORD_COUNT) -> list[str]:
    """The `limit` most frequent words (Chinese by jieba, English without stopwords), each as it
    was said most often; ties go to the word seen first."""
    said = _said(texts)
    first_seen = {token: index for index, token in enumerate(said)}
    ranked = sorted(said, key=lambda token: (-len(said[token]), first_seen[token]))
    return [as_said(said[token]) for token in ranked[:limit]]


def as_said(forms: list[Said]) -> str:
    """The one way to show a word said in these forms (all of one token): the most frequent
    form, first seen on a tie ("stories" over "story"), in lower case unless it was never said
    so ("Porto", "API" stay; "Stories", said "stories" elsewhere or only at the start of a
    sentence, is "stories")."""
    lowered = [word.lower() for word, _ in forms]
    counts = Counter(lowered)
    best = min(counts, key=lambda form: (-counts[form], lowered.index(form)))
    cased = [word for word, known in forms if known and word.lower() == best]
    if not cased or best in cased:
        return best
    return max(cased, key=lambda form: (cased.count(form), -cased.index(form)))


def keywords_as_said(keywords: list[str], texts: list[str]) -> list[str]:
    """Keywords stored as search tokens, as they were before they were kept as said ("stori"
    for "stories", "porto" for "Porto"), each shown as keywords_for shows it now: by the words
    of `texts` it stands for. A keyword that is no token of `texts` (a person's own, from an
    import; one whose session is gone and not in the summary) stays as it is."""
    said = _said(texts)
    return [as_said(said[keyword]) if keyword in said else keyword for keyword in keywords]
