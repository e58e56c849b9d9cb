from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class Episode(models.Model):
    """What one finished session was about: a summary and keywords (layer 4)."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, models.CASCADE, related_name="episodes")
    # One episode per session; a resumed session that grows updates it. The episode outlives
    # its session's messages (a deleted or never-imported session keeps its episode): the id
    # is kept in session_ref, the link is cleared.
    session = models.ForeignKey(
        "sessions_app.ChatSession",
        models.SET_NULL,
        null=True,
        blank=True,
        related_name="episodes",
    )
    session_ref = models.CharField(max_length=64)
    summary = models.TextField()
    keywords = models.JSONField(default=list)
    # Summary and keywords as words for search (sessions_app.search).
    search_tokens = models.TextField(blank=True, editable=False)
    # Its meaning for search (sessions_app.meaning): an int8 blob from embedder.to_blob, and the
    # name of the embedder that wrote it (vectors of different names are never compared).
    # Null until the background writes it; cleared when the text it embeds changes. Nullable
    # with no default, so adding them is an ALTER TABLE ADD COLUMN on SQLite too, not a copy
    # of the whole table.
    embedding = models.BinaryField(null=True, editable=False)
    embedding_model = models.CharField(max_length=100, null=True, editable=False)  # noqa: DJ001
    model = models.CharField(max_length=100, blank=True)
    turn_count = models.PositiveIntegerField()
    timestamp = models.DateTimeField(default=timezone.now)  # when the session ended

    class Meta:
        indexes = [
            # episodes_recent and search candidates: one owner's episodes, newest first.
            models.Index(fields=["owner", "-timestamp"], name="episode_owner_recent"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["owner", "session_ref"], name="episode_per_session"),
        ]

    def __str__(self) -> str:
        return f"{self.session_ref}: {self.summary[:50]}"
