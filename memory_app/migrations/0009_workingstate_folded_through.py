from django.db import migrations, models
from django.db.models import F


def folded_with_extraction(apps, schema_editor):
    # Until now a session's extraction and fold ran together: what was extracted was folded.
    WorkingState = apps.get_model("memory_app", "WorkingState")
    WorkingState.objects.update(folded_through=F("extracted_through"))


class Migration(migrations.Migration):
    dependencies = [
        ("memory_app", "0008_memory_review"),
    ]

    operations = [
        migrations.AddField(
            model_name="workingstate",
            name="folded_through",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.RunPython(folded_with_extraction, migrations.RunPython.noop),
    ]
