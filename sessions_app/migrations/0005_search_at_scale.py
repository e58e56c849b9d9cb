from django.db import migrations

from sessions_app.search_migrations import search_at_scale

FORWARD, BACKWARD = search_at_scale()


class Migration(migrations.Migration):
    """On PostgreSQL, what search needs at a million messages (docs/search.md): a stored
    tsvector of each message's search tokens with its GIN index (replacing the expression
    index), the owner's message count from an index alone, and a trigram index for titles."""

    dependencies = [("sessions_app", "0004_message_fts")]

    operations = [migrations.RunPython(FORWARD, BACKWARD)]
