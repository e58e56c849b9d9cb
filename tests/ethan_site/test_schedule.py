import pytest
from django_celery_beat.models import PeriodicTask

from ethan_site.schedule import PERIODIC_TASKS, periodic_tasks_declare
from sessions_app.tasks import cleanup_empty


@pytest.mark.django_db
def test_periodic_tasks_are_declared_by_migrate_and_idempotent():
    # migrate (the test database's creation) already declared them.
    declared = dict(PeriodicTask.objects.values_list("name", "task"))
    assert declared["sessions: remove empty sessions"] == cleanup_empty.name
    task = PeriodicTask.objects.get(name="sessions: remove empty sessions")
    task.enabled = False  # an operator's change survives the next migrate
    task.save()
    assert periodic_tasks_declare() == len(PERIODIC_TASKS)
    assert PeriodicTask.objects.filter(name__startswith="sessions:").count() == 1
    assert PeriodicTask.objects.get(pk=task.pk).enabled is False
