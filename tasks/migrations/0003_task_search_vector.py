"""PostgreSQL full-text search over Task.search_document (name + current instruction): a stored
tsvector column with a GIN index, invisible to the ORM (queried through `extra`). SQLite skips
this and the task list falls back to word matching."""
from django.db import migrations


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(
        "ALTER TABLE tasks_task ADD COLUMN search_vector tsvector "
        "GENERATED ALWAYS AS (to_tsvector('english', coalesce(search_document, ''))) STORED"
    )
    schema_editor.execute("CREATE INDEX task_search_vector_idx ON tasks_task USING GIN (search_vector)")


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("ALTER TABLE tasks_task DROP COLUMN IF EXISTS search_vector")


class Migration(migrations.Migration):
    dependencies = [("tasks", "0002_review_rollouts_datasets")]
    operations = [migrations.RunPython(forwards, backwards)]
