"""A chat app's housekeeping requests to /v1 (channels_app.openai.housekeeping): recognised by the
app's own templates and layout, never a person's chat; answered offline in the shape the app
parses (ethan_llm.offline.housekeeping); counted per app, kind and day (HousekeepingTally).

The Open WebUI requests are the ones it really sent (tests/fixtures/clients/open-webui-0.12.4). The
other templates are rebuilt here from each app's source, as the module's comments cite them."""

from __future__ import annotations

import json
import logging
from datetime import date
from pathlib import Path

import pytest
from django.db.models import QuerySet
from django.utils import timezone

from channels_app.models import HousekeepingTally
from channels_app.openai.housekeeping import Housekeeping, housekeeping_of
from channels_app.openai.housekeeping_tally import housekeeping_count
from ethan_llm.offline.housekeeping import offline_task_answer

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "clients" / "open-webui-0.12.4"
RECORDINGS = sorted(RECORDED.glob("*.json"))
CHAT_KINDS = {"chat", "chat_with_tools"}


def recording(path: Path) -> dict:
    return json.loads(path.read_text())


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def system(text: str) -> dict:
    return {"role": "system", "content": text}


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}


def the_prompt(kind: str) -> str:
    """The recorded Open WebUI prompt of that kind (its first)."""
    for path in RECORDINGS:
        data = recording(path)
        if data["kind"] == kind:
            return data["body"]["messages"][-1]["content"]
    raise LookupError(kind)


def parsed_as_open_webui_does(answer: str) -> dict:
    """Open WebUI's reading of a task answer (utils/middleware.py): the text from its first
    "{" to its last "}", as JSON."""
    return json.loads(answer[answer.find("{") : answer.rfind("}") + 1])


def test_housekeeping_of_is_pure():
    """The recogniser reads the request alone: its module imports no Django, no settings, no
    model (what it imports at all is the standard library)."""
    import ast

    import channels_app.openai.housekeeping as module

    tree = ast.parse(Path(module.__file__).read_text())
    imported = {
        name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for name in (
            [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module]
        )
    }
    assert imported == {"__future__", "re", "collections", "dataclasses"}


# --- Open WebUI, as recorded ---------------------------------------------------------------------


def test_recordings_are_there():
    kinds = {recording(path)["kind"] for path in RECORDINGS}
    assert len(RECORDINGS) == 33
    assert kinds == {"title", "tags", "follow_ups", "autocomplete", "chat", "chat_with_tools"}


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda path: path.stem)
def test_housekeeping_of_recorded_open_webui_request(path):
    data = recording(path)
    found = housekeeping_of(data["body"]["messages"])
    if data["kind"] in CHAT_KINDS:
        assert found is None
    else:
        assert found == Housekeeping("open-webui", data["kind"])


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda path: path.stem)
def test_housekeeping_of_recorded_prompt_as_text_parts(path):
    """The same requests with each content as a list of text parts, as other clients send."""
    data = recording(path)
    messages = [
        {"role": m["role"], "content": [{"type": "text", "text": m["content"]}]}
        for m in data["body"]["messages"]
    ]
    found = housekeeping_of(messages)
    assert (found is None) == (data["kind"] in CHAT_KINDS)


def test_housekeeping_of_open_webui_task_after_a_workspace_system_prompt():
    """A model set up in Open WebUI's workspace with a system prompt sends it first."""
    messages = [system("You are a helpful assistant."), user(the_prompt("title"))]
    assert housekeeping_of(messages) == Housekeeping("open-webui", "title")


