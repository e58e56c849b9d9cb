"""How often one address may make Ethan remember a new client: a registration (RFC 7591) or
the first sight of a client metadata document's URL. Both write an Application row and are
open to anyone, so they share one count per client address (ETHAN_OAUTH_REGISTER_RATE).

The address is DRF's, as for every throttle: the socket's, or with ETHAN_NUM_PROXIES set the
X-Forwarded-For hop the nearest trusted proxy added. Behind a proxy with ETHAN_NUM_PROXIES
unset, every host comes from the proxy's one address and shares one count (docs/mcp.md)."""

from __future__ import annotations

from types import SimpleNamespace

from django.conf import settings
from django.http.request import HttpHeaders
from oauth2_provider.models import Application
from rest_framework.throttling import SimpleRateThrottle


class RegistrationThrottle(SimpleRateThrottle):
    """Registrations per client address (ETHAN_OAUTH_REGISTER_RATE), in the shared cache."""

    scope = "oauth_register"

    def get_rate(self) -> str:
        return settings.ETHAN_OAUTH_REGISTER_RATE

    def get_cache_key(self, request, view) -> str:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


class UnknownDocumentPermission:
    """django-oauth-toolkit's CIMD permission (CIMD_REGISTRATION_PERMISSION_CLASSES): the first
    fetch of a metadata document URL Ethan does not know yet counts as a registration from the
    requesting address; past the rate the client is unknown (invalid_client), nothing fetched
    and nothing written. A known client's document refetched when its cache expired is not
    counted. Without this, 40 requests with 40 made-up URLs made 40 fetches and 40 rows."""

    def has_permission(self, request, client_id: str) -> bool:
        if Application.objects.filter(client_id=client_id).exists():
            return True
        # The oauthlib request's headers are the Django request's META (REMOTE_ADDR and the
        # forwarded addresses): enough for DRF's get_ident.
        meta = dict(getattr(request, "headers", None) or {})
        asking = SimpleNamespace(META=meta, headers=HttpHeaders(meta))
        return RegistrationThrottle().allow_request(asking, None)
