"""Lark's event encryption and request signatures (see docs/lark.md)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from typing import Any

from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes


class LarkCryptoError(ValueError):
    pass


def _key(encrypt_key: str) -> bytes:
    return hashlib.sha256(encrypt_key.encode()).digest()  # AES-256: 32 raw bytes


def decrypt(encrypted: str, encrypt_key: str) -> dict[str, Any]:
    """base64(iv[16] + AES-256-CBC(PKCS7(json))) → the JSON object."""
    try:
        raw = base64.b64decode(encrypted, validate=True)
        if len(raw) < 32 or len(raw) % 16:
            raise ValueError("wrong length")
        decryptor = Cipher(algorithms.AES(_key(encrypt_key)), modes.CBC(raw[:16])).decryptor()
        padded = decryptor.update(raw[16:]) + decryptor.finalize()
        unpadder = padding.PKCS7(128).unpadder()
        plain = unpadder.update(padded) + unpadder.finalize()
        value = json.loads(plain)
    except (ValueError, TypeError) as exc:
        raise LarkCryptoError(f"cannot decrypt the event: {exc}") from None
    if not isinstance(value, dict):
        raise LarkCryptoError("the decrypted event is not a JSON object")
    return value


def encrypt(payload: dict[str, Any], encrypt_key: str) -> str:
    """The inverse of decrypt (Lark's side; used by the tests and the benchmark)."""
    iv = os.urandom(16)
    padder = padding.PKCS7(128).padder()
    padded = padder.update(json.dumps(payload).encode()) + padder.finalize()
    encryptor = Cipher(algorithms.AES(_key(encrypt_key)), modes.CBC(iv)).encryptor()
    return base64.b64encode(iv + encryptor.update(padded) + encryptor.finalize()).decode()


def signature(timestamp: str, nonce: str, encrypt_key: str, body: bytes) -> str:
    return hashlib.sha256((timestamp + nonce + encrypt_key).encode() + body).hexdigest()


def signature_valid(
    timestamp: str, nonce: str, encrypt_key: str, body: bytes, received: str
) -> bool:
    return hmac.compare_digest(signature(timestamp, nonce, encrypt_key, body), received or "")
