"""(scaffold — the rollouts/analytics helper replaces this) Rollout batches, Harbor result import
and the analytics pages. URL names are reserved here so other pages can link to them."""
from django.http import HttpResponse
from django.urls import path


def _todo(request, *args, **kwargs):
    return HttpResponse("not built yet", status=501)


def rollouts_context(request, task) -> dict:
    """Context for tasks/_rollouts_panel.html on the task page (trajectories as transcripts)."""
    return {}


urlpatterns = [
    path("analytics/", _todo, name="analytics"),
    path("rollouts/", _todo, name="rollouts"),
    path("rollouts/new/", _todo, name="rollout-new"),
]
