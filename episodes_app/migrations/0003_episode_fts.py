from django.db import migrations

from sessions_app.search_migrations import fts5_index

CREATE_FTS, DROP_FTS = fts5_index("episodes_app_episode")


class Migration(migrations.Migration):
    """On SQLite, an FTS5 index of search_tokens (PostgreSQL has its GIN index)."""

    dependencies = [("episodes_app", "0002_episode_search_tokens")]

    operations = [migrations.RunPython(CREATE_FTS, DROP_FTS)]
