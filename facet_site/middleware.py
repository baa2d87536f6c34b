"""Request middleware: a login for every page, the JSON API authenticating itself, a backstop that
refuses input no view can store (NUL bytes, integers past 64 bits) with a 400, and the
Content-Security-Policy header."""
import json
from urllib.parse import unquote_to_bytes

from django.conf import settings
from django.contrib.auth.middleware import LoginRequiredMiddleware
from django.http import HttpResponse, JsonResponse

from .lib.safe_input import MAX_INT, bad_json_value

class FacetLoginRequiredMiddleware(LoginRequiredMiddleware):
    """Every page needs a login. The JSON API authenticates itself (token or session) and answers
    401 instead of redirecting; its docs page is a page like any other and needs a login."""

    def process_view(self, request, view_func, view_args, view_kwargs):
        path = request.path_info
        if path.startswith("/api/") and not path.startswith("/api/docs"):
            return None
        return super().process_view(request, view_func, view_args, view_kwargs)


# every JSON body of the API is an object (422, as the API's other validation errors)
NOT_AN_OBJECT = "body: expected a JSON object"


class BadInputMiddleware:
    """PostgreSQL stores neither a NUL in text nor an integer past 64 bits; SQLite and Python take
    both, so without this a bad value would fail only in production, as a 500. A backstop, not the
    check: forms and schemas refuse bad text and numbers themselves, naming the field. Whatever
    reaches a view past them with a NUL byte in the query string, a form or a JSON body, or an
    integer past 64 bits in the query string or JSON, is answered 400 here instead of failing in
    the database. Multipart forms are checked in process_view (see there)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        problem = self._problem(request)
        if problem == NOT_AN_OBJECT:
            return JsonResponse({"detail": problem}, status=422)
        if problem:
            if request.path_info.startswith("/api/"):
                return JsonResponse({"detail": problem}, status=400)
            return HttpResponse(f"Bad request: {problem}", status=400, content_type="text/plain; charset=utf-8")
        return self.get_response(request)

    def process_view(self, request, view_func, view_args, view_kwargs):
        # A multipart form's fields are read here, where CSRF checking reads them anyway, and not
        # for views exempt from it: those (the API, uploads) read their bodies themselves, some
        # with streaming upload handlers that must be in place before the body is parsed.
        if (request.method == "POST" and (request.content_type or "") == "multipart/form-data"
                and not getattr(view_func, "csrf_exempt", False)):
            problem = _bad_form(request)
            if problem:
                return HttpResponse(f"Bad request: {problem}", status=400, content_type="text/plain; charset=utf-8")
        return None

    def _problem(self, request) -> str | None:
        raw_query = request.META.get("QUERY_STRING", "")
        if "%00" in raw_query or b"\x00" in unquote_to_bytes(raw_query.replace("+", " ")):
            for key, values in request.GET.lists():
                if "\x00" in key or any("\x00" in v for v in values):
                    return f"{key.replace(chr(0), '')}: text must not contain NUL bytes"
            return "the query string must not contain NUL bytes"
        for key, values in request.GET.lists():
            # an id or a page number no database column holds (past 64 bits)
            if any(_out_of_range(v) for v in values):
                return f"{key}: number out of range"
        if request.method not in ("POST", "PUT", "PATCH"):
            return None
        content_type = request.content_type or ""
        if content_type == "application/x-www-form-urlencoded":
            return _bad_form(request)
        elif content_type == "application/json" or content_type.endswith("+json"):
            if not request.body:
                return None
            try:
                body = json.loads(request.body)
            except (ValueError, UnicodeDecodeError):
                return None  # not JSON: the API's own parser answers it
            # django-ninja reads a list or a string given for an object of optional fields as "no
            # fields given" and would act on its defaults (an export of every approved task)
            if request.path_info.startswith("/api/") and not isinstance(body, dict):
                return NOT_AN_OBJECT
            return bad_json_value(body)
        return None


def _bad_form(request) -> str | None:
    for key, values in request.POST.lists():
        if "\x00" in key or any("\x00" in v for v in values):
            return f"{key.replace(chr(0), '')}: text must not contain NUL bytes"
    return None


def _out_of_range(value: str) -> bool:
    digits = value.strip().lstrip("+-")
    return len(digits) > 18 and digits.isascii() and digits.isdigit() and abs(int(digits)) > MAX_INT


class ContentSecurityPolicyMiddleware:
    """Sets settings.FACET_CSP as the Content-Security-Policy of every response that has none:
    scripts, styles, images and connections from our own origin only, so no inline script runs
    and no reviewer's browser fetches what a skill or a task points at."""

    def __init__(self, get_response):
        self.get_response = get_response
        self.policy = settings.FACET_CSP

    def __call__(self, request):
        response = self.get_response(request)
        if self.policy and "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = self.policy
        return response
