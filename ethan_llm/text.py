"""Small text helpers, both languages: sentences, terms and overlap (the offline model), words
for keywords and search, and the time a question names (search)."""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from ethan_llm.tokens import is_chinese

_SENTENCE_END = re.compile(r"(?<=[。！？!?；;])\s*|(?<=\.)\s+")
_CJK_RUN = re.compile(r"[\u4e00-\u9fff]+")
_WORD = re.compile(r"[a-z0-9][a-z0-9'-]*")

STOPWORDS = frozenset(
    (
        "a an and are as at be but by can could did do does for from had has have how i i'm in "
        "is it its me my of on or our please so that the their them then there these they this "
        "to was we what when where which who why will with would you your about any some tell "
        "know remember"
    ).split()
)


# Function characters: a bigram with one of these says little about the topic.
CJK_STOP_CHARS = frozenset(
    "的了吗呢吧啊呀是我你他她它们这那什么怎哪谁在有和与就也都还很个吧请记得知道"
)


def sentences(text: str) -> list[str]:
    return [part.strip() for part in _SENTENCE_END.split(text) if part and part.strip()]


@functools.cache
def _stemmer() -> threading.local:
    return threading.local()


@functools.lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """English Snowball (Porter2) stemming, PyStemmer's binding of the Snowball project's own C
    code: 'likes'/'liked'/'liking' → 'like', 'adoption'/'adopted' → 'adopt'. A stemmer object
    holds per-call buffers and is not thread-safe, so each thread has its own; the cache in
    front of them is shared (words repeat: most calls never reach a stemmer)."""
    local = _stemmer()
    stemmer = getattr(local, "english", None)
    if stemmer is None:
        import Stemmer

        stemmer = local.english = Stemmer.Stemmer("english")
    return stemmer.stemWord(word)


def terms(text: str) -> set[str]:
    """English content words (stemmed), and Chinese character bigrams (single characters for a
    one-character run), so '咖啡' in a question meets '我喜欢喝咖啡' in a fact."""
    lowered = text.lower()
    found = {stem(w) for w in _WORD.findall(lowered) if w not in STOPWORDS and len(w) > 1}
    for run in _CJK_RUN.findall(text):
        if len(run) == 1 and run not in CJK_STOP_CHARS:
            found.add(run)
        for i in range(len(run) - 1):
            bigram = run[i : i + 2]
            if not (set(bigram) & CJK_STOP_CHARS):
                found.add(bigram)
    return found


def overlap(a: str, b: str) -> int:
    return len(terms(a) & terms(b))


def language_of(text: str) -> str:
    return "zh" if is_chinese(text) else "en"


# --- questions -----------------------------------------------------------------------------------
#
# One rule for "is this a question", for the offline model (a question is not a memory
# instruction, nor a fact to extract) and for the confidence rules (a strong-signal word in a
# question does not count): "What do you remember about me?", "Do you remember where I live",
# "你还记得我女儿叫什么吗？" all ask; they tell nothing.

_TRAILING = re.compile(r"[\s\"'”’」』)）\]】~～…。.!！]+$")
_EN_QUESTION_OPENING = re.compile(
    r"^(?:(?:so|and|but|ok|okay|hey|ethan)[,\s]+)*"
    r"(?:(?:what|where|when|who|whom|whose|which|why|how)(?:['’]s|['’]re)\b|"
    # A wh-word right before its subject opens a clause, not a question: "How I met my wife
    # is a long story", "What I need is rest" (a question ends with ? or inverts: "How did I").
    r"(?:what|where|when|who|whom|whose|which|why|how)\b"
    r"(?!\s+(?:i|we|he|she|they|my|our|his|her|their|you|your)\b)|"
    r"(?:do|does|did|can|could|would|will|is|are|am|was|were|have|has|had|should|shall|may|"
    r"might|must)(?:n['’]t)?\s+(?:you|i|we|he|she|it|they|my|your|our|the|there|this|that)\b)",
    re.IGNORECASE,
)
_ZH_QUESTION_OPENING = re.compile(r"^(?:那|那么|对了|嗯)?[，,\s]*(?:你?还记得|你?记不记得|你知道)")
_ZH_QUESTION_END = re.compile(
    r"(?:吗|么|呢|什么|哪里|哪儿|哪个|哪|谁|多少|几个?|怎么样|如何)(?:呀|啊|来着)?$"
)
_ZH_QUESTION_WORDS = re.compile(
    r"什么时候|为什么|为啥|哪个|哪里|哪儿|哪天|哪年|多少|几点|几岁|几号|怎么样|有没有|是不是|是否|"
    r"对不对|记不记得"
)
# A polite request to remember is an instruction, not a question: "Can you remember that I'm
# allergic to nuts?", "你能记住我不吃辣吗？".
_POLITE_REQUEST = re.compile(
    r"^(?:can|could|would|will)\s+you\s+(?:please\s+)?(?:remember|note|keep in mind)\b"
    r"(?!\s+(?:what|where|when|who|whom|which|why|how|if|whether)\b)|"
    r"^(?:请)?你?(?:能|可以|能不能|可不可以)(?:帮我)?记(?:住|下)(?!.*(?:什么|哪|谁|多少))",
    re.IGNORECASE,
)


