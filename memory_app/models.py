from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from ethan_shared import limits
from ethan_shared.limits import max_chars


class Fact(models.Model):
    """One long-term fact about the owner (the cold zone), with a confidence score."""

    class Category(models.TextChoices):
        PREFERENCE = "preference"
        DECISION = "decision"
        KNOWLEDGE = "knowledge"
        CORRECTION = "correction"

    class Source(models.TextChoices):
        CONSOLIDATOR = "consolidator"
        AGENT_PROACTIVE = "agent_proactive"
        IMPORT = "import"
        ADMIN = "admin"
        API = "api"
        # An MCP host (Claude Desktop, Cursor…) through the MCP server; which one is in
        # `source_client`.
        MCP = "mcp"

    class Status(models.TextChoices):
        ACTIVE = "active"
        SUPERSEDED = "superseded"
        EVICTED = "evicted"

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, models.CASCADE, related_name="facts")
    content = models.TextField(validators=[max_chars("a fact", limits.FACT_MAX_CHARS)])
    # sha1 of the content lower-cased without punctuation or spacing (normalize.content_key):
    # "the same fact" means equal keys.
    content_key = models.CharField(max_length=40, editable=False)
    # The content's words for search and relevance-aware injection (sessions_app.search).
    search_tokens = models.TextField(blank=True, editable=False)
    # Its meaning for search (sessions_app.meaning): an int8 blob from embedder.to_blob, and the
    # name of the embedder that wrote it (vectors of different names are never compared).
    # Null until the background writes it; cleared when the text it embeds changes. Nullable
    # with no default, so adding them is an ALTER TABLE ADD COLUMN on SQLite too, not a copy
    # of the whole table.
    embedding = models.BinaryField(null=True, editable=False)
    embedding_model = models.CharField(max_length=100, null=True, editable=False)  # noqa: DJ001
    category = models.CharField(max_length=16, choices=Category.choices, default=Category.KNOWLEDGE)
    confidence = models.FloatField(default=0.8)
    source = models.CharField(max_length=16, choices=Source.choices)
    # For source mcp: the MCP client that wrote it, by the name it gives itself (clientInfo),
    # so a curator can tell a fact written from Cursor from one the consolidator extracted.
    source_client = models.CharField(max_length=100, blank=True)
    hit_count = models.PositiveIntegerField(default=1)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    # Provenance: where the fact was learnt.
    session = models.ForeignKey(
        "sessions_app.ChatSession", models.SET_NULL, null=True, blank=True, related_name="facts"
    )
    message = models.ForeignKey(
        "sessions_app.Message", models.SET_NULL, null=True, blank=True, related_name="facts"
    )
    superseded_by = models.ForeignKey(
        "self", models.SET_NULL, null=True, blank=True, related_name="supersedes"
    )
    # The messages the fact was said in (its provenance): the turns the consolidator's
    # extraction named, the round a memory tool was called in; each reinforcement adds its
    # own. Empty for a fact written by hand (API, admin, MCP) or imported without them, and
    # for facts stored before provenance was kept. A deleted session takes its links along.
    sources = models.ManyToManyField(
        "sessions_app.Message", blank=True, related_name="sourced_facts"
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    last_accessed = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            # facts_for_injection: active facts of one owner by confidence, then recency.
            models.Index(
                fields=["owner", "status", "-confidence", "-last_accessed"],
                name="fact_injection_order",
            ),
            # fact_matching: is this fact already known?
            models.Index(fields=["owner", "content_key"], name="fact_owner_content_key"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(confidence__gte=0, confidence__lte=1),
                name="fact_confidence_range",
            ),
        ]

    def __str__(self) -> str:
        return self.content[:60]


class FactEvent(models.Model):
    """The history of a fact: every change, so it can be audited and undone."""

    class Kind(models.TextChoices):
        ADD = "add"
        REINFORCE = "reinforce"
        UPDATE = "update"
        SUPERSEDE = "supersede"
        EVICT = "evict"
        EDIT = "edit"

    fact = models.ForeignKey(Fact, models.CASCADE, related_name="events")
    event = models.CharField(max_length=16, choices=Kind.choices)
    old_content = models.TextField(blank=True)
    new_content = models.TextField(blank=True)
    old_confidence = models.FloatField(null=True, blank=True)
    new_confidence = models.FloatField(null=True, blank=True)
    # Who did it: a source ("agent_proactive", "consolidator") or "admin:<username>".
    actor = models.CharField(max_length=150, blank=True)
    # The source messages this change added (an add, a reinforcement, an update), as
    # [{"session_id", "seq"}]: the history keeps them even after a session is deleted.
    sources = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["fact", "created_at"], name="factevent_fact_time")]

    def __str__(self) -> str:
        return f"{self.event} {self.fact_id}"


