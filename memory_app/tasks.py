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


@shared_task(name="memory.catch_up", acks_late=True)
def catch_up() -> int:
    """Sessions whose consolidation is due but did not run (the broker was down when their turn
    ended, or a task gave up): consolidate them now. Safe alongside the regular tasks."""
    from datetime import timedelta

    from django.conf import settings
    from django.db.models import F, Value
    from django.db.models.functions import Coalesce
    from django.utils import timezone

    from sessions_app.models import ChatSession

    due = (
        ChatSession.objects.filter(updated_at__gte=timezone.now() - timedelta(days=7))
        .annotate(done=Coalesce(F("working_state__compressed_through"), Value(0)))
        .filter(
            round_count__gte=F("done")
            + settings.ETHAN_MEMORY_HOT_SIZE
            + settings.ETHAN_MEMORY_COMPRESS_BATCH
        )
        .values_list("pk", flat=True)
    )
    count = 0
    for session_id in due:
        consolidator.consolidation_run(session_id=session_id)
        count += 1
    return count


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
