"""Difficulty as a task label (the analytics' difficulty share and filter); existing tasks get
theirs: a generated task its scenario's difficulty (medium when it has none), an imported one its
task.toml's [metadata] difficulty (unknown when it is not easy, medium or hard)."""
import tomllib

from django.db import migrations, models


def label_difficulty(apps, schema_editor):
    Task = apps.get_model("tasks", "Task")
    TaskLabel = apps.get_model("tasks", "TaskLabel")
    labels = []
    for task in Task.objects.select_related("scenario", "current_version").iterator():
        if task.scenario_id or task.current_version_id is None:
            value = (getattr(task.scenario, "difficulty", "") or "") if task.scenario_id else ""
            value = value if value in ("easy", "medium", "hard") else "medium"
        else:
            try:
                meta = tomllib.loads(task.current_version.files.get("task.toml", "")).get("metadata", {})
            except tomllib.TOMLDecodeError:
                meta = {}
            value = meta.get("difficulty")
            value = value if value in ("easy", "medium", "hard") else "unknown"
        labels.append(TaskLabel(task_id=task.pk, kind="difficulty", value=value))
    TaskLabel.objects.bulk_create(labels, ignore_conflicts=True, batch_size=1000)


class Migration(migrations.Migration):

    dependencies = [
        ("tasks", "0011_repairround_evidence"),
        ("scenarios", "0004_scenario_difficulty"),
    ]

    operations = [
        migrations.AlterField(
            model_name="tasklabel",
            name="kind",
            field=models.CharField(choices=[("tag", "Skill tag"), ("category", "Category"),
                                            ("domain", "Top-level category"), ("family", "Task family"),
                                            ("difficulty", "Difficulty")], max_length=10),
        ),
        migrations.RunPython(label_difficulty, migrations.RunPython.noop),
    ]
