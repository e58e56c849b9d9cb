"""The streamable HTTP door's own rules, around the mcp SDK's session manager.

- Sessions per person: each person (the owner of the Bearer token) keeps at most
  ETHAN_MCP_SESSIONS_PER_PERSON sessions open. Past it, their session idle the longest is
  closed (terminated, its id then answers 404 as the spec says for an expired session) so the
  new one is accepted; when every one of theirs is in use (a request being served, an open GET
  stream), the new one is refused with 429. The SDK's global cap is switched off: it let one
  token fill the server and refuse everyone else with 503.
- Opening sessions is throttled per person (ETHAN_MCP_INITIALIZE_RATE, counted in the shared
  cache like the API's throttle): 429 with Retry-After.
- Stateless, when several processes serve the port (server.http_app): no session is kept, so
  there is none to cap; an `initialize` request is throttled all the same, and a GET (an event
  stream for the server's own messages, which a request without a session never has) is
  answered 405, as the transport specification allows, where the SDK would hold it open empty.
- Every error answer of the app is JSON, `{"error": code, "error_description": text}`, the
  shape of the SDK's 401; its transport checks answer plain text (a wrong Host is a 421).
- OAuth (OAuthChallenge): a 401 tells a host where to authorize (RFC 9728 §5.1, the MCP
  authorization specification's "Scope Selection Strategy"), and a tool call that needs a scope
  the token lacks is answered 403 insufficient_scope before it reaches the tool, so the host
  can ask the person again ("Runtime Insufficient Scope Errors").
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from contextvars import ContextVar

import anyio.to_thread
from django.conf import settings
from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from redis import RedisError
from rest_framework.throttling import SimpleRateThrottle
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from oauth_app import resource, scopes

log = logging.getLogger(__name__)

# The origin (scheme://host) the request being served came to, for the token check: an OAuth
# token is accepted only at the resource it was issued for (oauth_app.resource).
REQUEST_ORIGIN: ContextVar[str | None] = ContextVar("ethan_mcp_request_origin", default=None)
# The claim of an OAuth access token that carries its client's name (the facts it writes).
OAUTH_CLIENT_CLAIM = "ethan_oauth_client"
# And its client's id (the Application's key): what the Connected apps tab counts writes by.
OAUTH_APPLICATION_CLAIM = "ethan_oauth_application"


class SessionsInUse(Exception):
    """A person at their session cap with none idle: the new session is refused."""


class PersonalSessions(StreamableHTTPSessionManager):
    """The SDK's session manager with per-person accounting. The SDK builds its Starlette app
    around its own manager and takes no other, so `adopt` switches that manager's class to
    this one before it runs; the overridden steps are the manager's own admission hooks."""

    _evicting: dict[str, tuple[str, StreamableHTTPServerTransport]]

    @classmethod
    def adopt(cls, manager: StreamableHTTPSessionManager) -> PersonalSessions:
        manager.__class__ = cls
        # The SDK's cap counts everyone's sessions together (then 503 for all): off, as each
        # person's sessions are capped instead (_admit_session).
        manager.max_sessions = None
        manager._evicting = {}
        return manager  # type: ignore[return-value]

    def sessions_of(self, person: str) -> dict[str, StreamableHTTPServerTransport]:
        """The person's open sessions, oldest first."""
        return {
            session_id: self._server_instances[session_id]
            for session_id, owner in self._session_owners.items()
            if owner["client_id"] == person and session_id in self._server_instances
        }

    async def _handle_stateful_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope["headers"])
        if MCP_SESSION_ID_HEADER.encode() not in headers:
            # A request that opens a session (an `initialize`): counted per person first.
            refusal = await _initialize_refusal(scope)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        try:
            await super()._handle_stateful_request(scope, receive, send)
        except SessionsInUse as refused:
            await _error(429, "too_many_sessions", str(refused))(scope, receive, send)

    async def _handle_stateless_request(
        self, protocol_version_hint: str | None, scope: Scope, receive: Receive, send: Send
    ) -> None:
        if scope["method"] == "GET":
            # The SDK would open an event stream that nothing is ever sent on (no session to
            # send for) and that holds its connection until the host leaves.
            refusal = _error(
                405,
                "method_not_allowed",
                "this server keeps no MCP session: no event stream to open, POST each request",
                {"Allow": "POST"},
            )
            await refusal(scope, receive, send)
            return
        if scope["method"] == "POST":
            # Every request comes without a session: an `initialize` is known by its method.
            receive, body = await _held_body(receive)
            message = _rpc_request(body)
            if message is not None and message.get("method") == "initialize":
                refusal = await _initialize_refusal(scope)
                if refusal is not None:
                    await refusal(scope, receive, send)
                    return
        await super()._handle_stateless_request(protocol_version_hint, scope, receive, send)

    def _admit_session(
        self, requestor: AuthorizationContext | None
    ) -> StreamableHTTPServerTransport | None:
        # Under the manager's creation lock, with no await: the count and the choice of the
        # session to close cannot interleave with another admission.
        victim = None
        if requestor is not None:
            cap = settings.ETHAN_MCP_SESSIONS_PER_PERSON
            theirs = self.sessions_of(requestor["client_id"])
            if len(theirs) >= cap:
                idle = {sid: t for sid, t in theirs.items() if _idle_since(t) is not None}
                if not idle:
                    raise SessionsInUse(
                        f"{len(theirs)} MCP sessions of this person are open and in use "
                        f"(at most {cap}): end one first"
                    )
                victim = min(idle, key=lambda sid: _idle_since(idle[sid]))
                # Forgotten now, so its id answers 404 from this moment; terminated (its
                # streams and server task freed) before the new session is answered.
                self._server_instances.pop(victim)
                self._session_owners.pop(victim, None)
        transport = super()._admit_session(requestor)
        if victim is not None and transport is not None:
            self._evicting[transport.mcp_session_id] = (victim, theirs[victim])
        return transport

    async def _serve_opening_request(
        self,
        http_transport: StreamableHTTPServerTransport,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        evicted = self._evicting.pop(http_transport.mcp_session_id, None)
        if evicted is not None:
            await self._discard_session(*evicted)
        await super()._serve_opening_request(http_transport, scope, receive, send)


def _person(scope: Scope) -> str | None:
    user = scope.get("user")
    token = getattr(user, "access_token", None)
    return token.client_id if token is not None else None


def _idle_since(transport: StreamableHTTPServerTransport) -> float | None:
    """When the session's idle countdown ends, or None while it is in use. The transport
    holds its idle deadline at infinity while any request is in flight (an open GET stream
    included) and until its opening request has started."""
    scope = transport.idle_scope
    if scope is None or scope.deadline == math.inf:
        return None
    return scope.deadline


class InitializeThrottle(SimpleRateThrottle):
    """Sessions opened per person (ETHAN_MCP_INITIALIZE_RATE, e.g. "30/min"), counted in the
    shared cache as the API's requests are (ethan_shared.throttles)."""

    scope = "mcp_initialize"

    def __init__(self, *, person: str) -> None:
        self.person = person
        super().__init__()

    def get_rate(self) -> str:
        return settings.ETHAN_MCP_INITIALIZE_RATE

    def get_cache_key(self, request: None, view: None) -> str:
        return self.cache_format % {"scope": self.scope, "ident": self.person}


async def _initialize_refusal(scope: Scope) -> JSONResponse | None:
    """The 429 for a person past ETHAN_MCP_INITIALIZE_RATE, else None (anyone may open a
    session when no token names a person: the SDK answers 401)."""
    person = _person(scope)
    if person is None:
        return None
    wait = await anyio.to_thread.run_sync(_initialize_wait, person)
    if wait is None:
        return None
    return _error(
        429,
        "rate_limited",
        f"too many new MCP sessions; retry in {wait} s",
        {"Retry-After": str(wait)},
    )


def _initialize_wait(person: str) -> int | None:
    """None when the person may open a session now, else the whole seconds to wait. A cache
    that is down lets the session open, as it lets API requests through."""
    throttle = InitializeThrottle(person=person)
    try:
        if throttle.allow_request(None, None):
            return None
    except (RedisError, OSError) as exc:
        log.warning("MCP initialize not counted (cache unavailable: %s)", type(exc).__name__)
        return None
    return max(1, math.ceil(throttle.wait() or 1))


def _error(
    status: int, code: str, description: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        {"error": code, "error_description": description}, status_code=status, headers=headers
    )


# The SDK's plain-text answers, by status: its transport checks (Content-Type, Host, Origin),
# its body limit, and Starlette's own for an unknown path or method.
PLAIN_ERRORS = {
    400: "invalid_request",
    403: "invalid_origin",
    404: "not_found",
    405: "method_not_allowed",
    413: "request_too_large",
    421: "invalid_host",
}


class JsonErrors:
    """Every error answer of the MCP app as JSON: a plain-text one is rewritten into
    `{"error", "error_description"}` (JSON ones, the SDK's 401 and its JSON-RPC errors, pass)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        body = b""

        async def rewrite(message: Message) -> None:
            nonlocal start, body
            if message["type"] == "http.response.start" and _plain_error(message):
                start = message  # held until its body is complete
                return
            if start is None or message["type"] != "http.response.body":
                await send(message)
                return
            body += message.get("body", b"")
            if message.get("more_body", False):
                return
            status = start["status"]
            text = body.decode("utf-8", "replace").strip() or "error"
            kept = {
                key.decode("latin-1"): value.decode("latin-1")
                for key, value in start.get("headers", [])
                if key.lower() not in (b"content-type", b"content-length")
            }
            answer = _error(status, PLAIN_ERRORS.get(status, "http_error"), text, kept)
            await answer({"type": "http"}, receive, send)

        await self.app(scope, receive, rewrite)


def _plain_error(start: Message) -> bool:
    if start["status"] < 400:
        return False
    headers: list[tuple[bytes, bytes]] = start.get("headers", [])
    kind = next((value for key, value in headers if key.lower() == b"content-type"), b"")
    return not kind.lower().startswith(b"application/json")


class OAuthChallenge:
    """The OAuth side of the /mcp door. Sets REQUEST_ORIGIN for the token verifier; answers a
    write tool called with a token that lacks memory.write with 403 insufficient_scope (the
    tool refuses it too: EthanMCP._writer); and gives every 401 its challenge:

        WWW-Authenticate: Bearer
            resource_metadata="<origin>/.well-known/oauth-protected-resource/mcp",
            scope="memory.read memory.write"

    (with error="invalid_token" when a token was presented: RFC 6750 §3.1 leaves the error
    out when none was)."""

    def __init__(
        self, app: ASGIApp, access_for_token: Callable[[str, str | None], AccessToken | None]
    ) -> None:
        self.app = app
        self.access_for_token = access_for_token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        origin = resource.origin(scheme=_scheme(scope, headers), host=headers.get("host", ""))
        bearer = _bearer(headers.get("authorization", ""))
        reset = REQUEST_ORIGIN.set(origin)
        try:
            if bearer is not None and scope["method"] == "POST":
                receive, refusal = await self._scope_refusal(bearer, origin, receive)
                if refusal is not None:
                    await refusal(scope, receive, send)
                    return

            async def challenging(message: Message) -> None:
                if message["type"] == "http.response.start" and message["status"] == 401:
                    kept = [
                        (key, value)
                        for key, value in message.get("headers", [])
                        if key.lower() != b"www-authenticate"
                    ]
                    value = _challenge(origin, " ".join(scopes.ALL), presented=bearer is not None)
                    message = {**message, "headers": [*kept, (b"www-authenticate", value.encode())]}
                await send(message)

            await self.app(scope, receive, challenging)
        finally:
            REQUEST_ORIGIN.reset(reset)

    async def _scope_refusal(
        self, bearer: str, origin: str, receive: Receive
    ) -> tuple[Receive, JSONResponse | None]:
        """Reads the request's body to see which tool it calls; the body is replayed to the
        app."""
        replay, body = await _held_body(receive)
        tool = _tool_called(body)
        if tool not in scopes.WRITE_TOOLS:
            return replay, None
        access = await anyio.to_thread.run_sync(self.access_for_token, bearer, origin)
        if access is None or scopes.granted(access.scopes, scopes.WRITE):
            return replay, None  # an unknown token is the SDK's 401
        description = f"{tool} changes the memory: it needs {scopes.WRITE}"
        refusal = _error(
            403,
            "insufficient_scope",
            description,
            {
                "WWW-Authenticate": _challenge(
                    origin, scopes.WRITE, error="insufficient_scope", description=description
                )
            },
        )
        return replay, refusal


async def _held_body(receive: Receive) -> tuple[Receive, bytes]:
    """The request's body (at most ETHAN_MAX_BODY_BYTES of it; the rest, if any, is the SDK's
    to refuse), and a receive that gives the app the request's messages again."""
    held: list[Message] = []
    body = b""
    while len(body) <= settings.ETHAN_MAX_BODY_BYTES:
        message = await receive()
        held.append(message)
        if message["type"] != "http.request":
            break
        body += message.get("body", b"")
        if not message.get("more_body", False):
            break

    async def replay() -> Message:
        return held.pop(0) if held else await receive()

    return replay, body


