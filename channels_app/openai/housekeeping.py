"""Which requests to /v1/chat/completions are a chat app's housekeeping, not the person talking.

Chat apps ask their model for titles, tags, follow-up suggestions, autocompletion, search
queries, an emoji, an image prompt or a summary, each as one prompt that pastes the chat
(`### Task: … <chat_history> USER: … </chat_history>`). Such a request only serves the app: it
is answered by the person's model and leaves nothing behind (docs/openai.md).

`housekeeping_of(messages)` reads the request's raw `messages` and says which app's task it is,
or None for a chat. It is pure (no database, no settings) and cheap: it reads only the head and
the tail of the first and last messages, with precompiled patterns, so a long chat costs what a
short one does.

Recognised by each app's own templates, read from its source (the facts: their distinctive
phrases and where they stand), never by one phrase. A task request must have the app's shape:
- the app's message layout (Open WebUI: one user message, after any system prompt the person
  gave the model; LobeChat: its system prompt and one user message; …);
- the template's opening line at the very start of its message;
- its structure lines (Open WebUI: the "### Guidelines:" section and the output-format line);
- its closing line at the very end (Open WebUI: "</chat_history>", autocomplete's
  "#### Output:").
So a person who pastes a transcript, or an app's whole prompt with a question around it, or in
the middle of a conversation, is chatting: their message does not start and end as the
template does, or the request does not have the app's layout.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

# How much of a message's start and end is read: the templates' structure lines all stand in
# their first 2,500 characters (Open WebUI's query template, the longest, is about 1,900 before
# its chat history) and their closing lines in the last few dozen.
HEAD = 4096
TAIL = 512

OPEN_WEBUI = "open-webui"
LIBRECHAT = "librechat"
LOBECHAT = "lobechat"
CHATBOX = "chatbox"


@dataclass(frozen=True)
class Housekeeping:
    """A recognised task request: which app sent it and what for (title, tags, follow_ups,
    autocomplete, search_query, emoji, image_prompt, function_calling, moa, summary)."""

    app: str
    kind: str


@dataclass(frozen=True)
class _Ends:
    """A message's role and the start and end of its text, whitespace trimmed."""

    role: str
    head: str
    tail: str


def _ends(message: object) -> _Ends | None:
    """The role and the two ends of a message's text (a string, or a list of parts whose text
    parts are read); None for anything that is not an OpenAI message."""
    if not isinstance(message, dict):
        return None
    role = message.get("role")
    content = message.get("content")
    if not isinstance(role, str):
        return None
    if isinstance(content, str):
        first = last = content
    elif isinstance(content, list):
        texts = [
            part.get("text")
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        ]
        texts = [text for text in texts if isinstance(text, str)]
        if not texts:
            return _Ends(role, "", "")
        # Parts join with a newline, as the door reads them (channels_app.openai.conversations);
        # only the first parts' start and the last parts' end matter here.
        first, last = texts[0], texts[-1]
        if len(texts) > 1 and len(first) < HEAD:
            first = "\n".join(texts)[: HEAD + 64]
        if len(texts) > 1 and len(last) < TAIL:
            last = "\n".join(texts)[-TAIL - 64 :]
    elif content is None:
        first = last = ""
    else:
        return None
    # Slice before stripping: a message of a megabyte costs no more than one of a kilobyte.
    return _Ends(role, first[: HEAD + 64].lstrip()[:HEAD], last[-TAIL - 64 :].rstrip()[-TAIL:])


INSTRUCTION_ROLES = frozenset({"system", "developer"})


