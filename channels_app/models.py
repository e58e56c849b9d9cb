"""The rows the doors keep: who a person is on another channel, which session a chat
continues, where a chat app's conversation stands, the housekeeping /v1 recognised, and each
delivered Lark event. Made in agent_app, moved here with their tables unchanged (migrations:
agent_app 0009 and channels 0001 change Django's state only)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class ChannelIdentity(models.Model):
    """A person on another channel (a Lark open_id) mapped to their own Ethan owner."""

    channel = models.CharField(max_length=16)
    external_id = models.CharField(max_length=128)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.CASCADE, related_name="channel_identities"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "agent_app_channelidentity"  # made in agent_app, kept where it is
        verbose_name_plural = "channel identities"
        constraints = [
            models.UniqueConstraint(
                fields=["channel", "external_id"], name="channel_identity_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.channel}:{self.external_id}"


class ChannelChat(models.Model):
    """Which session a chat continues, per person: one until it goes idle, then a new one."""

    channel = models.CharField(max_length=16)
    chat_id = models.CharField(max_length=128)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, models.CASCADE, related_name="+")
    session = models.ForeignKey(
        "sessions_app.ChatSession", models.SET_NULL, null=True, blank=True, related_name="+"
    )
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "agent_app_channelchat"  # made in agent_app, kept where it is
        constraints = [
            models.UniqueConstraint(
                fields=["channel", "chat_id", "user"], name="channel_chat_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.channel}:{self.chat_id}:{self.user_id}"


class ClientConversation(models.Model):
    """Where a chat app's conversation stands in its session, for a client that sends the whole
    conversation with every request (POST /v1/chat/completions) and never a session id.

    Two digests of the conversation as the client knows it (channels_app.openai.conversations):
    `asked` through its latest user message, `shown` through the last thing it was sent (the
    reply, or that message when the turn failed). A request whose history digests to `shown`
    continues the session; one that digests to `asked` with its last message asks again."""

    session = models.OneToOneField(
        "sessions_app.ChatSession",
        models.CASCADE,
        primary_key=True,
        related_name="client_conversation",
    )
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, models.CASCADE, related_name="+")
    asked = models.CharField(max_length=64)
    shown = models.CharField(max_length=64)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "agent_app_clientconversation"  # made in agent_app, kept where it is
        indexes = [
            models.Index(fields=["owner", "asked"], name="clientconv_asked"),
            models.Index(fields=["owner", "shown"], name="clientconv_shown"),
        ]

    def __str__(self) -> str:
        return f"{self.session_id} ({self.owner_id})"


class HousekeepingTally(models.Model):
    """How many of a chat app's housekeeping requests (a title, tags, follow-ups…) /v1 recognised
    on one day: counted, never stored (channels_app.openai.housekeeping, docs/openai.md)."""

    app = models.CharField(max_length=32)
    kind = models.CharField(max_length=32)
    day = models.DateField()
    count = models.PositiveIntegerField(default=0)

    class Meta:
        db_table = "agent_app_housekeepingtally"  # made in agent_app, kept where it is
        verbose_name_plural = "housekeeping tallies"
        ordering = ["-day", "app", "kind"]
        constraints = [
            # One row a day per app and kind: the count is incremented in place.
            models.UniqueConstraint(
                fields=["app", "kind", "day"], name="housekeeping_tally_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.app} {self.kind}: {self.count}"


class LarkEvent(models.Model):
    """One delivered Lark event. The unique event_id makes handling exactly-once: a re-push or
    a racing second delivery fails to insert and is acknowledged without being processed."""

    class Status(models.TextChoices):
        RECEIVED = "received"
        PROCESSING = "processing"
        DONE = "done"
        IGNORED = "ignored"
        FAILED = "failed"

    event_id = models.CharField(max_length=128, unique=True)
    event_type = models.CharField(max_length=64, blank=True)
    # A message event's message_id: Lark's id of the message itself, the same when the message
    # is delivered again under a new event_id, so it is answered once.
    message_id = models.CharField(max_length=128, blank=True, default="")
    payload = models.JSONField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RECEIVED)
    note = models.TextField(blank=True)  # why it was ignored or failed
    received_at = models.DateTimeField(default=timezone.now)
    processed_at = models.DateTimeField(null=True, blank=True)
    # When its handling task was published (lark_events_dispatch). A received event with none
    # lost its wake-up, one queued long ago lost its task: the sweep queues both again.
    queued_at = models.DateTimeField(null=True, blank=True)
    # When a worker took it (status processing), renewed at each of its fenced writes. One
    # still processing long after this belongs to a worker that died: the sweep
    # (channels.lark_reclaim) takes it back.
    claimed_at = models.DateTimeField(null=True, blank=True)
    # The fence of the claim: a random token, new with each claim (the worker's, the sweep's).
    # A worker writes (the question, the reply) and sends only while the event still holds
    # its token, so a worker whose event the sweep took back stops instead of answering twice.
    claim_token = models.CharField(max_length=32, blank=True, editable=False)
    # The claim on the session its turn holds (ChatSession.turn_claim), recorded with each
    # fenced write: the sweep, taking the event back, gives that claim back for its own turn
    # (the old turn can write nothing more: the fence refuses it).
    session_claim = models.CharField(max_length=32, blank=True, editable=False)
    # The user message its turn stored, once stored: a retaken event never stores it twice.
    question = models.ForeignKey(
        "sessions_app.Message", models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        db_table = "agent_app_larkevent"  # made in agent_app, kept where it is
        indexes = [models.Index(fields=["status", "received_at"], name="larkevent_status")]
        constraints = [
            models.UniqueConstraint(
                fields=["message_id"],
                condition=~models.Q(message_id=""),
                name="larkevent_unique_message",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.event_id} {self.event_type} {self.status}"
