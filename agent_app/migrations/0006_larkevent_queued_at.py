from django.db import migrations, models
from django.db.models import F


def queued_when_received(apps, schema_editor):
    """Events stored before this migration had their task published by the webhook itself."""
    LarkEvent = apps.get_model("agent_app", "LarkEvent")
    LarkEvent.objects.update(queued_at=F("received_at"))


class Migration(migrations.Migration):
    dependencies = [("agent_app", "0005_lark_event_reclaim")]

    operations = [
        migrations.AddField(
            model_name="larkevent",
            name="queued_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(queued_when_received, migrations.RunPython.noop),
    ]
