"""The authorization server's doors, django-oauth-toolkit's views with Ethan's rules:

- ConsentView (GET/POST /oauth/authorize/): sign-in (the site's own), then the consent page;
  the person may grant reading only. The token is bound to this server's /mcp (RFC 8707): a
  `resource` naming anything else is refused, none at all means /mcp.
- ClientRegistrationView (POST /oauth/register/): RFC 7591 for hosts without client metadata
  documents; open, counted per address, public clients only, redirect URIs checked; and
  ClientManagementView, RFC 7592's updates held to the same rules.
- ProtectedResourceView: RFC 9728 metadata of /mcp (path-suffixed) and of the origin (root).
- JsonTokenView: DOT's token endpoint, its every error JSON.
- DOT's own revocation and RFC 8414 metadata views (urls.py), configured in settings.
"""

from __future__ import annotations

import json
import math
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from django import forms
from django.contrib import messages
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from oauth2_provider.forms import AllowForm
from oauth2_provider.models import Application
from oauth2_provider.settings import oauth2_settings
from oauth2_provider.views import (
    AuthorizationView,
    DynamicClientRegistrationManagementView,
    DynamicClientRegistrationView,
    OAuthProtectedResourceMetadataView,
    TokenView,
)

from oauth_app import resource, scopes
from oauth_app.clients import (
    client_domain,
    client_name,
    impersonated,
    redirect_host,
    redirect_uri_refusal,
)
from oauth_app.services import connection_grant
from oauth_app.throttles import RegistrationThrottle


def _origin(request) -> str:
    return resource.origin(scheme=request.scheme, host=request.get_host())


class ConsentForm(AllowForm):
    # Reading is what connecting means; writing is the person's choice (unticked: read only).
    write = forms.BooleanField(required=False)


class ConsentView(AuthorizationView):
    template_name = "oauth_app/consent.html"
    form_class = ConsentForm

    def get(self, request, *args, **kwargs):
        given = [r for r in request.GET.getlist("resource") if r]
        refusal = self._resource_refusal(given, request)
        if refusal:
            return refusal
        if not given:
            # A host that sends no resource gets a token for /mcp all the same, never one
            # valid anywhere.
            request.GET = request.GET.copy()
            request.GET["resource"] = resource.mcp_resource(_origin(request))
        return super().get(request, *args, **kwargs)

    def redirect(self, redirect_to, application):
        """Every redirect back to the host names this server (RFC 9207 `iss`), its errors too
        (a denial, a PKCE error): DOT adds it to a granted code only, and hosts that check it,
        as the metadata tells them to, reject an answer without it."""
        return super().redirect(_with_issuer(redirect_to, self.request), application)

    def form_valid(self, form):
        refusal = self._resource_refusal(
            form.cleaned_data.get("resource", "").split(), self.request
        )
        if refusal:
            return refusal
        if form.cleaned_data.get("allow"):
            asked = form.cleaned_data["scope"].split()
            allowed = {scopes.READ, scopes.WRITE} if form.cleaned_data["write"] else {scopes.READ}
            # Reading is always granted with consent (a connection that may do nothing is no
            # connection); writing only if asked for and ticked.
            granted = [s for s in scopes.ALL if s in allowed and (s in asked or s == scopes.READ)]
            form.cleaned_data["scope"] = " ".join(granted)
            application = Application.objects.filter(
                client_id=form.cleaned_data["client_id"]
            ).first()
            if application is None:
                raise Http404("unknown client")
            # The connection and the code together: the hidden fields are checked again as the
            # code is made, and a request refused then leaves no connection behind.
            with transaction.atomic():
                try:
                    connection_grant(
                        owner=self.request.user, application=application, scopes=granted
                    )
                except ValidationError as refused:
                    messages.error(self.request, " ".join(refused.messages))
                    return self.form_invalid(form)
                self.success_url = None
                response = super().form_valid(form)
                if not self.success_url:
                    transaction.set_rollback(True)
                return response
        return super().form_valid(form)

    def form_invalid(self, form):
        # The hidden fields came from the host's request: show the page again with them.
        application = Application.objects.filter(client_id=form.data.get("client_id", "")).first()
        if application is None:
            raise Http404("unknown client")
        asked, redirect_uri = form.data.get("scope", ""), form.data.get("redirect_uri", "")
        return self.render_to_response(
            self.get_context_data(
                form=form, **self._client_context(application, asked, redirect_uri)
            )
        )

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        application = kwargs.get("application")
        if application is not None:
            context.update(
                self._client_context(
                    application,
                    " ".join(kwargs.get("scopes", [])),
                    kwargs.get("redirect_uri") or "",
                )
            )
        return context

    @staticmethod
    def _client_context(application: Application, asked: str, redirect_uri: str) -> dict:
        # The MCP authorization specification: show the redirect URI's host, and warn when it
        # is the loopback interface (a metadata document cannot stop another program on the
        # computer from claiming a localhost callback). The host of the redirect URI this
        # request uses, never one the client merely listed: a client registered with
        # claude.ai's callback and its own showed as claude.ai while sending the code to its own.
        host, loopback = redirect_host(redirect_uri)
        name = client_name(application)
        verified = application.client_id.startswith("https://")
        claimed = impersonated(name, redirect_uri)
        return {
            "application": application,
            "client_name": name,
            # A metadata document's host vouches for the client (it published the document).
            "client_domain": client_domain(application) if verified else "",
            "client_verified": verified,
            "asks_write": scopes.WRITE in asked.split(),
            "redirect_host": host,
            "redirect_loopback": loopback,
            "claimed_host": claimed[0].capitalize() if claimed else "",
            "claimed_domains": ", ".join(claimed[1]) if claimed else "",
        }

    def _resource_refusal(self, resources: list[str], request) -> HttpResponse | None:
        """A consent page that names the error, for a resource that is not this server's /mcp
        (RFC 8707 invalid_target). Never a redirect: nothing is known yet about the client."""
        if not resources or resource.for_this_server(resources, _origin(request)):
            return None
        return self.render_to_response(
            {
                "error": {
                    "error": "invalid_target",
                    "description": "Ethan issues tokens for its own MCP server only: "
                    f"{resource.mcp_resource(_origin(request))}",
                }
            },
            status=400,
        )


