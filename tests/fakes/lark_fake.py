"""Lark's open platform on the wire: tenant tokens, the bot's info and message replies."""

from __future__ import annotations

import itertools
import re
from typing import Any

from tests.fakes.base import FakeServer, ProtocolError, Recorded, Reply

REPLY_PATH = re.compile(r"^/open-apis/im/v1/messages/(?P<message_id>[^/]+)/reply$")


class FakeLark(FakeServer):
    APP_ID, APP_SECRET, BOT_OPEN_ID = "cli_test", "test-secret", "ou_bot"

    def __init__(self) -> None:
        super().__init__()
        self._counter = itertools.count(1)
        self.valid_tokens: set[str] = set()
        self.replies: list[dict[str, Any]] = []
        self.fail_replies = 0  # answer this many replies with an error code first
        self.responder = self.answer

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
