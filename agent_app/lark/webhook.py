"""POST /lark/webhook: verify, dedupe, store, enqueue, answer 200 at once.

Lark wants an answer within 3 seconds and re-pushes otherwise, so nothing slow happens here:
the turn and the reply run in the `channels.lark_event` task (in-process after the response in
embedded mode). Each event is a unique row: a re-push, or two deliveries racing, insert once.
"""

from __future__ import annotations

import json
import logging
import time

from django.conf import settings
from django.db import IntegrityError, transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from agent_app.lark.crypto import LarkCryptoError, decrypt, signature_valid
from agent_app.models import LarkEvent
from ethan_site.queue import enqueue

log = logging.getLogger(__name__)

SUCCESS = {"msg": "success"}


def _refuse(status: int, message: str) -> JsonResponse:
    log.info("lark webhook refused (%d): %s", status, message)
    return JsonResponse({"msg": message}, status=status)


def _event_id(event: dict) -> str:
    header = event.get("header") or {}
    return str(header.get("event_id") or event.get("uuid") or "")


def _event_type(event: dict) -> str:
    header = event.get("header") or {}
    return str(header.get("event_type") or (event.get("event") or {}).get("type") or "")


@csrf_exempt
@require_POST
def lark_webhook(request: HttpRequest) -> JsonResponse:
    from agent_app.tasks import handle_lark_event

    if not settings.LARK_VERIFICATION_TOKEN:
        return _refuse(503, "Lark is not configured (LARK_VERIFICATION_TOKEN)")
    raw = request.body
    try:
        body = json.loads(raw)
    except ValueError:
        return _refuse(400, "the body is not JSON")
    if not isinstance(body, dict):
        return _refuse(400, "the body is not a JSON object")
    encrypted = "encrypt" in body
    if encrypted:
        if not settings.LARK_ENCRYPT_KEY:
            return _refuse(400, "an encrypted event, but no LARK_ENCRYPT_KEY is set")
        try:
            body = decrypt(str(body["encrypt"]), settings.LARK_ENCRYPT_KEY)
        except LarkCryptoError as exc:
            return _refuse(400, str(exc))

    # URL verification: answer the challenge in plaintext; Lark does not sign it.
    if body.get("type") == "url_verification":
        if body.get("token") != settings.LARK_VERIFICATION_TOKEN:
            return _refuse(401, "wrong verification token")
        return JsonResponse({"challenge": body.get("challenge", "")})

    if settings.LARK_ENCRYPT_KEY:
        stamp = request.headers.get("X-Lark-Request-Timestamp", "")
        nonce = request.headers.get("X-Lark-Request-Nonce", "")
        if not signature_valid(
            stamp,
            nonce,
            settings.LARK_ENCRYPT_KEY,
            raw,
            request.headers.get("X-Lark-Signature", ""),
        ):
            return _refuse(401, "bad signature")
        try:
            skew = abs(time.time() - int(stamp))
        except ValueError:
            return _refuse(401, "bad timestamp")
        if skew > settings.ETHAN_LARK_MAX_SKEW_SECONDS:
            return _refuse(401, "stale timestamp")

    token = (body.get("header") or {}).get("token") or body.get("token")
    if token != settings.LARK_VERIFICATION_TOKEN:
        return _refuse(401, "wrong verification token")
    event_id = _event_id(body)
    if not event_id:
        return _refuse(400, "no event_id")
    try:
        with transaction.atomic():
            event = LarkEvent.objects.create(
                event_id=event_id[:128], event_type=_event_type(body)[:64], payload=body
            )
            enqueue(handle_lark_event, event.pk)
    except IntegrityError:
        log.info("lark event %s delivered again: acknowledged, not processed", event_id)
    return JsonResponse(SUCCESS)
