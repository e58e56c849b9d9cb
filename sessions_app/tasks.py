from celery import shared_task

from sessions_app import services


@shared_task(name="sessions.cleanup_empty", acks_late=True)
def cleanup_empty() -> int:
    # Deleting what has no messages is safe to repeat: a second run finds nothing.
    return services.sessions_cleanup_empty()
