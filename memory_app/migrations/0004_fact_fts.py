from django.db import migrations

from sessions_app.search_migrations import fts5_index

CREATE_FTS, DROP_FTS = fts5_index("memory_app_fact")


class Migration(migrations.Migration):
    """On SQLite, an FTS5 index of search_tokens (PostgreSQL has its GIN index)."""

    dependencies = [("memory_app", "0003_fact_search_tokens")]

    operations = [migrations.RunPython(CREATE_FTS, DROP_FTS)]
