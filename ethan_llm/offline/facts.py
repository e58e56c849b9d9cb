"""The offline model's reading of what the person said: the patterns that find a fact in a
sentence (with its category and confidence), and the third
person facts are written in. Its extraction (extract) is OfflineMemory's (ethan_llm.offline)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ethan_llm.text import (
    is_question,
    is_request,
    language_of,
    sentences,
)
from ethan_llm.types import (
    ExtractedFact,
)

# An instruction to remember opens its sentence ("Remember that…", "Please remember…", "Can
# you remember…"): "I remember when I did my first play" reminisces and asks nothing, and
# "Remember to…" asks for a reminder, not for something about the person to be kept.
REMEMBER_EN = (
    r"(?:(?:ok|okay|also|and|ethan)[,\s]+)*(?:please\s+)?"
    r"(?:(?:can|could|would|will)\s+you\s+(?:please\s+)?)?remember\b(?!\s+to\b)"
)


@dataclass(frozen=True)
class _FactRule:
    category: str
    confidence: float
    pattern: re.Pattern[str]


# The words of a plain self-statement's people and times (see FACT_RULES).
KIN_ZH = (
    "女儿|儿子|老婆|老公|妻子|丈夫|太太|先生|妈妈|爸爸|母亲|父亲|哥哥|姐姐|弟弟|妹妹|"
    "男朋友|女朋友|对象|孩子|猫|狗|宠物"
)
_KIN_EN = (
    "daughters?|sons?|wife|husband|partner|girlfriend|boyfriend|mom|mum|mother|dad|father|"
    "brothers?|sisters?|kids?|children|child|dogs?|cats?|puppy|puppies|kittens?"
)
_WHEN_ZH = "下周|下星期|下个月|下个星期|明天|后天|这周末|周末|明年|月底|年底|下礼拜"
_MONTHS_EN = "january|february|march|april|may|june|july|august|september|october|november|december"
_DAYS_EN = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_WHEN_EN = (
    rf"next (?:week|month|year|weekend|{_MONTHS_EN}|{_DAYS_EN})|tomorrow|this weekend|tonight|"
    r"in \w+ (?:days|weeks|months)"
)

FACT_RULES = (
    # A strong signal: an instruction to remember (REMEMBER_EN), opening its sentence.
    _FactRule("knowledge", 0.95, re.compile(rf"记住|^\s*{REMEMBER_EN}", re.IGNORECASE)),
    _FactRule(
        "correction",
        0.9,
        re.compile(
            r"纠正|更正|不对[，,]|其实是|\bcorrect(?:ion| that)\b|\bactually\b", re.IGNORECASE
        ),
    ),
    _FactRule("preference", 0.9, re.compile(r"偏好|更喜欢|\bI prefer\b", re.IGNORECASE)),
    _FactRule(
        "preference",
        0.8,
        re.compile(
            r"我(?:很|最|更|不)?(?:喜欢|爱|讨厌)|我(?:从来)?不(?:吃|喝)|我吃素|"
            r"\bI (?:really )?(?:like|love|hate|don't like|enjoy)\b|"
            r"\bI (?:don't|never) (?:eat|drink)\b",
            re.IGNORECASE,
        ),
    ),
    _FactRule(
        "decision",
        0.8,
        re.compile(
            r"决定|打算|定了|\b(?:I|we) (?:decided|will|are going to|plan to)\b|"
            # A plan: 我要去东京出差, 我准备换工作, I'm going to learn Japanese, I'm planning to
            # visit Rome (not 我要去睡觉了, I'm going to bed).
            rf"我(?:{_WHEN_ZH})?(?:要|准备|计划|想要)(?:{_WHEN_ZH})?"
            r"(?:去|搬|换|学|买|考|参加|出差)(?!睡|洗澡|吃饭|上厕所)|"
            r"\b(?:I|we)(?:'m|'re| am| are) (?:going|planning) (?:to|on)\b"
            r"(?! (?:bed|sleep|go|head off|be off)\b)|"
            # A plan named by what it is: I'm planning a trip to Kyoto, we're booking a holiday.
            r"\b(?:I|we)(?:'m|'re| am| are) (?:planning|booking|organi[sz]ing|taking|going on) "
            r"(?:a|an|my|our|the)\b|\b(?:trip|holiday|vacation|visit|move|wedding) (?:to|in)\b.*"
            rf"\b(?:{_WHEN_EN})\b|"
            # A plan with a time: 下周去东京, 明天飞上海, I'm flying to Oslo next week.
            rf"(?:{_WHEN_ZH})(?:要|会|就|准备|打算)?(?:去|飞|出差|搬|回|到)|"
            r"\bI(?:'m| am| will be|'ll be) (?:flying|going|moving|heading|travell?ing|driving)"
            rf"\b.*\b(?:{_WHEN_EN})\b",
            re.IGNORECASE,
        ),
    ),
    _FactRule(
        "knowledge",
        0.8,
        re.compile(
            # Who the person is, what they do and where they live (or moved to), their health.
            r"我是|我(?:现在|目前|已经)?在.{1,12}(?:工作|上班|读书|上学|做|当|教)|我住在|我有|"
            r"我的.{1,8}是|我叫|我家在|我来自|我(?:已经|刚|最近|上个月|去年)?搬(?:到|去|家到)|"
            r"我对.{1,12}过敏|我(?:换|找到)了?(?:新)?工作|我(?:已经)?(?:入职|跳槽)|"
            rf"我(?:已经)?结婚|我(?:养|有)了?(?:一|两|三|几)?(?:只|条|个)?(?:{KIN_ZH})|"
            r"\bI(?:'m| am) (?:a|an|the)\b|\bI (?:work|live|study|teach)\b|"
            r"\bI(?:'ve| have)? (?:just |recently |finally )?(?:moved|relocated) to\b|"
            r"\bI(?:'m| am) (?:allergic|intolerant) to\b|\bI(?:'m| am) from\b|\bI was born\b|"
            r"\bI(?:'m| am) (?:married|engaged|divorced|vegetarian|vegan|retired|pregnant)\b|"
            r"\bI (?:started|began) (?:working|a new job)\b|\bI (?:got|found) a (?:new )?job\b|"
            r"\bI (?:just )?joined\b|"
            r"\b(?:my|our) \w+(?: \w+)? (?:is|are)\b|"
            # People and pets in their life: 我女儿叫小米, 我家的猫叫 Miso, my dog Max.
            rf"我们?(?:家)?(?:的)?(?:{KIN_ZH})(?:叫|是|名叫|今年)|"
            rf"\b(?:my|our) (?:{_KIN_EN})\b|"
            rf"\b(?:I|we) have (?:a|an|one|two|three|four|\d+) (?:{_KIN_EN})\b",
            re.IGNORECASE,
        ),
    ),
)
_STRONG_PREFIX = re.compile(
    rf"^(?:请|麻烦)?(?:帮我)?记住[：:，,\s]*|^\s*{REMEMBER_EN}(?:\s+that)?[:,]?\s*",
    re.IGNORECASE,
)
# A greeting that opens a sentence ("Hi, I live in Lisbon"): not part of the fact.
_GREETING = re.compile(
    r"^\s*(?:(?:hi|hello|hey|hiya|good (?:morning|afternoon|evening))(?: there)?|你好|您好|嗨|哈喽)"
    r"\s*[,，!！.。~]*\s*",
    re.IGNORECASE,
)
_PSYCH = re.compile(
    r"焦虑|压力|紧张|累|疲惫|难过|伤心|开心|快乐|害怕|担心|孤独|烦|失眠|委屈|放松|安心|治愈|"
    r"\bI feel\b|\bI(?:'m| am) (?:so |very |really )?(?:stressed|anxious|worried|tired|sad|"
    r"happy|lonely|scared|overwhelmed|calm)\b|\bmakes? me (?:feel )?(?:calm|better|relaxed)\b|"
    r"\bI value\b|\bI worry\b",
    re.IGNORECASE,
)
SIGNAL = re.compile("|".join(rule.pattern.pattern for rule in FACT_RULES), re.IGNORECASE)


def clean(text: str) -> str:
    return text.strip().strip("。.!！?？,，;；").strip()


def first(patterns, text: str) -> str | None:
    for pattern in patterns:
        match = pattern.search(text)
        if match:
            value = clean(match.group("x"))
            if value:
                return value
    return None


def about_user(text: str) -> str:
    """A fact in the third person, one form in both languages, as a language model is asked to
    write them (ethan_llm.memory), so it reads right inside a system prompt: Chinese 我 becomes 用户
    (我们 stays), English "I live in Lisbon" "The user lives in Lisbon", "my sister" "the
    user's sister", "we" "the user and others" (see _third_person)."""
    if language_of(text) == "zh":
        # 我们家/我们的 (our home, our dog) are the person's: 用户家, 用户的, as English "our"
        # is "the user's"; another 我们 is 用户他们 ("the user and others").
        text = re.sub(r"我们(?=家|的)", "用户", text)
        return re.sub(r"我(?!们)", "用户", text.replace("我们", "用户他们"))
    if re.match(r"(?:the )?user\b", text, re.IGNORECASE):
        return text
    told = _third_person(text)
    return told[0].upper() + told[1:] if told else told


