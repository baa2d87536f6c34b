import os

from django.apps import AppConfig
from django.conf import settings

# The restricted base image every generated Dockerfile must start FROM (`facet base-image` builds
# it). Overridden by settings.FACET_BASE_IMAGE or the FACET_BASE_IMAGE environment variable.
DEFAULT_BASE_IMAGE = "facet-base:bookworm"


def base_image() -> str:
    return getattr(settings, "FACET_BASE_IMAGE", "") or os.environ.get("FACET_BASE_IMAGE") or DEFAULT_BASE_IMAGE


class TasksConfig(AppConfig):
    name = "tasks"
    verbose_name = "Tasks"
