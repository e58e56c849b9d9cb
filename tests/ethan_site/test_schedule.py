import pytest
from django_celery_beat.models import PeriodicTask

from ethan_site.celery import app
from ethan_site.schedule import PERIODIC_TASKS, periodic_tasks_declare


@pytest.mark.django_db
def test_periodic_tasks_are_declared_by_migrate_and_idempotent():
    # migrate (the test database's creation) already declared them.
    declared = dict(PeriodicTask.objects.values_list("name", "task"))
    assert declared == {
        "sessions: remove empty sessions": "sessions.cleanup_empty",
        "sessions: close idle sessions": "sessions.close_idle",
        "memory: eviction sweep": "memory.evict_sweep",
        "memory: catch up consolidation": "memory.catch_up",
        "memory: catch up vectors": "memory.vectors_catch_up",
        "lark: answer events left behind": "channels.lark_reclaim",
        "oauth: clear expired tokens": "oauth.clear_expired",
    }
    app.loader.import_default_modules()  # autodiscover the apps' tasks, as a worker does
    for task_name in declared.values():
        assert task_name in app.tasks, task_name  # every name is a registered task
    task = PeriodicTask.objects.get(name="sessions: remove empty sessions")
    task.enabled = False  # an operator's change survives the next migrate
    task.save()
    assert periodic_tasks_declare() == len(PERIODIC_TASKS)
    assert PeriodicTask.objects.count() == len(PERIODIC_TASKS)
    assert PeriodicTask.objects.get(pk=task.pk).enabled is False
