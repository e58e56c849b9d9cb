"""Writes of the cold store: facts (with their history) and procedures."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from datetime import datetime

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from ethan_shared.limits import (
    FACT_MAX_CHARS,
    RULE_CONTEXT_MAX_CHARS,
    RULE_MAX_CHARS,
    UnstorableText,
    storable_text,
    too_long,
)
from memory_app import confidence as rules
from memory_app import selectors
from memory_app.models import Fact, FactEvent, MemoryReview, Procedure
from memory_app.normalize import content_key, normalize
from sessions_app import meaning
from sessions_app.models import ChatSession, Message
from sessions_app.search import (
    ReindexStep,
    rows_reindex_batches,
    search_tokens,
    with_context,
)


def fact_search_tokens(content: str, message: Message | None) -> str:
    """A fact is found by its words and by those of the turn it was learnt from."""
    return with_context(search_tokens(content), message.content if message else "")


def _words_set(fact: Fact, content: str) -> None:
    """Give a fact its (new) words: its key and search tokens follow them, and a vector of other
    words is dropped (the background writes the new one: facts_embed)."""
    if content != fact.content:
        fact.embedding = fact.embedding_model = None
    fact.content = content
    fact.content_key = content_key(content)
    fact.search_tokens = fact_search_tokens(content, fact.message)


# Facts embedded per call at most.
EMBED_BATCH = 256


def facts_embed(*, owner_ids: Collection[int], limit: int = EMBED_BATCH) -> int:
    """Write the vectors of these owners' facts that have none of the configured embedder's
    (active ones first, then the rest, which an undo can bring back), at most `limit`, in one
    embedding call; how many were written. A fact edited meanwhile is left for the next pass."""
    facts = (
        Fact.objects.filter(owner_id__in=owner_ids)
        .annotate(inactive=~Q(status=Fact.Status.ACTIVE))
        .order_by("inactive", "pk")
    )
    return meaning.pending_embed(facts, ["content"], lambda content: content, limit=limit)


def facts_reindex(*, batch: int) -> Iterator[ReindexStep]:
    """Every fact's search tokens rewritten with the current tokenizer (ethan_reindex)."""
    rows = Fact.objects.select_related("message").only(
        "id", "content", "search_tokens", "message__content"
    )
    return rows_reindex_batches(
        rows, lambda fact: fact_search_tokens(fact.content, fact.message), batch=batch
    )


def _within(field: str, what: str, text: str, limit: int) -> None:
    """ethan_shared.limits, checked first, before a fact or rule is matched against the stored
    ones: text no one can store (storable_text) or an over-long text is refused whole: never
    cut, never taken as a known one."""
    try:
        storable_text(what, text)
    except UnstorableText as exc:
        raise ValidationError({field: str(exc)}) from None
    if len(text) > limit:
        raise ValidationError({field: too_long(what, limit, len(text))})


def _fact_content(content: str) -> str:
    """A fact as stored: one line (whitespace collapsed, so it cannot start a line of its own in
    the system prompt), within FACT_MAX_CHARS, with words."""
    content = " ".join(content.split())
    _within("content", "a fact", content, FACT_MAX_CHARS)
    if not normalize(content):
        raise ValidationError({"content": "a fact needs words, not only punctuation or spaces"})
    return content