# Open WebUI's other task templates (backend/open_webui/config.py), filled in as
# routers/tasks.py and utils/task.py fill them.
HISTORY = "<chat_history>\nUSER: Hi! I live in Lisbon.\nASSISTANT: Noted.\n</chat_history>"
OPEN_WEBUI_QUERIES = f"""### Task:
Analyze the chat history to determine the necessity of generating search queries, in the given language. By default, **prioritize generating 1-3 broad and relevant search queries** unless it is absolutely certain that no additional information is required. The aim is to retrieve comprehensive, updated, and valuable information even with minimal uncertainty. If no search is unequivocally needed, return an empty list.

### Guidelines:
- Respond **EXCLUSIVELY** with a JSON object. Any form of extra commentary, explanation, or additional text is strictly prohibited.
- When generating search queries, respond in the format: {{ "queries": ["query1", "query2"] }}, ensuring each query is distinct, concise, and relevant to the topic.
- If and only if it is entirely certain that no useful results can be retrieved by a search, return: {{ "queries": [] }}.
- Today's date is: 2026-12-06.

### Output:
Strictly return in JSON format: 
{{
  "queries": ["query1", "query2"]
}}

### Chat History:
{HISTORY}
"""  # noqa: E501, W291
OPEN_WEBUI_IMAGE = f"""### Task:
Generate a detailed prompt for am image generation task based on the given language and context. Describe the image as if you were explaining it to someone who cannot see it. Include relevant details, colors, shapes, and any other important elements.

### Guidelines:
- Be descriptive and detailed, focusing on the most important aspects of the image.
- Avoid making assumptions or adding information not present in the image.

### Output:
Strictly return in JSON format:
{{
    "prompt": "Your detailed description here."
}}

### Chat History:
{HISTORY}"""  # noqa: E501
OPEN_WEBUI_TITLE_06 = f"""### Task:
Generate a concise, 3-5 word title with an emoji summarizing the chat history.
### Guidelines:
- The title should clearly represent the main theme or subject of the conversation.
- Use emojis that enhance understanding of the topic, but avoid quotation marks or special formatting.
### Output:
JSON format: {{ "title": "your concise title here" }}
### Examples:
- {{ "title": "📉 Stock Market Trends" }},
### Chat History:
{HISTORY}"""  # noqa: E501
OPEN_WEBUI_TITLE_04 = f"""Create a concise, 3-5 word title with an emoji as a title for the chat history, in the given language. Suitable Emojis for the summary can be used to enhance understanding but avoid quotation marks or special formatting. RESPOND ONLY WITH THE TITLE TEXT.

Examples of titles:
📉 Stock Market Trends
🍪 Perfect Chocolate Chip Recipe

{HISTORY}"""  # noqa: E501
OPEN_WEBUI_FOLLOW_UPS_06 = f"""### Task:
Suggest 3-5 relevant follow-up questions or prompts that the user might naturally ask next in this conversation as a **user**, based on the chat history, to help continue or deepen the discussion.
### Guidelines:
- Write all follow-up questions from the user’s point of view, directed to the assistant.
- Response must be a JSON array of strings, no extra text or formatting.
### Output:
JSON format: {{ "follow_ups": ["Question 1?", "Question 2?", "Question 3?"] }}
### Chat History:
{HISTORY}"""  # noqa: E501
OPEN_WEBUI_EMOJI = """Your task is to reflect the speaker's likely facial expression through a fitting emoji. Interpret emotions from the message and reflect their facial expression using fitting, diverse emojis (e.g., 😊, 😢, 😡, 😱).

Message: ```I got the job!```"""  # noqa: E501
OPEN_WEBUI_MOA = """You have been provided with a set of responses from various models to the latest user query: "Where is Lisbon?"

Your task is to synthesize these responses into a single, high-quality response. It is crucial to critically evaluate the information provided in these responses.

Responses from models: "In Portugal." "On the Tagus.\""""  # noqa: E501
OPEN_WEBUI_TOOLS = """Available Tools: [{"name": "get_weather", "description": "The weather", "parameters": {}}]

Your task is to choose and return the correct tool(s) from the list of available tools based on the query. Follow these guidelines:

- Return only the JSON object, without any additional text or explanation.

The format for the JSON response is strictly:
{
  "tool_calls": [
    {"name": "toolName1", "parameters": {"key1": "value1"}},
    {"name": "toolName2", "parameters": {"key2": "value2"}}
  ]
}"""  # noqa: E501