def is_question(text: str) -> bool:
    """Whether `text` (a sentence, or a short message) asks rather than tells: a trailing ?/？;
    an English interrogative opening (what/where/how…, do you/did I/is my…); a Chinese one
    (你还记得…, 记得…, 你知道…), a question particle or word at the end (吗, 呢, 什么, 哪里,
    来着) or a question word inside (什么时候, 为什么, 哪个, 有没有). A polite request to
    remember ("Can you remember that…?") is not a question: it tells."""
    text = _TRAILING.sub("", (text or "").strip())
    if not text:
        return False
    if _POLITE_REQUEST.search(text):
        return False
    if text.endswith(("?", "？")):
        return True
    if _EN_QUESTION_OPENING.search(text) or _ZH_QUESTION_OPENING.search(text):
        return True
    return bool(_ZH_QUESTION_END.search(text) or _ZH_QUESTION_WORDS.search(text))


def statements(text: str) -> list[str]:
    """The sentences of `text` that tell rather than ask (is_question)."""
    return [sentence for sentence in sentences(text) if not is_question(sentence)]


# --- words, for keywords and search (jieba for Chinese) --------------------------------------

CJK_STOPWORDS = frozenset(
    "的 了 是 我 你 他 她 它 在 和 也 就 都 而 及 与 着 或 吗 呢 吧 啊 呀 "
    "哦 嗯 很 还 又 把 被 让 给 这 那 个 一 不 没 有 要 会 能 可以 一个 "
    "没有 我们 你们 他们 她们 这个 那个 什么 怎么 怎样 为什么 因为 所以 "
    "但是 如果 就是 还是 然后 已经 一下 一些 这样 那样 自己 现在 今天 "
    "时候 知道 觉得 可能 应该 其实 真的 非常 比较 东西 事情 用户 好的 "
    # Everyday verbs: they say little about what a conversation was about.
    "喜欢 想 说 做 去 来 看 用 聊 聊聊 帮 帮我 最 爱 先 再".split()
)
_CJK_CHAR = re.compile(r"[\u4e00-\u9fff]")
_TOKEN_SPLIT = re.compile(r"([\u4e00-\u9fff]+)")


@functools.cache
def _jieba():
    import logging

    import jieba

    jieba.setLogLevel(logging.WARNING)  # no "Building prefix dict" chatter on stderr
    return jieba


def segmenter_load() -> None:
    """Load jieba's dictionary now: otherwise the first Chinese text a process reads waits
    for it (about 0.6 s)."""
    _jieba().initialize()


def tokenize(text: str, *, search: bool = False) -> list[str]:
    """Words in order, repeats kept (for term frequency): Chinese segmented by jieba, English
    lower-cased and Snowball-stemmed; stopwords, punctuation and numbers-only dropped.

    `search` uses jieba's search mode, which also yields the shorter words inside a long one
    (美式咖啡 → 美式, 咖啡, 美式咖啡), so 咖啡店 in a question meets 美式咖啡 in a fact."""
    return [token for token, _ in words(text, search=search)]


def words(text: str, *, search: bool = False) -> list[tuple[str, str]]:
    """tokenize's words, each with the word as it was written: ("stori", "stories"),
    ("porto", "Porto"), ("咖啡", "咖啡"). The token is for search; the word is for people
    (an episode's keywords)."""
    found: list[tuple[str, str]] = []
    for index, part in enumerate(_TOKEN_SPLIT.split(text or "")):
        if index % 2:  # a run of Chinese characters
            cut = _jieba().lcut_for_search if search else _jieba().lcut
            for word in cut(part):
                if word not in CJK_STOPWORDS and _CJK_CHAR.search(word):
                    found.append((word, word))
            continue
        lowered = part.lower()
        # Lower-casing keeps positions unless a character lower-cases to two ("İ"): then the
        # word is given lower-cased, as the token is found.
        aligned = len(lowered) == len(part)
        for match in _WORD.finditer(lowered):
            word = match.group()
            if word not in STOPWORDS and len(word) > 1 and not word.isdigit():
                found.append((stem(word), part[match.start() : match.end()] if aligned else word))
    return found