@transaction.atomic
def fact_write(
    *,
    owner: AbstractBaseUser,
    content: str,
    category: str,
    confidence: float,
    source: str,
    session: ChatSession | None = None,
    message: Message | None = None,
    source_client: str = "",
    sources: Sequence[Message] = (),
) -> Fact:
    """Add a fact, or reinforce the equal one the owner already has. The history names the
    writer: the source, or `mcp:<client>` for an MCP client. `sources` are the messages it
    was said in (its provenance); without `message`, the earliest of them is the one it was
    learnt from, and its words find the fact too (fact_search_tokens), as they find a fact
    written with its message: "moved to Porto in May", extracted from "We finally moved, the
    flat looks over the river", is found by a question about the flat."""
    content = _fact_content(content)
    actor = f"{source}:{source_client}" if source_client else source
    existing = selectors.fact_matching(owner=owner, content=content)
    if existing is not None:
        return fact_reinforce(fact=existing, confidence=confidence, actor=actor, sources=sources)
    if message is None and sources:
        message = next(iter(_owned(owner.pk, sources)), None)
    fact = Fact(
        owner=owner,
        content=content,
        content_key=content_key(content),
        search_tokens=fact_search_tokens(content, message),
        category=category,
        confidence=confidence,
        source=source,
        source_client=source_client,
        session=session,
        message=message,
    )
    fact.full_clean(exclude=["owner", "session", "message", "superseded_by"])
    fact.save()
    _event(fact, FactEvent.Kind.ADD, actor=actor, sources=_sources_add(fact, sources))
    return fact


@transaction.atomic
def fact_reinforce(
    *, fact: Fact, confidence: float, actor: str, sources: Sequence[Message] = ()
) -> Fact:
    """The same fact again: confidence rises, hit count grows, the new source is added, the
    history records it."""
    old = fact.confidence
    fact.confidence = rules.reinforced(old, confidence)
    fact.hit_count += 1
    fact.updated_at = timezone.now()
    fact.save(update_fields=["confidence", "hit_count", "updated_at"])
    _event(
        fact,
        FactEvent.Kind.REINFORCE,
        actor=actor,
        old_content=fact.content,
        old_confidence=old,
        sources=_sources_add(fact, sources),
    )
    return fact


def _sources_add(fact: Fact, messages: Sequence[Message]) -> list[dict]:
    """Link the fact to the messages it was said in (only its owner's, each once); returns the
    new ones as the history records them."""
    owned = _owned(fact.owner_id, messages)
    if not owned:
        return []
    known = set(fact.sources.filter(pk__in=[m.pk for m in owned]).values_list("pk", flat=True))
    new = [m for m in owned if m.pk not in known]
    fact.sources.add(*new)
    return [{"session_id": m.session_id, "seq": m.seq} for m in new]


def _owned(owner_id: int, messages: Sequence[Message]) -> list[Message]:
    """The stored messages of `messages` that are the owner's, each once, earliest first."""
    wanted = {m.pk: m for m in messages if m.pk is not None}
    if not wanted:
        return []
    owned = Message.objects.filter(pk__in=wanted, session__owner_id=owner_id)
    return [wanted[pk] for pk in sorted(owned.values_list("pk", flat=True))]


def facts_mark_injected(*, facts: list[Fact]) -> None:
    """Injected facts count as used now (the design's last_accessed update): one UPDATE.

    On PostgreSQL it skips the rows another transaction holds (a worker reinforcing one of
    them): a turn never waits on, or deadlocks with, consolidation over a recency mark; the
    fact being written is used right now anyway (bench.chat_throughput found the deadlock)."""
    if not facts:
        return
    now = timezone.now()
    ids = [fact.pk for fact in facts]
    if connection.vendor == "postgresql":
        table = Fact._meta.db_table
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} SET last_accessed = %s WHERE id IN (SELECT id FROM {table} "
                "WHERE id = ANY(%s) ORDER BY id FOR UPDATE SKIP LOCKED)",
                [now, ids],
            )
    else:  # SQLite: one writer at a time, nothing to deadlock with
        Fact.objects.filter(pk__in=ids).update(last_accessed=now)
    for fact in facts:
        fact.last_accessed = now