@pytest.mark.parametrize(
    ("messages", "kind"),
    [
        ([user(OPEN_WEBUI_QUERIES)], "search_query"),
        ([user(OPEN_WEBUI_IMAGE)], "image_prompt"),
        ([user(OPEN_WEBUI_TITLE_06)], "title"),
        ([user(OPEN_WEBUI_TITLE_04)], "title"),
        ([user(OPEN_WEBUI_FOLLOW_UPS_06)], "follow_ups"),
        ([user(OPEN_WEBUI_EMOJI)], "emoji"),
        ([user(OPEN_WEBUI_MOA)], "moa"),
        (
            [system(OPEN_WEBUI_TOOLS), user("Query: What's the weather in Lisbon?")],
            "function_calling",
        ),
        (
            [system(OPEN_WEBUI_TOOLS), user('History:\nUSER: """Hi"""\nQuery: And in Porto?')],
            "function_calling",
        ),
    ],
    ids=[
        "queries",
        "image",
        "title-0.6",
        "title-0.4",
        "follow-ups-0.6",
        "emoji",
        "moa",
        "tools",
        "tools-hist",
    ],
)
def test_housekeeping_of_open_webui_other_templates(messages, kind):
    assert housekeeping_of(messages) == Housekeeping("open-webui", kind)


# --- a person chatting is never a task -----------------------------------------------------------

TRANSCRIPT = (
    "USER: Hi! I live in Lisbon and I work as a marine biologist.\n"
    "ASSISTANT: Nice to meet you!\n"
    "USER: My favourite food is grilled sardines."
)


@pytest.mark.parametrize(
    "messages",
    [
        [user(f"Here is a chat I had elsewhere, what do you make of it?\n{TRANSCRIPT}")],
        [user(f"<chat_history>\n{TRANSCRIPT}\n</chat_history>")],
        [
            user(
                f"### Task:\nRead this and tell me what I like.\n<chat_history>\n{TRANSCRIPT}\n"
                "</chat_history>"
            )
        ],
        # An app's whole prompt pasted, with a question before or after it.
        [user("Why does Open WebUI send this to my model?\n\n" + the_prompt("title"))],
        [user(the_prompt("title") + "\n\nWhy does Open WebUI send this?")],
        [user(the_prompt("tags") + "\nWhat do you think?")],
        [user(the_prompt("autocomplete") + " is this an autocomplete prompt?")],
        # The prompt pasted as one message of a conversation.
        [
            user("I want to show you something."),
            assistant("Sure, paste it."),
            user(the_prompt("follow_ups")),
        ],
        [assistant(the_prompt("title")), user("What was that?")],
        # A title prompt without its structure lines (a person asking in their own words).
        [
            user(
                "### Task:\nGenerate a concise title summarizing the chat history.\n"
                f"<chat_history>\n{TRANSCRIPT}\n</chat_history>"
            )
        ],
        [user("Provide a concise, 5-word-or-less title for the conversation, please!")],
        [user("Name the conversation based on the chat records. It was about sardines.")],
        [user("Summarize the conversation by integrating new lines into the current summary.")],
        [
            system(
                "You are a professional conversation summarizer. Generate a concise title "
                "that captures the essence of the conversation.\n\nRules:\n- Be short"
            ),
            user("user: hi"),
            assistant("Hello"),
            user("user: what now?"),
        ],
    ],
    ids=[
        "transcript-with-question",
        "transcript-in-tags",
        "own-task-header",
        "question-before-prompt",
        "question-after-title-prompt",
        "question-after-tags-prompt",
        "question-after-autocomplete",
        "prompt-mid-conversation",
        "prompt-from-assistant",
        "title-without-structure",
        "librechat-phrase-alone",
        "chatbox-phrase-alone",
        "librechat-summary-phrase-alone",
        "lobechat-system-in-a-longer-chat",
    ],
)
def test_housekeeping_of_a_person_chatting_is_none(messages):
    assert housekeeping_of(messages) is None