# --- times named in a question -----------------------------------------------------------------
#
# A small parser of our own. dateparser was tried first (offline, both languages), but its
# search_dates read "5月2日" as the 18th of May, "we" and the modal "May" as dates, split
# "April 10, 2023" into three, and gave points rather than spans (a month, a week); what is
# needed here is narrow: the span a question names, in English or Chinese.

_MONTH_NAMES = (
    "january february march april may june july august september october november december"
).split()
_MONTH = {name: n for n, name in enumerate(_MONTH_NAMES, start=1)} | {"sept": 9}
_MONTH_RE = "|".join(sorted(_MONTH, key=len, reverse=True))
_ORDINAL = r"(?:st|nd|rd|th)?"
_EN_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a couple of": 2,
    "a few": 3, "several": 3,
}  # fmt: skip
_ZH_DIGITS = {"〇": 0, "零": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6,
              "七": 7, "八": 8, "九": 9}  # fmt: skip
_ZH_NUMBER = "[0-9〇零一二两三四五六七八九十]+"
_UNIT_ZH = {"天": "day", "日": "day", "周": "week", "星期": "week", "礼拜": "week",
            "月": "month", "年": "year"}  # fmt: skip
_RELATIVE_ZH = {
    "大前天": ("day", -3), "前天": ("day", -2), "昨天": ("day", -1), "昨日": ("day", -1),
    "今天": ("day", 0), "今日": ("day", 0), "上周末": ("weekend", -1), "上个周末": ("weekend", -1),
    "上上周": ("week", -2), "上周": ("week", -1), "上星期": ("week", -1),
    "上个星期": ("week", -1), "上礼拜": ("week", -1), "上个礼拜": ("week", -1),
    "这周": ("week", 0), "本周": ("week", 0), "这个星期": ("week", 0), "上个月": ("month", -1),
    "上月": ("month", -1), "这个月": ("month", 0), "本月": ("month", 0), "前年": ("year", -2),
    "去年": ("year", -1), "今年": ("year", 0),
}  # fmt: skip

# The patterns, most specific first; a later one never reuses text an earlier one took.
_TIME_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    (
        "zh_date",
        re.compile(
            rf"(?:(?P<year>\d{{4}}|[〇零一二三四五六七八九]{{4}})年|(?P<rel>去年|今年|前年))?"
            rf"(?P<month>{_ZH_NUMBER})月份?(?:(?P<day>{_ZH_NUMBER})[日号])?"
        ),
    ),
    ("zh_year", re.compile(r"(?P<year>\d{4})年")),
    (
        "zh_ago",
        re.compile(rf"(?P<n>{_ZH_NUMBER}|半)(?:个)?(?P<unit>天|日|周|星期|礼拜|月|年)(?:以)?前"),
    ),
    ("zh_relative", re.compile("|".join(sorted(_RELATIVE_ZH, key=len, reverse=True)))),
    (
        "en_day_month",
        re.compile(
            rf"\b(?P<day>\d{{1,2}}){_ORDINAL}(?:\s+of)?\s+(?P<month>{_MONTH_RE})\b"
            rf"(?:,?\s+(?P<year>\d{{4}})\b)?",
            re.IGNORECASE,
        ),
    ),
    (
        "en_month_day",
        re.compile(
            rf"\b(?P<month>{_MONTH_RE})\s+(?P<day>\d{{1,2}}){_ORDINAL}\b"
            rf"(?:,?\s+(?P<year>\d{{4}})\b)?",
            re.IGNORECASE,
        ),
    ),
    (
        "en_month_year",
        re.compile(rf"\b(?P<month>{_MONTH_RE}),?\s+(?P<year>\d{{4}})\b", re.IGNORECASE),
    ),
    (
        # A month alone needs a word before it that makes it a time ("in May", "last June"):
        # "may" and "march" are verbs too.
        "en_month",
        re.compile(
            rf"\b(?P<cue>in|on|during|since|last|this|early|late|mid|of|until|by|from)[\s-]+"
            rf"(?P<month>{_MONTH_RE})\b",
            re.IGNORECASE,
        ),
    ),
    (
        "en_ago",
        re.compile(
            r"\b(?P<n>\d+|a couple of|a few|several|an?|one|two|three|four|five|six|seven|"
            r"eight|nine|ten|eleven|twelve)\s+(?P<unit>day|week|month|year)s?\s+ago\b",
            re.IGNORECASE,
        ),
    ),
    (
        "en_relative",
        re.compile(
            r"\b(?:(?P<day>the day before yesterday|yesterday|today|tonight|this morning)|"
            r"(?P<which>last|past|previous|this)\s+(?P<unit>weekend|week|month|year))\b",
            re.IGNORECASE,
        ),
    ),
    ("en_year", re.compile(r"\b(?P<year>(?:19|20)\d{2})\b")),
]