# The person's first person, as about_user writes it in the third: the pronoun (with a
# contraction), and the verb after a subject pronoun.
_PRONOUN = re.compile(
    r"\b(?P<p>I(?:['’](?:m|ve|d|ll))?|me|my|mine|myself|we(?:['’](?:re|ve|d|ll))?|us|our|ours|"
    r"ourselves)\b(?![/'’]\w)"
    r"(?P<rest>(?:\s+(?:also|always|usually|often|never|still|really|sometimes|now|only|just|"
    r"recently|finally|currently|even|already|mostly|rarely|actually))*\s+(?P<verb>[A-Za-z'’]+))?",
    re.IGNORECASE,
)
_PRONOUN_THIRD = {
    "i'm": "the user is",
    "i've": "the user has",
    "i'd": "the user would",
    "i'll": "the user will",
    "me": "the user",
    "my": "the user's",
    "mine": "the user's",
    "myself": "themselves",
    "we": "the user and others",
    "we're": "the user and others are",
    "we've": "the user and others have",
    "we'd": "the user and others would",
    "we'll": "the user and others will",
    "us": "the user and others",
    "our": "the user's",
    "ours": "the user's",
    "ourselves": "themselves",
}
# The verb after "I", as it reads after "the user": am → is, have → has, go → goes.
_FIRST_TO_THIRD = {
    "am": "is",
    "have": "has",
    "do": "does",
    "don't": "doesn't",
    "haven't": "hasn't",
    "go": "goes",
}
_UNCHANGED_AFTER_I = frozenset(
    (
        "was wasn't can can't cannot could couldn't will won't would wouldn't should shouldn't "
        "must mustn't might may shall did didn't had got found went made bought left took met "
        "came became grew saw knew lost won spent sold quit felt thought told said ran wrote "
        "drove flew gave kept led paid put read set sent slept stood taught understood wore "
        "began broke chose fell forgot held heard hurt let rode rose sang sat shut stole swam "
        "threw woke"
    ).split()
)


