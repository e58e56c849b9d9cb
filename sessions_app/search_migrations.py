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
