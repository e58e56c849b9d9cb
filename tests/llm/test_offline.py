"""The offline model's rules, in Chinese and English."""

from __future__ import annotations

import pytest

import ethan_llm
from ethan_llm import memory
from ethan_llm.types import Message, ToolSpec

TOOLS = [
    ToolSpec(name, "d", {"type": "object"})
    for name in ("memory_write", "procedure_write", "profile_update")
]
SYSTEM = (
    "You are Ethan.\n<memory_context>\n- [0.95] 用户喜欢喝美式咖啡\n"
    "- [0.90] The user's sister lives in Lisbon\n- [0.80] 用户在杭州做后端开发\n</memory_context>"
)


def say(text: str, tools=TOOLS, system: str = SYSTEM) -> ethan_llm.Completion:
    return ethan_llm.complete(
        model="offline", system=system, messages=[Message.user(text)], tools=tools
    )


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
            [("memory_write", {"content": "用户他们决定下周一发布", "category": "decision"})],
        ),
        (
            "Remember that my sister lives in Lisbon.",
            [
                (
                    "memory_write",
                    {"content": "The user's sister lives in Lisbon", "category": "knowledge"},
                )
            ],
        ),
        (
            "please remember I prefer short answers",
            [
                (
                    "memory_write",
                    {"content": "The user prefers short answers", "category": "preference"},
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
    reply = ethan_llm.complete(model="offline", system=SYSTEM, messages=history, tools=TOOLS)
    assert (reply.text, reply.tool_calls) == ("好的，我记住了：你喜欢喝美式咖啡", ())

    first = say("Remember that my favourite coffee is a flat white")
    history = [
        Message.user("Remember that my favourite coffee is a flat white"),
        first.as_message(),
        Message.tool(first.tool_calls[0].id, "ok", name="memory_write"),
    ]
    reply = ethan_llm.complete(model="offline", system=SYSTEM, messages=history, tools=TOOLS)
    assert reply.text == "Got it, I'll remember: your favourite coffee is a flat white"

    first = say("From now on, answer in Chinese.")
    history = [
        Message.user("From now on, answer in Chinese."),
        first.as_message(),
        Message.tool(first.tool_calls[0].id, "error: store is full"),
    ]
    reply = ethan_llm.complete(model="offline", system=SYSTEM, messages=history, tools=TOOLS)
    assert reply.text == "Sorry, I could not save that (procedure_write)."


@pytest.mark.parametrize(
    ("question", "answer"),
    [
        ("我平时喝什么咖啡？", "你说过你喜欢喝美式咖啡。"),
        ("Where does my sister live?", "You told me your sister lives in Lisbon."),
        ("我在哪个城市工作来着，杭州吗", "你说过你在杭州做后端开发。"),
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
            "You told me your favourite coffee is a flat white.",
        ),
        (
            "User: I'm a backend engineer and I work at Acme",
            "Where do I work?",
            "You told me you're a backend engineer and you work at Acme.",
        ),
        (
            "User: My dog Max is afraid of me",
            "Is my dog Max ok?",
            "You told me your dog Max is afraid of you.",
        ),
        (
            "The user lives in Porto.",
            "Where do I live, Porto?",
            "You told me you live in Porto.",
        ),
        (
            "User prefers short answers",
            "short answers?",
            "You told me you prefer short answers.",
        ),
        (
            "the user always watches films",
            "films tonight?",
            "You told me you always watch films.",
        ),
        ("The user studies law", "what about law?", "You told me you study law."),
        ("The user is vegetarian", "am I vegetarian?", "You told me you are vegetarian."),
        (
            "The user doesn't drink coffee",
            "coffee?",
            "You told me you don't drink coffee.",
        ),
        # Naming nobody: told as it is.
        ("lives in Porto", "Porto?", "You told me: lives in Porto"),
        ("用户的女儿叫小米", "我女儿叫什么", "你说过你的女儿叫小米。"),
        ("我喜欢喝热的拿铁", "我喜欢喝什么", "你说过你喜欢喝热的拿铁。"),
        ("用户的用户名是 ada", "我的用户名是什么", "你说过你的用户名是 ada。"),
        ("我们决定下周一发布", "我们什么时候发布", "你说过你们决定下周一发布。"),
        # A fact in the other language than the question is still said to the person.
        (
            "用户喜欢喝美式咖啡",
            "What kind of 美式 coffee do I drink?",
            "You told me: 你喜欢喝美式咖啡",
        ),
        ("User: I live in 杭州", "我住在杭州吗", "你说过：you live in 杭州"),
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
        ("The user is a backend engineer and the user lives in Porto", "knowledge", 0.8),
        ("The user prefers short answers", "preference", 0.9),
        ("The launch is on Friday", "knowledge", 0.95),
        ("The user and others decided to ship the beta first", "decision", 0.8),
    ]


@pytest.mark.parametrize(
    ("said", "facts"),
    [
        ("Remember that my dog is called Max.", [("The user's dog is called Max", 0.95)]),
        ("Can you remember that I live in Lisbon?", [("The user lives in Lisbon", 0.95)]),
        ("Ok, remember: my wife is Ana.", [("The user's wife is Ana", 0.95)]),
        ("Thanks. Remember that my son is Leo.", [("The user's son is Leo", 0.95)]),
        # Reminiscing, or asking for a reminder: no instruction to keep anything.
        ("I remember when I did my first play.", []),
        ("Remember to take care of yourself.", []),
    ],
)
def test_only_an_instruction_to_remember_is_a_strong_signal(said, facts):
    extraction = memory.extract(model="offline", rounds=[Message.user(said)])
    assert [(f.content, f.importance) for f in extraction.facts] == facts


def test_reminiscing_is_not_an_instruction_to_write_memory():
    assert not say("I remember when I did my first play.", tools=TOOLS).tool_calls
    assert not say("Remember to take care of yourself.", tools=TOOLS).tool_calls
    [call] = say("Please remember that I'm allergic to nuts.", tools=TOOLS).tool_calls
    assert call.arguments["content"] == "The user is allergic to nuts"


def test_offline_psych_extraction_only_when_asked():
    zh = memory.extract(model="offline", rounds=ROUNDS_ZH, psych=True)
    assert zh.psych == ("最近压力很大，晚上失眠", "听音乐能让用户放松")
    en = memory.extract(model="offline", rounds=ROUNDS_EN, psych=True)
    assert en.psych == ("The user is so stressed lately", "Long walks make the user feel calm")


@pytest.mark.parametrize(
    ("said", "fact", "category"),
    [
        ("我在杭州做后端工程师", "用户在杭州做后端工程师", "knowledge"),
        (
            "I work at Acme as a backend engineer",
            "The user works at Acme as a backend engineer",
            "knowledge",
        ),
        ("我是老师", "用户是老师", "knowledge"),
        ("我住在成都", "用户住在成都", "knowledge"),
        ("I live in Lisbon", "The user lives in Lisbon", "knowledge"),
        ("我女儿叫小米", "用户女儿叫小米", "knowledge"),
        ("我家的猫叫 Miso", "用户家的猫叫 Miso", "knowledge"),
        ("my dog Max loves the beach", "The user's dog Max loves the beach", "knowledge"),
        ("下周去东京", "用户下周去东京", "decision"),
        ("I'm flying to Oslo next week", "The user is flying to Oslo next week", "decision"),
        # A greeting before it is not part of the fact.
        ("Hi, I live in Lisbon", "The user lives in Lisbon", "knowledge"),
        ("Hello there! I work at Acme", "The user works at Acme", "knowledge"),
        ("你好，我住在成都", "用户住在成都", "knowledge"),
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


MEMORY_QUESTIONS = [
    "What do you remember about me?",
    "Do you remember where I live?",
    "你还记得我女儿叫什么吗？",
    "你还记得我叫什么吗？",
    "Do you remember my name is what?",
    "你知道我的目标是什么吗？",
]


@pytest.mark.parametrize("question", MEMORY_QUESTIONS)
def test_a_question_about_memory_writes_nothing(question):
    """It asks for memory: no memory_write, profile_update or rule, and no fact extracted."""
    assert say(question, tools=[*TOOLS, SEARCH]).tool_calls in ((), (search_call(question),))
    assert memory.extract(model="offline", rounds=[Message.user(question)]).facts == ()


def test_a_message_that_tells_and_asks_writes_what_it_tells():
    assert calls("Remember that my dog is called Max. Got it?") == [
        ("memory_write", {"content": "The user's dog is called Max", "category": "knowledge"})
    ]
    extraction = memory.extract(
        model="offline", rounds=[Message.user("你还记得我住在哪吗？我住在里斯本。")]
    )
    assert [f.content for f in extraction.facts] == ["用户住在里斯本"]


SEARCH = ToolSpec("memory_search", "d", {"type": "object"})


def search_call(question: str):
    from ethan_llm.types import ToolCall

    return ToolCall(
        id="offline_call_1", name="memory_search", arguments={"query": question, "limit": 10}
    )


@pytest.mark.parametrize(
    ("question", "answer"),
    [
        ("Where do I live?", "You told me you live in Lisbon."),
        ("Do you remember where I live?", "You told me you live in Lisbon."),
        ("我住在哪里？", "你说过你住在里斯本。"),
        ("你还记得我女儿叫什么吗？", "你说过你女儿叫小米。"),
    ],
)
def test_a_question_about_the_person_is_answered_from_an_injected_fact(question, answer):
    system = (
        "<memory_context>\n- [knowledge, 0.80] User: I live in Lisbon\n"
        "- [knowledge, 0.80] 用户住在里斯本\n- [knowledge, 0.80] 用户女儿叫小米\n</memory_context>"
    )
    assert say(question, tools=[*TOOLS, SEARCH], system=system).text == answer


def test_what_do_you_remember_about_me_lists_the_injected_facts():
    system = (
        "<memory_context>\n- [knowledge, 0.80] User: I live in Lisbon\n"
        "- [knowledge, 0.80] User: My dog is called Max\n"
        "- [knowledge, 0.80] User: How I met my wife is a long story\n"
        "- [knowledge, 0.80] User: Max is my dog's vet\n</memory_context>"
    )
    assert say("What do you remember about me?", system=system).text == (
        "Here is what I remember about you: you live in Lisbon; your dog is called Max; "
        "how you met your wife is a long story; Max is your dog's vet."
    )
    assert say(
        "你都记得我什么？", system="<memory_context>\n- 用户女儿叫小米\n</memory_context>"
    ).text == ("我记得这些：你女儿叫小米。")
    assert say("What do you remember about me?", system="").text == (
        "I don't know much about you yet. Tell me about yourself and I'll remember."
    )


def answer_after_search(question: str, result: str) -> str:
    first = say(question, tools=[*TOOLS, SEARCH], system="")
    assert first.tool_calls == (search_call(question),)
    history = [
        Message.user(question),
        first.as_message(),
        Message.tool(first.tool_calls[0].id, result, name="memory_search"),
    ]
    return ethan_llm.complete(model="offline", system="", messages=history, tools=TOOLS).text


@pytest.mark.parametrize(
    ("question", "result", "answer"),
    [
        (
            "Where do I live?",
            "[message s1 #1 2026-12-01 user] Where do I live?\n"
            "[message s1 #2 2026-12-01 assistant] (offline mode) Noted: I live in Lisbon\n"
            "[fact #4 2026-12-02] User: I live in Lisbon",
            "You told me you live in Lisbon.",
        ),
        (
            "Where do I live?",
            "[message s1 #1 2026-12-01 user] Where do I live?\n"
            "[message s1 #2 2026-12-01 assistant] (offline mode) Noted: I live in Lisbon\n"
            "[message s2 #3 2026-12-03 user] I live in Lisbon, near the river.",
            "On 3 December you said: “I live in Lisbon, near the river”",
        ),
        (
            "我住在哪里？",
            "[message s2 #1 2026-11-30 user] 我住在里斯本，离海很近。",
            "你在11月30日说过：“我住在里斯本，离海很近”",
        ),
        (
            "Where do I live?",
            "[episode s3 2026-11-03] The user said: I like tea; I live in Lisbon.",
            "On 3 November you told me you live in Lisbon.",
        ),
        (
            "我住在哪里？",
            "[episode s3 2026-11-03] 用户提到：我喜欢咖啡；我住在里斯本。",
            "你在11月3日说过你住在里斯本。",
        ),
        (
            "Where do I live?",
            "ok: nothing in memory matches",
            "I don't remember you telling me that.",
        ),
        ("我女儿叫什么？", "ok: nothing in memory matches", "我不记得你跟我说过这件事。"),
    ],
)
def test_with_no_injected_fact_it_searches_and_answers_from_the_result(question, result, answer):
    assert answer_after_search(question, result) == answer


def test_a_question_about_something_else_searches_nothing():
    assert say("What's the weather like on Mars?", tools=[*TOOLS, SEARCH]).text == (
        "(offline mode) Noted: What's the weather like on Mars?"
    )


@pytest.mark.parametrize(
    ("said", "fact", "category"),
    [
        ("下周我要去东京出差", "下周用户要去东京出差", "decision"),
        ("我要去东京出差", "用户要去东京出差", "decision"),
        ("我打算学日语", "用户打算学日语", "decision"),
        ("我准备下个月换工作", "用户准备下个月换工作", "decision"),
        ("我住在里斯本", "用户住在里斯本", "knowledge"),
        ("我在阿里巴巴工作", "用户在阿里巴巴工作", "knowledge"),
        ("我女儿叫小米", "用户女儿叫小米", "knowledge"),
        ("我对花生过敏", "用户对花生过敏", "knowledge"),
        ("我搬到上海了", "用户搬到上海了", "knowledge"),
        ("我养了一只猫，叫 Miso", "用户养了一只猫，叫 Miso", "knowledge"),
        ("我来自巴西", "用户来自巴西", "knowledge"),
        ("我不吃辣", "用户不吃辣", "preference"),
        ("I'm going to learn Japanese", "The user is going to learn Japanese", "decision"),
        ("I'm planning to visit Rome", "The user is planning to visit Rome", "decision"),
        ("I work at Acme", "The user works at Acme", "knowledge"),
        ("I work as a nurse", "The user works as a nurse", "knowledge"),
        ("My wife is called Ana", "The user's wife is called Ana", "knowledge"),
        ("My husband is called Tom", "The user's husband is called Tom", "knowledge"),
        ("My partner is called Sam", "The user's partner is called Sam", "knowledge"),
        ("My son is called Leo", "The user's son is called Leo", "knowledge"),
        ("My daughter is called Mia", "The user's daughter is called Mia", "knowledge"),
        ("My dog is called Max", "The user's dog is called Max", "knowledge"),
        ("I'm allergic to peanuts", "The user is allergic to peanuts", "knowledge"),
        ("I moved to Porto", "The user moved to Porto", "knowledge"),
        ("I live in Lisbon", "The user lives in Lisbon", "knowledge"),
        ("I got a new job at Globex", "The user got a new job at Globex", "knowledge"),
        ("I'm vegetarian", "The user is vegetarian", "knowledge"),
        ("I have two kids", "The user has two kids", "knowledge"),
        ("I don't eat pork", "The user doesn't eat pork", "preference"),
    ],
)
def test_more_plain_self_statements_are_facts_with_their_turn(said, fact, category):
    extraction = memory.extract(
        model="offline", rounds=[Message.user("hi"), Message.assistant("hello"), Message.user(said)]
    )
    assert [(f.content, f.category, f.importance, f.turns) for f in extraction.facts] == [
        (fact, category, 0.8, (3,))
    ]


@pytest.mark.parametrize("said", ["我要去睡觉了", "I'm going to bed", "I'm going to go now"])
def test_leaving_for_now_is_no_plan(said):
    assert memory.extract(model="offline", rounds=[Message.user(said)]).facts == ()


@pytest.mark.parametrize(
    ("fact", "slot"),
    [
        ("User: I live in Lisbon", ("residence", ("lisbon",))),
        ("User: I just moved to Porto last month", ("residence", ("porto",))),
        ("The user lives in Porto.", ("residence", ("porto",))),
        ("用户住在里斯本", ("residence", ("里斯本",))),
        ("用户搬到上海了", ("residence", ("上海",))),
        ("The user works at Globex", ("employer", ("globex",))),
        ("用户在阿里巴巴工作", ("employer", ("阿里巴巴",))),
        ("User: I work as a nurse", ("occupation", ("nurs",))),
        ("用户是一名医生", ("occupation", ("医生",))),
        # Someone else, a plan, or a fact naming nobody: no slot of the person's.
        ("User: My sister lives in Paris", None),
        ("User: I'm moving to Porto next month", None),
        ("用户下周搬到东京", None),
        ("lives in Porto", None),
    ],
)
def test_the_slot_a_fact_about_the_person_fills(fact, slot):
    from ethan_llm.text import fact_slot

    assert fact_slot(fact) == slot
