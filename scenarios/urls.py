"""The scenario pages' URLs: runs, the repository, a pair, a scenario, and the pair JSONL import and export."""
from django.urls import path

from . import views

app_name = "scenarios"
urlpatterns = [
    path("runs/", views.run_list, name="runs"),
    path("runs/<int:run_id>/", views.run_detail, name="run"),
    path("runs/<int:run_id>/cancel/", views.cancel_run, name="cancel-run"),
    path("runs/<int:run_id>/retry/", views.retry_run, name="retry-run"),
    path("repository/", views.repository, name="repository"),
    path("repository/pairs/<int:pair_id>/", views.pair_detail, name="pair"),
    path("repository/scenarios/<int:scenario_id>/", views.scenario_detail, name="scenario"),
    path("repository/import/", views.import_pairs, name="import"),
    path("repository/export.jsonl", views.export_pairs, name="export"),
]
