"""Seed the paper's taxonomy (Tables 3 and 4) from skills/taxonomy.json."""
import json
from pathlib import Path

from django.db import migrations

TAXONOMY = Path(__file__).resolve().parent.parent / "taxonomy.json"


def fraction(percent):
    # taxonomy.json keeps the paper's percentages as printed (21.28); the database keeps fractions.
    return None if percent is None else round(percent / 100, 6)


def seed(apps, schema_editor):
    Category = apps.get_model("skills", "Category")
    data = json.loads(TAXONOMY.read_text())
    for p_pos, top in enumerate(data["categories"]):
        parent, _ = Category.objects.update_or_create(
            slug=top["slug"],
            defaults=dict(
                name=top["name"], description=top["description"], position=p_pos, parent=None,
                paper_count=top.get("paper_count"), paper_global_share=fraction(top.get("paper_global_share")),
                paper_within_parent=None, in_digest=top.get("in_digest", True),
            ),
        )
        for c_pos, child in enumerate(top.get("children", [])):
            Category.objects.update_or_create(
                slug=child["slug"],
                defaults=dict(
                    name=child["name"], description=child["description"], position=c_pos, parent=parent,
                    paper_count=child.get("paper_count"), paper_global_share=fraction(child.get("paper_global_share")),
                    paper_within_parent=fraction(child.get("paper_within_parent")), in_digest=child.get("in_digest", True),
                ),
            )


class Migration(migrations.Migration):
    dependencies = [("skills", "0001_initial")]
    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
