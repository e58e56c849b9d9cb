"""The web server's own periodic work, when there is no broker (embedded mode).

With a broker, celery beat sends the periodic tasks of ethan_site.schedule to the workers. With
none (`make serve`, `ethan serve --workers N` on a laptop), nothing else would close idle
sessions, write the ends due, catch up consolidation, sweep evictions, take back Lark events or
clear expired OAuth tokens: each server process runs them in a thread of its own
(PeriodicWork), started by the ASGI lifespan (ethan_site.asgi) and stopped at its shutdown.

- One process at a time: a run is claimed on django-celery-beat's PeriodicTask row, the one
  beat keeps, with a conditional update of its last_run_at (UPDATE … WHERE last_run_at is older
  than a period, or empty): of the processes that find a task due, one claims it and the
  others' update changes no row. A process killed mid-task holds the task until its period has
  passed since the claim, no longer; the next period's run takes it (every task claims its own
  work, so running one again is safe). A run longer than its period may overlap the next, as
  under beat.
- The admin's `enabled` flag is honoured at every claim; the periods are ethan_site.schedule's
  (close_idle's bounded by the idle time), times ETHAN_PERIODIC_SCALE.
- Off the event loop, at the worker threads' lower priority (ethan_shared.threads): a sweep never
  holds a stream. The tasks' own deferred work (a session's end after close_idle) runs in the
  same thread, right after the task, as a request's runs after its response.
- At shutdown the thread is told to stop and waited for STOP_WAIT_SECONDS at most: a task still
  running then (a model call) is abandoned with the process, which is safe because every task
  is idempotent; nothing it had not committed is kept, and its next run does it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from datetime import timedelta

from django.conf import settings
from django.db import close_old_connections, connections
from django.db.models import F, Q
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from ethan_shared.queue import run_deferred
from ethan_shared.threads import nicer
from ethan_site.schedule import PERIODIC_TASKS, Periodic

log = logging.getLogger(__name__)

# How long the shutdown waits for a task in progress before leaving it to the next period.
STOP_WAIT_SECONDS = 2.0
# The longest sleep between two looks at the rows: a task enabled again in the admin, or one
# whose last run another process claimed, is seen within this.
LOOK_SECONDS = 60.0
# The shortest: a task due in a moment is not looked for in a busy loop.
MIN_WAIT_SECONDS = 0.05
# After a look that failed (the database away for a moment).
RETRY_SECONDS = 5.0


class PeriodicWork:
    """The periodic tasks of one server process, in a daemon thread (one process of many may
    stop mid-task: the thread never holds the process's exit)."""

    def __init__(self) -> None:
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.running: str | None = None  # the task in progress, for the shutdown's log line

    def start(self) -> bool:
        """Start the thread in embedded mode; with a broker, beat runs the tasks (False)."""
        if not settings.ETHAN_EMBEDDED:
            log.info("periodic work left to celery beat: a broker is configured")
            return False
        self._stopping.clear()
        self._thread = threading.Thread(target=self._loop, name="ethan-periodic", daemon=True)
        self._thread.start()
        log.info(
            "periodic work started in process %d (periods times %g)",
            os.getpid(),
            settings.ETHAN_PERIODIC_SCALE,
        )
        return True

    def halt(self) -> None:
        """No task starts from now on (the server was told to stop; safe in a signal handler):
        the connections' drain is no time to begin one. stop() then waits for the thread."""
        self._stopping.set()

    def stop(self, wait: float = STOP_WAIT_SECONDS) -> None:
        """Stop the thread, waiting `wait` seconds at most for a task in progress. Blocking:
        call it from a thread, not the event loop."""
        thread = self._thread
        if thread is None:
            return
        self._stopping.set()
        thread.join(wait)
        self._thread = None
        if thread.is_alive():
            log.warning(
                "periodic work stopped in process %d with %s in progress: left to its next run "
                "(the tasks are safe to repeat)",
                os.getpid(),
                self.running,
            )
        else:
            log.info("periodic work stopped in process %d", os.getpid())

    def _loop(self) -> None:
        nicer()
        try:
            tasks = _registered_tasks()
        except Exception:  # a task renamed without its schedule: said once, nothing runs
            log.exception("periodic work not started in process %d", os.getpid())
            return
        try:
            while not self._stopping.is_set():
                try:
                    wait = self.look(tasks)
                except Exception:  # the database away for a moment: look again later
                    log.exception("periodic work: the tasks could not be read or claimed")
                    wait = RETRY_SECONDS
                finally:
                    # As a Celery worker does between tasks: a connection past its age or broken
                    # is not reused.
                    close_old_connections()
                self._stopping.wait(wait)
        finally:
            connections.close_all()  # this thread's own

    def look(self, tasks: dict) -> float:
        """Run every task that is due and claimed here; returns how long to sleep."""
        now = timezone.now()
        rows = dict(
            PeriodicTask.objects.filter(
                name__in=[periodic.name for periodic in PERIODIC_TASKS], enabled=True
            ).values_list("name", "last_run_at")
        )
        wait = LOOK_SECONDS
        for periodic in PERIODIC_TASKS:
            if self._stopping.is_set():
                return 0
            if periodic.name not in rows:  # disabled in the admin, or not declared (migrate)
                continue
            period = periodic.seconds() * settings.ETHAN_PERIODIC_SCALE
            last = rows[periodic.name]
            due_in = (last - now).total_seconds() + period if last else 0
            if due_in > 0:
                wait = min(wait, due_in)
            elif periodic_claim(periodic, period=period):
                self._run(periodic, tasks[periodic.task])
                return 0  # time has passed: look at the rows again
            else:
                wait = min(wait, period)  # another process claimed it first
        return max(wait, MIN_WAIT_SECONDS)

    def _run(self, periodic: Periodic, task) -> None:
        self.running = periodic.task
        pid = os.getpid()
        log.info("periodic task %s started in process %d", periodic.task, pid)
        started = time.monotonic()
        try:
            task.run()
        except Exception:  # logged; the next period runs it again
            log.exception("periodic task %s failed in process %d", periodic.task, pid)
        # What the task queued for after its commit (sessions_end_write after close_idle).
        deferred = run_deferred()
        self.running = None
        log.info(
            "periodic task %s ran in %.2f s in process %d (%d deferred task%s)",
            periodic.task,
            time.monotonic() - started,
            pid,
            deferred,
            "" if deferred == 1 else "s",
        )


def periodic_claim(periodic: Periodic, *, period: float) -> bool:
    """Claim this period's run of `periodic` for this process: True for exactly one of the
    processes that try, while the task is enabled and its last run is a period old (or none)."""
    now = timezone.now()
    claimed = (
        PeriodicTask.objects.filter(name=periodic.name, enabled=True)
        .filter(Q(last_run_at__isnull=True) | Q(last_run_at__lte=now - timedelta(seconds=period)))
        .update(last_run_at=now, total_run_count=F("total_run_count") + 1)
    )
    return claimed == 1


def _registered_tasks() -> dict:
    """The periodic tasks' Celery tasks, found by name as a worker finds them (the apps'
    tasks modules, imported by Celery's autodiscovery)."""
    from ethan_site.celery import app

    app.loader.import_default_modules()
    return {periodic.task: app.tasks[periodic.task] for periodic in PERIODIC_TASKS}


PERIODIC = PeriodicWork()
