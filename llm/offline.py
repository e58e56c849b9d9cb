"""The offline model: Ethan's embedded default when no provider key is set.

It is a deterministic heuristic, not a language model. Same input, same output; it is meant to
keep every code path of the memory system working on a laptop with no key (and in tests):

- chat: a brief answer. An explicit memory instruction becomes the matching tool call, when that
  tool is offered ("记住…"/"remember that…" → memory_write; "我叫…"/"my name is…" and
  "我的目标是…"/"my goal is…" → profile_update; an instruction addressed to the assistant →
  procedure_write: "以后/今后/从现在起" followed by a directive ("以后不要用韩语",
  "以后用中文回答我"; not "以后我会早点睡"), or "from now on/going forward/always/never"
  followed by an imperative verb ("always reply in English", "never use emoji", "from now
  on, don't use emoji"; not "Always a pleasure to talk to you" or "Never mind, forget it")).
  After the tool results it confirms what it stored. A question (llm.text.is_question) is
  never an instruction, and a request about the person ("Tell me about my daughter") is asked
  as a question is: "What do you remember about me?" writes nothing. A question about
  the person is answered from memory, in their language and the second person: the
  <memory_context> fact that answers it ("Where do I live?" → "You told me you live in
  Lisbon.", "你说过你住在里斯本。"; "What do you remember about me?" lists ten at most), else a
  memory_search call, answered on the next step from its result: a fact, or the best past
  message the person wrote with its day ("On 3 December you said: …"). Anything else gets a
  short acknowledgement.

Every completion says {"offline": True} in its meta; usage is our token estimate.

Its memory work (OfflineMemory, llm.memory's MemoryModel) is computed from the rounds
themselves, never from a prompt:

- summarize: an extractive summary: the first sentence of each user turn (signal sentences first),
  in the conversation's language.
- fold: the items of the earlier and newer summaries merged, duplicates dropped, newest kept.
- extract: facts found by patterns, with categories and the design's confidences (0.8; 0.9 for
  偏好/纠正/I prefer/correct that; 0.95 for 记住/remember), each with the user turn it is in
  (its provenance), and in companion mode the user's feelings for the profile's 心理与情绪
  section. Plain self-statements count at 0.8 with no signal word: who the person is and what
  they do ("我在杭州做后端工程师", "I work at Acme"), where they live, the people and pets in
  their life ("我女儿叫小米", "my dog Max"), plans ("我要去东京出差", "I'm going to learn
  Japanese", "I'm planning a trip to Kyoto next March"), moves, jobs, allergies ("I moved to
  Porto", "我对花生过敏"). A question or a request ("Tell me about my daughter") is never a
  fact; it reads only the person's words (llm.text.person_words, through llm.memory.turns_of),
  and writes facts in the third person in both languages ("The user lives in Lisbon", "用户住在
  杭州"); the consolidator dates their relative times (llm.text.dated). It does not judge
  against known facts: the consolidator's rules do (with fact_slot: "I moved to Porto"
  supersedes "I live in Lisbon").
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from llm.errors import ModelError
from llm.offline_housekeeping import offline_task_answer
from llm.provider import Request
from llm.routing import OFFLINE
from llm.text import (
    is_question,
    is_request,
    language_of,
    overlap,
    person_words,
    render_fold_input,
    sentences,
    statements,
    tells,
    tokenize,
)
from llm.tokens import estimate_tokens
from llm.types import (
    Completion,
    Consolidation,
    ExtractedFact,
    Extraction,
    Message,
    SessionsConsolidation,
    StreamEnd,
    StreamEvent,
    TextDelta,
    ToolCall,
    Turn,
    Usage,
)

# --- memory instructions (chat) ----------------------------------------------------------------

# An instruction to remember opens its sentence ("Remember that…", "Please remember…", "Can
# you remember…"): "I remember when I did my first play" reminisces and asks nothing, and
# "Remember to…" asks for a reminder, not for something about the person to be kept.
_REMEMBER_EN = (
    r"(?:(?:ok|okay|also|and|ethan)[,\s]+)*(?:please\s+)?"
    r"(?:(?:can|could|would|will)\s+you\s+(?:please\s+)?)?remember\b(?!\s+to\b)"
)
_REMEMBER = (
    re.compile(r"(?:请|麻烦)?(?:帮我)?记住[：:，,\s]*(?P<x>.+)"),
    re.compile(
        rf"(?:^|(?<=[.!?;] )){_REMEMBER_EN}(?:\s+that)?[:,]?\s+(?P<x>.+)",
        re.IGNORECASE | re.MULTILINE,
    ),
)
# A rule is an instruction to the assistant, not any sentence that starts with "always" or
# "以后" ("Always a pleasure to talk to you", "Never mind", "以后我会早点睡"): the time word must
# be followed by a directive. English: an imperative verb from _RULE_VERBS, optionally after
# "please", "you should/must/will/need to", "don't/do not". Chinese: a directive word
# (请/你/您/别/不要/用/回答/叫我…), never 我 (then the user speaks of themselves).
_RULE_VERBS = (
    "reply|answer|respond|use|write|speak|talk|call me|address me|refer to me|be|keep|give|"
    "include|ask|tell|say|start|begin|end|finish|format|explain|avoid|stop|mention|add|put|"
    "show|cite|quote|list|summari[sz]e|translate|check|double-check|confirm|remind me|let me|"
    "send|provide|offer|suggest|recommend|follow|assume|prefer|greet|sign|number|label|sort|"
    "spell|refuse|switch|stick to|limit|make|try|focus|wait|correct|point out|warn me|forget|"
    "interrupt|guess|apologi[sz]e|lie|reveal|share"
)
_PROCEDURE = (
    re.compile(
        r"^(?:请|麻烦你?)?(?:以后|今后|从现在(?:开始|起))[，,、：:\s]*"
        r"(?=请|你|您|别|不要|不用|不必|不许|要(?!是)|用|都|每次|一律|只|"
        r"回答|回复|叫我|称呼|说(?!不定)|写|给我|帮我|记得|保持|务必|尽量|必须|统一)"
        r"(?P<x>.+)"
    ),
    re.compile(
        r"^(?:please\s+)?(?:from now on|going forward|always|never)\b[,:]?\s*"
        r"(?:please\s+)?"
        r"(?:(?:you\s+)?(?:should|must|will|need to|have to)\s+|(?:don[’']t|do not)\s+)?"
        rf"(?P<x>(?:{_RULE_VERBS})\b.*)",
        re.IGNORECASE,
    ),
)
_NAME = (
    re.compile(r"我(?:叫|的名字是)\s*(?P<x>[^\s，。！？,.!?]{1,20})"),
    re.compile(r"\bmy name is\s+(?P<x>[A-Za-z][\w'-]*(?:\s+[A-Z][\w'-]*)?)", re.IGNORECASE),
)
_GOAL = (
    re.compile(r"我的(?:目标|梦想)是(?P<x>[^。！？!?]+)"),
    re.compile(r"\bmy goal is\s+(?:to\s+)?(?P<x>[^.!?]+)", re.IGNORECASE),
)

# --- fact patterns (extraction) ------------------------------------------------------------------


@dataclass(frozen=True)
class _FactRule:
    category: str
    confidence: float
    pattern: re.Pattern[str]


# The words of a plain self-statement's people and times (see _FACT_RULES).
_KIN_ZH = (
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

_FACT_RULES = (
    # A strong signal: an instruction to remember (_REMEMBER_EN), opening its sentence.
    _FactRule("knowledge", 0.95, re.compile(rf"记住|^\s*{_REMEMBER_EN}", re.IGNORECASE)),
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
            rf"我(?:已经)?结婚|我(?:养|有)了?(?:一|两|三|几)?(?:只|条|个)?(?:{_KIN_ZH})|"
            r"\bI(?:'m| am) (?:a|an|the)\b|\bI (?:work|live|study|teach)\b|"
            r"\bI(?:'ve| have)? (?:just |recently |finally )?(?:moved|relocated) to\b|"
            r"\bI(?:'m| am) (?:allergic|intolerant) to\b|\bI(?:'m| am) from\b|\bI was born\b|"
            r"\bI(?:'m| am) (?:married|engaged|divorced|vegetarian|vegan|retired|pregnant)\b|"
            r"\bI (?:started|began) (?:working|a new job)\b|\bI (?:got|found) a (?:new )?job\b|"
            r"\bI (?:just )?joined\b|"
            r"\b(?:my|our) \w+(?: \w+)? (?:is|are)\b|"
            # People and pets in their life: 我女儿叫小米, 我家的猫叫 Miso, my dog Max.
            rf"我们?(?:家)?(?:的)?(?:{_KIN_ZH})(?:叫|是|名叫|今年)|"
            rf"\b(?:my|our) (?:{_KIN_EN})\b|"
            rf"\b(?:I|we) have (?:a|an|one|two|three|four|\d+) (?:{_KIN_EN})\b",
            re.IGNORECASE,
        ),
    ),
)
# The slots a person has one value of at a time: where they live, whom they work for, what they
# work as. A fact about the same slot with another value is news that replaces the old fact
# ("I moved to Porto" after "I live in Lisbon"): memory_app.consolidator.decide_offline
# supersedes it. The subject is the person (a fact about_user wrote, "The user …", or a
# model's "用户…"), never someone else ("my sister lives in Paris"); plans are not slots
# ("I'm moving to Porto next month" is a decision, not yet where they live).
_SLOT_SUBJECT_EN = (
    r"^(?:user\s*[:：]\s*)?(?:the user|user|i|you)(?:['’](?:ve|m|re))?\s+"
    r"(?:(?:now|currently|still|just|recently|finally|also|have|has|had|am|is|are)\s+)*"
)
_SLOT_SUBJECT_ZH = r"^(?:用户|我)(?:现在|目前|已经|刚刚?|最近|去年|上个月|今年)*"
_SLOT_VALUE_EN = r"\s+(?P<v>.+)"
_SLOTS = (
    (
        "residence",
        re.compile(
            _SLOT_SUBJECT_EN
            + r"(?:live|lives|living|moved|relocated)\s+(?:in|to)"
            + _SLOT_VALUE_EN,
            re.IGNORECASE,
        ),
    ),
    (
        "residence",
        re.compile(_SLOT_SUBJECT_ZH + r"(?:住在|搬到了?|搬去了?|搬家到|定居在?)(?P<v>.+)"),
    ),
    (
        "employer",
        re.compile(
            _SLOT_SUBJECT_EN + r"(?:(?:work|works|working)\s+(?:at|for)|joined|"
            r"an?\s+(?:[\w-]+\s+){1,4}?(?:at|for)|"
            r"(?:started|began)\s+(?:working\s+)?(?:at|for)|got\s+a\s+(?:new\s+)?job\s+at)"
            + _SLOT_VALUE_EN,
            re.IGNORECASE,
        ),
    ),
    (
        "employer",
        re.compile(
            _SLOT_SUBJECT_ZH + r"(?:在(?P<v>[^，,。]{1,20}?)(?:工作|上班)|入职了?(?P<w>.+))"
        ),
    ),
    (
        "occupation",
        re.compile(
            _SLOT_SUBJECT_EN + r"(?:work|works|working)\s+as" + _SLOT_VALUE_EN, re.IGNORECASE
        ),
    ),
    ("occupation", re.compile(_SLOT_SUBJECT_ZH + r"(?:的(?:工作|职业)是|是一名|当上了)(?P<v>.+)")),
)
# Where a slot's value ends: "Lisbon with my wife", "Porto since May", "上海了".
_SLOT_VALUE_END = re.compile(
    r"\s+(?:with|since|for|last|now|near|and|but|because|in|at|from|next|this|when|where|"
    r"which|who|as|after|before)\b|[,.;:!?，。；：！？、了的]",
    re.IGNORECASE,
)


def fact_slot(fact: str) -> tuple[str, tuple[str, ...]] | None:
    """The slot a fact about the person fills and its value, as search words: "User: I live in
    Lisbon" → ("residence", ("lisbon",)), "用户搬到了波尔图" → ("residence", ("波尔图",)),
    "The user works at Acme" → ("employer", ("acm",)); None for any other fact."""
    text = _clean(fact)
    for slot, pattern in _SLOTS:
        match = pattern.search(text)
        if match:
            said = next(v for v in match.groups() if v)
            value = tuple(tokenize(_SLOT_VALUE_END.split(said, maxsplit=1)[0]))
            if value:
                return slot, value
    return None


_STRONG_PREFIX = re.compile(
    rf"^(?:请|麻烦)?(?:帮我)?记住[：:，,\s]*|^\s*{_REMEMBER_EN}(?:\s+that)?[:,]?\s*",
    re.IGNORECASE,
)
_PSYCH = re.compile(
    r"焦虑|压力|紧张|累|疲惫|难过|伤心|开心|快乐|害怕|担心|孤独|烦|失眠|委屈|放松|安心|治愈|"
    r"\bI feel\b|\bI(?:'m| am) (?:so |very |really )?(?:stressed|anxious|worried|tired|sad|"
    r"happy|lonely|scared|overwhelmed|calm)\b|\bmakes? me (?:feel )?(?:calm|better|relaxed)\b|"
    r"\bI value\b|\bI worry\b",
    re.IGNORECASE,
)
_SIGNAL = re.compile("|".join(rule.pattern.pattern for rule in _FACT_RULES), re.IGNORECASE)

SUMMARY_ITEMS = 6
SUMMARY_SENTENCE_CHARS = 80


def _clean(text: str) -> str:
    return text.strip().strip("。.!！?？,，;；").strip()


def _first(patterns, text: str) -> str | None:
    for pattern in patterns:
        match = pattern.search(text)
        if match:
            value = _clean(match.group("x"))
            if value:
                return value
    return None


def about_user(text: str) -> str:
    """A fact in the third person, one form in both languages, as a language model is asked to
    write them (llm.memory), so it reads right inside a system prompt: Chinese 我 becomes 用户
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


