"""What Ethan accepts from a client, however it identified itself (a client metadata document
or dynamic registration): its redirect URIs, and the name a person sees for it."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from oauth2_provider.models import Application

LOOPBACK_NAMES = {"localhost"}
NAME_MAX_CHARS = 90  # as an MCP client's own name in a fact's source_client


def redirect_uri_refusal(uri: str) -> str | None:
    """Why a redirect URI is refused, or None. https anywhere; plain http only to the loopback
    interface, where a desktop host listens for the code (RFC 8252 §7.3). No fragment, no
    credentials: the code must reach exactly the URI that was registered."""
    try:
        parts = urlsplit(uri)
        parts.port  # noqa: B018 (an out-of-range port raises here)
    except ValueError:
        return f"{uri!r} is not a URL"
    if parts.fragment or parts.username or parts.password or not parts.hostname:
        return f"{uri!r}: a redirect URI has a host and no fragment or user name"
    if parts.scheme == "https":
        return None
    if parts.scheme == "http" and _is_loopback(parts.hostname):
        return None
    return f"{uri!r}: redirect URIs use https, or http on the loopback interface"


def redirect_host(uri: str) -> tuple[str, bool]:
    """Where the code goes (the redirect URI's host), and whether that is this very computer's
    loopback interface, which any program on it could be listening on."""
    host = urlsplit(uri).hostname or ""
    return host, _is_loopback(host)


def _is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def client_domain(application: Application) -> str:
    """The domain that vouches for the client: its metadata document's host, else the host of
    its first redirect URI (which a registered client chose itself: shown as such)."""
    if application.client_id.startswith("https://"):
        return urlsplit(application.client_id).hostname or ""
    uris = application.redirect_uris.split()
    return (urlsplit(uris[0]).hostname or "") if uris else ""


def client_name(application: Application) -> str:
    """The client's name as a person sees it and as its facts record it."""
    return (application.name or client_domain(application) or application.client_id)[
        :NAME_MAX_CHARS
    ]
