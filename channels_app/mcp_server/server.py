"""Ethan's memory as an MCP server, built on the official `mcp` SDK (MCPServer).

Each tool is a thin call into the services the agent's own tools and the REST API use
(memory_search, memory_app.services, profile_app.services, the selectors): the same limits,
the same refusals, one code path. A refusal (a missing or wrong argument, an unknown fact or
section, a text over its limit) is a tool error result (`isError`) with the reason, and nothing
is written; every write is one service call in one transaction, so a client that goes away
mid-call leaves nothing half written.

Who is asking:
- over stdio (`ethan mcp --user NAME`) the person named at start;
- over streamable HTTP, the person whose token came as `Authorization: Bearer <token>` on that
  very request (EthanTokenVerifier; the SDK answers 401 without a valid one, and
  channels_app.mcp_server.http turns it into the OAuth challenge): an Ethan API token (`ethan
  token NAME`, for scripts and the bridge; it may do everything), or an OAuth access token a
  host obtained through oauth_app, bound to this server's /mcp and carrying the scopes the
  person granted (memory.read, and memory.write unless they chose read only: the write tools
  refuse a connection without it).
Every write names the MCP client: an OAuth client by the name it registered (the memory page's
Connected apps tab finds its facts by it), any other by the name it gives itself. Facts get
source `mcp` and `source_client`, history rows and profile revisions the actor
`mcp:<client name>`.

Django's ORM is synchronous: the tools are plain functions, which the SDK runs in worker
threads; each opens and closes its database connection (`_database`).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Literal

import anyio.to_thread
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import close_old_connections, transaction
from mcp.server import MCPServer
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import BaseModel, Field
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp

from agent_app.memory_search import MAX_LIMIT, memory_search
from agent_app.paths import FULL, SETTINGS
from agent_app.prompts import fact_line, stored_text
from agent_app.tools import refusal_text
from channels_app.mcp_server.http import (
    OAUTH_APPLICATION_CLAIM,
    OAUTH_CLIENT_CLAIM,
    REQUEST_ORIGIN,
    JsonErrors,
    OAuthChallenge,
    PersonalSessions,
)
from episodes_app import selectors as episode_selectors
from ethan_shared.api import api_token_owner_id
from ethan_shared.limits import (
    FACT_MAX_CHARS,
    PROFILE_ENTRY_MAX_CHARS,
    RULE_CONTEXT_MAX_CHARS,
    RULE_MAX_CHARS,
    SEARCH_QUERY_MAX_CHARS,
)
from memory_app import confidence
from memory_app import selectors as memory_selectors
from memory_app import services as memory_services
from memory_app.models import Fact, Procedure
from oauth_app import resource, scopes
from oauth_app import selectors as oauth_selectors
from oauth_app import services as oauth_services
from profile_app import selectors as profile_selectors
from profile_app import services as profile_services
from profile_app.markdown import render as render_profile
from profile_app.sections import SECTIONS
from sessions_app import selectors as session_selectors

log = logging.getLogger(__name__)

NAME = "ethan"
INSTRUCTIONS = (
    "Ethan is the user's long-term memory: facts about them (with a confidence), the rules "
    "they set for assistants, a narrative profile in seven sections, summaries of past "
    "conversations (episodes) and the conversations themselves. Search it before asking the "
    "user something they may have said before; write to it when they share something lasting "
    "about themselves or set a rule."
)
FACTS_MAX = 200
UNKNOWN_CLIENT = "unknown"


# --- who is asking -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Caller:
    owner: AbstractBaseUser
    client: str  # the MCP client's own name (clientInfo), for the history
    application_id: int | None = None  # an OAuth client's id, None for an Ethan API token

    @property
    def actor(self) -> str:
        return f"mcp:{self.client}"


def access_for_token(token: str, origin: str | None) -> AccessToken | None:
    """What a Bearer token lets its bearer do at /mcp of `origin`, or None. The access token's
    client_id is the person's id (sessions are counted and owned per person); an OAuth client's
    name travels in its claims."""
    with _database():
        owner_id = api_token_owner_id(key=token)
        if owner_id is not None:  # an Ethan API token: everything, as the REST API allows
            return AccessToken(token=token, client_id=str(owner_id), scopes=list(scopes.ALL))
        access = oauth_selectors.oauth_access(token=token)
        # Only a token issued for this very server's /mcp (RFC 8707; the MCP authorization
        # specification: "MCP servers MUST only accept tokens that are valid for use with their
        # own resources"); with no known origin, none at all.
        if (
            access is None
            or origin is None
            or not resource.for_this_server(access.resources, origin)
            or not scopes.granted(access.scopes, scopes.READ)
        ):
            return None
        oauth_services.connection_touch(
            owner_id=access.owner_id, application_id=access.application_id
        )
        return AccessToken(
            token=token,
            client_id=str(access.owner_id),
            scopes=access.scopes,
            expires_at=access.expires_at,
            resource=resource.mcp_resource(origin),
            claims={
                OAUTH_CLIENT_CLAIM: access.client,
                OAUTH_APPLICATION_CLAIM: access.application_id,
            },
        )


class EthanTokenVerifier(TokenVerifier):
    """An MCP request's Bearer token: an Ethan API token or an OAuth access token
    (access_for_token), checked against the origin the request came to (http.REQUEST_ORIGIN)."""

    async def verify_token(self, token: str) -> AccessToken | None:
        return await anyio.to_thread.run_sync(access_for_token, token, REQUEST_ORIGIN.get())


@contextlib.contextmanager
def _database() -> Iterator[None]:
    """One call's database use: a connection of its own thread, closed afterwards (no request
    cycle closes it here, as Django's does for a view)."""
    close_old_connections()
    try:
        yield
    finally:
        close_old_connections()


