from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("agent_app", "0006_larkevent_queued_at")]

    operations = [
        migrations.AddField(
            model_name="larkevent",
            name="claim_token",
            field=models.CharField(blank=True, editable=False, max_length=32),
        ),
        migrations.AddField(
            model_name="larkevent",
            name="session_claim",
            field=models.CharField(blank=True, editable=False, max_length=32),
        ),
    ]