# A stored fact, told back to the person it is about (told_to_user): the third-person subject
# about_user writes ("The user", "the user's"), the "User:" prefix it wrote before, and the
# person's own first person ("my favourite coffee") all become "you"/"your".
_USER_PREFIX = re.compile(r"^\s*user\s*[:：]\s*", re.IGNORECASE)
_USER_SUBJECT = re.compile(r"^\s*(?:the\s+)?user\b(?!['’]s)\s*", re.IGNORECASE)
_USER_POSSESSIVE = re.compile(r"\b(?:the\s+)?user['’]s\b", re.IGNORECASE)
_THE_USER = re.compile(r"\bthe\s+user\b", re.IGNORECASE)
_USER_ZH = re.compile(r"用户(?!名|群|数|量|界面|体验|协议)")
_FIRST_PERSON = {
    "i'm": "you're",
    "i've": "you've",
    "i'd": "you'd",
    "i'll": "you'll",
    "i am": "you are",
    "i was": "you were",
    "i": "you",
    "me": "you",
    "my": "your",
    "mine": "yours",
    "myself": "yourself",
    "we": "you",
    "we're": "you're",
    "we've": "you've",
    "we'll": "you'll",
    "us": "you",
    "our": "your",
    "ours": "yours",
    "ourselves": "yourselves",
}
_FIRST_PERSON_WORD = re.compile(
    r"\b(?:i['’](?:m|ve|d|ll)|i am|i was|i|me|my|mine|myself|we['’](?:re|ve|ll)|we|our|ours|"
    r"ourselves|us(?<!US))\b(?![/'’]\w)",
    re.IGNORECASE,
)
# The verb after "the user", in the third person singular, and its form after "you".
_THIRD_PERSON_VERBS = {
    "is": "are",
    "was": "were",
    "has": "have",
    "does": "do",
    "isn't": "aren't",
    "wasn't": "weren't",
    "doesn't": "don't",
    "hasn't": "haven't",
}
_ADVERBS = frozenset(
    "also always usually often never still really sometimes now only just recently finally "
    "currently even already mostly rarely actually".split()
)