@pytest.mark.parametrize(
    "messages",
    [
        None,
        "hello",
        [],
        [None],
        [{"role": 1, "content": "x"}],
        [{"role": "user", "content": 3}],
        [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
    ],
)
def test_housekeeping_of_anything_else_is_none(messages):
    assert housekeeping_of(messages) is None


def test_housekeeping_of_a_long_chat_is_none():
    long_text = "I went to the market and bought sardines. " * 50
    messages = [user(long_text) if i % 2 == 0 else assistant(long_text) for i in range(100)]
    assert housekeeping_of(messages) is None
    assert housekeeping_of([user(the_prompt("title") + long_text * 100)]) is None


# --- LibreChat, LobeChat, Chatbox ----------------------------------------------------------------

CONVO = "User: Hi! I live in Lisbon and I work as a marine biologist.\nAI: Nice to meet you!"
LIBRECHAT_COMPLETION_TITLE = (
    "Provide a concise, 5-word-or-less title for the conversation, using title case conventions."
    f" Only return the title itself.\n\nConversation:\n{CONVO}"
)
LIBRECHAT_STRUCTURED_TITLE = (
    "Analyze this conversation and provide:\n1. The detected language of the conversation\n"
    "2. A concise title in the detected language (5 words or less, no punctuation or quotation)"
    f"\n\n{CONVO}"
)
LIBRECHAT_LEGACY_TITLE = (
    "Please generate a concise, 5-word-or-less title for the conversation, using its same "
    "language, with no punctuation. Apply title case conventions appropriate for the language. "
    'Never directly mention the language name or the word "title"\n\n||>User:\n'
    '"Hi! I live in Lisbon and I work as a marine biologist."\n||>Response:\n'
    '"\\"Nice to meet you!\\""\n\n||>Title:'
)
LIBRECHAT_SUMMARY = """Summarize the conversation by integrating new lines into the current summary.

EXAMPLE:
Current summary:
The human inquires about the AI's view on artificial intelligence. The AI believes it's beneficial.

New lines:
Human: Why is it beneficial?
AI: It helps humans achieve their potential.

New summary:
The human inquires about the AI's view on artificial intelligence. The AI believes it's beneficial because it helps humans achieve their potential.

Current summary:
The human lives in Lisbon.

New lines:
Human: I work as a marine biologist.
AI: Nice!

New summary:"""  # noqa: E501
LIBRECHAT_CUTOFF = (
    "The following text is cut-off:\nHuman: I live in Lisbon and I work as a mar\n\n"
    "Summarize the content as best as you can, noting that it was cut-off.\n\nSummary:"
)
LIBRECHAT_CHECKPOINT = """Hold on, before you continue I need you to write me a checkpoint of everything so far. Your context window is filling up and this checkpoint replaces the messages above, so capture everything you need to pick right back up.

## Checkpoint

## Goal
What I asked you to do and any sub-goals you identified.

Rules:
- Record what you did and observed, don't judge or re-evaluate it
- Short declarative sentences
- Skip empty sections"""  # noqa: E501
LOBECHAT_TITLE_SYSTEM = (
    "You are a professional conversation summarizer. Generate a concise title that captures "
    "the essence of the conversation.\n\nRules:\n- Output ONLY the title text, no explanations "
    "or additional context\n- Maximum 10 words\n- Use the language specified by the locale "
    "code: en-US"
)
LOBECHAT_TITLE_SYSTEM_JSON = (
    "You are a professional conversation summarizer. Generate a concise title that captures "
    'the essence of the conversation.\n\nRules:\n- Return one JSON object with a single "title" '
    "string matching the supplied schema\n- Use the language specified by the locale code: en-US"
)
LOBECHAT_TITLE_USER = (
    "user: Hi! I live in Lisbon and I work as a marine biologist.\nassistant: Nice to meet you!"
)
LOBECHAT_TITLE_USER_TAGGED = (
    "<task>\nGenerate a concise title that captures the essence of the conversation.\n</task>\n\n"
    "<conversation>\n<user>\nHi! I live in Lisbon and I work as a marine biologist.\n</user>\n"
    "<assistant>\nNice to meet you!\n</assistant>\n</conversation>"
)
LOBECHAT_OLD_TITLE_SYSTEM = (
    "You are an assistant skilled at conversations. You need to summarize the user's "
    "conversation into a title within 10 characters"
)
LOBECHAT_HISTORY_SYSTEM = (
    "You're an assistant who's good at extracting key takeaways from conversations and "
    "summarizing them. Please summarize according to the user's needs. The content you need to "
    "summarize is located in the <chat_history> </chat_history> group of xml tags. The summary "
    "needs to maintain the original language."
)
LOBECHAT_HISTORY_USER = (
    "<chat_history>\n<user>Hi! I live in Lisbon.</user>\n<assistant>Nice!</assistant>\n"
    "</chat_history>\n\nPlease summarize the above conversation and retain key information. "
    "The summarized content will be used as context for subsequent prompts, and should be "
    "limited to 400 tokens."
)
CHATBOX_TITLE = """Based on the chat history, give this conversation a name.
Keep it short - 10 characters max, no quotes.
Use English.
Just provide the name, nothing else.

Here's the conversation:

```
Hi! I live in Lisbon and I work as a marine biologist.

---------

Nice to meet you!
```

Name this conversation in 10 characters or less.
Use English.
Only give the name, nothing else.

The name is:"""
CHATBOX_OLD_TITLE = """Name the conversation based on the chat records.
Please provide a concise name, within 10 characters and without quotation marks.
Please use the speak language in the conversation.
You only need to answer with the name.
The following is the conversation:

```
Hi! I live in Lisbon and I work as a marine biologist.
```

Please provide a concise name, within 10 characters and without quotation marks.
Please use the speak language in the conversation.
You only need to answer with the name.
The conversation is named:"""
CHATBOX_SEARCH = """As a professional web researcher who can access latest data, your primary objective is to fully comprehend the user's query, conduct thorough web searches to gather the necessary information, and provide an appropriate response. Keep in mind today's date: 12/6/2026.

JSON schema:
{"type":"object","properties":{"action":{"type":"string","enum":["search","proceed"]}},"required":["action"]}
You MUST answer with a JSON object that matches the JSON schema above."""  # noqa: E501


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        ([user(LIBRECHAT_COMPLETION_TITLE)], ("librechat", "title")),
        ([user(LIBRECHAT_STRUCTURED_TITLE)], ("librechat", "title")),
        ([system(LIBRECHAT_LEGACY_TITLE)], ("librechat", "title")),
        ([user(LIBRECHAT_SUMMARY)], ("librechat", "summary")),
        ([user(LIBRECHAT_CUTOFF)], ("librechat", "summary")),
        (
            [user("I live in Lisbon."), assistant("Noted."), user(LIBRECHAT_CHECKPOINT)],
            ("librechat", "summary"),
        ),
        ([system(LOBECHAT_TITLE_SYSTEM), user(LOBECHAT_TITLE_USER)], ("lobechat", "title")),
        (
            [system(LOBECHAT_TITLE_SYSTEM_JSON), user(LOBECHAT_TITLE_USER_TAGGED)],
            ("lobechat", "title"),
        ),
        ([system(LOBECHAT_OLD_TITLE_SYSTEM), user(LOBECHAT_TITLE_USER)], ("lobechat", "title")),
        ([system(LOBECHAT_HISTORY_SYSTEM), user(LOBECHAT_HISTORY_USER)], ("lobechat", "summary")),
        ([user(CHATBOX_TITLE)], ("chatbox", "title")),
        ([system(CHATBOX_OLD_TITLE)], ("chatbox", "title")),
        ([system(CHATBOX_SEARCH), user("What's new in Lisbon?")], ("chatbox", "search_query")),
    ],
    ids=[
        "librechat-title",
        "librechat-structured-title",
        "librechat-legacy-title",
        "librechat-summary",
        "librechat-cutoff-summary",
        "librechat-checkpoint",
        "lobechat-title",
        "lobechat-title-json",
        "lobechat-old-title",
        "lobechat-history",
        "chatbox-title",
        "chatbox-old-title",
        "chatbox-search",
    ],
)
def test_housekeeping_of_other_apps_templates(messages, expected):
    assert housekeeping_of(messages) == Housekeeping(*expected)


