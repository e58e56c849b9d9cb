"""A Claude export's conversation → Conversation.

Each conversation has a uuid, a name, created_at and updated_at (ISO 8601), and its
chat_messages in order: sender "human" or "assistant", the plain `text`, and (newer exports)
`content` blocks. Text blocks are kept; a tool call becomes "[tool use: name]", its result
"[tool output]", an image "[image]"; the model's private reasoning (thinking) is skipped; each
attachment or file becomes "[file: name]". When messages name their parent
(parent_message_uuid, an export with edits), the branch that ends at the last message is taken
and the abandoned versions are left out.
"""

from __future__ import annotations

from typing import Any

from sessions_app.imports.export import Conversation, Turn, clean, merged, shape_error, when

SOURCE = "claude"
ROLES = {"human": "user", "user": "user", "assistant": "assistant"}


def _block(block: Any) -> str:
    if not isinstance(block, dict):
        return ""
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text") or "")
    if kind == "thinking":
        return ""
    if kind == "tool_use":
        return f"[tool use: {block.get('name') or 'tool'}]"
    if kind == "tool_result":
        return "[tool output]"
    if kind == "image":
        return "[image]"
    return f"[{str(kind or 'content').replace('_', ' ')}]"


def _content(message: dict[str, Any]) -> str:
    blocks = message.get("content")
    text = ""
    if isinstance(blocks, list):
        text = "\n".join(piece for piece in map(_block, blocks) if piece)
    # Older exports have the text only; some newer ones empty blocks beside it.
    text = text or str(message.get("text") or "")
    names = [
        item.get("file_name")
        for key in ("attachments", "files")
        for item in message.get(key) or []
        if isinstance(item, dict) and item.get("file_name")
    ]
    files = "\n".join(f"[file: {name}]" for name in dict.fromkeys(names))
    return "\n".join(piece for piece in (files, text) if piece)


def _branch(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The branch ending at the last message, when messages name their parents; all of them,
    in order, when they do not."""
    if not any(message.get("parent_message_uuid") for message in messages):
        return messages
    by_id = {message.get("uuid"): message for message in messages}
    path, seen, message = [], set(), messages[-1]
    while message is not None and id(message) not in seen:
        seen.add(id(message))
        path.append(message)
        message = by_id.get(message.get("parent_message_uuid"))
    path.reverse()
    return path


def read(item: dict[str, Any], index: int) -> Conversation | None:
    """One conversation, or None when it has no message (nothing to import)."""
    messages = item.get("chat_messages")
    missing = [
        name
        for name, present in (("uuid", item.get("uuid")), ("chat_messages", messages))
        if not present and present != []
    ]
    if missing:
        raise shape_error(SOURCE, index, item, f"has no {' and no '.join(missing)}")
    if not isinstance(messages, list):
        raise shape_error(SOURCE, index, item, "has chat_messages that are not a list")
    messages = [message for message in messages if isinstance(message, dict)]
    created = when(item.get("created_at"))
    turns = []
    for message in _branch(messages):
        role = ROLES.get(str(message.get("sender")))
        if role is None:
            continue
        stamp = when(message.get("created_at")) or created
        turns.append(Turn(role, clean(_content(message)), stamp))
    turns = merged(turns)
    if not turns:
        return None
    return Conversation(
        external_id=clean(f"{SOURCE}:{item['uuid']}")[:200],
        title=clean(str(item.get("name") or "")).strip()[:200],
        created_at=created or turns[0].created_at,
        updated_at=when(item.get("updated_at")) or turns[-1].created_at or created,
        model=clean(str(item.get("model") or ""))[:100],
        turns=turns,
    )
