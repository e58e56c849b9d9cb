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
