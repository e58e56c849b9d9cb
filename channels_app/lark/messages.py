"""Reading Lark messages: the text of text and post messages, and mentions."""

from __future__ import annotations

import json
import re
from typing import Any

_PLACEHOLDER = re.compile(r"@_user_\d+|@_all")


def _content(message: dict[str, Any]) -> dict[str, Any]:
    # `content` is a JSON string inside the JSON event: parse it a second time.
    try:
        value = json.loads(message.get("content") or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _post_text(post: dict[str, Any]) -> str:
    # A post is {title, content: [[elements]]}, sometimes under a locale key ({"zh_cn": {...}}).
    if "content" not in post:
        post = next((v for v in post.values() if isinstance(v, dict) and "content" in v), {})
    lines = [post.get("title", "")] if post.get("title") else []
    for paragraph in post.get("content") or []:
        words = []
        for element in paragraph or []:
            if element.get("tag") in ("text", "a"):
                words.append(element.get("text", ""))
            elif element.get("tag") == "at":
                words.append(f"@{element.get('user_name') or element.get('user_id', '')}")
        lines.append("".join(words))
    return "\n".join(line for line in lines if line.strip())


def message_text(message: dict[str, Any], bot_open_id: str | None) -> str | None:
    """The message as plain text, mentions of the bot removed and other mentions replaced by
    the person's name; None for a type Ethan does not read."""
    kind = message.get("message_type")
    content = _content(message)
    if kind == "text":
        text = str(content.get("text", ""))
    elif kind == "post":
        text = _post_text(content)
    else:
        return None
    names = {}
    for mention in message.get("mentions") or []:
        open_id = (mention.get("id") or {}).get("open_id")
        names[mention.get("key", "")] = (
            "" if open_id and open_id == bot_open_id else (f"@{mention.get('name', '')}")
        )

    def replace(match: re.Match) -> str:
        return names.get(match.group(0), "")

    return " ".join(_PLACEHOLDER.sub(replace, text).split())


def mentions_bot(message: dict[str, Any], bot_open_id: str) -> bool:
    """@_all is never a mention of the bot."""
    return any(
        (mention.get("id") or {}).get("open_id") == bot_open_id
        for mention in message.get("mentions") or []
    )