class EthanMCP:
    """The server: its tools and resources, for one person (stdio) or for whoever each HTTP
    request's token names."""

    def __init__(self, *, owner_id: int | None = None, base_url: str = ""):
        self.owner_id = owner_id
        auth = None
        verifier = None
        if owner_id is None:
            # The SDK's resource-server mode: it checks each request's Bearer token with the
            # verifier and answers 401 itself. issuer_url is required by its settings; no
            # OAuth flow is offered (no authorization server, no metadata routes).
            verifier = EthanTokenVerifier()
            auth = AuthSettings(issuer_url=base_url or "http://127.0.0.1", resource_server_url=None)
        self.server = MCPServer(
            NAME,
            title="Ethan memory",
            version=importlib.metadata.version("ethan"),  # serverInfo.version
            instructions=INSTRUCTIONS,
            token_verifier=verifier,
            auth=auth,
            log_level="WARNING",
        )
        self._register()

    # The person behind this call.
    def _owner(self) -> AbstractBaseUser:
        owner_id = self.owner_id
        if owner_id is None:
            token = get_access_token()
            if token is None:  # the SDK refuses such a request first; never anyone's memory
                raise ToolError("not authenticated")
            owner_id = int(token.client_id)
        return get_user_model().objects.get(pk=owner_id)

    def _caller(self, ctx: Context) -> Caller:
        token = get_access_token() if self.owner_id is None else None
        claims = (token.claims or {}) if token is not None else {}
        client = claims.get(OAUTH_CLIENT_CLAIM, "")
        if not client:
            params = ctx.session.client_params if ctx is not None else None
            client = params.client_info.name if params is not None and params.client_info else ""
        return Caller(
            owner=self._owner(),
            client=(client or UNKNOWN_CLIENT)[:90],
            application_id=claims.get(OAUTH_APPLICATION_CLAIM),
        )

    def _writer(self, ctx: Context) -> Caller:
        """The caller of a tool that changes the memory: refused for a connection the person
        let read only (the HTTP door answers such a call 403 first, http.OAuthChallenge; this
        holds for any path that reaches the tool)."""
        token = get_access_token() if self.owner_id is None else None
        if token is not None and not scopes.granted(token.scopes, scopes.WRITE):
            raise ToolError(
                "this connection may only read Ethan's memory: the person did not grant "
                f"{scopes.WRITE}"
            )
        return self._caller(ctx)

    def _register(self) -> None:
        server = self.server
        for tool in (
            self.memory_search,
            self.memory_write,
            self.procedure_write,
            self.profile_get,
            self.profile_update,
            self.facts_list,
            self.fact_forget,
            self.episodes_search,
            self.session_search,
        ):
            server.add_tool(tool, structured_output=True)
        server.resource(
            "ethan://profile/user_profile.md",
            name="user_profile.md",
            description="The user's narrative profile, seven Markdown sections.",
            mime_type="text/markdown",
        )(self.profile_resource)
        server.resource(
            "ethan://procedures",
            name="procedures",
            description="The active rules the user set for assistants, one per line.",
            mime_type="text/markdown",
        )(self.procedures_resource)
        server.resource(
            "ethan://facts/injected",
            name="injected facts",
            description="The facts Ethan would put into a conversation now: the most trusted "
            "first, as [category, confidence] lines.",
            mime_type="text/markdown",
        )(self.injected_facts_resource)

        @server.custom_route("/healthz", methods=["GET"])
        async def healthz(request: Request) -> JSONResponse:
            return JSONResponse({"status": "ok", "server": NAME})

    # --- tools ---------------------------------------------------------------------------------

    def memory_search(
        self,
        query: Annotated[
            str,
            Field(
                min_length=1,
                max_length=SEARCH_QUERY_MAX_CHARS,
                description="words to look for, in any language (Chinese and English)",
            ),
        ],
        scope: Annotated[
            Literal["messages", "facts", "episodes", "all"],
            Field(description="what to search: past messages, facts, episodes, or all"),
        ] = "all",
        limit: Annotated[int, Field(ge=1, le=MAX_LIMIT, description="how many hits")] = 10,
        ctx: Context = None,
    ) -> SearchResult:
        """Search what Ethan remembers about the user: stored facts, summaries of past
        conversations (episodes) and past messages, ranked by relevance (BM25). Use it when
        the user refers to something said before."""
        with _database():
            caller = self._caller(ctx)
            hits = memory_search(owner=caller.owner, query=query, scope=scope, limit=limit)
            return SearchResult(
                hits=[
                    SearchHit(
                        kind=hit.kind,
                        id=hit.id,
                        session_id=hit.session_id,
                        seq=hit.seq,
                        role=hit.role,
                        content=hit.content,
                        score=round(hit.score, 4),
                        created_at=hit.created_at,
                    )
                    for hit in hits
                ]
            )

    def memory_write(
        self,
        content: Annotated[
            str,
            Field(
                min_length=1,
                max_length=FACT_MAX_CHARS,
                description="one lasting fact about the user as a short, self-contained "
                "statement in their language, e.g. 用户在 Acme 做后端工程师",
            ),
        ],
        category: Annotated[
            Literal["preference", "decision", "knowledge", "correction"],
            Field(description="what kind of fact it is"),
        ] = "knowledge",
        ctx: Context = None,
    ) -> FactWritten:
        """Store one lasting fact about the user in Ethan's long-term memory (who they are, a
        preference, a decision, a correction). An equal fact already known is reinforced
        instead of stored twice. Not for small talk."""
        with _database(), _refusals():
            caller = self._writer(ctx)
            fact = memory_services.fact_write(
                owner=caller.owner,
                content=content,
                category=category,
                confidence=confidence.AGENT_PROACTIVE,
                source=Fact.Source.MCP,
                source_client=caller.client,
            )
            reinforced = fact.hit_count > 1
            if caller.application_id is not None and not reinforced:
                oauth_services.connection_wrote(
                    owner_id=caller.owner.pk, application_id=caller.application_id
                )
            return FactWritten(fact=FactOut.of(fact), reinforced=reinforced)

    def procedure_write(
        self,
        rule: Annotated[
            str,
            Field(
                min_length=1,
                max_length=RULE_MAX_CHARS,
                description="the rule, as an instruction to the assistant "
                '("always reply in English", "以后不要用韩语")',
            ),
        ],
        context: Annotated[
            str, Field(max_length=RULE_CONTEXT_MAX_CHARS, description="why or when it applies")
        ] = "",
        ctx: Context = None,
    ) -> ProcedureWritten:
        """Store a rule for how assistants should behave with the user from now on; Ethan
        shows it on every turn. Only a limited number can be active: when the list is full the
        error says so."""
        with _database(), _refusals():
            caller = self._writer(ctx)
            procedure, created = memory_services.procedure_write(
                owner=caller.owner, rule=rule, context=context, source=Fact.Source.MCP
            )
            return ProcedureWritten(procedure=ProcedureOut.of(procedure), created=created)

    def profile_get(self, ctx: Context = None) -> Profile:
        """The user's narrative profile (user_profile.md): basic traits, identity, goals, work
        and communication style, emotional patterns, their own words, and the agreements they
        made with the assistant."""
        with _database():
            owner = self._caller(ctx).owner
            contents = profile_selectors.profile_sections(owner=owner)
            return Profile(
                markdown=render_profile(contents),
                sections=[
                    ProfileSectionOut(key=s.key, title=s.title, content=contents.get(s.key, ""))
                    for s in SECTIONS
                ],
            )

    def profile_update(
        self,
        section: Annotated[
            str,
            Field(
                min_length=1,
                description="a section key or title: "
                + "; ".join(f"{s.key} ({s.title}): {s.purpose}" for s in SECTIONS),
            ),
        ],
        entry: Annotated[
            str,
            Field(
                min_length=1,
                max_length=PROFILE_ENTRY_MAX_CHARS,
                description="the text to write",
            ),
        ],
        mode: Annotated[
            Literal["append", "merge", "overwrite"],
            Field(
                description="append adds a bullet, merge replaces the bullet on the same "
                "subject or adds one, overwrite replaces the whole section"
            ),
        ] = "append",
        ctx: Context = None,
    ) -> ProfileSectionOut:
        """Update one section of the user's narrative profile; the previous text is kept as a
        revision."""
        with _database(), _refusals():
            caller = self._writer(ctx)
            changed = profile_services.profile_update(
                owner=caller.owner, section=section, entry=entry, mode=mode, actor=caller.actor
            )
            return ProfileSectionOut(
                key=changed.key, title=changed.get_key_display(), content=changed.content
            )

    def facts_list(
        self,
        limit: Annotated[int, Field(ge=1, le=FACTS_MAX, description="how many facts")] = 20,
        min_confidence: Annotated[
            float, Field(ge=0, le=1, description="only facts at least this trusted")
        ] = 0.0,
        ctx: Context = None,
    ) -> FactsListed:
        """The user's active facts, the most trusted first (then the most recently used)."""
        with _database():
            owner = self._caller(ctx).owner
            facts = (
                memory_selectors.facts_for_owner(owner=owner)
                .filter(status=Fact.Status.ACTIVE, confidence__gte=min_confidence)
                .order_by("-confidence", "-last_accessed", "-id")[:limit]
            )
            return FactsListed(facts=[FactOut.of(fact) for fact in facts])

    def fact_forget(
        self,
        id: Annotated[int, Field(ge=1, description="the fact's id (from facts_list or search)")],
        ctx: Context = None,
    ) -> FactForgotten:
        """Forget a fact: it is evicted and never injected again; it stays in the fact's
        history, as when the user forgets it through the REST API."""
        with _database(), _refusals():
            caller = self._writer(ctx)
            fact = memory_selectors.facts_for_owner(owner=caller.owner).filter(pk=id).first()
            if fact is None:
                raise ToolError(f"there is no fact {id} among this user's facts")
            was = memory_services.fact_forget(fact=fact, actor=caller.actor)
            return FactForgotten(id=fact.pk, status=fact.status, was=was)

    def episodes_search(
        self,
        query: Annotated[
            str,
            Field(min_length=1, max_length=SEARCH_QUERY_MAX_CHARS, description="words to look for"),
        ],
        limit: Annotated[int, Field(ge=1, le=MAX_LIMIT, description="how many episodes")] = 10,
        ctx: Context = None,
    ) -> EpisodesFound:
        """Summaries of the user's past conversations (episodes) that match the query, with
        their keywords and dates, best first."""
        with _database():
            owner = self._caller(ctx).owner
            found = episode_selectors.episodes_search(owner=owner, query=query, limit=limit)
            return EpisodesFound(
                episodes=[
                    EpisodeOut(
                        id=item.episode.pk,
                        session_id=item.episode.session_ref,
                        summary=item.episode.summary,
                        keywords=list(item.episode.keywords or []),
                        rounds=item.episode.turn_count,
                        timestamp=item.episode.timestamp,
                        score=round(item.score, 4),
                    )
                    for item in found
                ]
            )

    def session_search(
        self,
        text: Annotated[
            str,
            Field(min_length=1, max_length=SEARCH_QUERY_MAX_CHARS, description="words or a phrase"),
        ],
        limit: Annotated[int, Field(ge=1, le=MAX_LIMIT, description="how many sessions")] = 10,
        ctx: Context = None,
    ) -> SessionsFound:
        """The user's conversations whose messages or title match the text, with the best
        matching message of each."""
        with _database(), _refusals():
            owner = self._caller(ctx).owner
            sessions = session_selectors.session_search(owner=owner, query=text, limit=limit)
            return SessionsFound(
                sessions=[
                    SessionOut(
                        id=session.pk,
                        title=session.title,
                        channel=session.channel,
                        updated_at=session.updated_at,
                        match=session.match,
                    )
                    for session in sessions
                ]
            )

    # --- resources -----------------------------------------------------------------------------

    def profile_resource(self) -> str:
        with _database():
            return profile_selectors.profile_markdown(owner=self._owner())

    def procedures_resource(self) -> str:
        with _database():
            rules = memory_selectors.procedures_active(owner=self._owner())
            return "\n".join(f"- {stored_text(rule.rule)}" for rule in rules)

    def injected_facts_resource(self) -> str:
        with _database():
            facts = memory_selectors.facts_for_injection(
                owner=self._owner(), limit=SETTINGS[FULL].fact_limit, text=""
            )
            return "\n".join(fact_line(fact) for fact in facts)


