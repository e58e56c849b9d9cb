"""The offline model's memory work, pinned: the same conversation gives the same summary, facts
and rolling summary, string for string (the LoCoMo and context benchmarks depend on them)."""

from __future__ import annotations

from ethan_llm import memory
from ethan_llm.types import Message, ToolCall

# Multi-line turns (a CRLF among them), a tool step inside the round, a blank message.
MULTI_LINE = [
    Message.user("我有两个孩子\n一个三岁，一个五岁。\r\n我更喜欢早上开会。"),
    Message.assistant("", (ToolCall("c1", "memory_write", {"content": "x"}),)),
    Message.tool("c1", "ok", name="memory_write"),
    Message.assistant("好的，记下了。\n还有别的吗？"),
    Message.user("   "),
    Message.user("  Remember that my badge number is 42.\n    We decided to move to Porto.  "),
]
# An episode's input: the rolling summary first, as episodes_app passes it.
EPISODE = [
    Message.user("[对话摘要]\n用户提到：我喜欢咖啡；我住在杭州。"),
    Message.user("我打算下个月去东京。"),
    Message.assistant("听起来不错。"),
    Message.user("I prefer window seats."),
]


def facts(rounds, psych=False):
    extraction = memory.extract(model="offline", rounds=rounds, psych=psych)
    return [(f.content, f.category, f.importance, f.action, f.target) for f in extraction.facts]


def test_multi_line_turns_and_tool_steps():
    assert memory.summarize(model="offline", rounds=MULTI_LINE) == (
        "用户提到：我有两个孩子\n一个三岁，一个五岁；我更喜欢早上开会；"
        "Remember that my badge number is 42；We decided to move to Porto。"
    )
    assert facts(MULTI_LINE) == [
        ("用户有两个孩子\n一个三岁，一个五岁", "knowledge", 0.8, "ADD", None),
        ("用户更喜欢早上开会", "preference", 0.9, "ADD", None),
        ("The user's badge number is 42", "knowledge", 0.95, "ADD", None),
        ("The user and others decided to move to Porto", "decision", 0.8, "ADD", None),
    ]


def test_an_episode_with_its_earlier_summary():
    assert memory.summarize(model="offline", rounds=EPISODE) == (
        "用户提到：[对话摘要]\n用户提到：我喜欢咖啡；我住在杭州；我打算下个月去东京；"
        "I prefer window seats。"
    )
    assert facts(EPISODE, psych=True) == [
        ("[对话摘要]\n用户提到：用户喜欢咖啡", "preference", 0.8, "ADD", None),
        ("用户住在杭州", "knowledge", 0.8, "ADD", None),
        ("用户打算下个月去东京", "decision", 0.8, "ADD", None),
        ("The user prefers window seats", "preference", 0.9, "ADD", None),
    ]


def test_fold_merges_items_drops_duplicates_and_keeps_the_newest():
    assert memory.fold(
        model="offline",
        rolling="用户提到：我喜欢咖啡；我住在杭州。",
        summaries=["用户提到：我住在杭州；我打算下个月去东京。", "用户提到：我更喜欢早上开会。"],
    ) == ("用户提到：我喜欢咖啡；我住在杭州；我打算下个月去东京；我更喜欢早上开会。")
    assert memory.fold(
        model="offline",
        rolling="",
        summaries=[
            "The user said: I prefer tea; We decided to ship.",
            "The user said: I prefer tea; Actually, it's Tuesday.",
        ],
    ) == ("The user said: I prefer tea; We decided to ship; Actually, it's Tuesday.")
    assert memory.fold(
        model="offline", rolling="", summaries=[f"The user said: item {i}." for i in range(14)]
    ) == ("The user said: " + "; ".join(f"item {i}" for i in range(4, 14)) + ".")
    assert memory.fold(model="offline", rolling="", summaries=[]) == ""
