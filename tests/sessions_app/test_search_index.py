"""The search index stays in step with its tables across every migration: on SQLite the FTS5
tables and the triggers that feed them, on PostgreSQL the generated tsvector column."""

from __future__ import annotations

import pytest
from django.db import connection

from sessions_app.search import VECTOR_COLUMNS


@pytest.mark.django_db
def test_every_search_index_is_there_after_all_migrations():
    """On SQLite, a migration that adds a column makes the table be rebuilt, which drops its
    triggers: such a migration must make them again (as memory_app 0006 and sessions_app 0007
    do), or new rows never reach the index and search finds nothing written after it."""
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("SELECT name FROM sqlite_master WHERE name LIKE '%\\_fts' ESCAPE '\\'")
            indexes = [name for (name,) in cursor.fetchall()]
            cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
            triggers = {name for (name,) in cursor.fetchall()}
            assert set(indexes) >= {"sessions_app_message_fts", "memory_app_fact_fts"}
            for index in indexes:
                assert {f"{index}_ai", f"{index}_ad", f"{index}_au"} <= triggers, index
        else:
            for table, column in VECTOR_COLUMNS.items():
                cursor.execute(
                    "SELECT data_type FROM information_schema.columns "
                    "WHERE table_name = %s AND column_name = %s",
                    [table, column],
                )
                assert cursor.fetchall() == [("tsvector",)], (table, column)
