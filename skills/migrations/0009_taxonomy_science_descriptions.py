"""Re-read skills/taxonomy.json: two categories' descriptions now name scientific analysis and
scientific databases (the classifier reads the file; this keeps the pages' descriptions the same)."""
from django.db import migrations


def reseed(apps, schema_editor):
    from skills.taxonomy import seed as seed_taxonomy

    seed_taxonomy(apps.get_model("skills", "Category"))


class Migration(migrations.Migration):
    dependencies = [("skills", "0008_category_source_llm")]
    operations = [migrations.RunPython(reseed, migrations.RunPython.noop)]