@transaction.atomic
def procedure_write(
    *,
    owner: AbstractBaseUser,
    rule: str,
    context: str = "",
    source: str = Fact.Source.AGENT_PROACTIVE,
    active: bool = True,
) -> tuple[Procedure, bool]:
    """Add a rule, active unless told; the same rule is not stacked twice (an inactive one
    comes back when `active`). Returns the procedure and whether it is new. Refused
    (ValidationError) when the rule or its context is too long, or when an active rule would
    be one more than ETHAN_PROCEDURE_CAPACITY (bringing an inactive one back counts too)."""
    rule = _rule_text(rule)
    _within("context", "a rule's context", context, RULE_CONTEXT_MAX_CHARS)
    key = content_key(rule)
    existing = Procedure.objects.filter(owner=owner, rule_key=key).first()
    if existing is not None:
        if active and not existing.active:
            _procedure_activation(owner=owner, field="rule")
            existing.active = True
            existing.save(update_fields=["active"])
        return existing, False
    if active:
        _procedure_activation(owner=owner, field="rule")
    procedure = Procedure(
        owner=owner, rule=rule, rule_key=key, context=context, source=source, active=active
    )
    procedure.full_clean(exclude=["owner"])
    procedure.save()
    return procedure, True


def _rule_text(rule: str) -> str:
    """A rule as stored: one line, within RULE_MAX_CHARS, with words."""
    rule = " ".join(rule.split())
    _within("rule", "a rule", rule, RULE_MAX_CHARS)
    if not normalize(rule):
        raise ValidationError({"rule": "a rule needs words"})
    return rule


def procedure_check_capacity(*, owner: AbstractBaseUser, field: str = "active") -> None:
    """Refuse one more active rule once the owner has ETHAN_PROCEDURE_CAPACITY: every active
    rule is in every turn's system prompt, so the list is bounded by refusing, never by
    dropping a rule the person set. (The services call it with the owner locked; the admin's
    form calls it to refuse before saving.)"""
    capacity = settings.ETHAN_PROCEDURE_CAPACITY
    active = Procedure.objects.filter(owner=owner, active=True).count()
    if active >= capacity:
        raise ValidationError(
            {
                field: f"you have {active} active rules, the most Ethan keeps is {capacity}; "
                "switch one off first"
            }
        )


def _procedure_activation(*, owner: AbstractBaseUser, field: str = "active") -> None:
    """Inside the transaction that switches a rule on: lock the owner's row, then count, so
    two concurrent activations cannot both take the last place (PostgreSQL; SQLite writes are
    serial anyway)."""
    user_model = get_user_model()
    list(user_model._default_manager.select_for_update().filter(pk=owner.pk).values("pk"))
    procedure_check_capacity(owner=owner, field=field)


def _event(
    fact: Fact,
    kind: str,
    *,
    actor: str,
    old_content: str = "",
    old_confidence=None,
    sources: list[dict] | None = None,
):
    FactEvent.objects.create(
        fact=fact,
        event=kind,
        old_content=old_content,
        new_content=fact.content,
        old_confidence=old_confidence,
        new_confidence=fact.confidence,
        actor=actor,
        sources=sources or [],
    )


@transaction.atomic
def fact_update(
    *, fact: Fact, content: str, confidence: float, actor: str, sources: Sequence[Message] = ()
) -> Fact:
    """The same fact, said more precisely: new wording, reinforced confidence."""
    old_content, old_confidence = fact.content, fact.confidence
    _words_set(fact, _fact_content(content))
    fact.confidence = rules.reinforced(old_confidence, confidence)
    fact.hit_count += 1
    fact.updated_at = timezone.now()
    fact.full_clean(exclude=["owner", "session", "message", "superseded_by"])
    fact.save()
    _event(
        fact,
        FactEvent.Kind.UPDATE,
        actor=actor,
        old_content=old_content,
        old_confidence=old_confidence,
        sources=_sources_add(fact, sources),
    )
    return fact


