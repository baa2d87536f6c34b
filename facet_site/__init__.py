"""The site package: settings, URLs, the API root and the Celery app (exported here so workers find it)."""
from .celery import app as celery_app

__all__ = ["celery_app"]