@contextlib.contextmanager
def _refusals() -> Iterator[None]:
    """A service's refusal as a tool error with its reason; nothing was written (each service
    call is one transaction)."""
    try:
        with transaction.atomic(durable=True):
            yield
    except ValidationError as exc:
        raise ToolError(refusal_text(exc)) from None
    except ValueError as exc:  # an unknown profile section or mode, an empty search
        raise ToolError(str(exc)) from None


# --- what the tools return (structured content, and the same as JSON text) --------------------


class SearchHit(BaseModel):
    kind: Literal["fact", "episode", "message"]
    id: int
    session_id: str | None
    seq: int | None
    role: str
    content: str
    score: float
    created_at: datetime


class SearchResult(BaseModel):
    hits: list[SearchHit]


class FactOut(BaseModel):
    id: int
    content: str
    category: str
    confidence: float
    source: str
    source_client: str
    status: str
    hit_count: int
    created_at: datetime
    last_accessed: datetime

    @classmethod
    def of(cls, fact: Fact) -> FactOut:
        return cls(
            id=fact.pk,
            content=fact.content,
            category=fact.category,
            confidence=round(fact.confidence, 4),
            source=fact.source,
            source_client=fact.source_client,
            status=fact.status,
            hit_count=fact.hit_count,
            created_at=fact.created_at,
            last_accessed=fact.last_accessed,
        )