def _c(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


# --- Open WebUI ----------------------------------------------------------------------------------
# backend/open_webui/config.py, DEFAULT_*_PROMPT_TEMPLATE, sent by routers/tasks.py as
# `messages: [{"role": "user", "content": <the template filled in>}]` (a model the person set up
# in its workspace with a system prompt gets that system message first). Each template opens
# with "### Task:" and its task line, has a guidelines section and an output-format line, and
# closes with the pasted chat (`<chat_history>{{MESSAGES:END:n}}</chat_history>`) or, for
# autocomplete, with `<text>{{PROMPT}}</text>` and "#### Output:".

_OWUI_TASK = _c(r"\A### Task:[ \t]*\r?\n(?P<line>[^\r\n]+)")
_OWUI_GUIDELINES = _c(r"\n### Guidelines:[ \t]*\r?\n")
_OWUI_CHAT_END = _c(r"</chat_history>\Z")


@dataclass(frozen=True)
class _OpenWebUiTask:
    kind: str
    task_line: re.Pattern[str]  # matched at the start of the task line
    structure: tuple[re.Pattern[str], ...]  # each found in the head
    closing: re.Pattern[str]  # matched at the end of the tail


_OPEN_WEBUI_TASKS = (
    _OpenWebUiTask(
        "title",
        # 0.6.x's "Generate a concise, 3-5 word title with an emoji summarizing the chat
        # history." and 0.12's "Generate a concise title summarizing the chat history."
        _c(r"Generate a concise(?:, 3-5 word)? title(?: with an emoji)? summarizing the chat"),
        (_OWUI_GUIDELINES, _c(r'\n### Output:[ \t]*\r?\nJSON format: \{ *"title": ')),
        _OWUI_CHAT_END,
    ),
    _OpenWebUiTask(
        "tags",
        _c(r"Generate 1-3 broad tags categorizing the main themes of the chat history"),
        (_OWUI_GUIDELINES, _c(r'\n### Output:[ \t]*\r?\nJSON format: \{ *"tags": \[')),
        _OWUI_CHAT_END,
    ),
    _OpenWebUiTask(
        "follow_ups",
        # 0.6.x "Suggest 3-5 relevant follow-up questions or prompts …", 0.12 "Predict 3-5
        # useful messages this user might naturally send next …".
        _c(
            r"(?:Suggest 3-5 relevant follow-up questions or prompts"
            r"|Predict 3-5 useful messages this user might naturally send next)"
        ),
        (_OWUI_GUIDELINES, _c(r'\n### Output:[ \t]*\r?\nJSON format: \{ *"follow_ups": \[')),
        _OWUI_CHAT_END,
    ),
    _OpenWebUiTask(
        "search_query",
        _c(r"Analyze the chat history to determine the necessity of generating search queries"),
        (_OWUI_GUIDELINES, _c(r"\n### Output:[ \t]*\r?\nStrictly return in JSON format: *\r?\n")),
        _OWUI_CHAT_END,
    ),
    _OpenWebUiTask(
        "image_prompt",
        # "am image generation task" is the template's own spelling.
        _c(r"Generate a detailed prompt for a[mn]? image generation task"),
        (_OWUI_GUIDELINES, _c(r'\n\s*"prompt": "Your detailed description here\."')),
        _OWUI_CHAT_END,
    ),
    _OpenWebUiTask(
        "autocomplete",
        _c(r"You are an autocompletion system\. Continue the text in `<text>`"),
        (
            _c(r"\n### \*\*Instructions\*\*:"),
            _c(r'\n- Respond only in JSON format: `\{ "text": '),
        ),
        _c(r"</text>[ \t]*\r?\n#### Output:\Z"),
    ),
)

# The title template before 0.5 (plain text, no "### Task:"): its instruction, the examples, the
# pasted chat.
_OWUI_OLD_TITLE_START = _c(
    r"\ACreate a concise, 3-5 word title with an emoji as a title for the chat history, in the"
    r" given language\."
)
_OWUI_OLD_TITLE_BODY = _c(
    r"RESPOND ONLY WITH THE TITLE TEXT\.\s*\r?\n\r?\nExamples of titles:\r?\n"
)

# DEFAULT_EMOJI_GENERATION_PROMPT_TEMPLATE (routers/tasks.py /emoji/completions): the message
# is the template with the person's message in a fence.
_OWUI_EMOJI_START = _c(
    r"\AYour task is to reflect the speaker's likely facial expression through a fitting emoji\."
    r" Interpret emotions from the message"
)
_OWUI_EMOJI_MESSAGE = _c(r"\n\r?\nMessage: ```")
_OWUI_EMOJI_END = _c(r"```\Z")

# DEFAULT_MOA_GENERATION_PROMPT_TEMPLATE (Mixture of Agents, /moa/completions): the person's
# question in quotes, the instruction to synthesise, then the models' answers.
_OWUI_MOA_START = _c(
    r"\AYou have been provided with a set of responses from various models to the latest user"
    r' query: "'
)
_OWUI_MOA_BODY = _c(
    r"\n\r?\nYour task is to synthesize these responses into a single, high-quality response\."
)

# DEFAULT_TOOLS_FUNCTION_CALLING_PROMPT_TEMPLATE, sent by utils/middleware.py's
# get_tools_function_calling_payload as [system: the template with the tools' specs,
# user: "Query: …" or "History:\n… \nQuery: …"] (the "default", prompt-based function calling).
_OWUI_TOOLS_START = _c(r"\AAvailable Tools: ")
_OWUI_TOOLS_END = _c(
    r'"tool_calls": \[\s*\{"name": "toolName1", "parameters": \{"key1": "value1"\}\},'
    r'\s*\{"name": "toolName2", "parameters": \{"key2": "value2"\}\}\s*\]\s*\}\Z'
)
_OWUI_TOOLS_QUERY = _c(r"\A(?:Query: |History:\r?\n)")


def _open_webui(messages: list, first: _Ends, last: _Ends) -> Housekeeping | None:
    if (
        len(messages) == 2
        and first.role == "system"
        and last.role == "user"
        and _OWUI_TOOLS_START.match(first.head)
        and _OWUI_TOOLS_END.search(first.tail)
        and _OWUI_TOOLS_QUERY.match(last.head)
    ):
        return Housekeeping(OPEN_WEBUI, "function_calling")
    # One user message, after the system prompt of a workspace model if there is one.
    if last.role != "user" or not _only_instructions_before(messages):
        return None
    task = _OWUI_TASK.match(last.head)
    if task:
        line = task["line"]
        for spec in _OPEN_WEBUI_TASKS:
            if (
                spec.task_line.match(line)
                and all(pattern.search(last.head) for pattern in spec.structure)
                and spec.closing.search(last.tail)
            ):
                return Housekeeping(OPEN_WEBUI, spec.kind)
        return None
    if (
        _OWUI_OLD_TITLE_START.match(last.head)
        and _OWUI_OLD_TITLE_BODY.search(last.head)
        and _OWUI_CHAT_END.search(last.tail)
    ):
        return Housekeeping(OPEN_WEBUI, "title")
    if (
        _OWUI_EMOJI_START.match(last.head)
        and _OWUI_EMOJI_MESSAGE.search(last.head)
        and _OWUI_EMOJI_END.search(last.tail)
    ):
        return Housekeeping(OPEN_WEBUI, "emoji")
    if _OWUI_MOA_START.match(last.head) and _OWUI_MOA_BODY.search(last.head):
        return Housekeeping(OPEN_WEBUI, "moa")
    return None


def _only_instructions_before(messages: list) -> bool:
    """Whether every message before the last is a system (or developer) message."""
    for message in messages[:-1]:
        if not isinstance(message, dict) or message.get("role") not in INSTRUCTION_ROLES:
            return False
    return True


# --- LibreChat -----------------------------------------------------------------------------------
# Titles. @librechat/agents src/utils/title.ts: the "completion" method (LibreChat's default)
# sends one human message, "Provide a concise, 5-word-or-less title for the conversation,
# using title case conventions. Only return the title itself.\n\nConversation:\n{convo}"; the
# "structured" one "Analyze this conversation and provide:\n1. The detected language of the
# conversation\n2. A concise title in the detected language (5 words or less, no punctuation or
# quotation)\n\n{convo}"; {convo} is "User: {input}\nAI: {output}". The older clients
# (api/app/clients, titlePrompts.js titleInstruction) send one system message "Please generate
# a concise, 5-word-or-less title for the conversation, using its same language, with no
# punctuation. …\n\n||>User:\n\"…\"\n||>Response:\n\"…\"\n\n||>Title:".
_LC_TITLE_COMPLETION = _c(
    r"\AProvide a concise, 5-word-or-less title for the conversation, using title case"
    r" conventions\. Only return the title itself\.\s*\r?\n\r?\nConversation:\r?\n"
)
_LC_TITLE_STRUCTURED = _c(
    r"\AAnalyze this conversation and provide:\r?\n1\. The detected language of the"
    r" conversation\r?\n2\. A concise title in the detected language \(5 words or less, no"
    r" punctuation or quotation\)\r?\n"
)
_LC_TITLE_LEGACY = _c(r"\APlease generate a concise, 5-word-or-less title for the conversation")
_LC_TITLE_LEGACY_CONVO = _c(r"\|\|>User:\r?\n")
_LC_TITLE_LEGACY_END = _c(r"\|\|>Title:\Z")
# Summaries. api/app/clients/prompts/summaryPrompts.js: SUMMARY_PROMPT ("Summarize the
# conversation by integrating new lines into the current summary.\n\nEXAMPLE:\n…New summary:")
# and CUT_OFF_PROMPT ("The following text is cut-off:\n{new_lines}\n\nSummarize the content as
# best as you can, noting that it was cut-off.\n\nSummary:"), each one message.
_LC_SUMMARY_START = _c(
    r"\ASummarize the conversation by integrating new lines into the current summary\.\s*"
    r"\r?\n\r?\nEXAMPLE:\r?\nCurrent summary:\r?\n"
)
_LC_SUMMARY_END = _c(r"\r?\nNew summary:\Z")
_LC_CUTOFF_START = _c(r"\AThe following text is cut-off:\r?\n")
_LC_CUTOFF_END = _c(
    r"\r?\n\r?\nSummarize the content as best as you can, noting that it was cut-off\."
    r"\r?\n\r?\nSummary:\Z"
)
# The agents' context compaction (@librechat/agents src/summarization/shared.ts,
# DEFAULT_SUMMARIZATION_PROMPT / DEFAULT_UPDATE_SUMMARIZATION_PROMPT): the conversation, then
# the checkpoint instruction as the last message.
_LC_CHECKPOINT_START = _c(
    r"\AHold on(?:, before you continue I need you to write me a checkpoint of everything so"
    r" far\.| again, update your checkpoint\.)"
)
_LC_CHECKPOINT_RULES = _c(r"\r?\nRules:\r?\n- ")
_LC_CHECKPOINT_END = _c(r"(?:- Skip empty sections|</previous-summary>)\Z")


def _librechat(messages: list, first: _Ends, last: _Ends) -> Housekeeping | None:
    if len(messages) == 1:
        head, tail = last.head, last.tail
        if _LC_TITLE_COMPLETION.match(head) or _LC_TITLE_STRUCTURED.match(head):
            return Housekeeping(LIBRECHAT, "title")
        if (
            _LC_TITLE_LEGACY.match(head)
            and _LC_TITLE_LEGACY_CONVO.search(head)
            and _LC_TITLE_LEGACY_END.search(tail)
        ):
            return Housekeeping(LIBRECHAT, "title")
        if _LC_SUMMARY_START.match(head) and _LC_SUMMARY_END.search(tail):
            return Housekeeping(LIBRECHAT, "summary")
        if _LC_CUTOFF_START.match(head) and _LC_CUTOFF_END.search(tail):
            return Housekeeping(LIBRECHAT, "summary")
    if (
        _LC_CHECKPOINT_START.match(last.head)
        and _LC_CHECKPOINT_RULES.search(last.head)
        and _LC_CHECKPOINT_END.search(last.tail)
    ):
        return Housekeeping(LIBRECHAT, "summary")
    return None


# --- LobeChat ------------------------------------------------------------------------------------
# src/chains/summaryTitle.ts (chainSummaryTitle: a topic's title) and summaryHistory.ts
# (chainSummaryHistory: the history compressed), each [system: the instruction, user: the
# conversation]. The title's system prompt has been, over the versions, "You are a professional
# conversation summarizer. Generate a concise title that captures the essence of the
# conversation.\n\nRules:\n…", "You are an assistant skilled at conversations. You need to
# summarize the user's conversation into a title within 10 characters" and its Chinese
# original; the history's "You're an assistant who's good at extracting key takeaways … from
# conversations and summarizing them.", its user message closing with "Please summarize the
# above conversation and retain key information…".
_LOBE_TITLE_SYSTEM = _c(
    r"\A(?:You are a professional conversation summarizer\. Generate a concise title that"
    r" captures the essence of the conversation\.\s*\r?\n\r?\nRules:\r?\n- "
    r"|You are an assistant skilled (?:at|in) conversations?(?: who needs|\. You need) to"
    r" summarize (?:the )?user(?:'s)? conversations? into (?:a )?titles? within 10 characters"
    r"|你是一名擅长会话的助理，你需要将用户的会话总结为 ?10 ?个字以内的标题)"
)
_LOBE_HISTORY_SYSTEM = _c(
    r"\AYou're an assistant who's good at extracting key takeaways (?:and important pieces of"
    r" data )?from conversations and summarizing them\. Please summarize according to the"
    r" user's needs\. The content you need to summarize is located in the <chat_history>"
)
_LOBE_HISTORY_USER_START = _c(r"\A<chat_history>")
_LOBE_HISTORY_USER_END = _c(
    r"</chat_history>\s*\r?\n\r?\nPlease summarize the above conversation and retain key"
    r" information[^\n]*\Z"
)


def _lobechat(messages: list, first: _Ends, last: _Ends) -> Housekeeping | None:
    if len(messages) != 2 or first.role != "system" or last.role != "user":
        return None
    if _LOBE_TITLE_SYSTEM.match(first.head):
        return Housekeeping(LOBECHAT, "title")
    if (
        _LOBE_HISTORY_SYSTEM.match(first.head)
        and _LOBE_HISTORY_USER_START.match(last.head)
        and _LOBE_HISTORY_USER_END.search(last.tail)
    ):
        return Housekeeping(LOBECHAT, "summary")
    return None


# --- Chatbox -------------------------------------------------------------------------------------
# src/renderer/packages/prompts.ts nameConversation: one message (system in early versions,
# user since) "Name the conversation based on the chat records.\n… The conversation is named:"
# or, since 1.x, "Based on the chat history, give this conversation a name.\n… The name is:",
# the first messages in a ``` fence. contructSearchAction / constructKnowledgeBaseSearchAction /
# constructCombinedSearchAction: a system prompt asking whether and what to search, answered
# with JSON, before the conversation.
_CHATBOX_TITLE_START = _c(
    r"\A(?:Name the conversation based on the chat records\."
    r"|Based on the chat history, give this conversation a (?:name|title)\.)\r?\n"
)
_CHATBOX_TITLE_FENCE = _c(r"\r?\n```\r?\n")
_CHATBOX_TITLE_END = _c(
    r"(?:The conversation is named:|The name is:|Only give the (?:name|title), nothing else\.)\Z"
)
_CHATBOX_SEARCH_START = _c(
    r"\AAs a professional (?:web researcher who can access latest data|knowledge base"
    r" researcher|researcher with access to both knowledge base and web search), your primary"
    r" objective is to fully comprehend the user's query"
)
_CHATBOX_SEARCH_END = _c(
    r"\r?\nYou MUST answer with a JSON object that matches the JSON schema above\.\Z"
)


def _chatbox(messages: list, first: _Ends, last: _Ends) -> Housekeeping | None:
    if (
        len(messages) == 1
        and _CHATBOX_TITLE_START.match(first.head)
        and _CHATBOX_TITLE_FENCE.search(first.head)
        and _CHATBOX_TITLE_END.search(first.tail)
    ):
        return Housekeeping(CHATBOX, "title")
    if (
        len(messages) >= 2
        and first.role == "system"
        and _CHATBOX_SEARCH_START.match(first.head)
        and _CHATBOX_SEARCH_END.search(first.tail)
    ):
        return Housekeeping(CHATBOX, "search_query")
    return None


_APPS: tuple[Callable[[list, _Ends, _Ends], Housekeeping | None], ...] = (
    _open_webui,
    _librechat,
    _lobechat,
    _chatbox,
)


def housekeeping_of(messages: object) -> Housekeeping | None:
    """Which app's task request `messages` (a request's raw OpenAI messages) is, or None for a
    chat (and for anything that is not a list of messages: the door reports those)."""
    if not isinstance(messages, list) or not messages:
        return None
    first = _ends(messages[0])
    last = first if len(messages) == 1 else _ends(messages[-1])
    if first is None or last is None:
        return None
    for app in _APPS:
        found = app(messages, first, last)
        if found is not None:
            return found
    return None