_RELATIVE_KINDS = frozenset({"zh_ago", "zh_relative", "en_ago", "en_relative"})


@dataclass(frozen=True)
class TimeSpan:
    """The time a question names: [start, end), in `now`'s time zone, and the text naming it."""

    start: datetime
    end: datetime
    said: tuple[str, ...]


def _zh_number(text: str) -> int | None:
    """'12', '十二', '二十三', '三' → int; None when it is not a number."""
    if text.isdigit():
        return int(text)
    if "十" in text:
        tens, _, units = text.partition("十")
        value = (_ZH_DIGITS.get(tens, 0) if tens else 1) * 10
        return value + (_ZH_DIGITS.get(units, 0) if units else 0)
    if all(c in _ZH_DIGITS for c in text):
        value = 0
        for c in text:
            value = value * 10 + _ZH_DIGITS[c]
        return value
    return None


def _shift_month(year: int, month: int, by: int) -> tuple[int, int]:
    index = year * 12 + (month - 1) + by
    return index // 12, index % 12 + 1


def _unit_span(unit: str, offset: int, now: datetime) -> tuple[datetime, datetime]:
    """The day/week (Monday first)/weekend/month/year `offset` units from the one `now` is in."""
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if unit == "day":
        start = today + timedelta(days=offset)
        return start, start + timedelta(days=1)
    if unit in ("week", "weekend"):
        monday = today - timedelta(days=today.weekday()) + timedelta(weeks=offset)
        if unit == "weekend":  # the Saturday and Sunday of that week
            return monday + timedelta(days=5), monday + timedelta(days=7)
        return monday, monday + timedelta(weeks=1)
    if unit == "month":
        year, month = _shift_month(now.year, now.month, offset)
        start = today.replace(year=year, month=month, day=1)
        year, month = _shift_month(year, month, 1)
        return start, start.replace(year=year, month=month)
    start = today.replace(year=now.year + offset, month=1, day=1)
    return start, start.replace(year=start.year + 1)


def _date_span(
    year: int | None, month: int, day: int | None, now: datetime, *, before_this_month: bool
) -> tuple[datetime, datetime] | None:
    """A named month (or day of it); without a year, the latest one not after `now` (or, for
    "last May", the latest before this month)."""
    if not 1 <= month <= 12:
        return None
    if year is None:
        year = now.year
        latest = (now.month, now.day) if day else (now.month, 31)
        if (month, day or 1) > latest or (before_this_month and month >= now.month):
            year -= 1
    try:
        start = now.replace(year=year, month=month, day=day or 1, hour=0, minute=0, second=0,
                            microsecond=0)  # fmt: skip
    except ValueError:  # 30 February
        return None
    if day:
        return start, start + timedelta(days=1)
    next_year, next_month = _shift_month(year, month, 1)
    return start, start.replace(year=next_year, month=next_month)


