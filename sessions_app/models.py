from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class ChatSession(models.Model):
    """One conversation. Written to the database only with its first message (lazy persistence)."""

    class Mode(models.TextChoices):
        WORK = "work"
        COMPANION = "companion"

    class Channel(models.TextChoices):
        CONSOLE = "console"
        API = "api"
        LARK = "lark"
        IMPORT = "import"
        # A chat app on the OpenAI-compatible endpoint (/v1/chat/completions).
        OPENAI = "openai", "OpenAI-compatible"

    # s_YYYYMMDD_HHMM_xxxx, as the original CLI named them (see ids.py).
    id = models.CharField(primary_key=True, max_length=32)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.CASCADE, related_name="chat_sessions"
    )
    title = models.CharField(max_length=200, blank=True)
    model = models.CharField(max_length=100, blank=True)
    mode = models.CharField(max_length=16, choices=Mode.choices, default=Mode.WORK)
    channel = models.CharField(max_length=16, choices=Channel.choices, default=Channel.CONSOLE)
    # The seq of the newest message. Appends claim the next seq by incrementing it, which also
    # serialises concurrent appends to one session (see services.message_append).
    last_seq = models.PositiveIntegerField(default=0)
    # How many rounds (user messages) the session has: working memory counts in rounds.
    round_count = models.PositiveIntegerField(default=0)
    # Turns on one session are answered one at a time: a turn holds this claim (a random token)
    # from before its user message is stored until its reply is (services.session_turn_claim).
    # A claim older than ETHAN_TURN_CLAIM_SECONDS belongs to a process that died. Only ever
    # written by conditional updates, never by a form.
    turn_claim = models.CharField(max_length=32, blank=True, editable=False)
    turn_claimed_at = models.DateTimeField(null=True, blank=True, editable=False)
    # Counts the writes of its messages' vectors (services.messages_embed): a process holding
    # the owner's vectors in memory (meaning.MessageVectors) reads again the sessions whose
    # count moved. Null until the first; nullable, so adding it copies no table on SQLite.
    vectors_version = models.PositiveIntegerField(null=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)
    # A conversation imported from another assistant: "chatgpt:<its id>" or "claude:<uuid>",
    # so importing the same export again finds it (sessions_app.imports). Empty otherwise.
    external_id = models.CharField(max_length=200, blank=True, editable=False)
    # The model the other assistant answered an imported conversation with ("gpt-4o"): kept
    # as history only. `model` stays empty, so Ethan's own model continues the conversation and
    # consolidates it, not one it may have no key for.
    external_model = models.CharField(max_length=100, blank=True, editable=False)

    class Meta:
        verbose_name = "session"
        indexes = [
            # session_list and `-r last`: one owner's sessions, newest activity first.
            models.Index(fields=["owner", "-updated_at"], name="session_owner_recent"),
        ]
        constraints = [
            # An imported conversation is one session per owner, however often it is imported.
            models.UniqueConstraint(
                fields=["owner", "external_id"],
                condition=~models.Q(external_id=""),
                name="session_external_unique",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.title}".strip()

    @property
    def is_persisted(self) -> bool:
        return not self._state.adding


class Message(models.Model):
    class Role(models.TextChoices):
        SYSTEM = "system"
        USER = "user"
        ASSISTANT = "assistant"
        TOOL = "tool"

    session = models.ForeignKey(ChatSession, models.CASCADE, related_name="messages")
    # 1, 2, 3… per session with no gaps: the conversation's order, and "messages by position"
    # for imports.
    seq = models.PositiveIntegerField()
    role = models.CharField(max_length=16, choices=Role.choices)
    content = models.TextField(blank=True)
    # The assistant's tool calls, as the provider-neutral list [{id, name, arguments}].
    tool_calls = models.JSONField(null=True, blank=True)
    # On a tool message: which call it answers.
    tool_call_id = models.CharField(max_length=128, blank=True)
    # An assistant reply the person stopped while it was being written (Ctrl-C): the content
    # is what they saw, kept so that the next turn's context holds it.
    interrupted = models.BooleanField(default=False)
    # The content's words for search (sessions_app.search); indexed on PostgreSQL.
    search_tokens = models.TextField(blank=True, editable=False)
    # Its meaning for search (sessions_app.meaning): an int8 blob from embedder.to_blob, and the
    # name of the embedder that wrote it (vectors of different names are never compared).
    # Null until the background writes it; cleared when the text it embeds changes. Nullable
    # with no default, so adding them is an ALTER TABLE ADD COLUMN on SQLite too, not a copy
    # of the whole table.
    embedding = models.BinaryField(null=True, editable=False)
    embedding_model = models.CharField(max_length=100, null=True, editable=False)  # noqa: DJ001
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            # Also the index that serves a session's messages in order.
            models.UniqueConstraint(fields=["session", "seq"], name="message_session_seq"),
        ]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.seq} {self.role}: {self.content[:40]}"


class ImportRun(models.Model):
    """One import of another assistant's export (sessions_app.imports) and the learning that
    follows it, as far as it has got: what the memory page polls, and what survives a stop."""

    class Source(models.TextChoices):
        CHATGPT = "chatgpt", "ChatGPT"
        CLAUDE = "claude", "Claude"

    class Status(models.TextChoices):
        QUEUED = "queued"
        READING = "reading"
        LEARNING = "learning"
        DONE = "done"
        FAILED = "failed"

    # Lines of skipped conversations kept on a run (the count has them all).
    SKIPPED_SHOWN = 20

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, models.CASCADE, related_name="+")
    source = models.CharField(max_length=16, choices=Source.choices)
    file_name = models.CharField(max_length=255)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    learn = models.BooleanField(default=True)
    conversations_total = models.PositiveIntegerField(default=0)
    conversations_done = models.PositiveIntegerField(default=0)
    sessions_created = models.PositiveIntegerField(default=0)
    messages_created = models.PositiveIntegerField(default=0)
    learn_total = models.PositiveIntegerField(default=0)
    learn_done = models.PositiveIntegerField(default=0)
    # Conversations left out because they could not be read, and a line for each (the first
    # SKIPPED_SHOWN): the rest of the export is imported.
    conversations_skipped = models.PositiveIntegerField(default=0)
    skipped = models.TextField(blank=True)
    # The one line a bad file is refused with, or why learning stopped.
    error = models.TextField(blank=True)
    # An upload from the page waits here until its task reads it (the web process and the
    # worker may not share a disk); emptied once read.
    upload = models.BinaryField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["owner", "-created_at"], name="importrun_owner_recent")]

    def __str__(self) -> str:
        return f"{self.source} {self.file_name} ({self.status})"

    @property
    def finished(self) -> bool:
        return self.status in (self.Status.DONE, self.Status.FAILED)
