"""The shared text helpers behind search: Snowball stemming and the times a question names."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ethan_llm.text import is_question, statements, stem, time_named, tokenize

# A Friday afternoon: the week began on Monday 16 October 2023.
NOW = datetime(2023, 10, 20, 15, 30, tzinfo=UTC)


def test_snowball_meets_the_forms_of_a_word_at_index_and_query_time():
    assert [stem(w) for w in ("likes", "liked", "liking", "like")] == ["like"] * 4
    assert [stem(w) for w in ("adoption", "adopted", "adopting")] == ["adopt"] * 3
    assert stem("sister's") == "sister"
    # The same tokens whether a turn says it or a question asks it.
    assert tokenize("She adopted two cats", search=True) == ["she", "adopt", "two", "cat"]
    assert tokenize("Who adopts a cat?", search=True) == ["adopt", "cat"]


def span(text: str) -> tuple[str, str, tuple[str, ...]] | None:
    found = time_named(text, now=NOW)
    if found is None:
        return None
    return found.start.date().isoformat(), found.end.date().isoformat(), found.said


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Days, months and years, with or without the year (then the latest not after now).
        ("What did I say on 8 May, 2023?", ("2023-05-08", "2023-05-09", ("8 May, 2023",))),
        ("what happened on May 8th", ("2023-05-08", "2023-05-09", ("May 8th",))),
        ("Where did we go camping in June?", ("2023-06-01", "2023-07-01", ("in June",))),
        ("the plan for October 25?", ("2022-10-25", "2022-10-26", ("October 25",))),
        ("anything from last May", ("2023-05-01", "2023-06-01", ("last May",))),
        ("what happened last October", ("2022-10-01", "2022-11-01", ("last October",))),
        ("her job in August 2023", ("2023-08-01", "2023-09-01", ("August 2023",))),
        ("trips in 2022", ("2022-01-01", "2023-01-01", ("2022",))),
        # Relative times count from now.
        ("what did I say yesterday", ("2023-10-19", "2023-10-20", ("yesterday",))),
        ("the book from last week", ("2023-10-09", "2023-10-16", ("last week",))),
        ("what we did last weekend", ("2023-10-14", "2023-10-16", ("last weekend",))),
        ("2 weeks ago we talked", ("2023-10-02", "2023-10-09", ("2 weeks ago",))),
        ("three days ago", ("2023-10-17", "2023-10-18", ("three days ago",))),
        # Chinese.
        ("我5月2日说了什么？", ("2023-05-02", "2023-05-03", ("5月2日",))),
        ("2023年5月2日的会议", ("2023-05-02", "2023-05-03", ("2023年5月2日",))),
        ("还记得我去年五月去哪了吗", ("2022-05-01", "2022-06-01", ("去年五月",))),
        ("十二月的计划", ("2022-12-01", "2023-01-01", ("十二月",))),
        ("上周我们聊了什么", ("2023-10-09", "2023-10-16", ("上周",))),
        ("上周末做了什么", ("2023-10-14", "2023-10-16", ("上周末",))),
        ("昨天说的那本书", ("2023-10-19", "2023-10-20", ("昨天",))),
        ("三天前我提到的书", ("2023-10-17", "2023-10-18", ("三天前",))),
        ("上个月的旅行", ("2023-09-01", "2023-10-01", ("上个月",))),
        ("去年的事", ("2022-01-01", "2023-01-01", ("去年",))),
    ],
)
def test_time_named(text, expected):
    assert span(text) == expected


def test_no_time_named():
    assert span("May I ask what you said about Lisbon?") is None  # "May" the verb
    assert span("我曾经说过什么时候去里斯本") is None
    assert span("I have 2 cats and 12 plants") is None
    assert span("") is None


def test_a_date_beside_a_relative_time_is_the_time():
    # "the weekend before April 10" counts from April 10, not from now: the date says when.
    assert span("What did she do the weekend before April 10, 2023, last weekend?") == (
        "2023-04-10",
        "2023-04-11",
        ("April 10, 2023",),
    )
    # Two dates: the span from the first to the end of the last.
    assert span("between 1 May 2023 and 3 June 2023") == (
        "2023-05-01",
        "2023-06-04",
        ("1 May 2023", "3 June 2023"),
    )


@pytest.mark.parametrize(
    "text",
    [
        "What do you remember about me?",
        "what do you remember about me",
        "Do you remember where I live?",
        "Do you remember where I live",
        "Did I tell you about my wife",
        "Where do I live",
        "Is my dog Max ok",
        "How's my dog doing",
        "How did I meet my wife",
        "Remember that?",
        "你还记得我女儿叫什么吗？",
        "你还记得我女儿叫什么",
        "你记得我住在哪吗",
        "记不记得我上周说的事",
        "你知道我在哪工作吗",
        "我女儿叫什么",
        "我们什么时候发布",
        "我在哪个城市工作来着，杭州吗",
    ],
)
def test_a_question_is_a_question_in_both_languages(text):
    assert is_question(text)


@pytest.mark.parametrize(
    "text",
    [
        "Remember that I live in Lisbon.",
        "I live in Lisbon",
        "I moved to Porto!",
        "Always reply in English",
        # A wh-word right before its subject opens a clause, not a question.
        "How I met my wife is a long story.",
        "What I need now is a quiet week.",
        # A polite request to remember tells: it is an instruction.
        "Can you remember that I'm allergic to nuts?",
        "你能记住我不吃辣吗？",
        "记住我喜欢喝美式咖啡",
        "请帮我记住：我们决定下周一发布",
        "我住在里斯本。",
        "我女儿叫小米",
        "记得明天提醒我",
        "",
    ],
)
def test_a_statement_or_an_instruction_is_not_a_question(text):
    assert not is_question(text)


def test_statements_keep_what_a_message_tells_and_drop_what_it_asks():
    assert statements("Remember that my dog is called Max. Got it?") == [
        "Remember that my dog is called Max."
    ]
    assert statements("你还记得我女儿叫什么吗？她叫小米。") == ["她叫小米。"]
