from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone
from oauth2_provider.settings import oauth2_settings


class Connection(models.Model):
    """A person's consent to one client (an MCP host): what it may do, since when, when it
    last used Ethan. Its tokens live in django-oauth-toolkit's tables; disconnecting revokes
    them and deletes this row (oauth_app.services.connection_end)."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.CASCADE, related_name="oauth_connections"
    )
    application = models.ForeignKey(
        oauth2_settings.APPLICATION_MODEL, models.CASCADE, related_name="connections"
    )
    scope = models.CharField(max_length=255)  # granted, space-separated (oauth_app.scopes)
    connected_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    # Facts this client (this client id) stored in the person's memory over MCP: the Connected
    # apps tab's count. By id, not by the name the facts record, which two clients can share.
    facts_written = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "application"], name="oauth_connection_one_per_client"
            ),
        ]
        indexes = [
            # connections_for_owner: a person's connections, the latest first.
            models.Index(fields=["owner", "-connected_at"], name="oauth_connection_owner"),
        ]

    def __str__(self) -> str:
        return f"{self.owner_id} → {self.application.name or self.application.client_id}"

    @property
    def scopes(self) -> list[str]:
        return self.scope.split()


class UsedCode(models.Model):
    """An authorization code already exchanged, and the tokens it gave: a second exchange of it
    means it leaked, and those tokens are revoked (RFC 6749 §4.1.2). django-oauth-toolkit
    deletes the code itself as it is used, and with it any trace of what it gave. Kept as long
    as a refresh token lives (oauth_app.tasks)."""

    code_checksum = models.CharField(max_length=64, unique=True)  # sha256 of the code
    application = models.ForeignKey(
        oauth2_settings.APPLICATION_MODEL, models.CASCADE, related_name="used_codes"
    )
    access_token_checksum = models.CharField(max_length=64)
    token_family = models.UUIDField(null=True, blank=True)  # its refresh token's family
    used_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            # oauth_clear_expired: the codes used before a refresh token's lifetime.
            models.Index(fields=["used_at"], name="oauth_used_code_used_at"),
        ]

    def __str__(self) -> str:
        return f"code used {self.used_at:%Y-%m-%d %H:%M} by {self.application_id}"
