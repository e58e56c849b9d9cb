"""The offline model's answers to a chat app's housekeeping prompts, in the shape each asks for.

Chat apps ask their model for a title, tags, follow-up suggestions, an autocompletion, search
queries… and parse the answer: Open WebUI cuts the text from its first "{" to its last "}" and
reads `title`, `tags`, `follow_ups`, `queries`, `prompt` or `text` from the JSON
(backend/open_webui/utils/middleware.py, routers/tasks.py); LibreChat, LobeChat and Chatbox take
the answer's text as the title. With no key, the offline model answers these from the chat the
prompt pastes, so the app's titles and follow-ups work: a few words of the first thing the
person said, ["General"] for tags (the template's own rule for a short chat), three questions
the person might ask Ethan next.

`offline_task_answer(text, system)` reads the last user message (and the system prompt, where
an app puts its instruction) and answers, or returns None for anything that is not such a
prompt: the offline model then answers it as a chat. A prompt is recognised by where its
template's lines stand (its first line at the very start, its closing line at the very end),
as channels_app.openai.housekeeping recognises the request; the model layer imports no door, so the
few phrases it needs are kept here. Plain Python: the model layer never imports Django.
"""

from __future__ import annotations

import json
import re

from ethan_llm.text import language_of

HEAD = 4096

# --- which prompt --------------------------------------------------------------------------------

_OWUI = re.compile(r"\A\s*### Task:[ \t]*\r?\n")
# Where Open WebUI's templates end: the pasted chat, or autocomplete's typed text.
_OWUI_END = re.compile(r"(?:</chat_history>|</text>\s*#### Output:)\s*\Z")
_OWUI_OUTPUT = {
    "title": re.compile(r'JSON format: \{ *"title": '),
    "tags": re.compile(r'JSON format: \{ *"tags": \['),
    "follow_ups": re.compile(r'JSON format: \{ *"follow_ups": \['),
    "queries": re.compile(r'\{ *"queries": \["query1"'),
    "image_prompt": re.compile(r'"prompt": "Your detailed description here\."'),
    "autocomplete": re.compile(r"You are an autocompletion system\."),
}
_OWUI_OLD_TITLE = re.compile(
    r"\A\s*Create a concise, 3-5 word title with an emoji as a title for the chat history"
    r"[\s\S]*</chat_history>\s*\Z"
)
_OWUI_EMOJI = re.compile(
    r"\A\s*Your task is to reflect the speaker's likely facial expression through a fitting emoji"
)
_OWUI_TOOLS = re.compile(r"\A\s*Available Tools: [\s\S]*Your task is to choose and return the")
_LIBRECHAT_TITLE = re.compile(
    r"\A\s*(?:Provide a concise, 5-word-or-less title for the conversation[^\n]*\r?\n\r?\n"
    r"Conversation:\r?\n"
    r"|Please generate a concise, 5-word-or-less title for the conversation[\s\S]*\|\|>Title:\s*\Z)"
)
_LIBRECHAT_STRUCTURED_TITLE = re.compile(
    r"\A\s*Analyze this conversation and provide:\r?\n1\. The detected language"
)
_LIBRECHAT_SUMMARY = re.compile(
    r"\A\s*(?:Summarize the conversation by integrating new lines into the current summary\."
    r"|The following text is cut-off:)"
)
_LIBRECHAT_SUMMARY_END = re.compile(r"\n(?:New summary|Summary):\s*\Z")
_LOBE_TITLE = re.compile(
    r"\A\s*(?:You are a professional conversation summarizer\. Generate a concise title"
    r"|You are an assistant skilled (?:at|in) conversations?"
    r"|你是一名擅长会话的助理，你需要将用户的会话总结为)"
)
_LOBE_TITLE_JSON = re.compile(r'Return one JSON object with a single "title" string')
_LOBE_HISTORY = re.compile(r"\A\s*You're an assistant who's good at extracting key takeaways")
_CHATBOX_TITLE = re.compile(
    r"\A\s*(?:Name the conversation based on the chat records\."
    r"|Based on the chat history, give this conversation a (?:name|title)\.)"
)
_CHATBOX_TITLE_END = re.compile(
    r"(?:The conversation is named:|The name is:|Only give the (?:name|title), nothing else\.)"
    r"\s*\Z"
)
_CHATBOX_SEARCH = re.compile(
    r"\A\s*As a professional (?:web researcher|knowledge base researcher|researcher with access)"
    r"[\s\S]*You MUST answer with a JSON object that matches the JSON schema above\.\s*\Z"
)

