"""The tasks app's configuration, and the base image its Dockerfiles start FROM."""
from django.apps import AppConfig
from django.conf import settings


def base_image() -> str:
    """The restricted base image every generated Dockerfile must start FROM (settings.FACET_BASE_IMAGE)."""
    return settings.FACET_BASE_IMAGE


class TasksConfig(AppConfig):
    name = "tasks"
    verbose_name = "Tasks"