def _scheme(scope: Scope, headers: Headers) -> str:
    """The request's scheme as Django sees it: behind the HTTPS proxy (ETHAN_HTTPS), the one
    its X-Forwarded-Proto says (SECURE_PROXY_SSL_HEADER), so /mcp and the OAuth pages name the
    same resource."""
    if settings.ETHAN_HTTPS and headers.get("x-forwarded-proto", "").lower() == "https":
        return "https"
    return scope.get("scheme", "http")


def _bearer(authorization: str) -> str | None:
    kind, _, token = authorization.partition(" ")
    return token.strip() or None if kind.lower() == "bearer" else None


def _rpc_request(body: bytes) -> dict | None:
    """The one JSON-RPC message a request's body holds (the transport takes no batch), else
    None."""
    try:
        message = json.loads(body)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


def _tool_called(body: bytes) -> str | None:
    """The tool a JSON-RPC `tools/call` request names, else None."""
    message = _rpc_request(body)
    if message is None or message.get("method") != "tools/call":
        return None
    params = message.get("params")
    name = params.get("name") if isinstance(params, dict) else None
    return name if isinstance(name, str) else None


def _challenge(
    origin: str,
    scope: str,
    *,
    presented: bool = True,
    error: str = "invalid_token",
    description: str = "the access token is missing, expired, revoked or for another server",
) -> str:
    parts = []
    if presented:
        parts += [f'error="{error}"', f'error_description="{description}"']
    parts += [f'resource_metadata="{resource.metadata_url(origin)}"', f'scope="{scope}"']
    return "Bearer " + ", ".join(parts)
