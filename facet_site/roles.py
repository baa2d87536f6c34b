"""Roles: admin, reviewer, viewer (read-only), kept as Django groups so the admin can manage them."""
from functools import wraps

from django.core.exceptions import PermissionDenied

ADMIN, REVIEWER, VIEWER = "admin", "reviewer", "viewer"
ROLES = (ADMIN, REVIEWER, VIEWER)


def role_of(user) -> str | None:
    if not user or not user.is_authenticated:
        return None
    if user.is_superuser:
        return ADMIN
    names = {g.name for g in user.groups.all()}
    for role in ROLES:
        if role in names:
            return role
    return VIEWER if user.is_active else None


def is_admin(user) -> bool:
    return role_of(user) == ADMIN


def can_review(user) -> bool:
    return role_of(user) in {ADMIN, REVIEWER}


def require(check):
    """View decorator: 403 unless `check(request.user)`; login itself is enforced by middleware."""

    def decorator(view):
        @wraps(view)
        def wrapped(request, *args, **kwargs):
            if not check(request.user):
                raise PermissionDenied("Your role does not allow this action.")
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


def context_processor(request):
    user = getattr(request, "user", None)
    role = role_of(user)
    return {"role": role, "can_review": role in {ADMIN, REVIEWER}, "is_admin": role == ADMIN}
