from celery import shared_task
from django.conf import settings

from sessions_app import services


@shared_task(name="sessions.cleanup_empty", acks_late=True)
def cleanup_empty() -> int:
    # Deleting what has no messages is safe to repeat: a second run finds nothing.
    return services.sessions_cleanup_empty()


@shared_task(name="sessions.close_idle", acks_late=True)
def close_idle() -> int:
    return len(services.sessions_close_idle(idle_minutes=settings.ETHAN_SESSION_IDLE_MINUTES))
