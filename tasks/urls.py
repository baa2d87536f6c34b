from django.urls import path

from . import analytics_views, dataset_views, review_views, views

app_name = "tasks"
urlpatterns = [
    path("", views.task_list, name="list"),
    path("funnel/", views.funnel_table, name="funnel-table"),
    path("<int:task_id>/", views.task_detail, name="detail"),
    path("<int:task_id>/validate/", views.validate, name="validate"),
    path("trials/<int:trial_id>/logs/<str:name>", views.trial_log, name="trial-log"),
    path("builds/<int:build_id>/log", views.build_log, name="build-log"),
    path("views/save/", views.save_view, name="view-save"),
    path("views/<int:view_id>/delete/", views.delete_view, name="view-delete"),
    path("<int:task_id>/versions/<int:number>/files/<path:path>", views.version_file, name="version-file"),
    path("<int:task_id>/recheck/", views.recheck_create, name="recheck"),
    path("rechecks/<int:recheck_id>/", views.recheck_progress, name="recheck-progress"),
    path("rechecks/<int:recheck_id>/resume/", views.recheck_resume, name="recheck-resume"),
]
# review (decisions, queue, bulk, audit, overview), analytics and rollouts, datasets in and out
urlpatterns += review_views.urlpatterns + analytics_views.urlpatterns + dataset_views.urlpatterns
