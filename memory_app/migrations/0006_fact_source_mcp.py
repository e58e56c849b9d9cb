from django.db import migrations, models

from sessions_app.search_migrations import fts5_index

CREATE_FTS, _ = fts5_index("memory_app_fact")

SOURCES = [
    ("consolidator", "Consolidator"),
    ("agent_proactive", "Agent Proactive"),
    ("import", "Import"),
    ("admin", "Admin"),
    ("api", "Api"),
    ("mcp", "Mcp"),
]


class Migration(migrations.Migration):
    """Facts and rules written by an MCP client: source `mcp`, and the client's name.

    On SQLite, adding the column makes Django rebuild the fact table, which drops the triggers
    that keep its FTS5 search index in step (0004): they are made again and the index rebuilt.
    PostgreSQL adds the column in place and needs nothing more."""

    dependencies = [("memory_app", "0005_length_limits")]

    operations = [
        migrations.AddField(
            model_name="fact",
            name="source_client",
            field=models.CharField(blank=True, max_length=100),
        ),
        migrations.AlterField(
            model_name="fact",
            name="source",
            field=models.CharField(choices=SOURCES, max_length=16),
        ),
        migrations.AlterField(
            model_name="procedure",
            name="source",
            field=models.CharField(choices=SOURCES, default="agent_proactive", max_length=16),
        ),
        migrations.RunPython(CREATE_FTS, migrations.RunPython.noop),
    ]