# --- what the pasted chat says -------------------------------------------------------------------

# Open WebUI's `<chat_history>` lines ("USER: …" / "ASSISTANT: …"), LibreChat's
# "User: …\nAI: …", LobeChat's "user: …\nassistant: …": a message runs to the next role line.
_ROLE_LINE = re.compile(
    r"^(USER|User|user|Human|ASSISTANT|Assistant|assistant|AI|SYSTEM|system):[ \t]?(.*)$",
    re.MULTILINE,
)
_LOBE_USER = re.compile(r"<user>\r?\n([\s\S]*?)\r?\n</user>")
_LIBRECHAT_LEGACY_USER = re.compile(r'\|\|>User:\r?\n"([\s\S]*?)"\r?\n\s*\|\|>Response:')
_FENCE = re.compile(r"```\r?\n([\s\S]*?)\r?\n```")
_AUTOCOMPLETE_TEXT = re.compile(r"<text>([\s\S]*?)</text>\s*#### Output:\s*\Z")
_CHAT_HISTORY = re.compile(r"<chat_history>([\s\S]*?)</chat_history>")

_WORD = re.compile(r"[A-Za-zÀ-ÖØ-öø-ÿ0-9][A-Za-zÀ-ÖØ-öø-ÿ0-9'’-]*")
_GREETING = re.compile(
    r"\A\s*(?:hi|hello|hey|good (?:morning|afternoon|evening)|你好|您好|嗨)[\s!,.！，。]*",
    re.IGNORECASE,
)
# Words that say little of what a chat is about: a title and a search are made of the others.
_STOPWORDS = frozenset(
    """a about above after again all am an and any are as at be been being but by can could did
    do does doing for from had has have having he her here hers him his how i i'm i’m if in
    into is it it's its just know let like live lives lived living me mine more most my no not
    now of off on once only or other our ours out over please so some still such tell than
    that the their them then there these they this those to too under until up very want was
    we were what when where which while who whom why will with work works working would you
    your yours yes also really think thanks thank ok okay got get gets need needs named
    called""".split()
)


def _user_messages(chat: str) -> list[str]:
    """What the person said in a pasted chat, in order (empty when no roles are marked)."""
    lobe = [text.strip() for text in _LOBE_USER.findall(chat)]
    if lobe:
        return [text for text in lobe if text]
    legacy = [text.strip() for text in _LIBRECHAT_LEGACY_USER.findall(chat)]
    if legacy:
        return [text for text in legacy if text]
    said: list[str] = []
    lines = list(_ROLE_LINE.finditer(chat))
    for index, line in enumerate(lines):
        if line[1].lower() not in ("user", "human"):
            continue
        end = lines[index + 1].start() if index + 1 < len(lines) else len(chat)
        text = (line[2] + chat[line.end() : end]).strip()
        # Open WebUI's history ends at its closing tag, a LibreChat summary's lines at the
        # blank line before its instruction: a message's first paragraph says what it is about.
        text = text.split("</chat_history>")[0].strip().split("\n\n")[0].strip()
        if text:
            said.append(text)
    return said


def _pasted_chat(text: str) -> str:
    """The part of a prompt that holds the chat (Open WebUI's <chat_history>, a fence), or
    the whole prompt."""
    found = _CHAT_HISTORY.search(text)
    if found:
        return found[1]
    return text


def _keywords(text: str, limit: int) -> list[str]:
    text = _GREETING.sub("", text)
    words = [word for word in _WORD.findall(text) if word.lower() not in _STOPWORDS]
    return words[:limit]


def _chinese_title(text: str) -> str:
    """The first clause of a Chinese message, at most ten characters (LobeChat's and Chatbox's
    own limit for a title)."""
    clause = re.split(r"[，。！？；,.!?;\n]", _GREETING.sub("", text).strip())[0]
    return re.sub(r"[\s、：“”‘’（）:\"'()]", "", clause)[:10]


def _title(said: list[str]) -> str:
    """A few words of the first thing the person said: its words that carry meaning, title
    cased, else its first words (a question made only of small words)."""
    first = said[0] if said else ""
    if not first:
        return "New Chat"
    if language_of(first) == "zh":
        return _chinese_title(first) or "新对话"
    words = _keywords(first, 4)
    if not words:
        words = _WORD.findall(_GREETING.sub("", first))[:6] or _WORD.findall(first)[:6]
    title = " ".join(word[:1].upper() + word[1:] for word in words)
    return title or "New Chat"


