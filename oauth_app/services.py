"""The writes of a connection's life: consent (connection_grant), use (connection_touch) and
disconnection (connection_end); and the authorization codes used (code_used, code_reused)."""

from __future__ import annotations

import hashlib
import logging
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone
from oauth2_provider.models import AccessToken, Application, Grant, RefreshToken

from oauth_app.clients import client_name, host_key
from oauth_app.models import Connection, UsedCode

log = logging.getLogger(__name__)

# last_used_at is written at most this often per connection: a host calling tools in a loop
# must not write a row per request.
TOUCH_EVERY = timedelta(minutes=1)


@transaction.atomic
def connection_grant(
    *, owner: AbstractBaseUser, application: Application, scopes: list[str]
) -> Connection:
    """The person consented: the client may act with `scopes` from now on. A new client past
    ETHAN_OAUTH_CLIENTS_PER_PERSON is refused (nothing written); consenting again to a client
    already connected replaces its scopes."""
    # Locks the person's connections, so two consents at once cannot both pass the cap. Apps
    # are counted by host (host_key): a host that registered again is the same app.
    theirs = {
        host_key(connection.application)
        for connection in Connection.objects.select_for_update(of=("self",))
        .filter(owner=owner)
        .select_related("application")
    }
    cap = settings.ETHAN_OAUTH_CLIENTS_PER_PERSON
    if host_key(application) not in theirs and len(theirs) >= cap:
        raise ValidationError(
            f"{len(theirs)} apps are connected to your memory (at most {cap}): disconnect one "
            "on the memory page's Connected apps tab first"
        )
    connection, _ = Connection.objects.update_or_create(
        owner=owner,
        application=application,
        defaults={"scope": " ".join(scopes)},
        create_defaults={"scope": " ".join(scopes), "connected_at": timezone.now()},
    )
    return connection


def connection_touch(*, owner_id: int, application_id: int) -> None:
    """The client used Ethan now (an MCP request with its token)."""
    now = timezone.now()
    Connection.objects.filter(owner_id=owner_id, application_id=application_id).filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - TOUCH_EVERY)
    ).update(last_used_at=now)


def connection_wrote(*, owner_id: int, application_id: int) -> None:
    """The client stored a new fact in the person's memory (the MCP memory_write tool)."""
    Connection.objects.filter(owner_id=owner_id, application_id=application_id).update(
        facts_written=F("facts_written") + 1
    )


@transaction.atomic
def connection_end(*, connection: Connection) -> str:
    """Disconnect: every token and pending code of the client for this person is revoked now
    (the next MCP request with them is a 401), and the connection is gone. Returns the
    client's name."""
    owner, application = connection.owner, connection.application
    for refresh in RefreshToken.objects.filter(
        user=owner, application=application, revoked__isnull=True
    ):
        refresh.revoke()  # revokes its access token too
    AccessToken.objects.filter(user=owner, application=application).delete()
    Grant.objects.filter(user=owner, application=application).delete()
    connection.delete()
    return client_name(application)


def _checksum(secret: str) -> str:
    # As django-oauth-toolkit stores its tokens (COMPLIANT_BCP_RFC9700_TOKEN_STORAGE).
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def code_used(*, code: str, application: Application, access_token: str) -> UsedCode:
    """The code was exchanged for `access_token` (and the refresh token issued with it): kept,
    so that a second exchange can revoke them (code_reused)."""
    checksum = _checksum(access_token)
    family = (
        RefreshToken.objects.filter(access_token__token_checksum=checksum)
        .values_list("token_family", flat=True)
        .first()
    )
    used = UsedCode(
        code_checksum=_checksum(code),
        application=application,
        access_token_checksum=checksum,
        token_family=family,
    )
    used.full_clean()
    used.save()
    return used


@transaction.atomic
def code_reused(*, code: str, application: Application) -> bool:
    """A code that is no longer valid was presented: if it was exchanged before, it leaked, and
    every token its exchange gave is revoked, the refresh tokens rotated from it too (RFC 6749
    §4.1.2). Whether it was."""
    used = UsedCode.objects.filter(code_checksum=_checksum(code), application=application).first()
    if used is None:
        return False
    RefreshToken.revoke_family(used.token_family)
    AccessToken.objects.filter(token_checksum=used.access_token_checksum).delete()
    log.warning(
        "an authorization code of %s was used twice: the tokens it gave are revoked",
        client_name(application),
    )
    return True


def used_codes_clear() -> int:
    """Used codes older than a refresh token lives: their tokens are dead already."""
    before = timezone.now() - timedelta(seconds=settings.ETHAN_OAUTH_REFRESH_TOKEN_DAYS * 86_400)
    deleted, _ = UsedCode.objects.filter(used_at__lt=before).delete()
    return deleted