class FactWritten(BaseModel):
    fact: FactOut
    reinforced: bool = Field(description="true when an equal fact was known and reinforced")


class FactsListed(BaseModel):
    facts: list[FactOut]


class FactForgotten(BaseModel):
    id: int
    status: str
    was: str = Field(description="its status before (evicted: it was forgotten already)")


class ProcedureOut(BaseModel):
    id: int
    rule: str
    context: str
    active: bool

    @classmethod
    def of(cls, procedure: Procedure) -> ProcedureOut:
        return cls(
            id=procedure.pk,
            rule=procedure.rule,
            context=procedure.context,
            active=procedure.active,
        )


class ProcedureWritten(BaseModel):
    procedure: ProcedureOut
    created: bool = Field(description="false when the same rule existed already")


class ProfileSectionOut(BaseModel):
    key: str
    title: str
    content: str


class Profile(BaseModel):
    markdown: str
    sections: list[ProfileSectionOut]


class EpisodeOut(BaseModel):
    id: int
    session_id: str
    summary: str
    keywords: list[str]
    rounds: int
    timestamp: datetime
    score: float


class EpisodesFound(BaseModel):
    episodes: list[EpisodeOut]


class SessionOut(BaseModel):
    id: str
    title: str
    channel: str
    updated_at: datetime
    match: str | None


