"""What "the same fact" means: equal after lower-casing and dropping punctuation and spacing."""

import hashlib
import re
import unicodedata


def normalize(text: str) -> str:
    kept = [
        ch.lower()
        for ch in unicodedata.normalize("NFKC", text)
        if not (unicodedata.category(ch).startswith(("P", "Z", "C")) or ch.isspace())
    ]
    return "".join(kept)


def content_key(text: str) -> str:
    """A fixed-size key of the normalised text, for an index that long facts cannot overflow."""
    return hashlib.sha1(normalize(text).encode("utf-8")).hexdigest()


# --- the same fact in other words ------------------------------------------------------------

# Two facts whose vectors are at least this near may be the same fact in other words (measured
# on LoCoMo's replayed facts: docs/memory.md, "The same fact in other words").
TWIN_COSINE = 0.87

_NUMBER = re.compile(r"\d+(?:[.,]\d+)?")
_NEGATION = re.compile(
    r"\b(?:not|no|never|none|nothing|neither|nor|without|dislikes?|disliked|hates?|hated|"
    r"stopped|quit|quits|doesn't|don't|didn't|isn't|aren't|wasn't|weren't|won't|can't|"
    r"cannot|couldn't|shouldn't|wouldn't|hasn't|haven't|hadn't)\b|n't\b|不|没|别|未|无|非|讨厌|戒",
    re.IGNORECASE,
)
# The direction of a relation between two people: the fact's subject receiving (thanking,
# appreciating) or giving (supporting, helping). An embedder puts "Calvin appreciates Dave's
# support" and "Calvin supports Dave" 0.92 apart. Verb forms only: "support" the noun is neither.
_RECEIVING = re.compile(
    r"\b(?:appreciat\w*|grateful|gratitude|thank\w*|indebted)\b|感谢|感激|谢谢", re.IGNORECASE
)
_GIVING = re.compile(
    # Active forms only: "encouraged", "inspired", "motivated" are as often the receiving
    # side's ("feels motivated by it": LoCoMo half A).
    r"\b(?:supports|supported|supporting|supportive|encourages|encouraging|helps|helped|"
    r"helping|offers|offered|offering|inspires|inspiring|motivates|motivating|mentors|"
    r"mentoring|comforts|comforting|reassures|reassuring|assures|assuring)\b",
    re.IGNORECASE,
)
_NAME = re.compile(r"\b[A-Z][\w'-]*")
# Capitalised only for starting a sentence: not names.
_NOT_NAMES = frozenset(
    "the a an i he she they we you it his her their my our your its this that these those "
    "user user's".split()
)


def _numbers(text: str) -> set[str]:
    return {number.replace(",", ".") for number in _NUMBER.findall(text)}


def _names(text: str) -> set[str]:
    """The capitalised words (names of people, places, things), but for sentence openers."""
    names = {name.lower().removesuffix("'s") for name in _NAME.findall(text)}
    return names - _NOT_NAMES


def _subject(text: str) -> str:
    """Whom a fact is about, as its first word says ("Melanie values…", "The user…", "用户…")."""
    text = text.strip().lower()
    if text[:1].isascii():
        words = re.findall(r"[\w']+", text)
        return words[0].removesuffix("'s") if words else ""
    return text[:2]


def _direction(text: str) -> tuple[bool, bool]:
    return bool(_RECEIVING.search(text)), bool(_GIVING.search(text))


def same_in_other_words(a: str, b: str, cosine: float) -> bool:
    """Whether facts `a` and `b`, whose vectors have this cosine, say the same thing: near
    enough (TWIN_COSINE), and nothing an embedder blurs differs between them: whom it is
    about ("Gina supports Jon" and "Jon is grateful for Gina's support", 0.90), the numbers
    (22 and 23 years old, 0.91), a negation (likes and dislikes tea, 0.88), the names, and
    the direction of a relation (appreciating Dave's support or supporting Dave, 0.92)."""
    if cosine < TWIN_COSINE:
        return False
    if _subject(a) != _subject(b):
        return False
    if _numbers(a) != _numbers(b) or _names(a) != _names(b):
        return False
    if _direction(a) != _direction(b):
        return False
    return bool(_NEGATION.search(a)) == bool(_NEGATION.search(b))
