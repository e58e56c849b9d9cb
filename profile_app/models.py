from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from ethan_shared.limits import PROFILE_MAX_CHARS, max_chars
from profile_app.sections import SECTIONS


class ProfileSection(models.Model):
    """One of the seven sections of an owner's user_profile.md (Markdown, usually bullets)."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.CASCADE, related_name="profile_sections"
    )
    key = models.CharField(max_length=16, choices=[(s.key, s.title) for s in SECTIONS])
    # No section can be longer than the whole profile (the services check the whole).
    content = models.TextField(
        blank=True, validators=[max_chars("a profile section", PROFILE_MAX_CHARS)]
    )
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["owner", "key"], name="profile_section_owner_key"),
        ]

    def __str__(self) -> str:
        return f"{self.owner_id}:{self.key}"


class ProfileRevision(models.Model):
    """The text of a section before and after each change, so a bad merge can be undone."""

    section = models.ForeignKey(ProfileSection, models.CASCADE, related_name="revisions")
    mode = models.CharField(max_length=16)  # append | overwrite | merge | edit | revert
    old_content = models.TextField(blank=True)
    new_content = models.TextField(blank=True)
    actor = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["section", "-created_at"], name="profilerev_recent")]

    def __str__(self) -> str:
        return f"{self.section} {self.mode} {self.created_at:%Y-%m-%d %H:%M}"
