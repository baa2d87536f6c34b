from django.urls import path

from . import analytics_views, dataset_views, review_views, views

app_name = "tasks"
urlpatterns = [
    path("", views.task_list, name="list"),
    path("<int:task_id>/", views.task_detail, name="detail"),
    path("<int:task_id>/validate/", views.validate, name="validate"),
    path("trials/<int:trial_id>/logs/<str:name>", views.trial_log, name="trial-log"),
    path("builds/<int:build_id>/log", views.build_log, name="build-log"),
]
# review (decisions, queue, bulk, audit, overview), analytics and rollouts, datasets in and out
urlpatterns += review_views.urlpatterns + analytics_views.urlpatterns + dataset_views.urlpatterns
