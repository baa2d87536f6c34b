"""(scaffold — the review helper replaces this) Review: decisions, the queue, bulk actions, the
audit log and the overview. URL names are reserved here so other pages can link to them."""
from django.http import HttpResponse
from django.urls import path


def _todo(request, *args, **kwargs):
    return HttpResponse("not built yet", status=501)


def panel_context(request, task) -> dict:
    """Context for tasks/_review_panel.html on the task page (decision form, review history)."""
    return {}


urlpatterns = [
    path("queue/", _todo, name="queue"),
    path("overview/", _todo, name="overview"),
    path("bulk/", _todo, name="bulk"),
    path("audit/", _todo, name="audit"),
    path("<int:task_id>/decide/", _todo, name="decide"),
]