def _span_of(kind: str, match: re.Match[str], now: datetime) -> tuple[datetime, datetime] | None:
    group = match.groupdict()
    if kind == "zh_date":
        year = _zh_number(group["year"]) if group["year"] else None
        if group["rel"]:
            year = now.year + {"前年": -2, "去年": -1, "今年": 0}[group["rel"]]
        month = _zh_number(group["month"])
        day = _zh_number(group["day"]) if group["day"] else None
        if month is None:
            return None
        return _date_span(year, month, day, now, before_this_month=False)
    if kind in ("zh_year", "en_year"):
        start = now.replace(year=int(group["year"]), month=1, day=1, hour=0, minute=0,
                            second=0, microsecond=0)  # fmt: skip
        return start, start.replace(year=start.year + 1)
    if kind in ("zh_ago", "en_ago"):
        n = group["n"].lower()
        if kind == "zh_ago":
            unit = _UNIT_ZH[group["unit"]]
            count = 0 if n == "半" else _zh_number(n)
        else:
            unit = group["unit"].lower()
            count = int(n) if n.isdigit() else _EN_NUMBERS.get(n)
        if count is None:
            return None
        return _unit_span(unit, -count, now)
    if kind == "zh_relative":
        unit, offset = _RELATIVE_ZH[match.group(0)]
        return _unit_span(unit, offset, now)
    if kind in ("en_day_month", "en_month_day", "en_month_year", "en_month"):
        year = int(group["year"]) if group.get("year") else None
        day = int(group["day"]) if group.get("day") else None
        last = (group.get("cue") or "").lower() == "last"
        return _date_span(year, _MONTH[group["month"].lower()], day, now, before_this_month=last)
    if kind == "en_relative":
        if group["day"]:
            day = group["day"].lower()
            offset = {"the day before yesterday": -2, "yesterday": -1}.get(day, 0)
            return _unit_span("day", offset, now)
        offset = 0 if group["which"].lower() == "this" else -1
        return _unit_span(group["unit"].lower(), offset, now)
    return None


def time_named(text: str, *, now: datetime) -> TimeSpan | None:
    """The span of time `text` names ("on 8 May, 2023", "last week", "5月2日", "上周", "三天前"),
    the union when it names several; None when it names none. Relative times count from `now`;
    a month or day without a year is the latest one not after `now`."""
    taken: list[tuple[int, int]] = []
    found: list[tuple[bool, datetime, datetime, str]] = []  # (relative, start, end, text)
    for kind, pattern in _TIME_PATTERNS:
        for match in pattern.finditer(text or ""):
            if any(match.start() < end and start < match.end() for start, end in taken):
                continue
            span = _span_of(kind, match, now)
            if span is None:
                continue
            taken.append(match.span())
            found.append((kind in _RELATIVE_KINDS, *span, match.group(0)))
    if not found:
        return None
    # A relative time beside a date counts from that date, not from now ("the weekend before
    # April 10"): the date alone then says when.
    if not all(relative for relative, *_rest in found):
        found = [item for item in found if not item[0]]
    spans = [(start, end) for _relative, start, end, _text in found]
    said = [text for *_rest, text in found]
    return TimeSpan(
        start=min(s for s, _e in spans), end=max(e for _s, e in spans), said=tuple(said)
    )


# --- requests -----------------------------------------------------------------------------------
#
# One rule for "is this a request": a command or a request asks for something ("Tell me about my
# daughter please.", "Show me my dog's vet records", "帮我查一下我下周的安排"); like a question
# it tells nothing about the person, so it is never a fact, nor an answer quoted back. An
# instruction to remember ("Please remember that…", "帮我记住…") tells: it is not a request here.

_REQUEST_VERBS_EN = (
    r"tell|show|give|list|explain|describe|help|find|search|look\s+up|look\s+for|fetch|get|"
    r"write|draft|summari[sz]e|translate|remind|make|create|generate|suggest|recommend|check|"
    r"compare|calculate|send|book|teach|read|fix|answer|say|talk|continue|go\s+on|repeat|"
    r"plan|prepare|organi[sz]e|schedule|set\s+up|add|delete|remove|forget|recall|name|count|"
    r"guess|walk\s+me|let\s+me\s+know|let['’]s"
)
_REQUEST_EN = re.compile(
    r"^(?:(?:so|and|but|ok|okay|hey|hi|ethan|now|then|also|just)[,\s]+)*"
    r"(?:please[,\s]+)?"
    r"(?:(?:can|could|would|will)\s+you\s+(?:please\s+)?|(?:i\s+(?:want|need|would\s+like)"
    r"\s+you\s+to)\s+)?"
    rf"(?:{_REQUEST_VERBS_EN})\b(?!['’-]|\s+(?:that|to|is|was|are|were)\b)",
    re.IGNORECASE,
)
_REQUEST_ZH = re.compile(
    r"^(?:那|那么|对了|嗯|好|好的)?[，,\s]*(?:请|麻烦)?你?(?:能不能|可不可以|能|可以)?"
    r"(?:帮我|替我|为我|告诉我|给我(?:讲|说|列|写|推荐|看|发|找|查|一个)|跟我(?:说|讲|聊)|"
    r"和我(?:说|讲|聊)|说说|讲讲|聊聊|介绍一?下|列出|查一?下|查查|找一?下|找找|搜一?下|翻译|"
    r"总结一?下|推荐|提醒我|安排一?下|计划一下)(?!记住|记下|记一下)"
)


