"""PostgreSQL full-text search over Skill.search_document: a stored tsvector column with a GIN index.

The column is invisible to the ORM (queried through `extra`), so SQLite, which has no tsvector,
simply skips this migration and uses the word-matching fallback.
"""
from django.db import migrations


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(
        "ALTER TABLE skills_skill ADD COLUMN search_vector tsvector "
        "GENERATED ALWAYS AS (to_tsvector('english', coalesce(search_document, ''))) STORED"
    )
    # serves the skills list's full-text search
    schema_editor.execute("CREATE INDEX skill_search_vector_idx ON skills_skill USING GIN (search_vector)")


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("ALTER TABLE skills_skill DROP COLUMN IF EXISTS search_vector")


class Migration(migrations.Migration):
    dependencies = [("skills", "0002_taxonomy")]
    operations = [migrations.RunPython(forwards, backwards)]
