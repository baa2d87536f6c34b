"""The paper's taxonomy (Tables 3 and 4), read from taxonomy.json into Category rows."""
import json
from pathlib import Path

TAXONOMY_FILE = Path(__file__).resolve().parent / "taxonomy.json"


def fraction(percent):
    # taxonomy.json keeps the paper's percentages as printed (21.28); the database keeps fractions.
    return None if percent is None else round(percent / 100, 6)


def seed(Category) -> int:
    """Create or update every category; `Category` is the model (historical in migrations). Idempotent."""
    data = json.loads(TAXONOMY_FILE.read_text())
    n = 0
    for p_pos, top in enumerate(data["categories"]):
        parent, _ = Category.objects.update_or_create(
            slug=top["slug"],
            defaults=dict(
                name=top["name"], description=top["description"], position=p_pos, parent=None,
                paper_count=top.get("paper_count"), paper_global_share=fraction(top.get("paper_global_share")),
                paper_within_parent=None, in_digest=top.get("in_digest", True),
            ),
        )
        n += 1
        for c_pos, child in enumerate(top.get("children", [])):
            Category.objects.update_or_create(
                slug=child["slug"],
                defaults=dict(
                    name=child["name"], description=child["description"], position=c_pos, parent=parent,
                    paper_count=child.get("paper_count"), paper_global_share=fraction(child.get("paper_global_share")),
                    paper_within_parent=fraction(child.get("paper_within_parent")), in_digest=child.get("in_digest", True),
                ),
            )
            n += 1
    return n