def _with_issuer(uri: str, request) -> str:
    parts = urlsplit(uri)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "iss"]
    query.append(("iss", oauth2_settings.oauth2_authorization_server_issuer(request)))
    return urlunsplit(parts._replace(query=urlencode(query)))


class JsonTokenView(TokenView):
    """DOT's token endpoint; its refusals raised by the validator (invalid_target) come without
    a media type, and RFC 6749 §5.2 answers every error as application/json."""

    def post(self, request, *args, **kwargs):
        response = super().post(request, *args, **kwargs)
        if response.status_code >= 400 and response.content.startswith(b"{"):
            response["Content-Type"] = "application/json"
            response["Cache-Control"] = "no-store"
        return response


class ClientRegistrationView(DynamicClientRegistrationView):
    def post(self, request, *args, **kwargs):
        throttle = RegistrationThrottle()
        if not throttle.allow_request(request, self):
            wait = max(1, math.ceil(throttle.wait() or 1))
            response = _registration_error(
                "too_many_requests", f"too many registrations; retry in {wait} s", status=429
            )
            response["Retry-After"] = str(wait)
            return response
        refusal, metadata = _as_public_client(request)
        if refusal is not None:
            return refusal
        # A registration belongs to no one (it is the host's, not the signed-in browser's):
        # its RFC 7592 management token must never carry a person.
        request.user = AnonymousUser()
        return super().post(_WithMetadata(request, metadata), *args, **kwargs)


class ClientManagementView(DynamicClientRegistrationManagementView):
    """RFC 7592: a registered host reads, updates or deletes its registration with the token it
    got; an update is held to the same rules as a registration."""

    def put(self, request, *args, **kwargs):
        refusal, metadata = _as_public_client(request)
        if refusal is not None:
            return refusal
        return super().put(_WithMetadata(request, metadata), *args, **kwargs)


def _as_public_client(request) -> tuple[JsonResponse | None, bytes]:
    """Registration metadata made Ethan's: redirect URIs checked (oauth_app.clients), and the
    client public whatever it asked for: no secret (RFC 7591 §3.2.1 lets the server replace
    what was asked), PKCE guarding its code. The refusal, or None and the metadata to
    register (the body as it came when it is no JSON object: django-oauth-toolkit answers
    invalid_client_metadata)."""
    try:
        metadata = json.loads(request.body)
    except ValueError:
        return None, request.body
    if not isinstance(metadata, dict):
        return None, request.body
    uris = metadata.get("redirect_uris")
    for uri in uris if isinstance(uris, list) else []:
        refusal = redirect_uri_refusal(uri) if isinstance(uri, str) else "not a string"
        if refusal:
            return _registration_error("invalid_redirect_uri", refusal), b""
    metadata["token_endpoint_auth_method"] = "none"
    metadata["grant_types"] = ["authorization_code", "refresh_token"]
    metadata.pop("client_secret", None)
    return None, json.dumps(metadata).encode()


class _WithMetadata:
    """The registration request as django-oauth-toolkit's view reads it: the request itself
    (its headers, user, URL), but for its body, the metadata Ethan registers. A Django
    request's body cannot be replaced, and the toolkit's views read the metadata from nothing
    else."""

    def __init__(self, request: HttpRequest, body: bytes) -> None:
        self._request = request
        self.body = body

    def __getattr__(self, name: str):
        return getattr(self._request, name)


def _registration_error(code: str, description: str, status: int = 400) -> JsonResponse:
    return JsonResponse({"error": code, "error_description": description}, status=status)


class ProtectedResourceView(OAuthProtectedResourceMetadataView):
    """RFC 9728 metadata: at /.well-known/oauth-protected-resource/mcp for /mcp (where a 401
    from /mcp points), and at the root for the origin; no other resource exists."""

    def get(self, request, *args, **kwargs):
        if kwargs.get("resource_path", "").strip("/") not in ("", resource.MCP_PATH.strip("/")):
            raise Http404("no such protected resource")
        return super().get(request, *args, **kwargs)

    def get_resource(self, request) -> str:
        origin = _origin(request)
        if self.kwargs.get("resource_path"):
            return resource.mcp_resource(origin)
        return origin

    def get_authorization_servers(self, request) -> list[str]:
        return [_origin(request)]  # the issuer: this server, at its origin

    def get_scopes_supported(self) -> list[str]:
        return list(scopes.ALL)