def _topic(said: list[str]) -> str:
    """What the latest thing the person said is about, in a few of its words."""
    latest = said[-1] if said else ""
    return " ".join(_keywords(latest, 4))


def _follow_ups(said: list[str]) -> list[str]:
    """Three messages the person might send Ethan next, in their language."""
    latest = said[-1] if said else ""
    if language_of(latest) == "zh":
        topic = _chinese_title(latest)
        first = f"关于{topic}你还记得什么？" if topic else "你还记得我什么？"
        return [first, "你还知道我哪些事？", "帮我总结一下我告诉过你的事。"]
    topic = _topic(said)
    first = f"What do you remember about {topic}?" if topic else "What do you remember about me?"
    return [first, "What else do you know about me?", "Can you sum up what I've told you so far?"]


def _summary(said: list[str]) -> str:
    if not said:
        return "Nothing was said yet."
    return "The user said: " + " / ".join(said)[:600]


def _json(payload: dict) -> str:
    return json.dumps(payload, ensure_ascii=False)


def _open_webui_answer(text: str) -> str | None:
    head = text[:HEAD]
    kind = next((kind for kind, output in _OWUI_OUTPUT.items() if output.search(head)), None)
    if kind is None:
        return None
    if kind == "autocomplete":
        # The template's own answer when unsure: the offline model does not guess the rest of
        # the person's sentence.
        typed = _AUTOCOMPLETE_TEXT.search(text[-HEAD:])
        return _json({"text": ""}) if typed else None
    said = _user_messages(_pasted_chat(text))
    if kind == "title":
        return _json({"title": _title(said)})
    if kind == "tags":
        return _json({"tags": ["General"]})
    if kind == "follow_ups":
        return _json({"follow_ups": _follow_ups(said)})
    if kind == "queries":
        topic = _topic(said)
        return _json({"queries": [topic] if topic else []})
    latest = said[-1] if said else ""
    return _json({"prompt": latest[:400]})


# Where a turn puts the client's own system messages in its system prompt (agent_app.prompts),
# as the offline model reads <memory_context> there.
_CLIENT_INSTRUCTIONS = re.compile(
    r"<client_instructions>\r?\n([\s\S]*?)\r?\n</client_instructions>"
)


def offline_task_answer(text: str, system: str = "") -> str | None:
    """The offline model's answer to a chat app's housekeeping prompt (`text`: the last user
    message; `system`: the request's system prompt, where LobeChat and Open WebUI's function
    calling put their instruction: the client's own, or a turn's with the client's in its
    <client_instructions> block), or None when it is no such prompt."""
    instructions = _CLIENT_INSTRUCTIONS.search(system)
    if instructions:
        system = instructions[1]
    if _OWUI.match(text) and _OWUI_END.search(text[-HEAD:]):
        return _open_webui_answer(text)
    if _OWUI_OLD_TITLE.match(text[:HEAD] + text[-HEAD:]):
        # Open WebUI before 0.5 took the answer's text as the title.
        return _title(_user_messages(_pasted_chat(text)))
    if _OWUI_EMOJI.match(text) and text.rstrip().endswith("```"):
        return "🙂"
    if _OWUI_TOOLS.match(system[:HEAD] + system[-HEAD:]):
        return _json({"tool_calls": []})
    # LibreChat's older clients and Chatbox's first versions sent their title prompt as the
    # system message, with no user message.
    prompt = text or system
    if _LIBRECHAT_TITLE.match(prompt[:HEAD] + prompt[-HEAD:]):
        return _title(_user_messages(prompt))
    if _LIBRECHAT_STRUCTURED_TITLE.match(text):
        said = _user_messages(text)
        language = "Chinese" if said and language_of(said[0]) == "zh" else "English"
        return _json({"language": language, "title": _title(said)})
    if _LIBRECHAT_SUMMARY.match(text) and _LIBRECHAT_SUMMARY_END.search(text[-HEAD:]):
        return _summary(_user_messages(text))
    if _CHATBOX_TITLE.match(prompt) and _CHATBOX_TITLE_END.search(prompt[-HEAD:]):
        fence = _FENCE.search(prompt)
        if fence:
            return _title([fence[1].split("---------")[0].strip()])
    if _CHATBOX_SEARCH.match(system):
        return _json({"action": "proceed"})
    if _LOBE_TITLE.match(system):
        said = _user_messages(text)
        title = _title(said)
        return _json({"title": title}) if _LOBE_TITLE_JSON.search(system) else title
    if _LOBE_HISTORY.match(system):
        return _summary(_user_messages(text))
    return None
