"""POST /lark/webhook: verify, dedupe, store, wake the dispatcher, answer 200 at once.

Lark wants an answer within 3 seconds and re-pushes otherwise, so nothing slow happens here:
the turn and the reply run in the `channels.lark_event` task, which `channels.lark_dispatch`
queues (in-process after the response in embedded mode). Each event is a unique row: a
re-push, or two deliveries racing, insert once.

The order is the security: what the request proves is checked before anything it merely says
is used (docs/lark.md).

- With an Encrypt Key, a signed request has its signature (over the raw, still-encrypted body)
  and its timestamp checked before the body is even parsed, let alone decrypted. An unsigned
  one may only be Lark's URL verification (which Lark does not sign); every way it can fail
  (bad base64, padding, JSON, type, token) answers the same 401, so the decryption cannot be
  used as an oracle.
- Without one, the verification token is the only proof, so the event's own create_time must
  be within ETHAN_LARK_MAX_SKEW_SECONDS too (a captured event cannot be replayed later).
- Either way a message is answered once: events are unique by event_id, and message events by
  their message_id as well (a message sent again under a new event id is acknowledged only).
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from channels_app.lark.crypto import LarkCryptoError, decrypt, signature_valid
from channels_app.lark.tasks import DISPATCH_WAKE, lark_events_dispatch_task
from channels_app.models import LarkEvent
from ethan_shared.queue import enqueue_coalesced

log = logging.getLogger(__name__)

SUCCESS = {"msg": "success"}
# One body for every refusal of proof, and one for every malformed event: the answer says no
# more than that (the reason is logged).
REFUSED = "refused"
MALFORMED = "malformed event"


class Refused(Exception):
    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status


def _refuse(status: int, reason: str) -> JsonResponse:
    log.info("lark webhook refused (%d): %s", status, reason)
    return JsonResponse({"detail": REFUSED if status == 401 else MALFORMED}, status=status)


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise Refused(400, f"not JSON: {type(exc).__name__}") from None
    if not isinstance(body, dict):
        raise Refused(400, "not a JSON object")
    return body


def _within_window(seconds: float) -> bool:
    return abs(time.time() - seconds) <= settings.ETHAN_LARK_MAX_SKEW_SECONDS


def _signed_body(request: HttpRequest) -> dict[str, Any]:
    """With an Encrypt Key: the signature and timestamp first, then the body."""
    key = settings.LARK_ENCRYPT_KEY
    stamp = request.headers.get("X-Lark-Request-Timestamp", "")
    nonce = request.headers.get("X-Lark-Request-Nonce", "")
    signed = request.headers.get("X-Lark-Signature", "")
    if not signed:
        return _url_verification(request.body, key)
    if not signature_valid(stamp, nonce, key, request.body, signed):
        raise Refused(401, "bad signature")
    if not stamp.isdigit() or not _within_window(int(stamp)):
        raise Refused(401, "stale or missing timestamp")
    body = _json_object(request.body)
    if "encrypt" in body:
        try:
            body = decrypt(str(body["encrypt"]), key)
        except LarkCryptoError as exc:  # signed by Lark, yet unreadable: a configuration error
            log.error("a signed Lark event could not be decrypted: %s", exc)
            raise Refused(400, "cannot decrypt a signed event") from None
    return body


def _url_verification(raw: bytes, key: str) -> dict[str, Any]:
    """An unsigned request: Lark's URL verification, or refused, always with the same 401."""
    try:
        body = json.loads(raw)
        body = decrypt(str(body["encrypt"]), key) if "encrypt" in body else body
        if body.get("type") != "url_verification":
            raise ValueError("unsigned and not a URL verification")
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        raise Refused(401, "unsigned request") from None
    return body


def _event_time(body: dict[str, Any]) -> float | None:
    """The event's own time in seconds: header.create_time (ms, schema 2.0) or ts (1.0)."""
    header = body.get("header") or {}
    raw = header.get("create_time") if "header" in body else body.get("ts")
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    return value / 1000 if "header" in body else value


def _check_shape(body: dict[str, Any]) -> None:
    for name in ("header", "event"):
        if name in body and not isinstance(body[name], dict):
            raise Refused(400, f"{name} is not an object")
    message = (body.get("event") or {}).get("message")
    if message is not None and not isinstance(message, dict):
        raise Refused(400, "event.message is not an object")


def _token_ok(value: Any) -> bool:
    return isinstance(value, str) and hmac.compare_digest(
        value.encode(), settings.LARK_VERIFICATION_TOKEN.encode()
    )


def _event_id(body: dict) -> str:
    header = body.get("header") or {}
    return str(header.get("event_id") or body.get("uuid") or "")


def _event_type(body: dict) -> str:
    header = body.get("header") or {}
    return str(header.get("event_type") or (body.get("event") or {}).get("type") or "")


def _message_id(body: dict) -> str:
    message = (body.get("event") or {}).get("message") or {}
    return str(message.get("message_id") or "")[:128]


def _verified_event(request: HttpRequest) -> dict[str, Any] | JsonResponse:
    """The event once every check passed, or the challenge's answer."""
    body = _signed_body(request) if settings.LARK_ENCRYPT_KEY else _json_object(request.body)
    _check_shape(body)
    if body.get("type") == "url_verification":
        # Answered in plaintext, also when it came encrypted (Lark's rule).
        if not _token_ok(body.get("token")) or not isinstance(body.get("challenge"), str):
            raise Refused(401, "URL verification with a wrong token")
        return JsonResponse({"challenge": body["challenge"]})
    if not _token_ok((body.get("header") or {}).get("token", body.get("token"))):
        raise Refused(401, "wrong verification token")
    if not settings.LARK_ENCRYPT_KEY:
        stamp = _event_time(body)
        if stamp is None or not _within_window(stamp):
            raise Refused(401, "stale or missing create_time")
    return body


@csrf_exempt
@require_POST
def lark_webhook(request: HttpRequest) -> JsonResponse:
    if not settings.LARK_VERIFICATION_TOKEN:
        log.info("lark webhook called, but LARK_VERIFICATION_TOKEN is not set")
        return JsonResponse({"detail": "Lark is not configured"}, status=503)
    try:
        verified = _verified_event(request)
    except Refused as refused:
        return _refuse(refused.status, str(refused))
    if isinstance(verified, JsonResponse):
        return verified
    body = verified
    event_id = _event_id(body)
    if not event_id:
        return _refuse(400, "no event_id")
    try:
        # Durable: the event is committed before Lark gets its 200, and only then is the
        # dispatcher woken (once per burst: the publish is the costly part of an ack).
        with transaction.atomic(durable=True):
            LarkEvent.objects.create(
                event_id=event_id[:128],
                event_type=_event_type(body)[:64],
                message_id=_message_id(body),
                payload=body,
            )
            enqueue_coalesced(lark_events_dispatch_task, key=DISPATCH_WAKE)
    except IntegrityError:
        log.info("lark event %s (or its message) delivered again: not processed", event_id)
    return JsonResponse(SUCCESS)
