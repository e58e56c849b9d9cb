from django.db import migrations, models


class Migration(migrations.Migration):
    """Facts know their source: the messages they were said in, and the history records the
    ones each change added. Existing facts are left without a source (nothing to infer it
    from reliably)."""

    dependencies = [
        ("memory_app", "0006_fact_source_mcp"),
        ("sessions_app", "0008_chatsession_channel_openai"),
    ]

    operations = [
        migrations.AddField(
            model_name="fact",
            name="sources",
            field=models.ManyToManyField(
                blank=True, related_name="sourced_facts", to="sessions_app.message"
            ),
        ),
        migrations.AddField(
            model_name="factevent",
            name="sources",
            field=models.JSONField(blank=True, default=list),
        ),
    ]