def _verb_after_you(word: str) -> str:
    """`word`, a verb that followed "the user", as it reads after "you": is → are,
    lives → live, studies → study, watches → watch. Anything else is left as it is."""
    lower = word.lower().replace("’", "'")
    if lower in _THIRD_PERSON_VERBS:
        return _THIRD_PERSON_VERBS[lower]
    if re.fullmatch(r"[a-z]+ies", lower) and len(lower) > 4:
        return word[:-3] + "y"
    if re.fullmatch(r"[a-z]+(?:ss|sh|ch|x|z|o)es", lower):
        return word[:-2]
    if re.fullmatch(r"[a-z]+[^su]s", lower):
        return word[:-1]
    return word


def _first_person_to_second(text: str) -> str:
    def swap(match: re.Match) -> str:
        said = match.group(0)
        told = _FIRST_PERSON[re.sub(r"\s+", " ", said.lower().replace("’", "'"))]
        # "I" is always a capital; "My" only at the start of a sentence.
        return told.capitalize() if said[0].isupper() and said[0] != "I" else told

    return _FIRST_PERSON_WORD.sub(swap, text)


def told_to_user(fact: str) -> str:
    """A remembered fact as said to the person it is about, in the second person: "User: my
    favourite coffee is a flat white" → "your favourite coffee is a flat white", "The user
    lives in Porto" → "you live in Porto", "用户喜欢喝美式咖啡" → "你喜欢喝美式咖啡". A fact
    that names nobody ("lives in Porto") comes back as it is."""
    fact = _clean(fact)
    if language_of(fact) == "zh":
        # 用户 (about_user's subject; not 用户名 "user name" and the like) and the person's
        # own 我 are both 你; their 我们 is 你们.
        return re.sub(r"我", "你", _USER_ZH.sub("你", fact.replace("用户他们", "你们")))
    if _USER_PREFIX.match(fact):
        # about_user's form: after the prefix, the person's own words.
        return _first_person_to_second(_USER_PREFIX.sub("", fact, count=1))
    subject = _USER_SUBJECT.match(fact)
    if subject:
        fact = "the user " + fact[subject.end() :]
    fact = _USER_POSSESSIVE.sub("your", fact)
    fact = re.sub(r"\bthe\s+user\s+and\s+others\b", "you", fact, flags=re.IGNORECASE)
    fact = _THE_USER_AND_VERB.sub(_you_and_verb, fact)
    return _first_person_to_second(fact)


