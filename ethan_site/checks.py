"""Ethan's own `manage.py check --deploy` warnings."""

from __future__ import annotations

from django.conf import settings
from django.core.checks import Tags, Warning, register


@register(Tags.security, deploy=True)
def lark_without_encrypt_key(app_configs, **kwargs):
    """Without an Encrypt Key, Lark's requests are not signed: the verification token in each
    body is the only proof, and anyone who learns it can forge events within the timestamp
    window (docs/lark.md)."""
    if settings.LARK_VERIFICATION_TOKEN and not settings.LARK_ENCRYPT_KEY:
        return [
            Warning(
                "Lark is configured without LARK_ENCRYPT_KEY: its events are not signed.",
                hint="Set an Encrypt Key in the Lark console and LARK_ENCRYPT_KEY here.",
                id="ethan.W001",
            )
        ]
    return []
