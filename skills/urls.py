"""The skill corpus' URLs: skills, their files and category overrides, the safety review queue, the taxonomy, uploads and ingest batches."""
from django.urls import path, register_converter

from . import views


class AnyFilePath:
    """A file's path within a skill, whatever characters its name has: Django's `path` converter
    stops at a newline, and a file named with one made its skill's page fail to render."""

    regex = r"[\s\S]+"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(AnyFilePath, "skillfile")

app_name = "skills"
urlpatterns = [
    path("", views.skill_list, name="list"),
    path("taxonomy/", views.taxonomy, name="taxonomy"),
    path("safety/", views.safety_queue, name="safety-queue"),
    path("<int:skill_id>/safety/", views.safety_decide, name="safety-decide"),
    path("ingest/", views.upload, name="upload"),
    path("ingest/<int:batch_id>/", views.batch_detail, name="batch"),
    path("ingest/<int:batch_id>/retry/", views.retry_batch, name="batch-retry"),
    path("<int:skill_id>/", views.skill_detail, name="detail"),
    path("<int:skill_id>/files/<skillfile:file_path>", views.skill_file, name="file"),
    path("<int:skill_id>/category/", views.override_category, name="override-category"),
]