# "the user" and the verb after it, maybe past an adverb: "the user also lives" → "you also
# live".
_THE_USER_AND_VERB = re.compile(
    r"\bthe\s+user\b(?P<adverb>(?:\s+(?:" + "|".join(sorted(_ADVERBS)) + r"))?)"
    r"(?:\s+(?P<verb>[A-Za-z'’]+))?",
    re.IGNORECASE,
)


def _you_and_verb(match: re.Match) -> str:
    verb = match.group("verb")
    return "you" + match.group("adverb") + (f" {_verb_after_you(verb)}" if verb else "")


def _remembered(fact: str, *, zh: bool, when: str = "") -> str:
    """The offline model's answer from one remembered fact, to the person it is about and in
    their language: "You told me you live in Lisbon.", "你说过你住在里斯本。"; with `when` (a
    day, for a past conversation) "On 3 December you told me…", "你在12月3日说过…"."""
    told = told_to_user(fact)
    if zh:
        said = f"你在{when}说过" if when else "你说过"
        return f"{said}{told}。" if told.startswith("你") else f"{said}：{told}"
    said = f"On {when} you told me" if when else "You told me"
    if re.match(r"your?\b", told, re.IGNORECASE):
        return f"{said} {_lower_you(told)}."
    return f"{said}: {told}"


# First words that are lower case inside a sentence (a name keeps its capital: "Max is…").
_COMMON_OPENING = re.compile(
    r"(?:you|your|how|what|where|when|why|who|which|the|a|an|my|this|that|there)\b",
    re.IGNORECASE,
)


def _lower_you(told: str) -> str:
    """'Your dog…', 'How you met…' inside a sentence: 'your dog…', 'how you met…'."""
    return f"{told[0].lower()}{told[1:]}" if _COMMON_OPENING.match(told) else told


def _with_subject(fact: str) -> str:
    """A Chinese fact that names nobody ("下周去东京") is about the user: 用户下周去东京."""
    if language_of(fact) == "zh" and "用户" not in fact:
        return f"用户{fact}"
    return fact


def _categorise(text: str) -> tuple[str, float]:
    for rule in _FACT_RULES[1:]:  # the "remember" rule only raises confidence
        if rule.pattern.search(text):
            return rule.category, rule.confidence
    return "knowledge", 0.8


