from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class OwnerSettings(models.Model):
    """A person's own settings: their imported config.yaml, kept as it was (export writes it
    back). Where a key applies to one person (`model`: their default chat model), the turn
    uses it."""

    owner = models.OneToOneField(
        settings.AUTH_USER_MODEL, models.CASCADE, related_name="ethan_settings"
    )
    values = models.JSONField(default=dict)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name_plural = "owner settings"

    def __str__(self) -> str:
        return f"settings of {self.owner_id}"
