"""The text rules memory learns by (ethan_llm.text): what the person said in a message
(person_words), what asks rather than tells (is_request), and the date a relative time names
(dated). Message texts from Open WebUI 0.12.4 (shared/clients) and LibreChat's prompts, copied."""

from __future__ import annotations

from datetime import datetime

import pytest

from ethan_llm.text import dated, is_request, person_words

# Open WebUI's title prompt (09-title.json): the assistant's reply quotes the person.
OPEN_WEBUI_TITLE = """### Task:
Generate a concise title summarizing the chat history.
### Guidelines:
- Keep it short: 2-4 words is best.
### Output:
JSON format: { "title": "your concise title here" }
### Chat History:
<chat_history>
USER: Where do I live, and what is my job?
ASSISTANT: On 6 December you said: “Hi! I live in Lisbon and I work as a marine biologist”
</chat_history>"""
LIBRECHAT_LEGACY_TITLE = (
    "Please generate a concise, 5-word-or-less title for the conversation.\n\n||>User:\n"
    '"Hi! I live in Lisbon."\n||>Response:\n"Nice to meet you! I live in the cloud."\n\n'
    "||>Title:"
)


@pytest.mark.parametrize(
    ("message", "said"),
    [
        (OPEN_WEBUI_TITLE, ""),
        ("I live in Lisbon.\nMy dog is Max.", "I live in Lisbon.\nMy dog is Max."),
        (
            "Look what it said:\nHuman: I like tea.\nAI: I like coffee.\nFunny, right?",
            "Look what it said:\n\nI like tea.",
        ),
        (
            "Claude: You live in Paris.\nThat is wrong: I live in Porto.",
            "",  # every line after the assistant's label is the assistant's
        ),
        (
            "<chat_history>\nUSER: I have a cat.\nASSISTANT: Nice.\n</chat_history>\nI also "
            "have a dog.",
            "I have a cat.\n\nI also have a dog.",
        ),
        ("[file: notes.txt]\nI moved to Porto.", "I moved to Porto."),
        # A config file is not a transcript: "model:" and "system:" alone are its keys.
        ("My setup:\nmodel: gpt-4o\nsystem: brief", "My setup:\nmodel: gpt-4o\nsystem: brief"),
        (LIBRECHAT_LEGACY_TITLE, 'Please generate a concise, 5-word-or-less title for the '
         'conversation.\n\n"Hi! I live in Lisbon."'),
    ],
    ids=["open-webui-title", "plain", "pasted", "assistant-only", "tags", "placeholder", "config",
         "librechat-legacy"],
)  # fmt: skip
def test_person_words_keep_what_the_person_said_and_drop_the_markup(message, said):
    assert person_words(message) == said


@pytest.mark.parametrize(
    ("text", "asks"),
    [
        ("Tell me about my daughter please.", True),
        ("Could you show me my notes", True),
        ("Please list my appointments for next week.", True),
        ("告诉我关于我女儿的事。", True),
        ("请给我讲讲我的猫。", True),
        ("帮我查一下我下周的安排。", True),
        ("Remember that I live in Lisbon.", False),
        ("Please remember that I'm allergic to nuts.", False),
        ("帮我记住我不吃辣。", False),
        ("I live in Lisbon.", False),
        ("Name's Bob and I live in Porto.", False),
        ("Plan is to move to Porto next year.", False),
        ("找到新工作了。", False),
        ("查理是我的狗。", False),
    ],
)
def test_a_request_asks_an_instruction_to_remember_tells(text, asks):
    assert is_request(text) is asks


SUNDAY = datetime(2026, 12, 6, 10, 0)


@pytest.mark.parametrize(
    ("text", "told"),
    [
        ("a trip to Kyoto next March", "a trip to Kyoto next March (March 2027)"),
        ("flying to Oslo next week", "flying to Oslo next week (week of 7 December 2026)"),
        ("going to Rome tomorrow", "going to Rome tomorrow (7 December 2026)"),
        ("the concert next Friday", "the concert next Friday (11 December 2026)"),
        ("moved here 2 days ago", "moved here 2 days ago (4 December 2026)"),
        ("starting in 3 months", "starting in 3 months (March 2027)"),
        ("moved last year", "moved last year (2025)"),
        ("下周去东京出差", "下周（2026年12月7日那周）去东京出差"),
        ("明年去读研究生", "明年（2027年）去读研究生"),
        ("明天飞上海", "明天（2026年12月7日）飞上海"),
        # Already dated, or no relative time: as it was.
        ("next March (March 2027)", "next March (March 2027)"),
        ("下周（2026年12月7日那周）去", "下周（2026年12月7日那周）去"),
        ("in March", "in March"),
    ],
)
def test_a_relative_time_gets_the_date_it_names_from_when_it_was_said(text, told):
    assert dated(text, said_at=SUNDAY) == told
