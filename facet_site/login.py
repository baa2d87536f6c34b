"""Login throttling: failed password logins are counted per username and per client address in the
cache (shared by every web process), and past settings.FACET_LOGIN_MAX_FAILURES (per user) or
FACET_LOGIN_MAX_FAILURES_PER_IP (per address) within FACET_LOGIN_WINDOW_S no password is even
checked until the window passes. The backend guards every password form (the login page and the
admin's); the login page also says why it refuses."""
import hashlib

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.backends import ModelBackend
from django.core.cache import cache
from django.core.exceptions import PermissionDenied


def client_address(request) -> str:
    # REMOTE_ADDR is the proxy's address behind one; the proxy's own header is trusted only when
    # the operator says there is a proxy (FACET_TRUSTED_PROXY_HEADER, e.g. HTTP_X_REAL_IP).
    header = settings.FACET_TRUSTED_PROXY_HEADER
    if header and request.META.get(header):
        return request.META[header].split(",")[0].strip()
    return request.META.get("REMOTE_ADDR", "") or "unknown"


def _keys(request, username: str) -> list[tuple[str, int]]:
    user = hashlib.sha256((username or "").strip().lower().encode()).hexdigest()[:32]
    keys = [(f"login-failures:user:{user}", settings.FACET_LOGIN_MAX_FAILURES)]
    if request is not None:
        keys.append((f"login-failures:ip:{client_address(request)}", settings.FACET_LOGIN_MAX_FAILURES_PER_IP))
    return keys


def is_throttled(request, username: str) -> bool:
    return any((cache.get(key) or 0) >= limit for key, limit in _keys(request, username))


def _record_failure(request, username: str) -> None:
    for key, _ in _keys(request, username):
        if cache.add(key, 1, settings.FACET_LOGIN_WINDOW_S):
            continue
        try:
            cache.incr(key)
        except ValueError:  # expired between add and incr
            cache.set(key, 1, settings.FACET_LOGIN_WINDOW_S)


class ThrottledModelBackend(ModelBackend):
    """Django's username/password check, refused outright while the user or the address is throttled."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        username = username if username is not None else kwargs.get("username", "")
        if is_throttled(request, username or ""):
            if request is not None:
                request.facet_login_throttled = True
            raise PermissionDenied("too many failed logins")  # stops authenticate() at once
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is None:
            _record_failure(request, username or "")
        else:
            cache.delete(_keys(request, username or "")[0][0])
        return user


class ThrottledLoginView(auth_views.LoginView):
    """The login page, answering 429 with a plain reason while logins are throttled."""

    def form_invalid(self, form):
        if not getattr(self.request, "facet_login_throttled", False):
            return super().form_invalid(form)
        minutes = max(1, settings.FACET_LOGIN_WINDOW_S // 60)
        return self.render_to_response(self.get_context_data(form=form, throttled_minutes=minutes), status=429)
