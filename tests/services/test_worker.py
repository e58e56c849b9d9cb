from __future__ import annotations

import threading

import pytest
from django.db import connection

from agent_app.lifecycle import sessions_cleanup_empty_task
from ethan_shared import queue
from sessions_app import services
from sessions_app.models import ChatSession, Message
from tests.services.conftest import wait_for


@pytest.mark.django_db(transaction=True)
def test_enqueued_task_runs_on_a_real_worker(celery_worker_process, owner, make_session):
    kept = make_session(owner, "hello", "hi")
    ChatSession.objects.create(id="s_20260101_0000_empt", owner=owner)

    queue.enqueue(sessions_cleanup_empty_task)  # autocommit: sent to Redis at once

    assert wait_for(lambda: not ChatSession.objects.filter(pk="s_20260101_0000_empt").exists())
    assert list(ChatSession.objects.values_list("pk", flat=True)) == [kept.pk]
    assert celery_worker_process.poll() is None


def test_the_worker_registers_every_task(celery_worker_process):
    """Autodiscovery imports only `<app>.tasks`: the tasks that live elsewhere (the session life
    cycle in agent_app.lifecycle, the Lark task in channels_app.lark.tasks) are found too."""
    from ethan_site.celery import app
    from tests.ethan_site.test_queue import TASK_NAMES

    hostname = celery_worker_process.hostname
    registered = app.control.inspect(destination=[hostname], timeout=5).registered()
    assert set(registered[hostname]) >= TASK_NAMES, registered


@pytest.mark.django_db(transaction=True)
def test_enqueue_inside_a_transaction_waits_for_commit(celery_worker_process, owner):
    from django.db import transaction

    with transaction.atomic():
        ChatSession.objects.create(id="s_20260101_0000_emp2", owner=owner)
        queue.enqueue(sessions_cleanup_empty_task)
        # Not yet sent: were it, a worker could run before this row is visible to it.
    assert wait_for(lambda: not ChatSession.objects.exists())


@pytest.mark.django_db(transaction=True)
def test_concurrent_appends_to_one_session_are_gap_free(services_ready, owner, make_session):
    session = make_session(owner, "start")
    threads, per_thread = 8, 25
    errors: list[BaseException] = []

    def append_many(index: int) -> None:
        try:
            mine = ChatSession.objects.get(pk=session.pk)
            for n in range(per_thread):
                services.message_append(session=mine, role="user", content=f"{index}-{n}")
        except BaseException as exc:  # reported below, in the test's own thread
            errors.append(exc)
        finally:
            connection.close()

    workers = [threading.Thread(target=append_many, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()

    assert errors == []
    total = 1 + threads * per_thread
    seqs = list(
        Message.objects.filter(session=session).order_by("seq").values_list("seq", flat=True)
    )
    assert seqs == list(range(1, total + 1))
    assert ChatSession.objects.get(pk=session.pk).last_seq == total
    # Each thread's own messages kept their order.
    for index in range(threads):
        contents = list(
            Message.objects.filter(session=session, content__startswith=f"{index}-")
            .order_by("seq")
            .values_list("content", flat=True)
        )
        assert contents == [f"{index}-{n}" for n in range(per_thread)]


@pytest.mark.django_db
def test_healthz_reports_the_real_broker(services_ready, client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok", "broker": "ok"}


@pytest.mark.django_db
def test_healthz_keeps_one_broker_connection_and_survives_its_loss(services_ready, client):
    """/healthz PINGs Redis on a connection it keeps (not a new one per probe); when the broker
    drops that connection, as a restart would, the next probe still says ok."""
    import redis

    from ethan_site.celery import app
    from ethan_site.health import HEALTH_CLIENT_NAME

    broker = redis.Redis.from_url(app.conf.broker_url)

    def health_connections() -> list[dict]:
        return [c for c in broker.client_list() if c["name"] == HEALTH_CLIENT_NAME]

    for _ in range(3):
        assert client.get("/healthz").json()["broker"] == "ok"
    kept = health_connections()
    assert len(kept) == 1, kept
    broker.client_kill_filter(_id=kept[0]["id"])
    assert client.get("/healthz").json()["broker"] == "ok"
    assert [c["id"] for c in health_connections()] != [kept[0]["id"]]


@pytest.mark.django_db(transaction=True)
def test_the_servers_healthz_keeps_its_own_database_connection(services_ready):
    """The server's /healthz thread checks PostgreSQL on a connection of its own, kept between
    probes outside the pool (no checkout and pool check per probe), and a connection the
    database dropped, as a restart would, is replaced: the next probe still says ok."""
    import psycopg

    from ethan_site.health import _probe_database, _report_in_thread

    assert _report_in_thread() == (200, {"status": "ok", "database": "ok", "broker": "ok"})
    probe = _probe_database()
    assert probe is not None and probe.connection is not None
    kept = probe.connection.info.backend_pid
    assert _report_in_thread()[0] == 200
    assert probe.connection.info.backend_pid == kept
    db = connection.settings_dict
    with psycopg.connect(
        host=db["HOST"] or "127.0.0.1",
        port=db["PORT"] or 5432,
        user=db["USER"],
        dbname=db["NAME"],
        autocommit=True,
    ) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [kept])
    assert _report_in_thread() == (200, {"status": "ok", "database": "ok", "broker": "ok"})
    assert probe.connection.info.backend_pid != kept
    probe.close()


def _backends() -> set[int]:
    """The test database's client connections other than this test's own."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
        )
        return {pid for (pid,) in cursor.fetchall()}


@pytest.mark.django_db(transaction=True)
def test_a_prefork_worker_keeps_its_database_connection_from_one_task_to_the_next(workers, owner):
    """Celery's Django fixup closed a prefork child's connection pool around every task, so
    each task connected anew (settings' CELERY_DB_REUSE_MAX, ethan_site.celery)."""
    workers.start("memory", pool="prefork")
    before = _backends()
    seen = []
    for n in range(3):
        empty = ChatSession.objects.create(id=f"s_20260101_000{n}_empt", owner=owner)
        queue.enqueue(sessions_cleanup_empty_task)  # autocommit: sent at once
        assert wait_for(lambda pk=empty.pk: not ChatSession.objects.filter(pk=pk).exists())
        threading.Event().wait(0.5)  # a connection closed at the task's end is gone by now
        seen.append(_backends() - before)
    # The worker's connections, kept after its task and the same ones for the next tasks.
    assert seen[0] and seen[0] == seen[1] == seen[2], seen
