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
        category=category,
        confidence=confidence,
        source=source,
        session=session,
        message=message,
    )
    fact.full_clean(exclude=["owner", "session", "message", "superseded_by"])
    fact.save()
    FactEvent.objects.create(
        fact=fact,
        event=FactEvent.Kind.ADD,
        new_content=content,
        new_confidence=confidence,
        actor=source,
    )
    return fact


def fact_reinforce(*, fact: Fact, confidence: float, actor: str) -> Fact:
    """The same fact again: confidence rises, hit count grows, history records it."""
    old = fact.confidence
    fact.confidence = rules.reinforced(old, confidence)
    fact.hit_count += 1
    fact.updated_at = timezone.now()
    fact.save(update_fields=["confidence", "hit_count", "updated_at"])
    FactEvent.objects.create(
        fact=fact,
        event=FactEvent.Kind.REINFORCE,
        old_content=fact.content,
        new_content=fact.content,
        old_confidence=old,
        new_confidence=fact.confidence,
        actor=actor,
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