class OfflineProvider:
    name = OFFLINE

    def stream(self, request: Request) -> Iterator[StreamEvent]:
        """The reply in small pieces (a word, or a few CJK characters, per delta) so every
        channel's streaming code runs with no key; tool calls come in the final Completion."""
        completion = self.answer(request)
        for piece in pieces(completion.text):
            yield TextDelta(piece)
        yield StreamEnd(completion)

    async def astream(self, request: Request) -> AsyncIterator[StreamEvent]:
        """stream, for the async callers: the answer is computed at once (no I/O to wait
        for), its pieces passed on as they are."""
        for event in self.stream(request):
            yield event

    def answer(self, request: Request) -> Completion:
        """The whole answer at once (the offline model has nothing to wait for)."""
        started = time.perf_counter()
        text, calls = chat(request)
        prompt = request.system + "".join(m.content for m in request.messages)
        return Completion(
            text=text,
            tool_calls=calls,
            usage=Usage(
                input_tokens=estimate_tokens(prompt),
                output_tokens=estimate_tokens(text),
                estimated=True,
            ),
            model=OFFLINE,
            provider=OFFLINE,
            latency_ms=(time.perf_counter() - started) * 1000,
            meta={"offline": True},
        )

    def translate(self, exc: Exception, model: str) -> tuple[ModelError, float | None]:
        raise exc  # nothing to translate: the offline model does not fail by itself


# A word with the spaces before it, or up to three characters of anything else (CJK,
# punctuation), or the trailing spaces: the pieces always join back into the text.
_PIECE = re.compile(r"\s*[A-Za-z0-9'’_-]+|\s*[^\sA-Za-z0-9'’_-]{1,3}|\s+$")


def pieces(text: str) -> list[str]:
    """The text as the offline model streams it."""
    return _PIECE.findall(text)


# --- chat ----------------------------------------------------------------------------------------


def _last_user_text(messages: tuple[Message, ...]) -> str:
    for message in reversed(messages):
        if message.role == "user":
            return message.content
    return ""


def memory_context_facts(system: str) -> list[str]:
    """The bullet lines of <memory_context>, in the order the system prompt gives them."""
    match = re.search(r"<memory_context>(.*?)</memory_context>", system, re.DOTALL)
    if not match:
        return []
    facts = []
    for line in match.group(1).splitlines():
        line = line.strip()
        if line.startswith(("-", "*", "•")):
            # Drop a leading "[0.95]" or "(preference)" tag that the prompt may carry.
            facts.append(re.sub(r"^[-*•]\s*(?:[\[(][^\])]*[\])]\s*)*", "", line).strip())
    return [fact for fact in facts if fact]


def instruction_calls(text: str, offered: set[str]) -> list[ToolCall]:
    """The tool calls an explicit memory instruction asks for, in a stable order. Only what the
    person tells counts: a question ("What do you remember about me?", "你还记得我叫什么吗？")
    asks for memory, it is not an instruction to write any."""
    text = person_words(text)
    zh = language_of(text) == "zh"
    told = statements(text)
    if len(told) < len(sentences(text)):
        text = " ".join(told)
    calls: list[tuple[str, dict[str, Any]]] = []
    remembered = _first(_REMEMBER, text)
    if remembered and "memory_write" in offered:
        category, _ = _categorise(remembered)
        calls.append(("memory_write", {"content": about_user(remembered), "category": category}))
    if _first(_PROCEDURE, text) and "procedure_write" in offered:
        calls.append(
            (
                "procedure_write",
                {
                    "rule": _clean(text),
                    "context": "用户明确要求" if zh else "the user asked explicitly",
                },
            )
        )
    if "profile_update" in offered:
        name = _first(_NAME, text)
        if name:
            calls.append(
                (
                    "profile_update",
                    {
                        "section": "基础特征",
                        "entry": f"名字：{name}" if zh else f"Name: {name}",
                        "mode": "merge",
                    },
                )
            )
        goal = _first(_GOAL, text)
        if goal:
            calls.append(
                ("profile_update", {"section": "目标与方向", "entry": goal, "mode": "append"})
            )
    return [
        ToolCall(id=f"offline_call_{i + 1}", name=name, arguments=args)
        for i, (name, args) in enumerate(calls)
    ]


def _confirmation(calls: tuple[ToolCall, ...], results: dict[str, str], zh: bool) -> str:
    lines = []
    for call in calls:
        failed = results.get(call.id, "").lower().startswith(("error", "错误"))
        args = call.arguments
        if failed:
            lines.append(
                f"抱歉，没能保存（{call.name}）。"
                if zh
                else f"Sorry, I could not save that ({call.name})."
            )
        elif call.name == "memory_write":
            # Said to the person, as they would say it back: "you like…", not "User: …".
            said = told_to_user(str(args.get("content", "")))
            lines.append(f"好的，我记住了：{said}" if zh else f"Got it, I'll remember: {said}")
        elif call.name == "procedure_write":
            lines.append(
                f"好的，以后我会照做：{args.get('rule', '')}"
                if zh
                else f"Understood, from now on: {args.get('rule', '')}"
            )
        elif call.name == "profile_update":
            lines.append(
                f"好的，已更新你的画像（{args.get('section', '')}）：{args.get('entry', '')}"
                if zh
                else f"Noted in your profile ({args.get('section', '')}): {args.get('entry', '')}"
            )
        else:
            lines.append("好的。" if zh else "Done.")
    return "\n".join(lines)


