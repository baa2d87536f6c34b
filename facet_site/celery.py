"""The Celery app. Jobs live in each app's `jobs.py`; their state lives in our own tables."""
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "facet_site.settings")

app = Celery("facet")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(related_name="jobs")
