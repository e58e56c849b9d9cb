"""Which path a turn takes: fast, medium or full.

| path   | facts injected | profile | episodes | tools | max tokens |
|--------|----------------|---------|----------|-------|------------|
| fast   | top 5          | no      | no       | no    | 512        |
| medium | top 15         | yes     | no       | yes   | 1024       |
| full   | top 15         | yes     | recalled | yes   | 2048       |

The router, in order (an explicit path always wins):
1. companion mode (陪伴) → full: listening needs the whole picture.
2. a memory instruction (记住 / remember, 以后 / from now on / always, 我叫 / my name is,
   我的目标 / my goal) → full: the model will need its tools.
3. long (over 120 estimated tokens) or multi-step (several lines or sentences with 首先/然后/
   步骤/计划, "first … then", "step by step", "plan", a numbered list) → full.
4. a short greeting or acknowledgement alone (你好, 谢谢, 好的, 嗯, hi, thanks, ok, got it;
   at most 24 characters) → fast.
5. anything else → medium.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ethan_llm.tokens import estimate_tokens
from sessions_app.models import ChatSession

FAST, MEDIUM, FULL = "fast", "medium", "full"
PATHS = (FAST, MEDIUM, FULL)


@dataclass(frozen=True)
class PathSettings:
    fact_limit: int
    profile: bool
    tools: bool
    max_tokens: int
    episodes: bool  # recall past sessions into <episodes>


SETTINGS = {
    FAST: PathSettings(fact_limit=5, profile=False, tools=False, max_tokens=512, episodes=False),
    MEDIUM: PathSettings(fact_limit=15, profile=True, tools=True, max_tokens=1024, episodes=False),
    FULL: PathSettings(fact_limit=15, profile=True, tools=True, max_tokens=2048, episodes=True),
}

LONG_TOKENS = 120
SHORT_CHARS = 24

_MEMORY_INSTRUCTION = re.compile(
    r"记住|以后|今后|从现在(?:开始|起)|我叫|我的名字|我的目标|"
    r"\bremember\b|\bfrom now on\b|\bgoing forward\b|^\s*(?:always|never)\b|\bmy name is\b|"
    r"\bmy goal\b",
    re.IGNORECASE,
)
_MULTI_STEP = re.compile(
    r"首先|然后|其次|最后|步骤|计划|方案|分析|对比|"
    r"\bstep[- ]by[- ]step\b|\bfirst\b.*\bthen\b|\bplan\b|\bcompare\b|\banaly[sz]e\b|"
    r"^\s*\d+[.)、]",
    re.IGNORECASE | re.DOTALL | re.MULTILINE,
)
_GREETING = re.compile(
    r"^\s*(?:你好|您好|嗨|哈喽|早上好|晚上好|晚安|谢谢(?:你)?|多谢|好的|好|嗯+|哦|收到|明白了?|"
    r"没问题|行|可以|hi|hello|hey|yo|thanks?(?: you)?|thx|ok(?:ay)?|sure|got it|cool|great|"
    r"good (?:morning|night|evening)|bye)\s*[!！。.~～?？]*\s*$",
    re.IGNORECASE,
)


def choose_path(*, text: str, mode: str, explicit: str | None = None) -> str:
    if explicit:
        if explicit not in PATHS:
            raise ValueError(f"unknown path {explicit!r}: use fast, medium or full")
        return explicit
    if mode == ChatSession.Mode.COMPANION:
        return FULL
    if _MEMORY_INSTRUCTION.search(text):
        return FULL
    if estimate_tokens(text) > LONG_TOKENS or _MULTI_STEP.search(text):
        return FULL
    if len(text.strip()) <= SHORT_CHARS and _GREETING.match(text):
        return FAST
    return MEDIUM
