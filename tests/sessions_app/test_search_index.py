"""The SQLite search index (FTS5) stays in step with its tables across every migration."""

from __future__ import annotations

import pytest


@pytest.mark.django_db
def test_every_fts_index_keeps_its_triggers_after_all_migrations():
    """A migration that adds a column makes SQLite rebuild the table, which drops its triggers:
    such a migration must make them again (as memory_app 0006 and sessions_app 0007 do), or
    new rows never reach the index and search finds nothing written after it."""
    from django.db import connection

    if connection.vendor != "sqlite":
        pytest.skip("the FTS5 index and its triggers are SQLite's (PostgreSQL: tsvector)")
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master WHERE name LIKE '%\\_fts' ESCAPE '\\'")
        indexes = [name for (name,) in cursor.fetchall()]
        cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        triggers = {name for (name,) in cursor.fetchall()}
    assert set(indexes) >= {"sessions_app_message_fts", "memory_app_fact_fts"}
    for index in indexes:
        assert {f"{index}_ai", f"{index}_ad", f"{index}_au"} <= triggers, index