def is_request(text: str) -> bool:
    """Whether `text` (a sentence, or a short message) asks the assistant to do something: an
    English imperative opening, maybe after "please" or "can you" ("Tell me…", "Could you show
    me…", "Please list…"); a Chinese one (告诉我…, 帮我…, 请给我讲讲…, 说说…). An instruction
    to remember is not a request: it tells ("Remember that I live in Lisbon", "帮我记住…")."""
    text = (text or "").strip()
    return bool(text) and bool(_REQUEST_EN.search(text) or _REQUEST_ZH.search(text))


def tells(text: str) -> bool:
    """A sentence that tells rather than asks: neither a question nor a request."""
    return not is_question(text) and not is_request(text)


# --- what the person said -----------------------------------------------------------------------
#
# One rule for the words a person said in a message, for everything memory learns
# (ethan_llm.memory's
# turns, for the offline model and the prompts to language models alike, and the offline chat's
# memory instructions): transcript markup is left out. A chat app's task prompt (Open WebUI's
# "### Task: … <chat_history> USER: … ASSISTANT: … </chat_history>") says nothing the person
# said now: none of it is kept. A transcript pasted into a real message keeps the person's own
# words around it and their lines in it ("USER:", "Human:"), without the labels; the other
# side's lines ("ASSISTANT:", "AI:", …) are never the person's words. Tags such as
# <chat_history> and the placeholders of what is not text ("[image]", "[file: a.txt]") go too.

_SPEAKER = re.compile(
    r"^\s*(?:\|\|>)?(?:[*_]{1,2})?(?P<who>user|human|me|assistant|ai|bot|model|system|chatgpt|"
    r"gpt|claude|gemini|ethan|copilot|llama|mistral|response)(?:[*_]{1,2})?\s*[:：](?:[*_]{1,2})?"
    r"[ \t]?",
    re.IGNORECASE,
)
_PERSON_SPEAKERS = frozenset({"user", "human", "me"})
# Labels that are the other side of a chat wherever they stand; "model:" or "system:" alone may be
# a line of a config file, and count only beside a person's label or inside a transcript's tags.
_ASSISTANT_SPEAKERS = frozenset(
    {"assistant", "ai", "bot", "chatgpt", "claude", "gemini", "copilot", "ethan"}
)
_TRANSCRIPT_TAG = re.compile(
    r"</?\s*(?:chat_history|chat-history|chathistory|history|conversation|transcript|messages?|"
    r"dialog(?:ue)?|chat|context|previous_messages|text|type)\s*>",
    re.IGNORECASE,
)
# A quoted app prompt opens with a heading that names its task: "### Task:", "**Task:**".
_APP_PROMPT = re.compile(
    r"\A\s*(?:#{1,6}\s*)?(?:\*\*)?(?:task|instructions?|system)(?:\*\*)?\s*:", re.IGNORECASE
)
_PLACEHOLDER = re.compile(
    r"\[(?:image|audio|video|tool output|(?:file|tool use|web page|attachment)\s*:[^\]\n]*)\]",
    re.IGNORECASE,
)


def person_words(text: str) -> str:
    """What the person said in a message, transcript markup left out (see above). Text with
    no markup comes back as it is."""
    text = text or ""
    lines = text.splitlines()
    speakers = [_SPEAKER.match(line) for line in lines]
    tagged = bool(_TRANSCRIPT_TAG.search(text))
    who = {speaker.group("who").lower() for speaker in speakers if speaker}
    transcript = (
        tagged
        or bool(who & _ASSISTANT_SPEAKERS)
        or (bool(who & _PERSON_SPEAKERS) and bool(who - _PERSON_SPEAKERS))
    )
    if not transcript:
        speakers = [None] * len(lines)
        if not _PLACEHOLDER.search(text):
            return text
    elif _APP_PROMPT.match(text):
        return ""
    # Paragraphs of lines: each speaker's turn its own paragraph, so that what was said before
    # it never runs into it ("This is what I told it:" and "I have two cats…").
    paragraphs: list[list[str]] = [[]]
    person = True  # whose line this is: the person's own, until a speaker label says otherwise
    for line, speaker in zip(lines, speakers, strict=True):
        if speaker:
            person = speaker.group("who").lower() in _PERSON_SPEAKERS
            line = line[speaker.end() :]
            paragraphs.append([])
        elif _TRANSCRIPT_TAG.search(line) and line.strip().startswith("</"):
            person = True  # the end of a quoted transcript: the person speaks again
            paragraphs.append([])
        if person:
            line = _PLACEHOLDER.sub("", _TRANSCRIPT_TAG.sub("", line)).strip()
            if line:
                paragraphs[-1].append(line)
    return "\n\n".join("\n".join(lines) for lines in paragraphs if lines)