def _verb_after_the_user(word: str) -> str:
    """`word`, a verb that followed "I", as it reads after "the user": live → lives, study →
    studies, watch → watches, have → has; a past tense or a modal stays as it is."""
    lower = word.lower().replace("’", "'")
    if lower in _FIRST_TO_THIRD:
        return _FIRST_TO_THIRD[lower]
    if lower in _UNCHANGED_AFTER_I or lower.endswith(("ed", "'t", "s")) or not lower.isalpha():
        return word
    if re.fullmatch(r"[a-z]+[^aeiou]y", lower):
        return word[:-1] + "ies"
    if re.fullmatch(r"[a-z]+(?:ss|sh|ch|x|z|o)", lower):
        return word + "es"
    return word + "s"


def _third_person(text: str) -> str:
    """The person's English first person in the third: "I live in Lisbon and my sister lives in
    Madrid" → "the user lives in Lisbon and the user's sister lives in Madrid"."""

    def swap(match: re.Match) -> str:
        pronoun = match.group("p")
        key = pronoun.lower().replace("’", "'")
        rest = match.group("rest") or ""
        if key == "i":
            verb = match.group("verb") or ""
            if verb.lower() == "am":
                return "the user" + rest[: -len(verb)] + "is"
            return "the user" + (rest[: -len(verb)] + _verb_after_the_user(verb) if verb else "")
        if pronoun == "US":  # the country, not "us"
            return match.group(0)
        return _PRONOUN_THIRD[key] + rest

    return _PRONOUN.sub(swap, text)


def _with_subject(fact: str) -> str:
    """A Chinese fact that names nobody ("下周去东京") is about the user: 用户下周去东京."""
    if language_of(fact) == "zh" and "用户" not in fact:
        return f"用户{fact}"
    return fact


def categorise(text: str) -> tuple[str, float]:
    for rule in FACT_RULES[1:]:  # the "remember" rule only raises confidence
        if rule.pattern.search(text):
            return rule.category, rule.confidence
    return "knowledge", 0.8


def extract(
    user_texts: Sequence[str], *, psych: bool, numbers: Sequence[int] = ()
) -> tuple[tuple[ExtractedFact, ...], tuple[str, ...]]:
    """Facts found by patterns, each sentence once, in the third person, each with the turn
    number of the text it is in (`numbers[i]` for user_texts[i]; i + 1 by default); and, when
    `psych`, the sentences about feelings."""
    facts: list[ExtractedFact] = []
    feelings: list[str] = []
    seen: set[str] = set()
    for index, text in enumerate(user_texts):
        number = numbers[index] if index < len(numbers) else index + 1
        # Each paragraph on its own: a blank line ends what was said before it (person_words
        # sets the person's lines quoted from a transcript apart so).
        paragraphs = re.split(r"\n\s*\n", text)
        for sentence in (part for paragraph in paragraphs for part in sentences(paragraph)):
            strong = bool(FACT_RULES[0].pattern.search(sentence))
            # It asks ("Do you remember where I live?", "Tell me about my daughter please."):
            # it tells nothing about the person.
            if is_question(sentence) or (is_request(sentence) and not strong):
                continue
            content = clean(_STRONG_PREFIX.sub("", _GREETING.sub("", sentence)))
            if content and (strong or SIGNAL.search(sentence)) and content not in seen:
                category, confidence = categorise(sentence)
                seen.add(content)
                facts.append(
                    ExtractedFact(
                        content=_with_subject(about_user(content)),
                        category=category,
                        importance=0.95 if strong else confidence,
                        turns=(number,),
                    )
                )
            feeling = about_user(clean(sentence))
            if psych and _PSYCH.search(sentence) and feeling not in feelings:
                feelings.append(feeling)
    return tuple(facts), tuple(feelings)
