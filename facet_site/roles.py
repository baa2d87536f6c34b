"""Roles: admin, lead, reviewer, viewer (read-only), kept as Django groups so the admin can manage them.

A lead reviews like a reviewer and also adjudicates disagreements and assigns work (tasks.consensus,
tasks.assignment); admins may do everything a lead may."""
from functools import wraps

from django.core.exceptions import PermissionDenied

ADMIN, LEAD, REVIEWER, VIEWER = "admin", "lead", "reviewer", "viewer"
ROLES = (ADMIN, LEAD, REVIEWER, VIEWER)


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
    return role_of(user) in {ADMIN, LEAD, REVIEWER}


def can_lead(user) -> bool:
    """Adjudicate, assign, set required reviews: admins and leads."""
    return role_of(user) in {ADMIN, LEAD}


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
    return {"role": role, "can_review": role in {ADMIN, LEAD, REVIEWER}, "is_admin": role == ADMIN,
            "can_lead": role in {ADMIN, LEAD}}