@pytest.mark.parametrize(
    "messages",
    [
        # Each app's prompt in a conversation that does not have the app's layout.
        [user("hi"), assistant("Hello!"), user(LIBRECHAT_COMPLETION_TITLE)],
        [user("hi"), assistant("Hello!"), user(CHATBOX_TITLE)],
        [user(LIBRECHAT_SUMMARY), assistant("ok"), user("and?")],
        [user(LOBECHAT_HISTORY_USER)],
        [system("Be brief."), user(LOBECHAT_HISTORY_USER)],
        # A question after the prompt's closing line.
        [user(CHATBOX_TITLE + "\n\nWhy does Chatbox ask this?")],
        [user(LIBRECHAT_CHECKPOINT + "\n\nIs this how LibreChat compacts?")],
    ],
    ids=[
        "librechat-mid",
        "chatbox-mid",
        "summary-then-chat",
        "lobe-user-alone",
        "lobe-own-system",
        "chatbox-question-after",
        "checkpoint-question-after",
    ],
)
def test_housekeeping_of_other_apps_prompts_in_a_chat_is_none(messages):
    assert housekeeping_of(messages) is None


# --- the offline model's answers -----------------------------------------------------------------


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda path: path.stem)
def test_offline_task_answer_recorded_prompt_parses_as_open_webui_reads_it(path):
    data = recording(path)
    text = data["body"]["messages"][-1]["content"]
    answer = offline_task_answer(text)
    kind = data["kind"]
    if kind in CHAT_KINDS:
        assert answer is None
        return
    parsed = parsed_as_open_webui_does(answer)
    if kind == "title":
        assert set(parsed) == {"title"}
        assert isinstance(parsed["title"], str) and 0 < len(parsed["title"].split()) <= 6
    elif kind == "tags":
        assert parsed == {"tags": ["General"]}
    elif kind == "follow_ups":
        assert set(parsed) == {"follow_ups"}
        assert len(parsed["follow_ups"]) == 3
        assert all(isinstance(q, str) and q.endswith("?") for q in parsed["follow_ups"])
    elif kind == "autocomplete":
        assert parsed == {"text": ""}
    else:
        raise AssertionError(kind)


