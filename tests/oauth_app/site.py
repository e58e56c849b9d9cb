"""The site as one ASGI application for the OAuth tests: /mcp to the MCP app, everything else
(/.well-known, /oauth, the sign-in and consent pages) to Django, as `make serve` routes them."""

from __future__ import annotations

from django.core.asgi import get_asgi_application
from starlette.types import ASGIApp, Receive, Scope, Send

# Bound at import, before tests.oauth_app.hosts.served_site puts the whole site in its place.
from agent_app.mcp_server.server import http_app


def site_app(port: int) -> ASGIApp:
    django_app = get_asgi_application()
    mcp_app = http_app(host="127.0.0.1", port=port)

    async def site(scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        # The lifespan too: the MCP app's session manager runs in it.
        if scope["type"] == "lifespan" or path == "/mcp" or path.startswith("/mcp/"):
            await mcp_app(scope, receive, send)
        else:
            await django_app(scope, receive, send)

    return site