@transaction.atomic
def fact_supersede(*, old: Fact, new: Fact, actor: str) -> Fact:
    """`new` contradicts `old`: old is kept, marked superseded and linked to its successor."""
    if old.pk == new.pk or old.owner_id != new.owner_id:
        raise ValidationError("a fact can only be superseded by another fact of the same owner")
    old.status = Fact.Status.SUPERSEDED
    old.superseded_by = new
    old.updated_at = timezone.now()
    old.save(update_fields=["status", "superseded_by", "updated_at"])
    _event(
        old,
        FactEvent.Kind.SUPERSEDE,
        actor=actor,
        old_content=old.content,
        old_confidence=old.confidence,
    )
    return old


@transaction.atomic
def fact_set_status(*, fact: Fact, status: str, actor: str) -> Fact:
    """Evict a fact (kept for audit, never injected) or restore an evicted/superseded one."""
    kind = FactEvent.Kind.EVICT if status == Fact.Status.EVICTED else FactEvent.Kind.EDIT
    fact.status = status
    if status == Fact.Status.ACTIVE:
        fact.superseded_by = None
    fact.updated_at = timezone.now()
    fact.save(update_fields=["status", "superseded_by", "updated_at"])
    _event(fact, kind, actor=actor, old_content=fact.content, old_confidence=fact.confidence)
    return fact


@transaction.atomic
def fact_forget(*, fact: Fact, actor: str) -> str:
    """The person (or their curator) forgets a fact, the same through every door: the REST
    API, the memory page, MCP and the admin. It is evicted (never injected again) and kept,
    with an "evict" event naming the door in `actor`, so it can be audited and undone.

    Forgetting a forgotten fact changes nothing and records nothing. The fact is claimed with a
    conditional update, so a double click, a retried request or two doors at once leave one
    event, and one undo (fact_undo) brings the fact back. Whose fact it is is the door's
    lookup (facts_for_owner; the admin sees every owner's). Returns the status the fact had
    before: EVICTED when this call forgot nothing."""
    was = fact.status
    now = timezone.now()
    claimed = (
        Fact.objects.filter(pk=fact.pk)
        .exclude(status=Fact.Status.EVICTED)
        .update(status=Fact.Status.EVICTED, updated_at=now)
    )
    fact.status = Fact.Status.EVICTED
    if not claimed:
        return Fact.Status.EVICTED
    fact.updated_at = now
    kind = FactEvent.Kind.EVICT
    _event(fact, kind, actor=actor, old_content=fact.content, old_confidence=fact.confidence)
    return was


@transaction.atomic
def fact_edit(
    *,
    fact: Fact,
    actor: str,
    content: str | None = None,
    category: str | None = None,
    confidence: float | None = None,
) -> Fact:
    """A curator's change (the admin, the API, the memory page), recorded as an "edit" event
    with old and new values, and returned.

    An active fact edited into the words of another active fact of its owner (equal by
    content_key, as fact_write matches) is merged into it, never left as a second copy: the
    other is reinforced (with the edited fact's confidence and sources) and the edited one is
    superseded by it, its one "supersede" event holding the words before and after the edit.
    Undoing that event (fact_undo) brings the edited fact back, active, in its old words."""
    old_content, old_confidence = fact.content, fact.confidence
    twin = None
    if content is not None:
        _words_set(fact, _fact_content(content))
        if fact.status == Fact.Status.ACTIVE:
            twin = selectors.fact_matching(owner=fact.owner, content=fact.content, other_than=fact)
    fact.search_tokens = fact_search_tokens(fact.content, fact.message)
    if category is not None:
        fact.category = category
    if confidence is not None:
        fact.confidence = round(confidence, 4)
    if twin is not None:
        fact.status, fact.superseded_by = Fact.Status.SUPERSEDED, twin
    fact.updated_at = timezone.now()
    # Content not given is not checked again: a fact stored before the limits (longer than
    # FACT_MAX_CHARS) can still be re-rated or shortened.
    unchanged = [] if content is not None else ["content"]
    fact.full_clean(exclude=["owner", "session", "message", "superseded_by", *unchanged])
    fact.save()
    if twin is None:
        _event(
            fact,
            FactEvent.Kind.EDIT,
            actor=actor,
            old_content=old_content,
            old_confidence=old_confidence,
        )
        return fact
    _event(
        fact,
        FactEvent.Kind.SUPERSEDE,
        actor=f"{actor} (edit merged into #{twin.pk})",
        old_content=old_content,
        old_confidence=old_confidence,
    )
    fact_reinforce(
        fact=twin,
        confidence=fact.confidence,
        actor=f"{actor} (merged #{fact.pk} into it)",
        sources=list(fact.sources.all()),
    )
    return fact


