"""The webhook as an attacker sees it: proof checked before anything is parsed or decrypted,
one answer for every refusal, no replays, a message answered once."""

from __future__ import annotations

import base64
import json
import os
import time

import pytest
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from channels_app.lark.crypto import _key, encrypt
from channels_app.models import LarkEvent
from sessions_app.models import Message
from tests.lark_helpers import KEY, TOKEN, deliver, message_event, signed_delivery

pytestmark = pytest.mark.django_db(transaction=True)


def _ciphertext(plain: bytes, *, pad: bool) -> str:
    iv = os.urandom(16)
    if pad:
        padder = padding.PKCS7(128).padder()
        plain = padder.update(plain) + padder.finalize()
    encryptor = Cipher(algorithms.AES(_key(KEY)), modes.CBC(iv)).encryptor()
    return base64.b64encode(iv + encryptor.update(plain) + encryptor.finalize()).decode()


def _post(client, body: dict | str, **headers):
    raw = body if isinstance(body, str) else json.dumps(body)
    return client.generic("POST", "/lark/webhook", raw, content_type="application/json", **headers)


def test_unsigned_bodies_get_one_answer_whatever_their_padding(client, lark):
    """The padding oracle: bad padding, good padding around bad JSON, a valid event that is
    not a URL verification, all unsigned: the same status and the same words."""
    bad_padding = _ciphertext(b"x" * 32, pad=False)  # last byte 'x' is no PKCS7 padding
    bad_json = _ciphertext(b"{not json", pad=True)
    an_event = encrypt(message_event("ev-o1", "hi"), KEY)
    wrong_token = encrypt({"type": "url_verification", "token": "guess", "challenge": "c"}, KEY)
    answers = [
        _post(client, {"encrypt": value})
        for value in (bad_padding, bad_json, an_event, wrong_token, "not base64!")
    ]
    assert {(a.status_code, a.content) for a in answers} == {(401, b'{"detail": "refused"}')}
    assert not LarkEvent.objects.exists() and lark.replies == []


def test_a_signed_request_is_checked_before_its_body_is_read(client, lark):
    """A forged signature on garbage is 401, not a parse error: nothing was parsed."""
    body, headers = signed_delivery(message_event("ev-o2", "hi"), bad_signature=True)
    meta = {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in headers.items()}
    for raw in (body, b"[" * 10_000, b'{"header": "x"}'):
        answer = client.generic("POST", "/lark/webhook", raw, "application/json", **meta)
        assert (answer.status_code, answer.json()) == (401, {"detail": "refused"})
    assert not LarkEvent.objects.exists()


@pytest.mark.parametrize(
    "body",
    [{"header": "x"}, {"schema": "2.0", "header": {"token": TOKEN}, "event": "str"}],
)
def test_malformed_shapes_are_400(client, lark, body):
    answer = deliver(client, body, encrypted=False)
    assert (answer.status_code, answer.json()) == (400, {"detail": "malformed event"})
    assert not LarkEvent.objects.exists()


def test_deep_json_signed_is_400_not_a_crash(client, lark):
    raw = "[" * 50_000 + "]" * 50_000
    _, headers = signed_delivery({}, encrypted=False)
    from channels_app.lark.crypto import signature

    headers["X-Lark-Signature"] = signature(
        headers["X-Lark-Request-Timestamp"], headers["X-Lark-Request-Nonce"], KEY, raw.encode()
    )
    meta = {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in headers.items()}
    answer = client.generic("POST", "/lark/webhook", raw, "application/json", **meta)
    assert (answer.status_code, answer.json()) == (400, {"detail": "malformed event"})


def test_without_an_encrypt_key_events_are_held_to_their_create_time(client, lark, settings):
    settings.LARK_ENCRYPT_KEY = ""
    old = message_event("ev-t1", "hi")
    old["header"]["create_time"] = "1"
    missing = message_event("ev-t2", "hi")
    del missing["header"]["create_time"]
    assert _post(client, old).status_code == 401
    assert _post(client, missing).status_code == 401
    assert not LarkEvent.objects.exists()
    fresh = message_event("ev-t3", "hi")
    assert _post(client, fresh).status_code == 200
    assert len(lark.replies) == 1


@pytest.mark.parametrize("encrypt_key", [KEY, ""])
def test_a_message_sent_again_under_a_new_event_id_is_answered_once(
    client, lark, settings, encrypt_key
):
    settings.LARK_ENCRYPT_KEY = encrypt_key
    first = message_event("ev-m1", "你好")
    again = message_event("ev-m2", "你好")
    again["event"]["message"]["message_id"] = first["event"]["message"]["message_id"]
    for event in (first, again):
        answer = deliver(client, event) if encrypt_key else _post(client, event)
        assert (answer.status_code, answer.json()) == (200, {"msg": "success"})
    assert LarkEvent.objects.count() == 1 and len(lark.replies) == 1
    assert Message.objects.filter(role="user").count() == 1


def test_get_and_other_methods_are_json_405(client, lark):
    answer = client.get("/lark/webhook")
    assert (answer.status_code, answer.json()) == (405, {"detail": "method not allowed"})
    assert answer["Allow"] == "POST"


def test_url_verification_still_works_encrypted_and_unsigned(client, lark):
    challenge = {"challenge": "c-7", "token": TOKEN, "type": "url_verification"}
    answer = _post(client, {"encrypt": encrypt(challenge, KEY)})
    assert (answer.status_code, answer.json()) == (200, {"challenge": "c-7"})


def test_a_stale_signed_timestamp_is_refused_even_with_a_valid_signature(client, lark):
    answer = deliver(client, message_event("ev-s1", "hi"), stamp=int(time.time()) - 301)
    assert (answer.status_code, answer.json()) == (401, {"detail": "refused"})