# A question about the person or about what they said, answered from memory: memory words
# ("Do you remember…", "你还记得…"), the person's own things ("What's my dog called?",
# "我女儿叫什么？") or their state ("Where do I live?", "我住在哪里？"); not "What should I
# read next?" or "我该读什么书？".
_ABOUT_THEM = re.compile(
    r"\b(?:remember|recall|forget|forgot|told you|did I (?:tell|say|mention))\b|\b(?:my|our)\b|"
    r"\b(?:do|did|am|was|have|had)\s+I\s+(?:live|work|study|come|stay|like|love|prefer|hate|"
    r"have|own|drink|eat|do|plan|want|need)\b|\bam I\b|\bwhere I\b|"
    rf"记得|说过|告诉过|提过|提到过|忘了|我们?的|我们?(?:家)?(?:的)?(?:{_KIN_ZH})|"
    r"我(?:现在|平时|以前)?(?:住|在哪|工作|上班|喜欢|爱|讨厌|叫|是|有|养|来自|对|打算|要去|计划|"
    r"过敏|不吃|吃|喝|搬)",
    re.IGNORECASE,
)
# A general "what do you know about me", naming no subject: answered with the injected facts.
_ABOUT_ME_GENERALLY = re.compile(
    r"\bwhat (?:do|did|else do) you (?:remember|know|recall) about me\b|"
    r"\bwhat (?:have|did) I (?:told|tell) you\b|\bwhat do you know of me\b|"
    r"(?:记得|知道|了解)(?:关于)?我(?:的)?(?:什么|哪些|多少|些什么)|对我(?:有)?(?:多少|什么)了解|"
    r"对我了解(?:多少|什么|哪些)",
    re.IGNORECASE,
)
_SEARCH_LIMIT = 10
_CITED = re.compile(
    r"^\[(?P<kind>fact|episode|message)\b[^\]]*?(?P<date>\d{4})-(?P<month>\d{2})-(?P<day>\d{2})"
    r"(?:\s+(?P<role>\w+))?\]\s*(?P<text>.*)$"
)
_MONTHS = (
    "January February March April May June July August September October November December"
).split()


# "What do you remember about me?" lists this many facts of those in the prompt (the most
# trusted and relevant first: memory_app.selectors.facts_for_injection). When it was shown
# more, it says how many, and where to see all of them (there may be more than the prompt has).
RECALL_LISTED = 10
RECALL_WHERE_EN = (
    " All of them are on the 我的记忆 (My memory) page, /memory/ (`ethan serve`; "
    "`ethan password` to sign in), and in `ethan export`'s memory/facts.json."
)
RECALL_WHERE_ZH = (
    "全部记忆在“我的记忆”页面 /memory/（`ethan serve`，`ethan password` 设置登录密码），"
    "也在 `ethan export` 导出的 memory/facts.json 里。"
)


def _recall_all(facts: list[str], *, zh: bool) -> str:
    """The answer to "What do you remember about me?": the injected facts, said to the person."""
    if not facts:
        return (
            "我还不太了解你。跟我说说你自己吧，我会记住的。"
            if zh
            else "I don't know much about you yet. Tell me about yourself and I'll remember."
        )
    told = [_lower_you(told_to_user(fact)) for fact in facts[:RECALL_LISTED]]
    more = len(facts) - len(told)
    if zh:
        answer = "我记得这些：" + "；".join(told) + "。"
        return answer + (f"还有 {more} 条没列出。{RECALL_WHERE_ZH}" if more else "")
    answer = "Here is what I remember about you: " + "; ".join(told) + "."
    return answer + (f" And {more} more.{RECALL_WHERE_EN}" if more else "")


def _not_remembered(zh: bool) -> str:
    return "我不记得你跟我说过这件事。" if zh else "I don't remember you telling me that."


def _shared(question: str, text: str) -> int:
    """How many words a question and a remembered text share: terms (the fact match) and
    search words (jieba's, so 住在 in a question meets 我住在里斯本)."""
    words = set(tokenize(question, search=True)) & set(tokenize(text, search=True))
    return overlap(question, text) + len(words)


# The slots (fact_slot) a question asks about: "Where do I live?" is answered by "I moved to
# Porto" too, though they share no word.
_ASKED_SLOTS = (
    ("residence", re.compile(r"\b(?:live|living|home|moved?|based)\b|住|搬|家在", re.IGNORECASE)),
    (
        "employer",
        re.compile(r"\b(?:work|working|job|employer|company)\b|工作|上班|公司", re.IGNORECASE),
    ),
    ("occupation", re.compile(r"\b(?:job|do for a living|profession)\b|职业|工作", re.IGNORECASE)),
)


def _relevance(question: str, fact: str) -> tuple[bool, int]:
    """How well an injected fact answers a question: the slot asked about, then shared words."""
    slot = fact_slot(fact)
    asked = slot is not None and any(
        name == slot[0] and cue.search(question) for name, cue in _ASKED_SLOTS
    )
    return asked, _shared(question, told_to_user(fact))


def _best_part(text: str, question: str, *, summary: bool = True) -> str:
    """The sentence of a remembered text (an episode's summary, its items; or a message) that
    shares the most words with the question, among those the person said about themselves
    (_about_them): never a question, a request, or a placeholder ("[file: a.txt]"); "" when
    none shares a word. A summary's items are split at their separators, never inside a
    word ("a.txt")."""
    body = person_words(_SUMMARY_PREFIX.sub("", text.strip()) if summary else text)
    body = re.sub(r"…$", "", body.strip())  # a cited snippet's cut
    parts = [_clean(part) for item in re.split(r"[；;]\s*", body) for part in sentences(item)]
    scored = [(_shared(question, part), part) for part in parts if part and _about_them(part)]
    best = max(scored, key=lambda item: item[0], default=(0, ""))
    return best[1] if best[0] else ""