def facts_evict_over_capacity(
    *, owner: AbstractBaseUser, capacity: int | None = None, actor: str = "consolidator"
) -> int:
    """Keep at most `capacity` active facts: evict the lowest confidence, least recently
    accessed ones first. Returns how many were evicted."""
    from django.conf import settings

    capacity = settings.ETHAN_FACT_CAPACITY if capacity is None else capacity
    active = Fact.objects.filter(owner=owner, status=Fact.Status.ACTIVE)
    excess = active.count() - capacity
    if excess <= 0:
        return 0
    victims = list(active.order_by("confidence", "last_accessed", "id")[:excess])
    for fact in victims:
        fact_set_status(fact=fact, status=Fact.Status.EVICTED, actor=actor)
    return len(victims)


def facts_evict_sweep(*, actor: str = "evict_sweep") -> int:
    """Everyone over their fact capacity (a lowered setting, an import) brought back under it;
    returns how many facts were evicted."""
    from django.db.models import Count, Q

    over = (
        get_user_model()
        .objects.annotate(active=Count("facts", filter=Q(facts__status=Fact.Status.ACTIVE)))
        .filter(active__gt=settings.ETHAN_FACT_CAPACITY)
    )
    return sum(facts_evict_over_capacity(owner=owner, actor=actor) for owner in over)


@transaction.atomic
def procedure_edit(
    *,
    procedure: Procedure,
    rule: str | None = None,
    context: str | None = None,
    active: bool | None = None,
) -> Procedure:
    """Change a rule's text, context or whether it applies. Switching a rule on counts against
    ETHAN_PROCEDURE_CAPACITY as a new rule does."""
    if rule is not None:
        rule = _rule_text(rule)
        key = content_key(rule)
        clash = Procedure.objects.filter(owner=procedure.owner, rule_key=key).exclude(
            pk=procedure.pk
        )
        if clash.exists():
            raise ValidationError({"rule": "the same rule already exists"})
        procedure.rule, procedure.rule_key = rule, key
    if context is not None:
        _within("context", "a rule's context", context, RULE_CONTEXT_MAX_CHARS)
        procedure.context = context
    if active is not None:
        if active and not procedure.active:
            _procedure_activation(owner=procedure.owner)
        procedure.active = active
    # Fields not given are not checked again: a rule stored before the limits can still be
    # switched off.
    unchanged = [name for name, value in (("rule", rule), ("context", context)) if value is None]
    procedure.full_clean(exclude=["owner", *unchanged])
    procedure.save()
    return procedure


@transaction.atomic
def procedure_delete(*, procedure: Procedure) -> None:
    """Delete a rule for good (switching it off keeps it, for later)."""
    procedure.delete()


def _status_after(events: Sequence[FactEvent]) -> str | None:
    """A fact's status after these events (oldest first), read back from its history, which
    records contents and confidences but not statuses: an add, a reinforcement or an update
    leaves the fact active (only active facts are matched and updated); a supersede and an
    evict say what they did; an edit that changes neither content nor confidence of a fact
    that is not active is fact_set_status(ACTIVE) bringing it back (a category-only edit
    would read the same; the page never makes one)."""
    status = None
    for event in events:
        if event.event in (FactEvent.Kind.ADD, FactEvent.Kind.REINFORCE, FactEvent.Kind.UPDATE):
            status = Fact.Status.ACTIVE
        elif event.event == FactEvent.Kind.SUPERSEDE:
            status = Fact.Status.SUPERSEDED
        elif event.event == FactEvent.Kind.EVICT:
            status = Fact.Status.EVICTED
        elif (
            status != Fact.Status.ACTIVE
            and event.old_content == event.new_content
            and event.old_confidence == event.new_confidence
        ):
            status = Fact.Status.ACTIVE
    return status


