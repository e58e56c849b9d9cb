"""Episode keywords as they were said: rows written before kept search stems ("stori" for
"stories", "porto" for "Porto"); each is told again by the words of its session's latest user
messages and its summary (episodes_app.keywords.keywords_as_said), the search tokens with them."""

from django.db import migrations

from episodes_app.keywords import keywords_as_said
from sessions_app.search import search_tokens

# The user messages an episode's keywords were counted from at most (episodes_app.services
# reads the latest 40 rounds).
LATEST_SAID = 40


def keywords_forward(apps, schema_editor):
    Episode = apps.get_model("episodes_app", "Episode")
    Message = apps.get_model("sessions_app", "Message")
    rows = Episode.objects.only("id", "session_id", "summary", "keywords").order_by("id")
    for episode in rows.iterator(chunk_size=500):
        said = []
        if episode.session_id is not None:
            said = list(
                Message.objects.filter(session_id=episode.session_id, role="user")
                .order_by("-seq")
                .values_list("content", flat=True)[:LATEST_SAID]
            )
        stored = list(episode.keywords or [])
        keywords = keywords_as_said(stored, [*reversed(said), episode.summary])
        if keywords != stored:
            Episode.objects.filter(pk=episode.pk).update(
                keywords=keywords,
                search_tokens=search_tokens(f"{episode.summary} {' '.join(keywords)}"),
            )


class Migration(migrations.Migration):
    dependencies = [
        ("episodes_app", "0003_episode_fts"),
        ("sessions_app", "0008_chatsession_channel_openai"),
    ]

    # Going back leaves the words: they read as well with the code before.
    operations = [migrations.RunPython(keywords_forward, migrations.RunPython.noop)]
