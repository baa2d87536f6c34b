"""The tasks app's pages: the task list and task page here; review, analytics, rollouts and datasets
bring their own urlpatterns."""
from django.urls import path

from . import analytics_views, dataset_views, list_views, review_views, reviewers_views, rollout_views, views

app_name = "tasks"
urlpatterns = [
    path("", list_views.task_list, name="list"),
    path("funnel/", list_views.funnel_table, name="funnel-table"),
    path("<int:task_id>/", views.task_detail, name="detail"),
    path("<int:task_id>/validate/", views.validate, name="validate"),
    path("<int:task_id>/retry/", views.construction_retry, name="construction-retry"),
    path("validations/<int:validation_id>/retry/", views.validation_retry, name="validation-retry"),
    path("trials/<int:trial_id>/logs/<str:name>", views.trial_log, name="trial-log"),
    path("builds/<int:build_id>/log", views.build_log, name="build-log"),
    path("views/save/", list_views.save_view, name="view-save"),
    path("views/<int:view_id>/delete/", list_views.delete_view, name="view-delete"),
    path("<int:task_id>/versions/<int:number>/files/<path:path>", views.version_file, name="version-file"),
    path("<int:task_id>/recheck/", views.recheck_create, name="recheck"),
    path("rechecks/<int:recheck_id>/", views.recheck_progress, name="recheck-progress"),
    path("rechecks/<int:recheck_id>/resume/", views.recheck_resume, name="recheck-resume"),
]
# review (decisions, queue, bulk, audit, overview; several reviewers), analytics, rollouts, datasets in and out
urlpatterns += (review_views.urlpatterns + reviewers_views.urlpatterns + analytics_views.urlpatterns
                + rollout_views.urlpatterns + dataset_views.urlpatterns)
