"""The offline model's rules, in Chinese and English."""

from __future__ import annotations

import pytest

import llm
from llm import memory
from llm.types import Message, ToolSpec

TOOLS = [
    ToolSpec(name, "d", {"type": "object"})
    for name in ("memory_write", "procedure_write", "profile_update")
]
SYSTEM = (
    "You are Ethan.\n<memory_context>\n- [0.95] 用户喜欢喝美式咖啡\n"
    "- [0.90] The user's sister lives in Lisbon\n- [0.80] 用户在杭州做后端开发\n</memory_context>"
)


def say(text: str, tools=TOOLS, system: str = SYSTEM) -> llm.Completion:
    return llm.complete(model="offline", system=system, messages=[Message.user(text)], tools=tools)


def calls(text: str) -> list[tuple[str, dict]]:
    return [(c.name, c.arguments) for c in say(text).tool_calls]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "记住我喜欢喝美式咖啡",
            [("memory_write", {"content": "用户喜欢喝美式咖啡", "category": "preference"})],
        ),
        (
            "请帮我记住：我们决定下周一发布",
            [("memory_write", {"content": "我们决定下周一发布", "category": "decision"})],
        ),
        (
            "Remember that my sister lives in Lisbon.",
            [
                (
                    "memory_write",
                    {"content": "User: my sister lives in Lisbon", "category": "knowledge"},
                )
            ],
        ),
        (
            "please remember I prefer short answers",
            [
                (
                    "memory_write",
                    {"content": "User: I prefer short answers", "category": "preference"},
                )
            ],
        ),
        (
            "以后回复都用英文",
            [("procedure_write", {"rule": "以后回复都用英文", "context": "用户明确要求"})],
        ),
        (
            "从现在起，不要用韩语。",
            [("procedure_write", {"rule": "从现在起，不要用韩语", "context": "用户明确要求"})],
        ),
        (
            "From now on, answer in Chinese.",
            [
                (
                    "procedure_write",
                    {
                        "rule": "From now on, answer in Chinese",
                        "context": "the user asked explicitly",
                    },
                )
            ],
        ),
        (
            "Always cite your sources",
            [
                (
                    "procedure_write",
                    {"rule": "Always cite your sources", "context": "the user asked explicitly"},
                )
            ],
        ),
        (
            "我叫张三",
            [("profile_update", {"section": "基础特征", "entry": "名字：张三", "mode": "merge"})],
        ),
        (
            "Hi, my name is Ada Lovelace.",
            [
                (
                    "profile_update",
                    {"section": "基础特征", "entry": "Name: Ada Lovelace", "mode": "merge"},
                )
            ],
        ),
        (
            "我的目标是2026年底前完成独立产品上线。",
            [
                (
                    "profile_update",
                    {
                        "section": "目标与方向",
                        "entry": "2026年底前完成独立产品上线",
                        "mode": "append",
                    },
                )
            ],
        ),
        (
            "My goal is to run a marathon.",
            [
                (
                    "profile_update",
                    {"section": "目标与方向", "entry": "run a marathon", "mode": "append"},
                )
            ],
        ),
        (
            "我叫李雷，记住我对花生过敏",
            [
                ("memory_write", {"content": "用户对花生过敏", "category": "knowledge"}),
                ("profile_update", {"section": "基础特征", "entry": "名字：李雷", "mode": "merge"}),
            ],
        ),
    ],
)
def test_memory_instructions_become_tool_calls(text, expected):
    completion = say(text)
    assert completion.text == ""
    assert [(c.name, c.arguments) for c in completion.tool_calls] == expected
    assert len({c.id for c in completion.tool_calls}) == len(expected)


@pytest.mark.parametrize(
    "text",
    [
        "always reply in English",
        "never use emoji",
        "from now on, answer briefly",
        "Going forward, please don't mention the weather",
        "Please always call me Ada",
        "From now on you should write in French",
        "以后不要用韩语",
        "以后用中文回答我",
        "今后请叫我老王",
        "从现在开始，回复简短一点",
    ],
)
def test_instructions_to_the_assistant_become_rules(text):
    rules = [args["rule"] for name, args in calls(text) if name == "procedure_write"]
    assert rules == [text]


@pytest.mark.parametrize(
    "text",
    [
        "Always a pleasure to talk to you",
        "Never mind, forget it",
        "Never again, that restaurant was awful",
        "always",
        "From now on I'll go to bed earlier",
        "Going forward the team meets on Mondays",
        "以后我会早点睡",
        "以后说不定会去北京",
        "以后要是下雨就别去了",
        "今后的计划还没定",
        "从现在开始我要锻炼身体",
    ],
)
def test_sentences_that_are_not_instructions_are_not_rules(text):
    assert [name for name, _ in calls(text)] == []


