"""The tests' own SQLite database (tests/conftest.py, django_db_modify_db_settings) lets a
server's thread write while the test reads, as the product's database file does (and
PostgreSQL, in the services suite)."""

from __future__ import annotations

import threading

import pytest
from django.contrib.auth import get_user_model
from django.db import connection, connections


@pytest.mark.django_db(transaction=True)
def test_a_thread_writes_a_table_the_test_is_still_reading(owner, other_owner):
    errors: list[Exception] = []

    def write() -> None:
        try:
            get_user_model().objects.filter(pk=owner.pk).update(first_name="Ada")
        except Exception as exc:  # what the test reports
            errors.append(exc)
        finally:
            connections.close_all()

    with connection.cursor() as cursor:
        # A statement left open on the table, as a page's query is while it is rendered.
        cursor.execute("SELECT id FROM auth_user ORDER BY id")
        cursor.fetchone()
        writer = threading.Thread(target=write)
        writer.start()
        writer.join(30)
    assert not errors  # in Django's shared-cache memory: "database table is locked: auth_user"
    owner.refresh_from_db()
    assert owner.first_name == "Ada"
