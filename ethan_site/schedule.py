"""Periodic tasks, declared in the database for django-celery-beat's DatabaseScheduler; without a
broker the server runs them itself (ethan_site.periodic), claiming each run on the same rows.

Declared with update_or_create by name after every migrate, never deleted and recreated, so an
operator's changes in the admin (enabled, last run) survive, and running migrate on many hosts
at once is harmless.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from django.conf import settings

# sessions.close_idle runs at least this many times in ETHAN_SESSION_IDLE_MINUTES: a session is
# closed at most a sixth of the idle time late (5 minutes of the default 30), so a chat app's
# conversation is learnt from within the idle time and the end wait, plus at most two of its
# periods (docs/operations.md, "Periodic work without a broker").
RUNS_PER_IDLE_TIME = 6


@dataclass(frozen=True)
class Periodic:
    name: str
    task: str
    every_seconds: int
    # Run often enough to notice the idle time pass (RUNS_PER_IDLE_TIME).
    within_idle_time: bool = False

    def seconds(self) -> float:
        """The period this task runs at, with this install's settings."""
        if self.within_idle_time:
            idle = settings.ETHAN_SESSION_IDLE_MINUTES * 60
            return min(self.every_seconds, idle / RUNS_PER_IDLE_TIME)
        return self.every_seconds


PERIODIC_TASKS = [
    # Sessions never start empty (they are written with their first message), but deleting
    # every message of one in the admin, or an import, can leave one behind.
    Periodic(
        name="sessions: remove empty sessions", task="sessions.cleanup_empty", every_seconds=3600
    ),
    # API and Lark sessions have no "exit": idle ones are closed (and get their episode).
    Periodic(
        name="sessions: close idle sessions",
        task="sessions.close_idle",
        every_seconds=300,
        within_idle_time=True,
    ),
    # Consolidation that a broker outage left undone.
    Periodic(name="memory: catch up consolidation", task="memory.catch_up", every_seconds=600),
    # Lark events whose worker died while answering them are answered after all.
    Periodic(
        name="lark: answer events left behind", task="channels.lark_reclaim", every_seconds=60
    ),
    # Owners over the fact capacity (a lowered setting, an import) are brought back under it.
    Periodic(name="memory: eviction sweep", task="memory.evict_sweep", every_seconds=3600),
    # Vectors a failed task or a broker outage left unwritten (agent_app.vectors).
    Periodic(name="memory: catch up vectors", task="memory.vectors_catch_up", every_seconds=600),
    # Expired OAuth tokens and grants (remote MCP hosts) are removed.
    Periodic(name="oauth: clear expired tokens", task="oauth.clear_expired", every_seconds=86400),
]


def periodic_tasks_declare(*, using: str = "default") -> int:
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    for periodic in PERIODIC_TASKS:
        interval, _ = IntervalSchedule.objects.using(using).get_or_create(
            every=max(1, math.ceil(periodic.seconds())), period=IntervalSchedule.SECONDS
        )
        PeriodicTask.objects.using(using).update_or_create(
            name=periodic.name, defaults={"task": periodic.task, "interval": interval}
        )
    return len(PERIODIC_TASKS)


def on_post_migrate(sender: Any = None, using: str = "default", **kwargs: Any) -> None:
    # post_migrate is sent once per app with models; beat's own tables exist once its turn comes.
    if getattr(sender, "label", None) == "django_celery_beat":
        periodic_tasks_declare(using=using)
