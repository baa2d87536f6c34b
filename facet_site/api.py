"""The JSON API root: one NinjaAPI, one router per app, token or session authentication."""
from django.contrib.admin.views.decorators import staff_member_required  # noqa: F401  (kept for admin-only routes)
from django.contrib.auth.decorators import login_required
from django.utils import timezone
from ninja import NinjaAPI
from ninja.security import HttpBearer, django_auth

from .models import ApiToken


class TokenAuth(HttpBearer):
    def authenticate(self, request, token):
        row = ApiToken.objects.active().select_related("user").filter(token_hash=ApiToken.hash(token)).first()
        if row is None or not row.user.is_active:
            return None
        now = timezone.now()
        # Writing on every request would make each GET a write; a minute's resolution is enough.
        if row.last_used_at is None or (now - row.last_used_at).total_seconds() > 60:
            ApiToken.objects.filter(pk=row.pk).update(last_used_at=now)
        request.user = row.user
        return row.user


api = NinjaAPI(
    title="facet API",
    version="1",
    description="Skills, taxonomy and ingestion; synthesis runs and the scenario–skill repository. Authenticate with `Authorization: Bearer <token>`; "
    "create a token on the API tokens page.",
    auth=[TokenAuth(), django_auth],
    docs_decorator=login_required,
    urls_namespace="api",
)

from scenarios.api import router as scenarios_router  # noqa: E402
from skills.api import router as skills_router  # noqa: E402
from tasks.api import router as tasks_router  # noqa: E402
from tasks.dataset_api import router as dataset_router  # noqa: E402
from tasks.review_api import router as review_router  # noqa: E402
from tasks.rollout_api import router as rollout_router  # noqa: E402

api.add_router("/", skills_router)
api.add_router("/", scenarios_router)
api.add_router("/", tasks_router)
api.add_router("/", review_router)
api.add_router("/", rollout_router)
api.add_router("/", dataset_router)
