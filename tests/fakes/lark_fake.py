"""Lark's open platform on the wire: tenant tokens, the bot's info, message replies (text or
card) and card updates, with Lark's checks: a card must declare update_multi to be updated,
a card body is at most 30 KB, and one message takes at most 5 updates a second."""

from __future__ import annotations

import itertools
import json
import re
import time
from collections.abc import Callable
from typing import Any

from tests.fakes.base import FakeServer, ProtocolError, Recorded, Reply

REPLY_PATH = re.compile(r"^/open-apis/im/v1/messages/(?P<message_id>[^/]+)/reply$")
MESSAGE_PATH = re.compile(r"^/open-apis/im/v1/messages/(?P<message_id>[^/]+)$")
CARD_MAX_BYTES = 30 * 1024


def card_text(content: str) -> str:
    """The Markdown a card (its `content` JSON string) shows."""
    card = json.loads(content)
    return "".join(e.get("content", "") for e in card["elements"] if e.get("tag") == "markdown")


class FakeLark(FakeServer):
    APP_ID, APP_SECRET, BOT_OPEN_ID = "cli_test", "test-secret", "ou_bot"

    def __init__(self) -> None:
        super().__init__()
        self._counter = itertools.count(1)
        self.valid_tokens: set[str] = set()
        self.replies: list[dict[str, Any]] = []
        self.fail_replies = 0  # answer this many text replies with an error code first
        # Cards: each sent card {message_id, reply_to, uuid, content, text, at} and each update
        # {message_id, content, text, at} that Lark took (at: time.monotonic()).
        self.cards: list[dict[str, Any]] = []
        self.card_updates: list[dict[str, Any]] = []
        self.fail_cards = 0  # answer this many card sends with an error code first
        # Whether the nth update asked for (1-based, refused ones counted) fails.
        self.fail_update: Callable[[int], bool] = lambda n: False
        self.update_attempts = 0
        self.updates_per_second = 5  # Lark's limit per message; None: not enforced
        self.responder = self.answer

    def shown(self, card_id: str) -> str:
        """What a card shows now: its last update's text, or what it was sent with."""
        updates = [u for u in self.card_updates if u["message_id"] == card_id]
        if updates:
            return updates[-1]["text"]
        return next(c["text"] for c in self.cards if c["message_id"] == card_id)

    def revoke_tokens(self) -> None:
        """Every token handed out so far is now expired (Lark answers 99991663)."""
        self.valid_tokens.clear()

    def check(self, recorded: Recorded) -> None:
        if (
            recorded.path.startswith("/open-apis/")
            and "tenant_access_token" not in recorded.path
            and not recorded.headers.get("authorization", "").startswith("Bearer ")
        ):
            raise ProtocolError("missing Authorization: Bearer <tenant token>")

    def error_body(self, status: int, message: str) -> Any:
        return {"code": 99992402, "msg": message}

    def _token_ok(self, recorded: Recorded) -> bool:
        return (
            recorded.headers.get("authorization", "").removeprefix("Bearer ") in self.valid_tokens
        )

    def answer(self, recorded: Recorded) -> Reply:
        path = recorded.path
        if path == "/open-apis/auth/v3/tenant_access_token/internal":
            body = recorded.body or {}
            if (body.get("app_id"), body.get("app_secret")) != (self.APP_ID, self.APP_SECRET):
                return Reply(body={"code": 10014, "msg": "app secret invalid"})
            token = f"t-{next(self._counter)}"
            self.valid_tokens.add(token)
            return Reply(
                body={"code": 0, "msg": "ok", "tenant_access_token": token, "expire": 7200}
            )
        if not self._token_ok(recorded):
            return Reply(body={"code": 99991663, "msg": "Invalid access token for authorization"})
        if path == "/open-apis/bot/v3/info":
            return Reply(
                body={
                    "code": 0,
                    "msg": "ok",
                    "bot": {"open_id": self.BOT_OPEN_ID, "app_name": "Ethan"},
                }
            )
        match = REPLY_PATH.match(path)
        if (
            match
            and recorded.method == "POST"
            and (recorded.body or {}).get("msg_type") == ("interactive")
        ):
            return self._card_send(match.group("message_id"), recorded.body)
        match = MESSAGE_PATH.match(path)
        if match and recorded.method == "PATCH":
            return self._card_update(match.group("message_id"), recorded.body or {})
        match = REPLY_PATH.match(path)
        if match and recorded.method == "POST":
            if self.fail_replies:
                self.fail_replies -= 1
                return Reply(body={"code": 230020, "msg": "rate limited"})
            body = recorded.body
            if body.get("msg_type") != "text" or "uuid" not in body:
                return Reply(body={"code": 230001, "msg": "invalid message content"})
            duplicate = any(r["uuid"] == body["uuid"] for r in self.replies)
            if not duplicate:
                self.replies.append({"message_id": match.group("message_id"), **body})
            return Reply(
                body={
                    "code": 0,
                    "msg": "success",
                    "data": {"message_id": f"om_reply_{len(self.replies)}"},
                }
            )
        return Reply(status=404, body={"code": 404, "msg": f"no route {path}"})

    @staticmethod
    def _card_refused(content: Any) -> Reply | None:
        """Lark's checks of a card's content: JSON, within 30 KB, and updatable (update_multi)."""
        if not isinstance(content, str):
            return Reply(body={"code": 230001, "msg": "invalid message content"})
        if len(json.dumps({"content": content}).encode()) > CARD_MAX_BYTES:
            return Reply(body={"code": 230025, "msg": "message content reaches its limit"})
        try:
            card = json.loads(content)
            card_text(content)
        except (ValueError, KeyError, TypeError, AttributeError):
            return Reply(body={"code": 230099, "msg": "Failed to create card content"})
        if not (card.get("config") or {}).get("update_multi"):
            return Reply(body={"code": 230099, "msg": "a shared card needs update_multi: true"})
        return None

    def _card_send(self, reply_to: str, body: dict[str, Any]) -> Reply:
        if self.fail_cards:
            self.fail_cards -= 1
            return Reply(status=500, body={"code": 230099, "msg": "Failed to create card"})
        refused = self._card_refused(body.get("content"))
        if refused or "uuid" not in body:
            return refused or Reply(body={"code": 230001, "msg": "uuid missing"})
        # A uuid seen before: Lark sends nothing new and answers with the message it sent.
        sent = next((c for c in self.cards if c["uuid"] == body["uuid"]), None)
        if sent is None:
            sent = {
                "message_id": f"om_card_{len(self.cards) + 1}",
                "reply_to": reply_to,
                "uuid": body["uuid"],
                "content": body["content"],
                "text": card_text(body["content"]),
                "at": time.monotonic(),
            }
            self.cards.append(sent)
        return Reply(body={"code": 0, "msg": "success", "data": {"message_id": sent["message_id"]}})

    def _card_update(self, card_id: str, body: dict[str, Any]) -> Reply:
        self.update_attempts += 1
        if self.fail_update(self.update_attempts):
            return Reply(status=400, body={"code": 230020, "msg": "frequency limit"})
        if not any(c["message_id"] == card_id for c in self.cards):
            return Reply(status=400, body={"code": 230001, "msg": "not a card this bot sent"})
        refused = self._card_refused(body.get("content"))
        if refused:
            return refused
        now = time.monotonic()
        recent = [u for u in self.card_updates if u["message_id"] == card_id and now - u["at"] < 1]
        if self.updates_per_second is not None and len(recent) >= self.updates_per_second:
            return Reply(status=400, body={"code": 230020, "msg": "frequency limit"})
        self.card_updates.append(
            {
                "message_id": card_id,
                "content": body["content"],
                "text": card_text(body["content"]),
                "at": now,
            }
        )
        return Reply(body={"code": 0, "msg": "success", "data": {}})
