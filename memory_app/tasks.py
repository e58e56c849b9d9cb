"""Thin Celery shells over the memory services: ids in, a service call, the shared retry
policy (ethan_shared.queue.ethan_task). Each is named after its service with `_task`; `name=` is
the stable name queued messages and the beat schedule use. The services are imported inside
each task: services import tasks to enqueue them, never the other way round at import time."""

from ethan_shared.queue import ethan_task


@ethan_task(name="memory.consolidate_session")
def consolidation_run_task(session_id: str) -> dict:
    from memory_app import consolidator

    report = consolidator.consolidation_run(session_id=session_id)
    return {
        "summaries": report.summaries,
        "extractions": report.extractions,
        "facts": report.facts,
        "evicted": report.evicted,
    }


@ethan_task(name="memory.catch_up")
def consolidation_catch_up_task() -> int:
    """Periodic (ethan_site.schedule): consolidation that is due but did not run."""
    from memory_app import consolidator

    return consolidator.consolidation_catch_up()


@ethan_task(name="memory.evict_sweep")
def facts_evict_sweep_task() -> int:
    """Periodic: owners over their fact capacity are brought back under it."""
    from memory_app import services

    return services.facts_evict_sweep(actor="evict_sweep")