def test_no_tool_call_when_the_tool_is_not_offered():
    completion = say("记住我喜欢喝美式咖啡", tools=[])
    assert completion.tool_calls == ()
    assert completion.text


def test_after_tool_results_it_confirms_in_the_users_language():
    first = say("记住我喜欢喝美式咖啡")
    history = [
        Message.user("记住我喜欢喝美式咖啡"),
        first.as_message(),
        Message.tool(first.tool_calls[0].id, "ok", name="memory_write"),
    ]
    reply = llm.complete(model="offline", system=SYSTEM, messages=history, tools=TOOLS)
    assert (reply.text, reply.tool_calls) == ("好的，我记住了：你喜欢喝美式咖啡", ())

    first = say("Remember that my favourite coffee is a flat white")
    history = [
        Message.user("Remember that my favourite coffee is a flat white"),
        first.as_message(),
        Message.tool(first.tool_calls[0].id, "ok", name="memory_write"),
    ]
    reply = llm.complete(model="offline", system=SYSTEM, messages=history, tools=TOOLS)
    assert reply.text == "Got it, I'll remember: your favourite coffee is a flat white"

    first = say("From now on, answer in Chinese.")
    history = [
        Message.user("From now on, answer in Chinese."),
        first.as_message(),
        Message.tool(first.tool_calls[0].id, "error: store is full"),
    ]
    reply = llm.complete(model="offline", system=SYSTEM, messages=history, tools=TOOLS)
    assert reply.text == "Sorry, I could not save that (procedure_write)."


@pytest.mark.parametrize(
    ("question", "answer"),
    [
        ("我平时喝什么咖啡？", "我记得你喜欢喝美式咖啡。"),
        ("Where does my sister live?", "From what I remember, your sister lives in Lisbon."),
        ("我在哪个城市工作来着，杭州吗", "我记得你在杭州做后端开发。"),
    ],
)
def test_questions_get_the_overlapping_fact(question, answer):
    assert say(question).text == answer


@pytest.mark.parametrize(
    ("fact", "question", "answer"),
    [
        (
            "User: my favourite coffee is a flat white",
            "What is my favourite coffee?",
            "From what I remember, your favourite coffee is a flat white.",
        ),
        (
            "User: I'm a backend engineer and I work at Acme",
            "Where do I work?",
            "From what I remember, you're a backend engineer and you work at Acme.",
        ),
        (
            "User: My dog Max is afraid of me",
            "Is my dog Max ok?",
            "From what I remember, your dog Max is afraid of you.",
        ),
        (
            "The user lives in Porto.",
            "Where do I live, Porto?",
            "From what I remember, you live in Porto.",
        ),
        (
            "User prefers short answers",
            "short answers?",
            "From what I remember, you prefer short answers.",
        ),
        (
            "the user always watches films",
            "films tonight?",
            "From what I remember, you always watch films.",
        ),
        ("The user studies law", "what about law?", "From what I remember, you study law."),
        ("The user is vegetarian", "am I vegetarian?", "From what I remember, you are vegetarian."),
        (
            "The user doesn't drink coffee",
            "coffee?",
            "From what I remember, you don't drink coffee.",
        ),
        # Naming nobody: told as it is.
        ("lives in Porto", "Porto?", "From what I remember: lives in Porto"),
        ("用户的女儿叫小米", "我女儿叫什么", "我记得你的女儿叫小米。"),
        ("我喜欢喝热的拿铁", "我喜欢喝什么", "我记得你喜欢喝热的拿铁。"),
        ("用户的用户名是 ada", "我的用户名是什么", "我记得你的用户名是 ada。"),
        ("我们决定下周一发布", "我们什么时候发布", "我记得：我们决定下周一发布"),
        # A fact in the other language than the question is still said to the person.
        (
            "用户喜欢喝美式咖啡",
            "What kind of 美式 coffee do I drink?",
            "From what I remember: 你喜欢喝美式咖啡",
        ),
        ("User: I live in 杭州", "我住在杭州吗", "我记得：you live in 杭州"),
    ],
)
def test_a_remembered_fact_is_told_to_the_person_it_is_about(fact, question, answer):
    system = f"<memory_context>\n- [preference, 0.90] {fact}\n</memory_context>"
    assert say(question, system=system).text == answer


def test_no_overlap_gets_a_brief_acknowledgement():
    assert say("What's the weather like on Mars?").text == (
        "(offline mode) Noted: What's the weather like on Mars?"
    )
    assert say("今天天气怎么样").text == "（离线模式）收到：今天天气怎么样"
    assert say("你好").text == "你好！我是 Ethan（离线模式）。"
    assert say("hello", system="").text == "Hi! I'm Ethan (offline mode)."


