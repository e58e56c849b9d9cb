"""What "the same fact" means: equal after lower-casing and dropping punctuation and spacing."""

import hashlib
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
