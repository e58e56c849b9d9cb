"""Thin Celery shells over the memory services: ids in, a service call, bounded retries."""

from celery import shared_task
from django.contrib.auth import get_user_model

from llm.errors import ModelUnavailable
from memory_app import consolidator, services
from memory_app.models import Fact


@shared_task(
    name="memory.consolidate_session",
    acks_late=True,
    autoretry_for=(ModelUnavailable,),
    retry_backoff=True,
    retry_backoff_max=600,
    retry_jitter=True,
    max_retries=5,
)
def consolidate_session(session_id: str) -> dict:
    report = consolidator.consolidation_run(session_id=session_id)
    return {
        "summaries": report.summaries,
        "extractions": report.extractions,
        "facts": report.facts,
        "evicted": report.evicted,
    }


@shared_task(name="memory.evict_sweep", acks_late=True)
def evict_sweep() -> int:
    """Owners over their fact capacity (a lowered setting, imports) are brought back under it."""
    from django.conf import settings
    from django.db.models import Count, Q

    over = (
        get_user_model()
        .objects.annotate(active=Count("facts", filter=Q(facts__status=Fact.Status.ACTIVE)))
        .filter(active__gt=settings.ETHAN_FACT_CAPACITY)
    )
    return sum(
        services.facts_evict_over_capacity(owner=owner, actor="evict_sweep") for owner in over
    )
