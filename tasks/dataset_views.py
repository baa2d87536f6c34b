"""(scaffold — the datasets helper replaces this) Exports and task imports. URL names are
reserved here so other pages can link to them."""
from django.http import HttpResponse
from django.urls import path


def _todo(request, *args, **kwargs):
    return HttpResponse("not built yet", status=501)


urlpatterns = [
    path("exports/", _todo, name="exports"),
    path("exports/new/", _todo, name="export-new"),
    path("imports/", _todo, name="imports"),
]