# --- relative dates in what was said -------------------------------------------------------------
#
# A fact outlives the day it was said: "next March" said on 6 December 2026 is March 2027, and
# read in June it would be wrong. dated() puts the date a relative time names beside it, counted
# from when it was said ("next March (March 2027)", "下周（2026年12月14日那周）"); the words
# stay as said. A relative time already dated is left alone.

_EN_MONTHS_TITLE = [name.capitalize() for name in _MONTH_NAMES]
_WEEKDAYS = "monday tuesday wednesday thursday friday saturday sunday".split()
_DATED_ALREADY = r"(?!\s*[(（])"
_RELATIVE_EN = re.compile(
    r"\b(?:(?P<day>the day after tomorrow|tomorrow|tonight|today|yesterday|the day before "
    r"yesterday)|(?P<which>next|last|this|coming)\s+(?P<unit>week(?:end)?|month|year|"
    rf"{_MONTH_RE}|{'|'.join(_WEEKDAYS)})|in\s+(?P<n>\d+|a|an|one|two|three|four|five|six|seven|"
    r"eight|nine|ten|a couple of|a few)\s+(?P<nunit>day|week|month|year)s?|"
    r"(?P<agon>\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|a couple of|a few)\s+"
    rf"(?P<agounit>day|week|month|year)s?\s+ago)\b{_DATED_ALREADY}",
    re.IGNORECASE,
)
_RELATIVE_ZH_DAYS = {"大前天": -3, "前天": -2, "昨天": -1, "今天": 0, "今晚": 0, "明天": 1,
                     "明晚": 1, "后天": 2, "大后天": 3}  # fmt: skip
_RELATIVE_ZH_UNITS = {
    "上上周": ("week", -2), "上周末": ("weekend", -1), "上周": ("week", -1), "上星期": ("week", -1),
    "上个星期": ("week", -1), "上礼拜": ("week", -1), "这周末": ("weekend", 0),
    "本周末": ("weekend", 0), "周末": ("weekend", 0), "这周": ("week", 0), "本周": ("week", 0),
    "下周末": ("weekend", 1), "下周": ("week", 1), "下星期": ("week", 1), "下个星期": ("week", 1),
    "下礼拜": ("week", 1), "下个礼拜": ("week", 1), "下下周": ("week", 2),
    "上个月": ("month", -1), "这个月": ("month", 0), "本月": ("month", 0), "下个月": ("month", 1),
    "下月": ("month", 1), "月底": ("month_end", 0), "去年": ("year", -1), "今年": ("year", 0),
    "明年": ("year", 1), "后年": ("year", 2), "前年": ("year", -2), "年底": ("year_end", 0),
}  # fmt: skip
_RELATIVE_ZH_TIME = re.compile(
    "(?P<w>"
    + "|".join(sorted([*_RELATIVE_ZH_DAYS, *_RELATIVE_ZH_UNITS], key=len, reverse=True))
    + f"){_DATED_ALREADY}"
)


def _en_day(day: datetime) -> str:
    return f"{day.day} {_EN_MONTHS_TITLE[day.month - 1]} {day.year}"


def _zh_day(day: datetime) -> str:
    return f"{day.year}年{day.month}月{day.day}日"


def _count(word: str) -> int | None:
    word = word.lower()
    return int(word) if word.isdigit() else _EN_NUMBERS.get(word)


def _en_span(unit: str, offset: int, now: datetime) -> str:
    start, _end = _unit_span(unit, offset, now)
    if unit == "day":
        return _en_day(start)
    if unit == "week":
        return f"week of {_en_day(start)}"
    if unit == "weekend":
        return f"weekend of {_en_day(start)}"
    if unit == "month":
        return f"{_EN_MONTHS_TITLE[start.month - 1]} {start.year}"
    return str(start.year)


