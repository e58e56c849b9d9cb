"""Thin Celery shells over the memory services: ids in, a service call, the shared retry
policy (ethan_site.queue.ethan_task). The services are imported inside each task: services
import tasks to enqueue them, never the other way round at import time."""

from ethan_site.queue import ethan_task


@ethan_task(name="memory.consolidate_session")
def consolidate_session(session_id: str) -> dict:
    from memory_app import consolidator

    report = consolidator.consolidation_run(session_id=session_id)
    return {
        "summaries": report.summaries,
        "extractions": report.extractions,
        "facts": report.facts,
        "evicted": report.evicted,
    }


@ethan_task(name="memory.catch_up")
def catch_up() -> int:
    """Sessions whose consolidation is due but did not run (the broker was down when their turn
    ended, or a task gave up): consolidate them now. Safe alongside the regular tasks."""
    from datetime import timedelta

    from django.conf import settings
    from django.db.models import F, Value
    from django.db.models.functions import Coalesce
    from django.utils import timezone

    from memory_app import consolidator
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


@ethan_task(name="memory.evict_sweep")
def evict_sweep() -> int:
    """Owners over their fact capacity (a lowered setting, imports) are brought back under it."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.db.models import Count, Q

    from memory_app import services
    from memory_app.models import Fact

    over = (
        get_user_model()
        .objects.annotate(active=Count("facts", filter=Q(facts__status=Fact.Status.ACTIVE)))
        .filter(active__gt=settings.ETHAN_FACT_CAPACITY)
    )
    return sum(
        services.facts_evict_over_capacity(owner=owner, actor="evict_sweep") for owner in over
    )
