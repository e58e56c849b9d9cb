"""What Ethan accepts from a client, however it identified itself (a client metadata document
or dynamic registration): its redirect URIs, and the name a person sees for it."""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from urllib.parse import urlsplit

from oauth2_provider.models import Application

LOOPBACK_NAMES = {"localhost"}
NAME_MAX_CHARS = 90  # as an MCP client's own name in a fact's source_client


# The hosts people know by name, and the domains their redirect URIs are at: a client that
# calls itself one of them but sends the code elsewhere is marked on the consent page.
KNOWN_HOSTS = {
    "claude": ("claude.ai", "claude.com", "anthropic.com"),
    "anthropic": ("claude.ai", "claude.com", "anthropic.com"),
    "chatgpt": ("chatgpt.com", "openai.com"),
    "openai": ("chatgpt.com", "openai.com"),
    "gemini": ("google.com",),
    "copilot": ("github.com", "githubcopilot.com", "microsoft.com"),
    "cursor": ("cursor.com", "cursor.sh"),
    "ethan": (),  # no host may call itself Ethan
}
# Latin look-alikes from other scripts (Cyrillic, Greek) that NFKC leaves as they are.
LOOKALIKES = str.maketrans("аеорсухіјӏԁɡοαν", "aeopcyxijldgoav")
# What a name shows as nothing or as a new line: controls, format characters (the bidi
# overrides and isolates, zero-width ones), line and paragraph separators.
HIDDEN_CATEGORIES = {"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"}


def redirect_uri_refusal(uri: str) -> str | None:
    """Why a redirect URI is refused, or None. https anywhere; plain http only to the loopback
    interface, where a desktop host listens for the code (RFC 8252 §7.3). No fragment, no
    credentials.

    A code goes only to a URI registered exactly (django-oauth-toolkit), but for the port of
    http://127.0.0.1 and http://[::1]: RFC 8252 §7.3 has the server accept any port there, as
    a desktop host listens on whichever port its system gave it for this one sign-in. Only
    this computer can be reached there, and the consent page says that any program on it
    could be listening. http://localhost is matched port included (RFC 8252 §8.3 advises
    against it; ALLOW_LOCALHOST_LOOPBACK stays off)."""
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
    """Where the code goes (the host of the redirect URI the request uses, with its port on the
    loopback interface, where any port is accepted), and whether that is this very computer's
    loopback interface, which any program on it could be listening on."""
    parts = urlsplit(uri)
    host = parts.hostname or ""
    loopback = _is_loopback(host)
    shown = f"[{host}]" if ":" in host else host
    if loopback and parts.port:
        shown = f"{shown}:{parts.port}"
    return shown, loopback


def impersonated(name: str, uri: str) -> tuple[str, tuple[str, ...]] | None:
    """The known host a client's name claims (its word and its domains), when the redirect URI
    it uses is at none of that host's domains; else None. A desktop host's loopback URI is
    not judged here: the consent page warns of every one of those."""
    host = (urlsplit(uri).hostname or "").lower().rstrip(".")
    if not host or _is_loopback(host):
        return None
    folded = unicodedata.normalize("NFKC", clean_name(name)).casefold().translate(LOOKALIKES)
    letters = re.sub(r"[^a-z]", "", folded)
    for word, domains in KNOWN_HOSTS.items():
        if word in letters and not any(host == d or host.endswith("." + d) for d in domains):
            return word, domains
    return None


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


def clean_name(name: str) -> str:
    """A name on one line, as it reads: no control, format (bidi overrides and isolates,
    zero-width characters) or line-breaking character, each run of spaces one space.
    "Claude\n\nVerified by Ethan" showed as one line that seemed to be two statements."""
    visible = "".join(
        " " if unicodedata.category(c) in HIDDEN_CATEGORIES | {"Zs"} else c
        for c in name
        if unicodedata.category(c) not in HIDDEN_CATEGORIES or c in "\t\n\r\x0b\x0c"
    )
    return " ".join(visible.split())


def client_name(application: Application) -> str:
    """The client's name as a person sees it and as its facts record it."""
    return (clean_name(application.name) or client_domain(application) or application.client_id)[
        :NAME_MAX_CHARS
    ]


def host_key(application: Application) -> tuple[str, tuple[str, ...]]:
    """What makes registrations one host to the person: the same name and the same redirect
    URIs. Claude and ChatGPT register again whenever told invalid_client, each time a new
    client id; the person still connected one app."""
    return client_name(application).casefold(), tuple(sorted(application.redirect_uris.split()))
