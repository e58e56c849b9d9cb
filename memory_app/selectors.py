"""Reads of the cold store, every one scoped to an owner."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet

from memory_app import confidence
from memory_app.models import Fact, Procedure
from memory_app.normalize import content_key


def facts_for_owner(*, owner: AbstractBaseUser) -> QuerySet[Fact]:
    return Fact.objects.filter(owner=owner)


def fact_matching(*, owner: AbstractBaseUser, content: str) -> Fact | None:
    """The active fact equal to `content` (see normalize), if the owner has one."""
    return (
        facts_for_owner(owner=owner)
        .filter(content_key=content_key(content), status=Fact.Status.ACTIVE)
        .first()
    )


def facts_for_injection(*, owner: AbstractBaseUser, limit: int) -> list[Fact]:
    """The design's order: confidence >= 0.3, confidence desc, then last_accessed desc."""
    return list(
        facts_for_owner(owner=owner)
        .filter(status=Fact.Status.ACTIVE, confidence__gte=confidence.INJECTION_THRESHOLD)
        .order_by("-confidence", "-last_accessed", "-id")[:limit]
    )


def procedures_active(*, owner: AbstractBaseUser) -> list[Procedure]:
    return list(Procedure.objects.filter(owner=owner, active=True).order_by("created_at", "id"))
