from django.db import migrations, models

from sessions_app.search_migrations import fts5_index

CREATE_FTS, _ = fts5_index("sessions_app_message")


class Migration(migrations.Migration):
    """Message.interrupted: a reply the person stopped while it was written.

    On SQLite, adding a NOT NULL column makes Django rebuild the table, which drops the
    triggers that keep the FTS5 search index in step (0004): they are made again and the index
    rebuilt. PostgreSQL adds the column in place and needs nothing more."""

    dependencies = [("sessions_app", "0006_chatsession_turn_claim")]

    operations = [
        migrations.AddField(
            model_name="message",
            name="interrupted",
            field=models.BooleanField(default=False),
        ),
        migrations.RunPython(CREATE_FTS, migrations.RunPython.noop),
    ]
