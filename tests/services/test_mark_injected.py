"""Marking injected facts never waits on a worker that holds one of them (PostgreSQL): the turn
and consolidation cannot deadlock over a recency mark."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from memory_app.models import Fact
from memory_app.services import fact_write, facts_mark_injected


@pytest.mark.django_db(transaction=True)
def test_marking_injected_facts_skips_the_rows_a_worker_holds(services_ready, owner):
    facts = [
        fact_write(
            owner=owner, content=f"fact {n}", category="knowledge", confidence=0.8, source="api"
        )
        for n in range(3)
    ]
    before = {f.pk: f.last_accessed for f in Fact.objects.all()}
    held, release = threading.Event(), threading.Event()

    def worker_holds_the_first():
        try:
            with transaction.atomic():
                list(Fact.objects.select_for_update().filter(pk=facts[0].pk))
                held.set()
                release.wait(30)
        finally:
            connection.close()

    def turn_marks_them():
        try:
            facts_mark_injected(facts=facts)
        finally:
            connection.close()

    worker = threading.Thread(target=worker_holds_the_first)
    worker.start()
    assert held.wait(10)
    turn = threading.Thread(target=turn_marks_them)
    turn.start()
    turn.join(10)
    blocked = turn.is_alive()  # still waiting on the worker's row lock
    release.set()
    worker.join(10)
    turn.join(10)
    assert not blocked
    after = {f.pk: f.last_accessed for f in Fact.objects.all()}
    assert after[facts[0].pk] == before[facts[0].pk]  # the held one is left alone
    assert all(after[f.pk] > before[f.pk] for f in facts[1:])