def test_offline_task_answer_title_is_from_the_first_user_message():
    assert parsed_as_open_webui_does(offline_task_answer(the_prompt("title"))) == {
        "title": "Lisbon Marine Biologist"
    }
    follow_ups = parsed_as_open_webui_does(offline_task_answer(the_prompt("follow_ups")))
    assert follow_ups["follow_ups"][0] == "What do you remember about Lisbon marine biologist?"


def test_offline_task_answer_other_open_webui_templates():
    assert parsed_as_open_webui_does(offline_task_answer(OPEN_WEBUI_QUERIES)) == {
        "queries": ["Lisbon"]
    }
    assert parsed_as_open_webui_does(offline_task_answer(OPEN_WEBUI_IMAGE)) == {
        "prompt": "Hi! I live in Lisbon."
    }
    assert parsed_as_open_webui_does(offline_task_answer(OPEN_WEBUI_TITLE_06)) == {
        "title": "Lisbon"
    }
    assert offline_task_answer(OPEN_WEBUI_TITLE_04) == "Lisbon"
    assert offline_task_answer(OPEN_WEBUI_EMOJI) == "🙂"
    assert parsed_as_open_webui_does(
        offline_task_answer("Query: weather?", system=OPEN_WEBUI_TOOLS)
    ) == {"tool_calls": []}


def test_offline_task_answer_reads_the_clients_instructions_in_a_turns_system_prompt():
    turn_system = (
        "You are Ethan.\n<memory_context>\n- The user lives in Lisbon.\n</memory_context>\n"
        f"The chat app's own instructions:\n<client_instructions>\n{LOBECHAT_TITLE_SYSTEM}\n"
        "</client_instructions>"
    )
    assert offline_task_answer(LOBECHAT_TITLE_USER, system=turn_system) == "Lisbon Marine Biologist"


def test_offline_task_answer_chinese_chat():
    prompt = the_prompt("title").replace(
        "Hi! I live in Lisbon and I work as a marine biologist.",
        "我住在里斯本，是一名海洋生物学家。",
    )
    assert parsed_as_open_webui_does(offline_task_answer(prompt)) == {"title": "我住在里斯本"}


