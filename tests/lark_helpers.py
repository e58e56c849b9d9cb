"""Building Lark deliveries as Lark does: schema 2.0 events, encrypted and signed."""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

import pytest

from channels_app.lark.client import LarkClient
from channels_app.lark.crypto import encrypt, signature
from tests.fakes.lark_fake import FakeLark

TOKEN, KEY = "v-token-123", "e-key-456"


def message_event(
    event_id: str,
    text: str | None = None,
    *,
    open_id: str = "ou_ada",
    chat_id: str = "oc_chat1",
    chat_type: str = "p2p",
    mentions: list | None = None,
    sender_type: str = "user",
    message_type: str = "text",
    content: dict | None = None,
) -> dict[str, Any]:
    return {
        "schema": "2.0",
        "header": {
            "event_id": event_id,
            "event_type": "im.message.receive_v1",
            "create_time": str(int(time.time() * 1000)),
            "token": TOKEN,
            "app_id": FakeLark.APP_ID,
            "tenant_key": "t1",
        },
        "event": {
            "sender": {
                "sender_id": {"open_id": open_id, "union_id": f"on_{open_id}", "user_id": "u1"},
                "sender_type": sender_type,
            },
            "message": {
                "message_id": f"om_{event_id}",
                "chat_id": chat_id,
                "chat_type": chat_type,
                "message_type": message_type,
                "content": json.dumps(
                    content if content is not None else {"text": text}, ensure_ascii=False
                ),
                "mentions": mentions or [],
            },
        },
    }


def signed_delivery(
    payload: dict,
    *,
    encrypted: bool = True,
    stamp: int | None = None,
    bad_signature: bool = False,
) -> tuple[bytes, dict[str, str]]:
    """The raw body and the headers Lark sends: encrypted with the Encrypt Key and signed
    (shared by the tests and bench/lark_ack.py, which posts over real HTTP)."""
    body = json.dumps({"encrypt": encrypt(payload, KEY)} if encrypted else payload).encode()
    stamp_text = str(int(time.time()) if stamp is None else stamp)
    nonce = secrets.token_hex(8)
    sig = signature(stamp_text, nonce, KEY, body)
    if bad_signature:
        sig = "0" * len(sig)
    headers = {
        "X-Lark-Request-Timestamp": stamp_text,
        "X-Lark-Request-Nonce": nonce,
        "X-Lark-Signature": sig,
    }
    return body, headers


def deliver(
    client,
    payload: dict,
    *,
    encrypted: bool = True,
    stamp: int | None = None,
    bad_signature: bool = False,
):
    """POST the event as Lark would, through Django's test client."""
    body, headers = signed_delivery(
        payload, encrypted=encrypted, stamp=stamp, bad_signature=bad_signature
    )
    meta = {f"HTTP_{name.upper().replace('-', '_')}": value for name, value in headers.items()}
    return client.generic("POST", "/lark/webhook", body, content_type="application/json", **meta)


def worker_answers(workers, name: str, text: str, *, model_url: str, lark: FakeLark):
    """Store the event `ev-<name>` (a message saying `text`), start a worker of its own with
    gpt-4o on the OpenAI fake at `model_url` and Lark on the fake, and queue the event to it;
    returns the worker, the event and the worker's environment (for a sweep run here)."""
    from channels_app.lark.tasks import lark_event_handle_task
    from channels_app.models import LarkEvent

    env = {
        "OPENAI_API_KEY": "test-key",
        "OPENAI_BASE_URL": f"{model_url}/v1",
        "ETHAN_MODEL": "gpt-4o",
        "LARK_BASE_URL": lark.url,
        "LARK_APP_ID": FakeLark.APP_ID,
        "LARK_APP_SECRET": FakeLark.APP_SECRET,
    }
    event = LarkEvent.objects.create(
        event_id=f"ev-{name}",
        event_type="im.message.receive_v1",
        message_id=f"om_ev-{name}",
        payload=message_event(f"ev-{name}", text),
    )
    worker = workers.start(name, **env)
    lark_event_handle_task.delay(event.pk)
    return worker, event, env


def forget_cached() -> None:
    """Each test starts with no tenant token or bot id cached by an earlier one."""
    with LarkClient._lock:
        LarkClient._tokens.clear()
        LarkClient._bot_ids.clear()


@pytest.fixture
def lark(settings, llm_config, monkeypatch):
    """The fake Lark server and Ethan's Lark settings pointing at it (embedded mode)."""
    fake = FakeLark()
    settings.ETHAN_EMBEDDED = True
    settings.LARK_BASE_URL = fake.url
    settings.LARK_APP_ID, settings.LARK_APP_SECRET = FakeLark.APP_ID, FakeLark.APP_SECRET
    settings.LARK_VERIFICATION_TOKEN, settings.LARK_ENCRYPT_KEY = TOKEN, KEY
    settings.LARK_BOT_OPEN_ID = ""
    forget_cached()
    from channels_app.lark import handling

    real = handling.lark_client

    def fast_client():
        client = real()
        client.backoff = 0.01  # retries without the production waits
        return client

    monkeypatch.setattr(handling, "lark_client", fast_client)
    yield fake
    forget_cached()
    fake.close()
