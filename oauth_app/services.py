"""The writes of a connection's life: consent (connection_grant), use (connection_touch) and
disconnection (connection_end)."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from oauth2_provider.models import AccessToken, Application, Grant, RefreshToken

from oauth_app.clients import client_name
from oauth_app.models import Connection

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
    # Locks the person's connections, so two consents at once cannot both pass the cap.
    theirs = list(
        Connection.objects.select_for_update()
        .filter(owner=owner)
        .values_list("application_id", flat=True)
    )
    cap = settings.ETHAN_OAUTH_CLIENTS_PER_PERSON
    if application.pk not in theirs and len(theirs) >= cap:
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
