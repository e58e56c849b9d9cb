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
  After the tool results it confirms what it stored. A question that shares terms with a fact
  in <memory_context> gets that fact back; otherwise a short acknowledgement.

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
  their life ("我女儿叫小米", "my dog Max"), plans with a time ("下周去东京", "I'm flying to
  Oslo next week"). It does not judge against known facts: the consolidator's rules do.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from llm.errors import ModelError
from llm.memory import Consolidation, ExtractedFact, Extraction, Turn, render_fold_input
from llm.provider import Request
from llm.routing import OFFLINE
from llm.text import language_of, overlap, sentences
from llm.tokens import estimate_tokens
from llm.types import Completion, Message, StreamEnd, StreamEvent, TextDelta, ToolCall, Usage

# --- memory instructions (chat) ----------------------------------------------------------------

_REMEMBER = (
    re.compile(r"(?:请|麻烦)?(?:帮我)?记住[：:，,\s]*(?P<x>.+)"),
    re.compile(r"\b(?:please\s+)?remember(?:\s+that)?[:,]?\s+(?P<x>.+)", re.IGNORECASE),
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
    "daughter|son|wife|husband|partner|girlfriend|boyfriend|mom|mum|mother|dad|father|"
    "brother|sister|kids?|children|child|dog|cat|puppy|kitten"
)
_WHEN_ZH = "下周|下星期|下个月|下个星期|明天|后天|这周末|周末|明年|月底|年底|下礼拜"
_WHEN_EN = "next (?:week|month|year|weekend)|tomorrow|this weekend|tonight|in \\w+ days"

_FACT_RULES = (
    _FactRule("knowledge", 0.95, re.compile(r"记住|\bremember\b", re.IGNORECASE)),
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
            r"我(?:很|最|更|不)?(?:喜欢|爱|讨厌)|"
            r"\bI (?:really )?(?:like|love|hate|don't like|enjoy)\b",
            re.IGNORECASE,
        ),
    ),
    _FactRule(
        "decision",
        0.8,
        re.compile(
            r"决定|打算|定了|\b(?:I|we) (?:decided|will|are going to|plan to)\b|"
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
            # Who the person is, what they do and where they live.
            r"我是|我在.{1,12}(?:工作|上班|读书|上学|做|当|教)|我住在|我有|我的.{1,8}是|我叫|"
            r"\bI(?:'m| am) (?:a|an|the)\b|\bI (?:work|live|study|teach)\b|"
            r"\bmy \w+(?: \w+)? is\b|"
            # People and pets in their life: 我女儿叫小米, 我家的猫叫 Miso, my dog Max.
            rf"我(?:家)?(?:的)?(?:{_KIN_ZH})(?:叫|是|名叫|今年)|"
            rf"\bmy (?:{_KIN_EN})\b",
            re.IGNORECASE,
        ),
    ),
)
_STRONG_PREFIX = re.compile(
    r"^(?:请|麻烦)?(?:帮我)?记住[：:，,\s]*|^(?:please\s+)?remember(?:\s+that)?[:,]?\s*",
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
    """A fact in the third person, so it reads right inside a system prompt: Chinese 我 becomes
    用户 (我们 stays); English gets a "User:" prefix rather than risky grammar rewrites."""
    if language_of(text) == "zh":
        return re.sub(r"我(?!们)", "用户", text)
    if re.match(r"(?:the )?user\b", text, re.IGNORECASE):
        return text
    return f"User: {text}"


# A stored fact, told back to the person it is about (told_to_user): the "User:" prefix of
# about_user, or a third-person subject ("The user", "User's"), and the person's own first
# person ("my favourite coffee") all become "you"/"your".
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
}
_FIRST_PERSON_WORD = re.compile(
    r"\b(?:i['’](?:m|ve|d|ll)|i am|i was|i|me|my|mine|myself)\b(?![/'’]\w)", re.IGNORECASE
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
_ADVERBS = frozenset("also always usually often never still really sometimes now only just".split())


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
        # own 我 (not 我们) are both 你.
        return re.sub(r"我(?!们)", "你", _USER_ZH.sub("你", fact))
    if _USER_PREFIX.match(fact):
        # about_user's form: after the prefix, the person's own words.
        return _first_person_to_second(_USER_PREFIX.sub("", fact, count=1))
    subject = _USER_SUBJECT.match(fact)
    if subject:
        words = fact[subject.end() :].split(" ")
        at = 1 if len(words) > 1 and words[0].lower() in _ADVERBS else 0
        words[at] = _verb_after_you(words[at])
        fact = "you " + " ".join(words)
    fact = _THE_USER.sub("you", _USER_POSSESSIVE.sub("your", fact))
    return _first_person_to_second(fact)


def _remembered(fact: str, *, zh: bool) -> str:
    """The offline model's answer from one remembered fact, to the person it is about."""
    told = told_to_user(fact)
    if zh:
        return f"我记得{told}。" if told.startswith("你") else f"我记得：{told}"
    if re.match(r"your?\b", told, re.IGNORECASE):
        return f"From what I remember, {told[0].lower()}{told[1:]}."
    return f"From what I remember: {told}"


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
    """The tool calls an explicit memory instruction asks for, in a stable order."""
    zh = language_of(text) == "zh"
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


def chat(request: Request) -> tuple[str, tuple[ToolCall, ...]]:
    messages = request.messages
    text = _last_user_text(messages)
    zh = language_of(text) == "zh"
    # Tool results are in: confirm what the calls did.
    if messages and messages[-1].role == "tool":
        results: dict[str, str] = {}
        index = len(messages) - 1
        while index >= 0 and messages[index].role == "tool":
            results[messages[index].tool_call_id] = messages[index].content
            index -= 1
        calls = messages[index].tool_calls if index >= 0 else ()
        return _confirmation(calls, results, zh), ()

    calls = instruction_calls(text, {tool.name for tool in request.tools})
    if calls:
        return "", tuple(calls)

    facts = memory_context_facts(request.system)
    best = max(facts, key=lambda fact: overlap(text, fact), default="")
    if best and overlap(text, best) > 0:
        return _remembered(best, zh=zh), ()
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
        for sentence in sentences(text):
            strong = bool(_FACT_RULES[0].pattern.search(sentence))
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
