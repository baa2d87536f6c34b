"""Seed the paper's taxonomy (Tables 3 and 4) from skills/taxonomy.json."""
from django.db import migrations


def seed(apps, schema_editor):
    from skills.taxonomy import seed as seed_taxonomy

    seed_taxonomy(apps.get_model("skills", "Category"))


class Migration(migrations.Migration):
    dependencies = [("skills", "0001_initial")]
    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
