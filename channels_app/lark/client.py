"""The Lark REST calls Ethan makes (a reply, as text or as a card, a card's update, and the
bot's own id), with a cached tenant token.

Hand-written on the standard library: the official SDK costs seconds and 170 MB to import and
adds nothing we need (see ../shared/PROTOCOLS.md).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

# Lark's codes for a missing, invalid or expired tenant access token: refresh and try again.
INVALID_TOKEN_CODES = frozenset({99991661, 99991663, 99991664, 99991668})
# Refresh this long before Lark's stated expiry.
TOKEN_MARGIN_SECONDS = 300
# Lark refuses a card (its request body) over 30 KB (code 230025): a longer reply goes as text.
CARD_MAX_BYTES = 30_000


class LarkError(Exception):
    """Lark answered with code != 0 (or not at all) after the retries."""


@dataclass
class _Token:
    value: str
    expires_at: float


class LarkClient:
    # Shared by every client of the same app in this process.
    _tokens: dict[tuple[str, str], _Token] = {}
    _bot_ids: dict[tuple[str, str], str] = {}
    _lock = threading.Lock()

    def __init__(
        self,
        *,
        base_url: str,
        app_id: str,
        app_secret: str,
        timeout: float = 5.0,
        retries: int = 3,
        backoff: float = 0.5,
        sleep=time.sleep,
    ):
        self.base_url = base_url.rstrip("/")
        self.app_id = app_id
        self.app_secret = app_secret
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.sleep = sleep

    @property
    def _cache_key(self) -> tuple[str, str]:
        return (self.base_url, self.app_id)

    def _http(
        self, method: str, path: str, body: dict | None = None, token: str | None = None
    ) -> dict[str, Any]:
        request = urllib.request.Request(
            f"{self.base_url}{path}",
            method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={
                "Content-Type": "application/json; charset=utf-8",
                **({"Authorization": f"Bearer {token}"} if token else {}),
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:  # Lark puts its code in error bodies too
            try:
                return json.loads(exc.read() or b"{}")
            except ValueError:
                return {"code": -exc.code, "msg": f"HTTP {exc.code}"}
        except (urllib.error.URLError, TimeoutError, ValueError) as exc:
            return {"code": -1, "msg": f"{type(exc).__name__}: {exc}"}

    def tenant_token(self, *, refresh: bool = False) -> str:
        with self._lock:
            cached = self._tokens.get(self._cache_key)
            if cached and not refresh and cached.expires_at > time.time():
                return cached.value
            answer = self._http(
                "POST",
                "/open-apis/auth/v3/tenant_access_token/internal",
                {"app_id": self.app_id, "app_secret": self.app_secret},
            )
            if answer.get("code") != 0:
                raise LarkError(f"tenant token refused: {answer.get('code')} {answer.get('msg')}")
            expires = time.time() + int(answer.get("expire", 7200)) - TOKEN_MARGIN_SECONDS
            self._tokens[self._cache_key] = _Token(answer["tenant_access_token"], expires)
            return answer["tenant_access_token"]

    def call(
        self, method: str, path: str, body: dict | None = None, *, retries: int | None = None
    ) -> dict[str, Any]:
        """An authorised call; an invalid token is refreshed once; other failures (code != 0,
        no answer) are retried with exponential backoff (`retries` times, default the
        client's), then raised as LarkError."""
        retries = self.retries if retries is None else retries
        refreshed = False
        attempt = 0
        while True:
            answer = self._http(method, path, body, token=self.tenant_token())
            code = answer.get("code")
            if code == 0:
                return answer
            if code in INVALID_TOKEN_CODES and not refreshed:
                refreshed = True
                self.tenant_token(refresh=True)
                continue
            if attempt >= retries:
                raise LarkError(f"{method} {path}: code {code} {answer.get('msg', '')}".strip())
            log.warning("lark %s %s: code %s, retrying", method, path, code)
            self.sleep(self.backoff * 2**attempt)
            attempt += 1

    def bot_open_id(self) -> str:
        with self._lock:
            cached = self._bot_ids.get(self._cache_key)
        if cached:
            return cached
        bot_id = self.call("GET", "/open-apis/bot/v3/info")["bot"]["open_id"]
        with self._lock:
            self._bot_ids[self._cache_key] = bot_id
        return bot_id

    def reply(self, *, message_id: str, text: str, idempotency_key: str) -> dict[str, Any]:
        # The uuid makes Lark drop a second identical reply (a retried task).
        return self.call(
            "POST",
            f"/open-apis/im/v1/messages/{message_id}/reply",
            {
                "msg_type": "text",
                "content": json.dumps({"text": text}, ensure_ascii=False),
                "uuid": idempotency_key[:50],
            },
        )

    def reply_card(
        self, *, message_id: str, text: str, idempotency_key: str, retries: int = 0
    ) -> str:
        """Answer with a card showing `text`; returns the card's own message id (for its
        updates). Not retried by default: a card that cannot be sent is answered as text."""
        answer = self.call(
            "POST",
            f"/open-apis/im/v1/messages/{message_id}/reply",
            {"msg_type": "interactive", "content": card_json(text), "uuid": idempotency_key[:50]},
            retries=retries,
        )
        return answer["data"]["message_id"]

    def card_update(self, *, card_id: str, text: str, retries: int = 0) -> None:
        """Show `text` in a card sent before (Lark allows 5 updates a second per message)."""
        self.call(
            "PATCH",
            f"/open-apis/im/v1/messages/{card_id}",
            {"content": card_json(text)},
            retries=retries,
        )


def card_json(text: str) -> str:
    """A card (Lark's message card JSON) whose one element is `text` as Markdown. Updatable
    only when it says so (update_multi), in the card sent and in each update."""
    card = {
        "config": {"update_multi": True, "wide_screen_mode": True},
        "elements": [{"tag": "markdown", "content": text}],
    }
    return json.dumps(card, ensure_ascii=False)


def card_fits(text: str) -> bool:
    """Whether a card showing `text` is within Lark's size limit for a card."""
    return len(json.dumps({"content": card_json(text)}).encode()) <= CARD_MAX_BYTES
