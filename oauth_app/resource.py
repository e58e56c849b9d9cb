"""Ethan's /mcp as an OAuth protected resource: its identifier, its metadata URL, and which
token audiences it accepts. One rule for the Django side (metadata, consent, token) and the MCP
app (its 401 challenge and token check), so both name the same resource."""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings

MCP_PATH = "/mcp"
PROTECTED_RESOURCE_WELL_KNOWN = "/.well-known/oauth-protected-resource"


def origin(*, scheme: str, host: str) -> str:
    """The origin people reach Ethan at: ETHAN_PUBLIC_URL, else the request's own scheme and
    Host (lower case: RFC 8707's canonical form)."""
    if settings.ETHAN_PUBLIC_URL:
        return settings.ETHAN_PUBLIC_URL
    return f"{scheme.lower()}://{host.lower()}"


def mcp_resource(origin: str) -> str:
    """The canonical URI of the MCP server (RFC 8707 §2, the MCP authorization specification's
    "canonical server URI"): what tokens are bound to."""
    return origin + MCP_PATH


def metadata_url(origin: str) -> str:
    """The protected-resource metadata of /mcp, in RFC 9728's path-suffixed form (§3.1)."""
    return origin + PROTECTED_RESOURCE_WELL_KNOWN + MCP_PATH


def accepted_resources(origin: str) -> set[str]:
    """The resource indicators a token for /mcp may carry: /mcp itself, or the whole origin (the
    resource of the root metadata document, which a host falls back to, RFC 9728 §3)."""
    return {origin, mcp_resource(origin)}


def canonical(uri: str) -> str:
    """A resource indicator compared without case in scheme and host, without a trailing slash
    (the specification asks servers to accept either spelling)."""
    parts = urlsplit(uri)
    return (
        parts._replace(scheme=parts.scheme.lower(), netloc=parts.netloc.lower())
        .geturl()
        .rstrip("/")
    )


def for_this_server(resources: list[str], origin: str) -> bool:
    """Whether every resource indicator names this server's /mcp (or its origin)."""
    accepted = accepted_resources(origin)
    return bool(resources) and all(canonical(r) in accepted for r in resources)
