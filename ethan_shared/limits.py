"""How long stored memory may be: one place, read by every door that writes it.

The services (memory_app.services, profile_app.services) enforce these, so the chat tools, the
REST API, the admin, import and any later door get the same answer; the model fields carry
them as MaxLengthValidator so the admin's forms refuse too, and the API serializers and the
tools' JSON schemas quote them. Everything here ends up in a system prompt on every turn, so
each limit is a budget for prompt space as much as for storage. The number of active rules is
a setting instead (settings.ETHAN_PROCEDURE_CAPACITY, 30 by default), as it is per deployment.

Lengths are in characters (Python's len), counted after a fact's or a rule's whitespace is
collapsed, as it is stored.

Besides lengths, one rule on what text is at all (storable_text): no NUL and no lone surrogate.
The turn (agent_app.turn.turn_plan) and the memory and profile services call it, the import's
readers too, so every door refuses such text the same way, before anything is written.
"""

from __future__ import annotations

import re

from django.core.validators import MaxLengthValidator

# A fact is one short, self-contained statement ("用户在 Acme 做后端工程师"); up to 15 of them
# go into <memory_context> on every turn. 2,000 leaves room for a precise paragraph and keeps
# 15 facts under ~30,000 characters at worst. The API has always accepted 2,000.
FACT_MAX_CHARS = 2_000

# A rule is an instruction ("always reply in English"), and every active rule goes into every
# turn's <behavioral_guidelines>, the fast path included: 30 rules × 500 = 15,000 characters at
# most. A real rule is a sentence; 500 is a few.
RULE_MAX_CHARS = 500

# Why or when a rule applies. It is stored and shown (API, admin, export) but not put into
# the prompt, so it may be longer than the rule.
RULE_CONTEXT_MAX_CHARS = 1_000

# One append or merge into a profile section: a bullet, or a short paragraph. (An overwrite
# replaces a whole section and is bounded by PROFILE_MAX_CHARS instead.)
PROFILE_ENTRY_MAX_CHARS = 10_000

# The whole rendered user_profile.md (title, the seven headings and their text). The page and
# PUT /api/profile accept a document this long, so a profile kept within it can always be read,
# edited and saved back; it goes whole into <user_profile> on the full and medium paths.
PROFILE_MAX_CHARS = 100_000


# The longest search any door takes (GET /api/search, GET /api/sessions?q=, the MCP tools):
# a search, not a document.
SEARCH_QUERY_MAX_CHARS = 1_000


def too_long(what: str, limit: int, length: int) -> str:
    """The one wording of a refusal: "a fact is at most 2000 characters; this one is 31000"."""
    return f"{what} is at most {limit} characters; this one is {length}"


def max_chars(what: str, limit: int) -> MaxLengthValidator:
    """A limit as a model field's validator, so a ModelForm (the admin) refuses too, in the
    same words as the services."""
    return MaxLengthValidator(
        limit, message=f"{what} is at most %(limit_value)d characters; this one is %(show_value)d"
    )


# A NUL, which PostgreSQL's text cannot hold (SQLite stores it, and the same data must move
# between the two), and the halves of UTF-16 surrogate pairs: JSON's "\ud800" decodes to one in
# Python, yet it is no character, and UTF-8 (a file, a web page, PostgreSQL) cannot encode it.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


class UnstorableText(ValueError):
    """Text that holds a character no stored text may hold (storable_text)."""


def storable_text(what: str, text: str) -> str:
    """`text` if a person can store it, else UnstorableText in the one wording of that refusal:
    "a fact contains a NUL character (U+0000), which text cannot hold: remove it"."""
    found = _UNSTORABLE.search(text)
    if found is None:
        return text
    code = ord(found.group())
    name = (
        "a NUL character (U+0000)"
        if code == 0
        else f"a lone surrogate (U+{code:04X}, half of a UTF-16 pair, not a character)"
    )
    raise UnstorableText(f"{what} contains {name}, which text cannot hold: remove it")


def storable_data(what: str, data: object) -> object:
    """`data` (JSON-like: mappings, lists, text, numbers) if every text in it, keys included,
    passes storable_text; PostgreSQL's jsonb refuses "\\u0000" as its text does a NUL."""
    if isinstance(data, str):
        storable_text(what, data)
    elif isinstance(data, dict):
        for key, value in data.items():
            storable_data(what, str(key))
            storable_data(what, value)
    elif isinstance(data, list | tuple):
        for value in data:
            storable_data(what, value)
    return data