class Procedure(models.Model):
    """A behavioural rule ("always reply in English"), injected into every turn while active."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, models.CASCADE, related_name="procedures")
    rule = models.TextField(validators=[max_chars("a rule", limits.RULE_MAX_CHARS)])
    # As Fact.content_key: the same rule is not stacked twice.
    rule_key = models.CharField(max_length=40, editable=False)
    context = models.TextField(
        blank=True,
        validators=[max_chars("a rule's context", limits.RULE_CONTEXT_MAX_CHARS)],
    )
    active = models.BooleanField(default=True)
    source = models.CharField(
        max_length=16, choices=Fact.Source.choices, default=Fact.Source.AGENT_PROACTIVE
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            # procedures_active: one owner's rules in the order they were made.
            models.Index(fields=["owner", "active", "created_at"], name="procedure_owner_active"),
        ]

    def __str__(self) -> str:
        return self.rule[:60]


class WorkingState(models.Model):
    """A session's consolidation cursors, in rounds. Workers claim work by moving a cursor with
    a conditional UPDATE (WHERE cursor = the value they read), so only one of two racing workers
    stores a batch, and a redelivered task finds the work done."""

    session = models.OneToOneField(
        "sessions_app.ChatSession", models.CASCADE, primary_key=True, related_name="working_state"
    )
    # Rounds 1..compressed_through are summarised (warm or folded into the rolling summary).
    compressed_through = models.PositiveIntegerField(default=0)
    # Rounds 1..extracted_through went through fact extraction: with their compress batch, or
    # at the session's end (then it runs ahead of compressed_through, over the hot zone).
    extracted_through = models.PositiveIntegerField(default=0)
    # Rounds 1..folded_through are in the rolling summary (their warm summaries folded).
    folded_through = models.PositiveIntegerField(default=0)
    rolling_summary = models.TextField(blank=True)
    updated_at = models.DateTimeField(default=timezone.now)
    # Who is doing this session's memory work now, until when (memory_app.claims): taken before
    # the model is called, so two workers never pay for the same call; the cursors above still
    # decide what is stored, exactly once, should a claim run out mid-call.
    claimed_by = models.CharField(max_length=32, blank=True, default="")
    claimed_until = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return (
            f"{self.session_id} warm@{self.compressed_through} cold@{self.extracted_through} "
            f"rolling@{self.folded_through}"
        )


class Summary(models.Model):
    """A warm-zone summary of consecutive rounds of one session."""

    session = models.ForeignKey(
        "sessions_app.ChatSession", models.CASCADE, related_name="summaries"
    )
    first_round = models.PositiveIntegerField()
    last_round = models.PositiveIntegerField()
    text = models.TextField()
    model = models.CharField(max_length=100)
    # Folded into the rolling summary once the warm zone was full (then no longer shown alone).
    folded = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name_plural = "summaries"
        constraints = [
            # A second guard behind the cursor claim: one summary per batch.
            models.UniqueConstraint(
                fields=["session", "first_round"], name="summary_session_first_round"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.session_id} rounds {self.first_round}-{self.last_round}"


class MemoryReview(models.Model):
    """The person's review of what Ethan remembered about them (the 新记住的 tab of /memory/).

    Two kinds of row: with no fact, the owner's mark "I have looked at everything added up to
    reviewed_at" ("keep all"; one per owner, moved forward); with a fact, "I keep this one"
    (the fact then leaves the new list while the others wait). Forgetting needs no row: an
    evicted fact is no longer listed anyway."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.CASCADE, related_name="memory_reviews"
    )
    fact = models.ForeignKey(Fact, models.CASCADE, null=True, blank=True, related_name="reviews")
    reviewed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            # The owner's "reviewed up to" mark: one row, moved forward by "keep all".
            models.UniqueConstraint(
                fields=["owner"],
                condition=models.Q(fact__isnull=True),
                name="memoryreview_one_mark_per_owner",
            ),
            # A fact is kept once (it also indexes the new list's NOT EXISTS by fact).
            models.UniqueConstraint(fields=["fact"], name="memoryreview_fact_once"),
        ]

    def __str__(self) -> str:
        return f"{self.owner_id} kept {self.fact_id or 'all'} at {self.reviewed_at:%Y-%m-%d %H:%M}"
