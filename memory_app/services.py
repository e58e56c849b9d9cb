"""Writes of the cold store: facts (with their history) and procedures."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from memory_app import confidence as rules
from memory_app import selectors
from memory_app.models import Fact, FactEvent, Procedure
from memory_app.normalize import content_key, normalize
from sessions_app.models import ChatSession, Message
from sessions_app.search import search_tokens, with_context


def fact_search_tokens(content: str, message: Message | None) -> str:
    """A fact is found by its words and by those of the turn it was learnt from."""
    return with_context(search_tokens(content), message.content if message else "")


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
) -> Fact:
    """Add a fact, or reinforce the equal one the owner already has."""
    content = " ".join(content.split())
    if not normalize(content):
        raise ValidationError({"content": "a fact needs words, not only punctuation or spaces"})
    existing = selectors.fact_matching(owner=owner, content=content)
    if existing is not None:
        return fact_reinforce(fact=existing, confidence=confidence, actor=source)
    fact = Fact(
        owner=owner,
        content=content,
        content_key=content_key(content),
        search_tokens=fact_search_tokens(content, message),
        category=category,
        confidence=confidence,
        source=source,
        session=session,
        message=message,
    )
    fact.full_clean(exclude=["owner", "session", "message", "superseded_by"])
    fact.save()
    _event(fact, FactEvent.Kind.ADD, actor=source)
    return fact


def fact_reinforce(*, fact: Fact, confidence: float, actor: str) -> Fact:
    """The same fact again: confidence rises, hit count grows, history records it."""
    old = fact.confidence
    fact.confidence = rules.reinforced(old, confidence)
    fact.hit_count += 1
    fact.updated_at = timezone.now()
    fact.save(update_fields=["confidence", "hit_count", "updated_at"])
    _event(
        fact, FactEvent.Kind.REINFORCE, actor=actor, old_content=fact.content, old_confidence=old
    )
    return fact


def facts_mark_injected(*, facts: list[Fact]) -> None:
    """Injected facts count as used now (the design's last_accessed update): one UPDATE."""
    if not facts:
        return
    now = timezone.now()
    Fact.objects.filter(pk__in=[fact.pk for fact in facts]).update(last_accessed=now)
    for fact in facts:
        fact.last_accessed = now


@transaction.atomic
def procedure_write(
    *,
    owner: AbstractBaseUser,
    rule: str,
    context: str = "",
    source: str = Fact.Source.AGENT_PROACTIVE,
) -> tuple[Procedure, bool]:
    """Add an active rule; the same rule is not stacked twice (an inactive one comes back).
    Returns the procedure and whether it is new."""
    rule = " ".join(rule.split())
    if not normalize(rule):
        raise ValidationError({"rule": "a rule needs words"})
    key = content_key(rule)
    existing = Procedure.objects.filter(owner=owner, rule_key=key).first()
    if existing is not None:
        if not existing.active:
            existing.active = True
            existing.save(update_fields=["active"])
        return existing, False
    procedure = Procedure(owner=owner, rule=rule, rule_key=key, context=context, source=source)
    procedure.full_clean(exclude=["owner"])
    procedure.save()
    return procedure, True


def _event(fact: Fact, kind: str, *, actor: str, old_content: str = "", old_confidence=None):
    FactEvent.objects.create(
        fact=fact,
        event=kind,
        old_content=old_content,
        new_content=fact.content,
        old_confidence=old_confidence,
        new_confidence=fact.confidence,
        actor=actor,
    )


@transaction.atomic
def fact_update(*, fact: Fact, content: str, confidence: float, actor: str) -> Fact:
    """The same fact, said more precisely: new wording, reinforced confidence."""
    old_content, old_confidence = fact.content, fact.confidence
    fact.content = " ".join(content.split())
    fact.content_key = content_key(fact.content)
    fact.search_tokens = fact_search_tokens(fact.content, fact.message)
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
def fact_edit(
    *,
    fact: Fact,
    actor: str,
    content: str | None = None,
    category: str | None = None,
    confidence: float | None = None,
) -> Fact:
    """A curator's change (admin or API), recorded as an "edit" event with old and new values."""
    old_content, old_confidence = fact.content, fact.confidence
    if content is not None:
        fact.content = " ".join(content.split())
        if not normalize(fact.content):
            raise ValidationError({"content": "a fact needs words"})
        fact.content_key = content_key(fact.content)
    fact.search_tokens = fact_search_tokens(fact.content, fact.message)
    if category is not None:
        fact.category = category
    if confidence is not None:
        fact.confidence = round(confidence, 4)
    fact.updated_at = timezone.now()
    fact.full_clean(exclude=["owner", "session", "message", "superseded_by"])
    fact.save()
    _event(
        fact,
        FactEvent.Kind.EDIT,
        actor=actor,
        old_content=old_content,
        old_confidence=old_confidence,
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


@transaction.atomic
def procedure_edit(
    *,
    procedure: Procedure,
    rule: str | None = None,
    context: str | None = None,
    active: bool | None = None,
) -> Procedure:
    """Change a rule's text, context or whether it applies."""
    if rule is not None:
        rule = " ".join(rule.split())
        if not normalize(rule):
            raise ValidationError({"rule": "a rule needs words"})
        key = content_key(rule)
        clash = Procedure.objects.filter(owner=procedure.owner, rule_key=key).exclude(
            pk=procedure.pk
        )
        if clash.exists():
            raise ValidationError({"rule": "the same rule already exists"})
        procedure.rule, procedure.rule_key = rule, key
    if context is not None:
        procedure.context = context
    if active is not None:
        procedure.active = active
    procedure.full_clean(exclude=["owner"])
    procedure.save()
    return procedure
