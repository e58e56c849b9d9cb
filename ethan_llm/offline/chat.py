"""The offline model's chat (OfflineProvider): memory instructions become tool calls, a question
about the person is answered from memory in the second person, anything else is acknowledged.
ethan_llm.offline's docstring says how."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import replace
from typing import Any

from ethan_llm.errors import ModelError
from ethan_llm.offline.facts import (
    KIN_ZH,
    REMEMBER_EN,
    SIGNAL,
    about_user,
    categorise,
    clean,
    first,
)
from ethan_llm.offline.housekeeping import offline_task_answer
from ethan_llm.offline.summary import SUMMARY_PREFIX
from ethan_llm.provider import Request
from ethan_llm.routing import OFFLINE
from ethan_llm.text import (
    fact_slot,
    is_question,
    is_request,
    language_of,
    overlap,
    person_words,
    sentences,
    statements,
    tells,
    tokenize,
)
from ethan_llm.tokens import estimate_tokens
from ethan_llm.types import (
    Completion,
    Message,
    StreamEnd,
    StreamEvent,
    TextDelta,
    ToolCall,
    Usage,
)

_REMEMBER = (
    re.compile(r"(?:请|麻烦)?(?:帮我)?记住[：:，,\s]*(?P<x>.+)"),
    re.compile(
        rf"(?:^|(?<=[.!?;] )){REMEMBER_EN}(?:\s+that)?[:,]?\s+(?P<x>.+)",
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
    fact = clean(fact)
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
    remembered = first(_REMEMBER, text)
    if remembered and "memory_write" in offered:
        category, _ = categorise(remembered)
        calls.append(("memory_write", {"content": about_user(remembered), "category": category}))
    if first(_PROCEDURE, text) and "procedure_write" in offered:
        calls.append(
            (
                "procedure_write",
                {
                    "rule": clean(text),
                    "context": "用户明确要求" if zh else "the user asked explicitly",
                },
            )
        )
    if "profile_update" in offered:
        name = first(_NAME, text)
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
        goal = first(_GOAL, text)
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
    rf"记得|说过|告诉过|提过|提到过|忘了|我们?的|我们?(?:家)?(?:的)?(?:{KIN_ZH})|"
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
    body = person_words(SUMMARY_PREFIX.sub("", text.strip()) if summary else text)
    body = re.sub(r"…$", "", body.strip())  # a cited snippet's cut
    parts = [clean(part) for item in re.split(r"[；;]\s*", body) for part in sentences(item)]
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
    said = _USER_PREFIX.sub("", clean(fact), count=1)
    return bool(said) and tells(said)


def _about_them(sentence: str) -> bool:
    """A sentence the person said about themselves, worth quoting back: it tells (not a
    question or request) and speaks of them ("I…", "my…", 我…) or matches a fact rule; "That
    worked, thanks" does not."""
    return tells(sentence) and bool(
        SIGNAL.search(sentence)
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