@transaction.atomic
def fact_undo(*, fact: Fact, actor: str) -> Fact:
    """Undo a fact's last change: its content, confidence and status go back to what they were
    before its newest history event, and the undo is recorded as an event itself (actor
    "<actor> (undo #<event id>)"), so undoing again re-does it. Hit count, category and source
    links stay as they are. Refused (ValidationError) when the only event is the fact's
    addition (forget it instead), and when bringing it back would make it a second active
    copy of a fact the owner has."""
    # One undo at a time per fact: the second reads the first's event as the last change.
    fact = Fact.objects.select_for_update().get(pk=fact.pk)
    events = list(fact.events.order_by("created_at", "id"))
    if not events or events[-1].event == FactEvent.Kind.ADD:
        raise ValidationError(
            "nothing to undo: this is the fact as it was first remembered (forget it instead)"
        )
    last = events[-1]
    old_content, old_confidence, old_status = fact.content, fact.confidence, fact.status
    content = last.old_content or fact.content
    confidence = fact.confidence if last.old_confidence is None else last.old_confidence
    status = _status_after(events[:-1]) or fact.status
    if status == Fact.Status.ACTIVE:
        twin = selectors.fact_matching(owner=fact.owner, content=content, other_than=fact)
        if twin is not None:
            raise ValidationError(
                f"an equal fact is already remembered (#{twin.pk}); forget that one first"
            )
    _words_set(fact, content)
    fact.confidence, fact.status = confidence, status
    if status == Fact.Status.ACTIVE:
        fact.superseded_by = None
    fact.updated_at = timezone.now()
    fact.save()
    # The event's kind keeps the history readable by _status_after: a status put back is
    # recorded as the change that makes it.
    if status != old_status and status == Fact.Status.EVICTED:
        kind = FactEvent.Kind.EVICT
    elif status != old_status and status == Fact.Status.SUPERSEDED:
        kind = FactEvent.Kind.SUPERSEDE
    else:
        kind = FactEvent.Kind.EDIT
    _event(
        fact,
        kind,
        actor=f"{actor} (undo #{last.pk})",
        old_content=old_content,
        old_confidence=old_confidence,
    )
    return fact


@transaction.atomic
def fact_keep(*, fact: Fact) -> MemoryReview:
    """The person keeps a newly remembered fact: it leaves their list of new facts (the others
    wait for their own decision). Keeping it twice is keeping it once."""
    review, _ = MemoryReview.objects.get_or_create(fact=fact, defaults={"owner_id": fact.owner_id})
    return review


@transaction.atomic
def memory_review_all(*, owner: AbstractBaseUser, until: datetime | None = None) -> MemoryReview:
    """ "Keep all": every fact added up to `until` counts as looked at and kept. The page sends
    the time it was shown, so a fact extracted while the person was reading is not approved
    unseen; never later than now, and the mark only moves forward."""
    now = timezone.now()
    until = now if until is None else min(until, now)
    mark, created = MemoryReview.objects.select_for_update().get_or_create(
        owner=owner, fact=None, defaults={"reviewed_at": until}
    )
    if not created and mark.reviewed_at < until:
        mark.reviewed_at = until
        mark.save(update_fields=["reviewed_at"])
    # Single keeps behind the mark say nothing more than the mark: the table stays small.
    MemoryReview.objects.filter(
        owner=owner, fact__isnull=False, fact__created_at__lte=mark.reviewed_at
    ).delete()
    return mark
