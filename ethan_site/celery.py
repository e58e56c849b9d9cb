"""The Celery app. Every setting lives in settings.py's Celery block (CELERY_* names)."""

import os
import sys

from celery import Celery, signals
from django.db import close_old_connections

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ethan_site.settings")

app = Celery("ethan")
# Read through django_settings below: the worker and beat load the settings through this name,
# so a bad value stops them with one line naming the variable.
app.config_from_object("ethan_site.celery:django_settings", namespace="CELERY")
app.autodiscover_tasks()


@signals.task_prerun.connect
@signals.task_postrun.connect
def connections_tidied(sender=None, **kwargs) -> None:
    """Around each task a worker runs, what Django does around a request: a connection that
    failed or outlived CONN_MAX_AGE is closed, on PostgreSQL given back to the process's pool
    (settings' CELERY_DB_REUSE_MAX keeps Celery's fixup from closing the pool itself). Not for
    a task run eagerly, inside its caller's transaction."""
    if sender is None or getattr(sender.request, "is_eager", False):
        return
    close_old_connections()


def __getattr__(name: str):
    """`django_settings`, resolved when Celery first reads its configuration (not at import:
    this module is imported while the settings module itself loads)."""
    if name == "django_settings":
        from django.conf import settings

        from ethan_shared.config import settings_or_exit

        settings_or_exit("celery")
        return settings
    raise AttributeError(name)


def worker_command(*, hostname: str, pool: str, concurrency: int, loglevel: str) -> list[str]:
    """A `celery worker` in this Python on both of Ethan's queues, as `make worker` runs it:
    how the services suite and the HTTP benchmarks start real workers. Gossip, mingle and
    heartbeats are off: a lone worker has no peers to talk to, and they slow its start."""
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "ethan_site",
        "worker",
        "--pool",
        pool,
        "--concurrency",
        str(concurrency),
        "--queues",
        "memory,channels",
        "--hostname",
        hostname,
        "--loglevel",
        loglevel,
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
    ]
