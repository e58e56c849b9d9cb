"""Reads: a person's connections, and what an OAuth access token presented at /mcp allows."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Exists, OuterRef, QuerySet
from django.http import Http404
from django.utils import timezone
from oauth2_provider.models import AccessToken, RefreshToken

from oauth_app.clients import client_name, host_key
from oauth_app.models import Connection
from oauth_app.resource import canonical


def connections_for_owner(*, owner: AbstractBaseUser) -> QuerySet[Connection]:
    """The person's connections, the latest first, each with `signed_in`: whether the app still
    holds a token that works (an access token not expired, or a refresh token not revoked). An
    app that revoked its own tokens, or let them lapse, must ask the person again."""
    live_access = AccessToken.objects.filter(
        user=OuterRef("owner"), application=OuterRef("application"), expires__gt=timezone.now()
    )
    live_refresh = RefreshToken.objects.filter(
        user=OuterRef("owner"), application=OuterRef("application"), revoked__isnull=True
    )
    return (
        Connection.objects.filter(owner=owner)
        .select_related("application")
        .annotate(signed_in=Exists(live_access) | Exists(live_refresh))
        .order_by("-connected_at", "-id")
    )


def host_connections(*, owner: AbstractBaseUser, connection_id: int) -> list[Connection]:
    """One of the person's connections and the others of the same host (host_key: registered
    again under another client id), the latest first; another person's id is not found."""
    connection = connection_for_owner(owner=owner, connection_id=connection_id)
    key = host_key(connection.application)
    return [c for c in connections_for_owner(owner=owner) if host_key(c.application) == key]


def connection_for_owner(*, owner: AbstractBaseUser, connection_id: int) -> Connection:
    """One of the person's connections; another person's id is not found."""
    connection = connections_for_owner(owner=owner).filter(pk=connection_id).first()
    if connection is None:
        raise Http404("no such connection")
    return connection


@dataclass(frozen=True)
class OAuthAccess:
    """What an access token lets its bearer do: act for `owner_id` with `scopes`, as `client`,
    at `resources`."""

    owner_id: int
    application_id: int
    client: str
    scopes: list[str]
    resources: list[str]
    expires_at: int


def oauth_access(*, token: str) -> OAuthAccess | None:
    """The access token's grant, or None: unknown, expired, revoked, or its connection ended.
    Tokens are stored hashed (looked up by checksum)."""
    checksum = hashlib.sha256(token.encode("utf-8")).hexdigest()
    access = (
        AccessToken.objects.select_related("application")
        .filter(token_checksum=checksum, user__isnull=False, application__isnull=False)
        .first()
    )
    if access is None or access.is_expired():
        return None
    if not Connection.objects.filter(
        owner_id=access.user_id, application_id=access.application_id
    ).exists():
        return None
    return OAuthAccess(
        owner_id=access.user_id,
        application_id=access.application_id,
        client=client_name(access.application),
        scopes=sorted(access.scopes),
        resources=[canonical(r) for r in access.resource or []],
        expires_at=int(access.expires.timestamp()),
    )
