"""The skill corpus' URLs: skills, their files and category overrides, the taxonomy, uploads and ingest batches."""
from django.urls import path

from . import views

app_name = "skills"
urlpatterns = [
    path("", views.skill_list, name="list"),
    path("taxonomy/", views.taxonomy, name="taxonomy"),
    path("ingest/", views.upload, name="upload"),
    path("ingest/<int:batch_id>/", views.batch_detail, name="batch"),
    path("<int:skill_id>/", views.skill_detail, name="detail"),
    path("<int:skill_id>/files/<path:file_path>", views.skill_file, name="file"),
    path("<int:skill_id>/category/", views.override_category, name="override-category"),
]
