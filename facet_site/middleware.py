"""Request middleware: a login for every page, the JSON API authenticating itself."""
from django.contrib.auth.middleware import LoginRequiredMiddleware


class FacetLoginRequiredMiddleware(LoginRequiredMiddleware):
    """Every page needs a login. The JSON API authenticates itself (token or session) and answers
    401 instead of redirecting; its docs page is a page like any other and needs a login."""

    def process_view(self, request, view_func, view_args, view_kwargs):
        path = request.path_info
        if path.startswith("/api/") and not path.startswith("/api/docs"):
            return None
        return super().process_view(request, view_func, view_args, view_kwargs)