def _answer_from_search(result: str, question: str, *, zh: bool) -> str:
    """The answer from memory_search's result (agent_app.memory_search.Hit.cited lines): a fact
    first, else the best-matching thing the person said (a message, or an item of an episode's
    summary), with its day. Their own questions and Ethan's replies are not answers."""
    hits = [match for line in result.splitlines() if (match := _CITED.match(line.strip()))]
    facts = [hit for hit in hits if hit["kind"] == "fact" and _tells(hit["text"])]
    if facts:
        return _remembered(facts[0]["text"], zh=zh)
    for hit in hits:
        if hit["kind"] == "fact" or (hit["kind"] == "message" and hit["role"] != "user"):
            continue
        month, day = int(hit["month"]), int(hit["day"])
        when = f"{month}月{day}日" if zh else f"{day} {_MONTHS[month - 1]}"
        if hit["kind"] == "episode":
            part = _best_part(hit["text"], question)
            if part:
                return _remembered(about_user(part), zh=zh, when=when)
            continue
        said = _best_part(hit["text"], question, summary=False)
        if said:
            return f"你在{when}说过：“{said}”" if zh else f"On {when} you said: “{said}”"
    return _not_remembered(zh)


def _tells(fact: str) -> bool:
    """A remembered fact that says something about the person: not a question or a request
    (stored before they were kept out), in the person's own words or in the third person."""
    said = _USER_PREFIX.sub("", _clean(fact), count=1)
    return bool(said) and tells(said)


def _about_them(sentence: str) -> bool:
    """A sentence the person said about themselves, worth quoting back: it tells (not a
    question or request) and speaks of them ("I…", "my…", 我…) or matches a fact rule; "That
    worked, thanks" does not."""
    return tells(sentence) and bool(
        _SIGNAL.search(sentence)
        or re.search(r"\b(?:I|I['’]m|my|me|we|our)\b|我", sentence, re.IGNORECASE)
    )


def _unseen_attachments(messages: Sequence[Message]) -> str:
    """The placeholders of what the person's last message brought beside its text."""
    if not messages or messages[-1].role != "user":
        return ""
    return ", ".join(attachment.placeholder for attachment in messages[-1].attachments)


def chat(request: Request) -> tuple[str, tuple[ToolCall, ...]]:
    messages = request.messages
    text = _last_user_text(messages)
    zh = language_of(text) == "zh"
    unseen = _unseen_attachments(messages)
    if unseen:
        # The offline model reads text only: it says so, and answers the words as ever.
        answer, calls = chat(
            replace(request, messages=(*messages[:-1], replace(messages[-1], attachments=())))
        )
        note = (
            f"（离线模式看不到附件：{unseen}）"
            if zh
            else f"(I can't see {unseen} in offline mode.)"
        )
        return (f"{note}\n\n{answer}".strip() if answer else note), calls
    # Tool results are in: answer from a search, or confirm what the calls did.
    if messages and messages[-1].role == "tool":
        results: dict[str, str] = {}
        index = len(messages) - 1
        while index >= 0 and messages[index].role == "tool":
            results[messages[index].tool_call_id] = messages[index].content
            index -= 1
        calls = messages[index].tool_calls if index >= 0 else ()
        for call in calls:
            if call.name == "memory_search":
                return _answer_from_search(results.get(call.id, ""), text, zh=zh), ()
        return _confirmation(calls, results, zh), ()

    # A chat app's housekeeping prompt (a title, tags, follow-ups) in the shape it asks for.
    task_answer = offline_task_answer(text, system=request.system)
    if task_answer is not None:
        return task_answer, ()

    offered = {tool.name for tool in request.tools}
    calls = instruction_calls(text, offered)
    if calls:
        return "", tuple(calls)

    if is_question(text) or (is_request(text) and _ABOUT_THEM.search(text)):
        # Answered from memory: the injected facts first, then the search the memory_search
        # tool runs (episodes and past messages), answered on the next step. A request about
        # the person ("Tell me about my daughter") asks as a question does.
        facts = [fact for fact in memory_context_facts(request.system) if _tells(fact)]
        if _ABOUT_ME_GENERALLY.search(text):
            return _recall_all(facts, zh=zh), ()
        about = _ABOUT_THEM.search(text)
        best = max(facts, key=lambda fact: _relevance(text, fact), default="")
        if best and _relevance(text, best) > (False, 0):
            return _remembered(best, zh=zh), ()
        if about and "memory_search" in offered:
            call = ToolCall(
                id="offline_call_1",
                name="memory_search",
                arguments={"query": text.strip(), "limit": _SEARCH_LIMIT},
            )
            return "", (call,)
        if about:
            return _not_remembered(zh), ()
    if re.fullmatch(r"\s*(你好|您好|嗨|哈喽|hi|hello|hey)[!！。.\s]*", text, re.IGNORECASE):
        return ("你好！我是 Ethan（离线模式）。" if zh else "Hi! I'm Ethan (offline mode)."), ()
    snippet = text.strip()[:60]
    return (f"（离线模式）收到：{snippet}" if zh else f"(offline mode) Noted: {snippet}"), ()


# --- memory work (llm.memory.MemoryModel) -------------------------------------------------------