class SessionsFound(BaseModel):
    sessions: list[SessionOut]


# --- the two transports -------------------------------------------------------------------------


def run_stdio(owner: AbstractBaseUser) -> None:
    """Serve one person over stdin/stdout until the host closes the pipe."""
    EthanMCP(owner_id=owner.pk).server.run("stdio")


def http_app(*, host: str, port: int) -> ASGIApp:
    """The streamable HTTP transport at /mcp (and /healthz), each request authenticated by its
    Bearer token (a 401 or 403 says how to get one: http.OAuthChallenge). Host and Origin
    headers are checked against DJANGO_ALLOWED_HOSTS (DNS rebinding), as the web process checks
    Host. Sessions are counted per person and every error is JSON (channels_app.mcp_server.http).

    Stateless when more than one process serves the port (ETHAN_SERVE_PROCESSES): each request
    is answered whole by the process that gets it, with no session to find again."""
    hosts = list(settings.ALLOWED_HOSTS)
    if "*" in hosts:
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    else:
        allowed = [*hosts, *(f"{h}:*" for h in hosts)]
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=allowed,
            allowed_origins=[f"{scheme}://{h}" for h in allowed for scheme in ("http", "https")],
        )
    mcp = EthanMCP(base_url=f"http://{host}:{port}")
    app = mcp.server.streamable_http_app(
        streamable_http_path="/mcp",
        transport_security=security,
        host=host,
        stateless_http=settings.ETHAN_SERVE_PROCESSES > 1,
    )
    PersonalSessions.adopt(mcp.server.session_manager)
    return OAuthChallenge(JsonErrors(app), access_for_token)
