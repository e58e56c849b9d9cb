"""Migration helpers for search_tokens columns: filling existing rows, and the PostgreSQL index."""

from __future__ import annotations

from collections.abc import Callable

BATCH = 2000


def fill(app_label: str, model_name: str, text_of: Callable[[object], str]):
    """A RunPython function that computes search_tokens for rows written before the column."""

    def run(apps, schema_editor):
        from sessions_app.search import search_tokens

        model = apps.get_model(app_label, model_name)
        rows = model.objects.using(schema_editor.connection.alias).order_by("pk")
        batch = []
        for row in rows.iterator(chunk_size=BATCH):
            row.search_tokens = search_tokens(text_of(row))
            batch.append(row)
            if len(batch) >= BATCH:
                model.objects.bulk_update(batch, ["search_tokens"])
                batch = []
        model.objects.bulk_update(batch, ["search_tokens"])

    return run


def gin_index(table: str, name: str):
    """RunPython functions creating and dropping the GIN index search uses, on PostgreSQL
    only (SQLite has no such index; it scans)."""

    def create(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(
                f'CREATE INDEX IF NOT EXISTS "{name}" ON "{table}" '
                f"USING gin (to_tsvector('simple', \"search_tokens\"))"
            )

    def drop(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(f'DROP INDEX IF EXISTS "{name}"')

    return create, drop


def fts5_index(table: str):
    """RunPython functions creating and dropping, on SQLite only, an FTS5 index of a table's
    search_tokens (external content, kept in step by triggers), so search does not scan."""
    fts = f"{table}_fts"

    def create(apps, schema_editor):
        if schema_editor.connection.vendor != "sqlite":
            return
        for statement in (
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {fts} USING fts5(search_tokens, "
            f"content='{table}', content_rowid='id')",
            f"CREATE TRIGGER IF NOT EXISTS {fts}_ai AFTER INSERT ON {table} BEGIN "
            f"INSERT INTO {fts}(rowid, search_tokens) VALUES (new.id, new.search_tokens); END",
            f"CREATE TRIGGER IF NOT EXISTS {fts}_ad AFTER DELETE ON {table} BEGIN "
            f"INSERT INTO {fts}({fts}, rowid, search_tokens) "
            f"VALUES ('delete', old.id, old.search_tokens); END",
            f"CREATE TRIGGER IF NOT EXISTS {fts}_au AFTER UPDATE OF search_tokens ON {table} "
            f"BEGIN INSERT INTO {fts}({fts}, rowid, search_tokens) "
            f"VALUES ('delete', old.id, old.search_tokens); "
            f"INSERT INTO {fts}(rowid, search_tokens) VALUES (new.id, new.search_tokens); END",
            f"INSERT INTO {fts}({fts}) VALUES ('rebuild')",
        ):
            schema_editor.execute(statement)

    def drop(apps, schema_editor):
        if schema_editor.connection.vendor != "sqlite":
            return
        for name in ("ai", "ad", "au"):
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {fts}_{name}")
        schema_editor.execute(f"DROP TABLE IF EXISTS {fts}")

    return create, drop


def search_at_scale():
    """RunPython functions for migration 0005, PostgreSQL only.

    - `search_vector`, a stored generated column: to_tsvector once per write instead of once
      per row a search looks at (the newest-first scan of a common word reads thousands), and
      a GIN index on it in place of the expression index.
    - (owner_id, last_seq): BM25's N, the owner's message count, summed by an index-only
      scan instead of reading every session row.
    - a trigram GIN index on UPPER(title), the expression Django's icontains uses, so a title
      search no longer reads every session; skipped when pg_trgm cannot be installed (search
      stays correct, only slower).
    """

    def forward(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return
        for statement in (
            "ALTER TABLE sessions_app_message ADD COLUMN IF NOT EXISTS search_vector tsvector "
            "GENERATED ALWAYS AS (to_tsvector('simple', search_tokens)) STORED",
            "CREATE INDEX IF NOT EXISTS message_search_vector_gin ON sessions_app_message "
            "USING gin (search_vector)",
            "DROP INDEX IF EXISTS message_search_gin",
            "CREATE INDEX IF NOT EXISTS session_owner_seq_total ON sessions_app_chatsession "
            "(owner_id, last_seq)",
        ):
            schema_editor.execute(statement)
        from django.db import DatabaseError, transaction

        try:
            with transaction.atomic(using=schema_editor.connection.alias):
                schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
                schema_editor.execute(
                    "CREATE INDEX IF NOT EXISTS session_title_trgm ON sessions_app_chatsession "
                    "USING gin (UPPER(title) gin_trgm_ops)"
                )
        except DatabaseError:
            pass  # no pg_trgm here (not installed, or no right to create it): titles scan

    def backward(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return
        for statement in (
            "DROP INDEX IF EXISTS session_title_trgm",
            "DROP INDEX IF EXISTS session_owner_seq_total",
            'CREATE INDEX IF NOT EXISTS "message_search_gin" ON "sessions_app_message" '
            "USING gin (to_tsvector('simple', \"search_tokens\"))",
            "DROP INDEX IF EXISTS message_search_vector_gin",
            "ALTER TABLE sessions_app_message DROP COLUMN IF EXISTS search_vector",
        ):
            schema_editor.execute(statement)

    return forward, backward