def _en_dated(match: re.Match[str], now: datetime) -> str | None:
    group = match.groupdict()
    if group["day"]:
        offsets = {"the day after tomorrow": 2, "tomorrow": 1, "tonight": 0, "today": 0,
                   "yesterday": -1, "the day before yesterday": -2}  # fmt: skip
        return _en_span("day", offsets[" ".join(group["day"].lower().split())], now)
    if group["n"] or group["agon"]:
        count = _count(group["n"] or group["agon"])
        if count is None:
            return None
        unit = (group["nunit"] or group["agounit"]).lower()
        return _en_span(unit, count if group["n"] else -count, now)
    which, unit = group["which"].lower(), group["unit"].lower()
    step = {"next": 1, "coming": 1, "last": -1, "this": 0}[which]
    if unit in ("week", "weekend", "month", "year"):
        return _en_span(unit, step, now)
    if unit in _MONTH:  # "next March": the first March after this month; "last May" before it
        month = _MONTH[unit]
        year = now.year
        if step > 0 and month <= now.month:
            year += 1
        elif step < 0 and month >= now.month:
            year -= 1
        return f"{_EN_MONTHS_TITLE[month - 1]} {year}"
    weekday = _WEEKDAYS.index(unit)  # "next Friday": the first Friday after today
    days = (weekday - now.weekday()) % 7
    if step > 0:
        days = days or 7
    elif step < 0:
        days = days - 7 if days else -7
    return _en_day(now + timedelta(days=days))


def _zh_dated(word: str, now: datetime) -> str:
    if word in _RELATIVE_ZH_DAYS:
        return _zh_day(now + timedelta(days=_RELATIVE_ZH_DAYS[word]))
    unit, offset = _RELATIVE_ZH_UNITS[word]
    if unit == "month_end":
        return f"{now.year}年{now.month}月底"
    if unit == "year_end":
        return f"{now.year}年底"
    start, _end = _unit_span(unit, offset, now)
    if unit == "week":
        return f"{_zh_day(start)}那周"
    if unit == "weekend":
        return f"{_zh_day(start)}那个周末"
    if unit == "month":
        return f"{start.year}年{start.month}月"
    return f"{start.year}年"


def dated(text: str, *, said_at: datetime) -> str:
    """`text` with the date each relative time in it names put beside it, counted from
    `said_at` (in the person's time zone): "a trip to Kyoto next March" → "a trip to Kyoto
    next March (March 2027)", "下周去东京" → "下周（2026年12月14日那周）去东京"."""

    def en(match: re.Match[str]) -> str:
        when = _en_dated(match, said_at)
        return f"{match.group(0)} ({when})" if when else match.group(0)

    text = _RELATIVE_EN.sub(en, text or "")
    return _RELATIVE_ZH_TIME.sub(
        lambda m: f"{m.group(0)}（{_zh_dated(m.group('w'), said_at)}）", text
    )


def render_fold_input(*, rolling: str, summaries: Sequence[str]) -> str:
    """`Earlier summary:` (when there is one) and `Newer summary n:` sections, blank-line apart."""
    parts = [f"Earlier summary:\n{rolling.strip()}"] if rolling.strip() else []
    parts += [f"Newer summary {n}:\n{text.strip()}" for n, text in enumerate(summaries, 1)]
    return "\n\n".join(parts)


# --- the slots of a fact about the person (the consolidator's rules, the offline model) ------

# The slots a person has one value of at a time: where they live, whom they work for, what they
# work as. A fact about the same slot with another value is news that replaces the old fact
# ("I moved to Porto" after "I live in Lisbon"): memory_app.consolidator.decide_offline
# supersedes it, and the offline model answers "where do I live?" with it. The subject is the
# person (a fact the offline model wrote, "The user …", or a model's "用户…"), never someone
# else ("my sister lives in Paris"); plans are not slots ("I'm moving to Porto next month" is a
# decision, not yet where they live).
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
    text = fact.strip().strip("。.!！?？,，;；").strip()
    for slot, pattern in _SLOTS:
        match = pattern.search(text)
        if match:
            said = next(v for v in match.groups() if v)
            value = tuple(tokenize(_SLOT_VALUE_END.split(said, maxsplit=1)[0]))
            if value:
                return slot, value
    return None
