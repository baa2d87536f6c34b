"""The evidence each repair round's prompts were given, kept on the round for the repair timeline."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('tasks', '0010_trajectory_heartbeat'),
    ]

    operations = [
        migrations.AddField(
            model_name='repairround',
            name='evidence',
            field=models.JSONField(blank=True, default=dict),
        ),
    ]