class OfflineMemory:
    """Summaries, facts and rolling summaries computed from the rounds themselves, with no
    language model: the same rounds always give the same strings. Only what the user said is
    read; the assistant's replies add nothing the user told about themselves."""

    def summarize(self, turns: Sequence[Turn]) -> str:
        return summarize(_user_texts(turns))

    def extract(self, turns: Sequence[Turn], *, known: Sequence[str], psych: bool) -> Extraction:
        # It does not judge against `known`: every fact is an ADD, and the consolidator's
        # documented rules decide what it means (judged=False). It knows each fact's source
        # turn directly: the user turn the sentence is in.
        numbers = [n for n, turn in enumerate(turns, start=1) if turn.role == "user"]
        facts, feelings = extract(_user_texts(turns), psych=psych, numbers=numbers)
        return Extraction(facts=facts, psych=feelings, judged=False)

    def consolidate(
        self, turns: Sequence[Turn], *, known: Sequence[str], psych: bool, extract_from: int
    ) -> Consolidation:
        # Its summarize and its extract: the summary reads every turn, the extraction those
        # from extract_from on, its turn numbers shifted back to count among all of them.
        skipped = max(0, extract_from - 1)
        extraction = self.extract(turns[skipped:], known=known, psych=psych)
        facts = tuple(
            replace(fact, turns=tuple(n + skipped for n in fact.turns)) for fact in extraction.facts
        )
        return Consolidation(
            summary=self.summarize(turns),
            extraction=Extraction(facts=facts, psych=extraction.psych, judged=False),
        )

    def consolidate_sessions(
        self, sessions: Sequence[Sequence[Turn]], *, known: Sequence[str], psych: bool
    ) -> SessionsConsolidation:
        # Each session summarised alone, the facts of all of them numbered across them.
        every = [turn for turns in sessions for turn in turns]
        extraction = self.extract(every, known=known, psych=psych)
        return SessionsConsolidation(
            summaries=tuple(self.summarize(turns) for turns in sessions), extraction=extraction
        )

    def fold(self, *, rolling: str, summaries: Sequence[str]) -> str:
        # The language is judged over the input as a language model would read it, section
        # labels included, as it always was: the same summaries fold into the same language.
        # (Over the summaries alone, mixed Chinese and English near the threshold would flip.)
        zh = language_of(render_fold_input(rolling=rolling, summaries=summaries)) == "zh"
        return fold([rolling, *summaries], zh=zh)


def _user_texts(turns: Sequence[Turn]) -> list[str]:
    """What the user said, turn by turn, every line break a plain newline."""
    return ["\n".join(turn.text.splitlines()) for turn in turns if turn.role == "user"]


def summarize(user_texts: Sequence[str]) -> str:
    """Extractive: signal sentences (preferences, decisions, facts) first, then each turn's
    first sentence; SUMMARY_ITEMS at most, in the language the user wrote in."""
    zh = language_of(" ".join(user_texts)) == "zh"
    picked: list[str] = []
    candidates = [s for t in user_texts for s in sentences(t) if _SIGNAL.search(s)]
    candidates += [sentences(t)[0] for t in user_texts if sentences(t)]
    for sentence in candidates:
        sentence = _clean(sentence)[:SUMMARY_SENTENCE_CHARS]
        if sentence and sentence not in picked:
            picked.append(sentence)
        if len(picked) == SUMMARY_ITEMS:
            break
    if not picked:
        return "（没有需要记录的内容）" if zh else "(nothing worth keeping)"
    return (
        ("用户提到：" + "；".join(picked) + "。")
        if zh
        else ("The user said: " + "; ".join(picked) + ".")
    )


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
            strong = bool(_FACT_RULES[0].pattern.search(sentence))
            # It asks ("Do you remember where I live?", "Tell me about my daughter please."):
            # it tells nothing about the person.
            if is_question(sentence) or (is_request(sentence) and not strong):
                continue
            content = _clean(_STRONG_PREFIX.sub("", sentence))
            if content and (strong or _SIGNAL.search(sentence)) and content not in seen:
                category, confidence = _categorise(sentence)
                seen.add(content)
                facts.append(
                    ExtractedFact(
                        content=_with_subject(about_user(content)),
                        category=category,
                        importance=0.95 if strong else confidence,
                        turns=(number,),
                    )
                )
            feeling = about_user(_clean(sentence))
            if psych and _PSYCH.search(sentence) and feeling not in feelings:
                feelings.append(feeling)
    return tuple(facts), tuple(feelings)


FOLD_ITEMS = 10
_SUMMARY_PREFIX = re.compile(r"^(?:用户提到：|The user said: )")


def fold(summaries: Sequence[str], *, zh: bool) -> str:
    """Merge summaries extractively: their items, oldest first, duplicates dropped, the newest
    FOLD_ITEMS kept (newer details win)."""
    items: list[str] = []
    for text in (text.strip() for text in summaries):
        for paragraph in re.split(r"\n\s*\n", text):
            body = _SUMMARY_PREFIX.sub("", paragraph.strip())
            for item in re.split(r"[；;]\s*", body):
                item = _clean(item)
                if item and item not in items:
                    items.append(item)
    kept = items[-FOLD_ITEMS:]
    if not kept:
        return ""
    return (
        ("用户提到：" + "；".join(kept) + "。")
        if zh
        else ("The user said: " + "; ".join(kept) + ".")
    )
