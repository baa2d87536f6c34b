"""Site-wide workflows: the role groups and the users that hold them."""
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction

from .roles import ADMIN, ROLES


def ensure_roles() -> dict[str, Group]:
    return {name: Group.objects.get_or_create(name=name)[0] for name in ROLES}


@transaction.atomic
def ensure_user(*, username: str, password: str, role: str, email: str = ""):
    """Create or update a user with exactly one role (used by the demo and by tests)."""
    if role not in ROLES:
        raise ValueError(f"role: expected one of {', '.join(ROLES)}, got {role!r}")
    groups = ensure_roles()
    User = get_user_model()
    user, _ = User.objects.get_or_create(username=username, defaults={"email": email})
    user.set_password(password)
    user.is_staff = role == ADMIN  # the Django admin is for admins only
    user.is_superuser = role == ADMIN
    user.save()
    user.groups.set([groups[role]])
    return user