@pytest.mark.parametrize(
    ("text", "system_prompt", "expected"),
    [
        (LIBRECHAT_COMPLETION_TITLE, "", "Lisbon Marine Biologist"),
        ("", LIBRECHAT_LEGACY_TITLE, "Lisbon Marine Biologist"),
        (CHATBOX_TITLE, "", "Lisbon Marine Biologist"),
        ("", CHATBOX_OLD_TITLE, "Lisbon Marine Biologist"),
        (LOBECHAT_TITLE_USER, LOBECHAT_TITLE_SYSTEM, "Lisbon Marine Biologist"),
        (
            LOBECHAT_TITLE_USER_TAGGED,
            LOBECHAT_TITLE_SYSTEM_JSON,
            '{"title": "Lisbon Marine Biologist"}',
        ),
        (LIBRECHAT_CUTOFF, "", "The user said: I live in Lisbon and I work as a mar"),
        ("What's new in Lisbon?", CHATBOX_SEARCH, '{"action": "proceed"}'),
    ],
    ids=[
        "librechat",
        "librechat-legacy",
        "chatbox",
        "chatbox-old",
        "lobechat",
        "lobechat-json",
        "librechat-cutoff",
        "chatbox-search",
    ],
)
def test_offline_task_answer_other_apps(text, system_prompt, expected):
    assert offline_task_answer(text, system=system_prompt) == expected


@pytest.mark.parametrize(
    "text",
    [
        "Hi! I live in Lisbon.",
        f"What do you make of this?\n{TRANSCRIPT}",
        'How do I make my model answer JSON format: { "title": "x" }?',
        "Why does Open WebUI send this?\n" + the_prompt("title"),
        "Provide a title for my essay on sardines.",
        '### Task:\nWrite my essay.\nJSON format: { "title": "x" }\nThanks!',
        "Provide a concise, 5-word-or-less title for the conversation, please!",
        "Name the conversation based on the chat records. It was about sardines.",
        "Summarize the conversation by integrating new lines into the current summary.",
        "Your task is to reflect the speaker's likely facial expression through a fitting emoji.",
        CHATBOX_TITLE + "\n\nWhy does Chatbox ask this?",
    ],
)
def test_offline_task_answer_a_chat_is_none(text):
    assert offline_task_answer(text) is None


# --- the tally -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_housekeeping_count_increments_one_row_per_app_kind_and_day(caplog):
    day = date(2026, 12, 6)
    with caplog.at_level(logging.INFO, logger="channels_app.openai.housekeeping_tally"):
        housekeeping_count(app="open-webui", kind="title", day=day)
        housekeeping_count(app="open-webui", kind="title", day=day)
        housekeeping_count(app="open-webui", kind="tags", day=day)
        housekeeping_count(app="open-webui", kind="title", day=date(2026, 12, 7))
    rows = HousekeepingTally.objects.order_by("day", "kind").values_list(
        "app", "kind", "day", "count"
    )
    assert list(rows) == [
        ("open-webui", "tags", day, 1),
        ("open-webui", "title", day, 2),
        ("open-webui", "title", date(2026, 12, 7), 1),
    ]
    assert [r.getMessage() for r in caplog.records].count(
        "housekeeping request recognised: app=open-webui kind=title (not stored)"
    ) == 3


@pytest.mark.django_db
def test_housekeeping_count_today_by_default():
    housekeeping_count(app="librechat", kind="summary")
    assert HousekeepingTally.objects.get().day == timezone.localdate()


@pytest.mark.django_db
def test_housekeeping_count_after_a_lost_race_to_create_the_row(monkeypatch):
    """Another request created the day's row between this one's UPDATE and INSERT: the insert
    fails on the unique constraint and the count goes to that row."""
    day = date(2026, 12, 6)
    HousekeepingTally.objects.create(app="chatbox", kind="title", day=day, count=1)
    updates = []
    update = QuerySet.update

    def first_update_before_the_other_insert(self, **kwargs):
        updates.append(kwargs)
        return 0 if len(updates) == 1 else update(self, **kwargs)

    monkeypatch.setattr(QuerySet, "update", first_update_before_the_other_insert)
    housekeeping_count(app="chatbox", kind="title", day=day)
    monkeypatch.undo()
    assert HousekeepingTally.objects.get().count == 2
    assert len(updates) == 2


@pytest.mark.django_db
def test_housekeeping_tally_admin_lists_rows_read_only(admin_client):
    HousekeepingTally.objects.create(
        app="open-webui", kind="follow_ups", day=date(2026, 12, 6), count=7
    )
    page = admin_client.get("/admin/channels/housekeepingtally/")
    assert page.status_code == 200
    assert b"follow_ups" in page.content and b"open-webui" in page.content
    assert admin_client.get("/admin/channels/housekeepingtally/add/").status_code == 403
