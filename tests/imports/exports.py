"""Exports as ChatGPT and Claude write them, made up for the tests and the benchmark: the
fields their conversations.json files carry (ChatGPT: a `mapping` tree with `current_node`;
Claude: `chat_messages` with senders), with the parts that are not text."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

START = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)


def text(*parts: Any) -> dict[str, Any]:
    return {"content_type": "text", "parts": list(parts)}


class ChatGPT:
    """One ChatGPT conversation, built node by node: each add() hangs a message under
    `parent` (default: the last one added) and makes it the current node."""

    def __init__(self, conversation_id: str, title: str, start: datetime = START):
        self.id, self.title, self.start = conversation_id, title, start.timestamp()
        self.mapping: dict[str, dict[str, Any]] = {
            "root": {"id": "root", "message": None, "parent": None, "children": []}
        }
        self.current = "root"
        self.clock = 0

    def add(
        self,
        role: str,
        content: dict[str, Any] | str,
        *,
        parent: str | None = None,
        hidden: bool = False,
        model: str = "gpt-4o",
        recipient: str = "all",
    ) -> str:
        parent = parent or self.current
        node_id = f"{self.id}-n{len(self.mapping)}"
        self.clock += 30
        metadata: dict[str, Any] = {}
        if hidden:
            metadata["is_visually_hidden_from_conversation"] = True
        if role == "assistant":
            metadata["model_slug"] = model
        self.mapping[node_id] = {
            "id": node_id,
            "message": {
                "id": node_id,
                "author": {"role": role, "name": None, "metadata": {}},
                "create_time": self.start + self.clock,
                "update_time": None,
                "content": text(content) if isinstance(content, str) else content,
                "status": "finished_successfully",
                "end_turn": role == "assistant" or None,
                "weight": 1.0,
                "metadata": metadata,
                "recipient": recipient,
            },
            "parent": parent,
            "children": [],
        }
        self.mapping[parent]["children"].append(node_id)
        self.current = node_id
        return node_id

    def exchange(self, *pairs: tuple[str, str]) -> ChatGPT:
        for question, answer in pairs:
            self.add("user", question)
            self.add("assistant", answer)
        return self

    def export(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "create_time": self.start,
            "update_time": self.start + self.clock,
            "mapping": self.mapping,
            "moderation_results": [],
            "current_node": self.current,
            "plugin_ids": None,
            "conversation_id": self.id,
            "conversation_template_id": None,
            "gizmo_id": None,
            "is_archived": False,
            "safe_urls": [],
            "default_model_slug": "gpt-4o",
            "id": self.id,
        }


def claude(
    uuid: str,
    name: str,
    messages: Iterable[tuple[str, Any]],
    start: datetime = START,
) -> dict[str, Any]:
    """One Claude conversation: (sender, text or a list of content blocks) in order."""
    rows = []
    for index, (sender, said) in enumerate(messages):
        moment = (start + timedelta(seconds=30 * (index + 1))).isoformat().replace("+00:00", "Z")
        blocks = said if isinstance(said, list) else [{"type": "text", "text": said}]
        plain = "\n".join(block.get("text", "") for block in blocks if block["type"] == "text")
        rows.append(
            {
                "uuid": f"{uuid}-m{index}",
                "text": plain,
                "content": blocks,
                "sender": sender,
                "created_at": moment,
                "updated_at": moment,
                "attachments": [],
                "files": [],
            }
        )
    last = start + timedelta(seconds=30 * (len(rows) + 1))
    return {
        "uuid": uuid,
        "name": name,
        "created_at": start.isoformat().replace("+00:00", "Z"),
        "updated_at": last.isoformat().replace("+00:00", "Z"),
        "account": {"uuid": "acc-1"},
        "chat_messages": rows,
    }


def write_json(path: Path, conversations: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps(conversations, ensure_ascii=False), encoding="utf-8")
    return path


def write_zip(path: Path, conversations: list[dict[str, Any]], folder: str = "") -> Path:
    """An export zip: conversations.json with the files an export has besides."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("user.json", json.dumps({"id": "user-1", "email": "a@example.com"}))
        archive.writestr("chat.html", "<html><body>the export's own viewer</body></html>")
        archive.writestr("file-abc123-photo.png", b"\x89PNG\r\n\x1a\n" + bytes(64))
        archive.writestr(
            f"{folder}conversations.json", json.dumps(conversations, ensure_ascii=False)
        )
    return path
