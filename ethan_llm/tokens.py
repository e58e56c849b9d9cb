"""A token estimate for budgets: no SDK counts tokens offline (and tiktoken downloads its tables).

CJK characters count about one token each; other text about four characters per token. Real
counts come from each response's usage fields.
"""

from __future__ import annotations

import math
import re

# CJK ideographs, kana, hangul and CJK punctuation/fullwidth forms.
_CJK = re.compile(
    "[\u3000-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]"
)


def estimate_tokens(text: str) -> int:
    if not text:
        return 0
    cjk = len(_CJK.findall(text))
    other = len(text) - cjk
    return cjk + math.ceil(other / 4)


def cjk_ratio(text: str) -> float:
    """Share of CJK characters among the non-space characters (0 for empty text)."""
    visible = [c for c in text if not c.isspace()]
    if not visible:
        return 0.0
    return len(_CJK.findall("".join(visible))) / len(visible)


def is_chinese(text: str) -> bool:
    return cjk_ratio(text) >= 0.2