def test_offline_is_deterministic_and_marked():
    first, second = say("我平时喝什么咖啡？"), say("我平时喝什么咖啡？")
    assert (first.text, first.tool_calls) == (second.text, second.tool_calls)
    assert first.meta == {"offline": True}
    assert (first.provider, first.model) == ("offline", "offline")
    assert first.usage.estimated and first.usage.input_tokens > 0


ROUNDS_ZH = [
    Message.user("我是后端工程师，在杭州工作。我更喜欢简短的回答。最近压力很大，晚上失眠。"),
    Message.assistant("明白了，我会简短一些。"),
    Message.user("记住：周五前要交季度报告。纠正一下，我住在上海，不是杭州。"),
    Message.assistant("好的。"),
    Message.user("听音乐能让我放松。"),
]
ROUNDS_EN = [
    Message.user("I am a backend engineer and I live in Porto. I prefer short answers."),
    Message.assistant("Noted."),
    Message.user("Remember that the launch is on Friday. We decided to ship the beta first."),
    Message.user("I'm so stressed lately. Long walks make me feel calm."),
]


def test_offline_summary_is_extractive_in_the_conversation_language():
    assert memory.summarize(model="offline", rounds=ROUNDS_ZH) == (
        "用户提到：我是后端工程师，在杭州工作；我更喜欢简短的回答；记住：周五前要交季度报告；"
        "纠正一下，我住在上海，不是杭州；听音乐能让我放松。"
    )
    assert memory.summarize(model="offline", rounds=ROUNDS_EN) == (
        "The user said: I am a backend engineer and I live in Porto; I prefer short answers; "
        "Remember that the launch is on Friday; We decided to ship the beta first; "
        "I'm so stressed lately."
    )


def test_offline_extraction_categories_and_strong_signal_confidences():
    extraction = memory.extract(model="offline", rounds=ROUNDS_ZH)
    assert [(f.content, f.category, f.importance) for f in extraction.facts] == [
        ("用户是后端工程师，在杭州工作", "knowledge", 0.8),
        ("用户更喜欢简短的回答", "preference", 0.9),
        ("用户周五前要交季度报告", "knowledge", 0.95),  # a fact that names nobody is the user's
        ("纠正一下，用户住在上海，不是杭州", "correction", 0.9),
    ]
    assert extraction.psych == ()  # only asked for in companion mode

    extraction = memory.extract(model="offline", rounds=ROUNDS_EN)
    assert [(f.content, f.category, f.importance) for f in extraction.facts] == [
        ("User: I am a backend engineer and I live in Porto", "knowledge", 0.8),
        ("User: I prefer short answers", "preference", 0.9),
        ("User: the launch is on Friday", "knowledge", 0.95),
        ("User: We decided to ship the beta first", "decision", 0.8),
    ]


def test_offline_psych_extraction_only_when_asked():
    zh = memory.extract(model="offline", rounds=ROUNDS_ZH, psych=True)
    assert zh.psych == ("最近压力很大，晚上失眠", "听音乐能让用户放松")
    en = memory.extract(model="offline", rounds=ROUNDS_EN, psych=True)
    assert en.psych == ("User: I'm so stressed lately", "User: Long walks make me feel calm")


@pytest.mark.parametrize(
    ("said", "fact", "category"),
    [
        ("我在杭州做后端工程师", "用户在杭州做后端工程师", "knowledge"),
        (
            "I work at Acme as a backend engineer",
            "User: I work at Acme as a backend engineer",
            "knowledge",
        ),
        ("我是老师", "用户是老师", "knowledge"),
        ("我住在成都", "用户住在成都", "knowledge"),
        ("I live in Lisbon", "User: I live in Lisbon", "knowledge"),
        ("我女儿叫小米", "用户女儿叫小米", "knowledge"),
        ("我家的猫叫 Miso", "用户家的猫叫 Miso", "knowledge"),
        ("my dog Max loves the beach", "User: my dog Max loves the beach", "knowledge"),
        ("下周去东京", "用户下周去东京", "decision"),
        ("I'm flying to Oslo next week", "User: I'm flying to Oslo next week", "decision"),
    ],
)
def test_plain_self_statements_are_facts_at_the_designs_confidence(said, fact, category):
    extraction = memory.extract(model="offline", rounds=[Message.user(said)])
    assert [(f.content, f.category, f.importance, f.turns) for f in extraction.facts] == [
        (fact, category, 0.8, (1,))
    ]


@pytest.mark.parametrize(
    "said", ["今天天气不错", "I went to the park", "Never mind", "下周见", "see you next week"]
)
def test_small_talk_is_still_no_fact(said):
    assert memory.extract(model="offline", rounds=[Message.user(said)]).facts == ()
