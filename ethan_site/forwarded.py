"""The request as the person sent it, when a reverse proxy stands in front of the server.

A proxy that ends TLS forwards plain http, and says what the person used in X-Forwarded-Proto.
Trusted only when ETHAN_NUM_PROXIES says proxies are there (the same setting that reads the
client address from X-Forwarded-For): without one, anyone could send the header. With it, the
scope's scheme is the proxy's, so every URL the server makes (a redirect, the OAuth issuer, the
metadata documents, the MCP 401's resource_metadata) points where the person came from, https,
and never to http, which MCP hosts refuse to follow."""

from __future__ import annotations

from django.conf import settings
from starlette.types import Scope

SCHEMES = {"http": "http", "https": "https", "ws": "ws", "wss": "wss"}


def forwarded_scope(scope: Scope) -> Scope:
    """`scope` with the scheme the nearest trusted proxy reports, or `scope` itself."""
    proxies = settings.REST_FRAMEWORK.get("NUM_PROXIES") or 0
    if proxies <= 0:
        return scope
    said = [
        value.decode("latin-1")
        for name, value in scope.get("headers", ())
        if name.lower() == b"x-forwarded-proto"
    ]
    # Each proxy adds its hop at the end, as for X-Forwarded-For: the trusted one is the
    # ETHAN_NUM_PROXIES-th from the end.
    hops = [hop.strip().lower() for hop in ",".join(said).split(",") if hop.strip()]
    if not hops:
        return scope
    scheme = SCHEMES.get(hops[-min(proxies, len(hops))])
    if scheme is None:
        return scope
    if scope["type"] == "websocket":
        scheme = {"http": "ws", "https": "wss"}.get(scheme, scheme)
    return {**scope, "scheme": scheme}
