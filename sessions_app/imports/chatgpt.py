"""A ChatGPT export's conversation → Conversation.

Each conversation is a tree: `mapping` holds its nodes ({id, message, parent, children}), and
`current_node` the last message of the branch the person saw. Following parents from there to
the root gives that branch; the versions of an edited message that were left behind, and the
answers regenerated away, are not on it and are not imported.

Kept: text parts and code (fenced), as written. Other parts become a short placeholder: an
image "[image]", a file "[file: name]", the assistant calling a tool "[tool use: browser]",
a tool's output "[tool output]" (an image it made "[image]"), a web result "[web page: title]".
Skipped: what ChatGPT itself hides (system messages, the custom instructions it sends along,
metadata.is_visually_hidden_from_conversation) and the model's private reasoning. The model is
the conversation's default_model_slug, else the last assistant message's model_slug.
"""

from __future__ import annotations

from typing import Any

from sessions_app.imports.export import Conversation, Turn, clean, merged, shape_error, when

SOURCE = "chatgpt"

# Content types that are not part of the conversation as shown: context ChatGPT adds, and the
# model's reasoning.
HIDDEN_TYPES = {
    "user_editable_context",
    "model_editable_context",
    "thoughts",
    "reasoning_recap",
    "system_error",
}


def _part(part: Any) -> str:
    """One part of a text or multimodal message: its text, or a placeholder."""
    if isinstance(part, str):
        return part
    if not isinstance(part, dict):
        return ""
    kind = str(part.get("content_type") or "")
    if kind == "audio_transcription":
        return str(part.get("text") or "")
    if "image" in kind:
        return "[image]"
    if "audio" in kind:
        return "[audio]"
    if "video" in kind:
        return "[video]"
    if part.get("name"):
        return f"[file: {part['name']}]"
    return f"[{kind.replace('_', ' ')}]" if kind else "[attachment]"


def _content(message: dict[str, Any]) -> str:
    content = message.get("content") or {}
    if not isinstance(content, dict):
        return ""
    kind = content.get("content_type")
    author = message.get("author") or {}
    recipient = message.get("recipient")
    if author.get("role") == "assistant" and recipient not in (None, "all", "python"):
        # The assistant calling a tool (the browser, DALL·E): its arguments are not what the
        # person read. Code it runs (recipient python) is kept, as code.
        text = f"[tool use: {recipient}]"
    elif author.get("role") == "tool" and kind not in (
        "tether_browsing_display",
        "tether_quote",
    ):
        # What a tool gave back: its images as such, the rest as one placeholder.
        parts = (content.get("parts") or []) if kind == "multimodal_text" else []
        shown = [_part(part) for part in parts if not isinstance(part, str)]
        text = "\n".join(piece for piece in shown if piece) or "[tool output]"
    elif kind in ("text", "multimodal_text"):
        parts = content.get("parts") or []
        text = "\n".join(piece for piece in map(_part, parts) if piece)
    elif kind == "code":
        language = content.get("language") or ""
        language = "" if language == "unknown" else language
        text = f"```{language}\n{content.get('text') or ''}\n```"
    elif kind == "execution_output":
        text = "[tool output]"
    elif kind in ("tether_browsing_display", "tether_quote"):
        title = content.get("title") or content.get("domain") or ""
        text = f"[web page: {title}]" if title else "[web results]"
    elif kind in HIDDEN_TYPES:
        text = ""
    else:
        text = f"[{str(kind or 'content').replace('_', ' ')}]"
    metadata = message.get("metadata") or {}
    names = [
        item.get("name")
        for item in metadata.get("attachments") or []
        if isinstance(item, dict) and item.get("name")
    ]
    files = "\n".join(f"[file: {name}]" for name in names)
    return "\n".join(piece for piece in (files, text) if piece)


def _visible(message: dict[str, Any]) -> str | None:
    """The role the person saw it under (user or assistant), or None for what is hidden."""
    author = message.get("author") or {}
    role = author.get("role") if isinstance(author, dict) else None
    metadata = message.get("metadata") or {}
    if metadata.get("is_visually_hidden_from_conversation") or role == "system":
        return None
    if role == "user":
        return "user"
    if role in ("assistant", "tool"):
        # A tool's output is shown inside the answer: it joins the assistant's turn.
        return "assistant"
    return None


def _branch(mapping: dict[str, Any], current: Any, index: int, item: dict[str, Any]) -> list:
    """The messages from the root to `current`, following parents (a cycle or a missing node
    ends the walk rather than looping)."""
    path, seen, node_id = [], set(), current
    while isinstance(node_id, str) and node_id in mapping and node_id not in seen:
        seen.add(node_id)
        node = mapping[node_id]
        if not isinstance(node, dict):
            raise shape_error(SOURCE, index, item, f"has a node {node_id} that is not an object")
        if isinstance(node.get("message"), dict):
            path.append(node["message"])
        node_id = node.get("parent")
    path.reverse()
    return path


def _current_node(mapping: dict[str, Any]) -> str | None:
    """For an export without current_node: the newest leaf."""
    leaves = [
        (((node.get("message") or {}).get("create_time") or 0), node_id)
        for node_id, node in mapping.items()
        if isinstance(node, dict) and not node.get("children")
    ]
    return max(leaves)[1] if leaves else None


def read(item: dict[str, Any], index: int) -> Conversation | None:
    """One conversation, or None when it has no visible message (nothing to import)."""
    mapping = item.get("mapping")
    if not isinstance(mapping, dict):
        raise shape_error(SOURCE, index, item, "has no mapping of messages")
    external = item.get("conversation_id") or item.get("id")
    created = when(item.get("create_time"))
    if not external:
        # Old exports had no id: the title and start time name the conversation as well.
        external = f"{item.get('title') or ''}@{item.get('create_time')}"
    current = item.get("current_node") or _current_node(mapping)
    turns, model = [], ""
    for message in _branch(mapping, current, index, item):
        role = _visible(message)
        if role is None:
            continue
        metadata = message.get("metadata") or {}
        if role == "assistant" and metadata.get("model_slug"):
            model = str(metadata["model_slug"])
        text = clean(_content(message))
        turns.append(Turn(role, text, when(message.get("create_time")) or created))
    turns = merged(turns)
    if not turns:
        return None
    return Conversation(
        external_id=clean(f"{SOURCE}:{external}")[:200],
        title=clean(str(item.get("title") or "")).strip()[:200],
        created_at=created or turns[0].created_at,
        updated_at=when(item.get("update_time")) or turns[-1].created_at or created,
        model=clean(str(item.get("default_model_slug") or model))[:100],
        turns=turns,
    )
