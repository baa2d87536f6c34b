"""The JSON API root: one NinjaAPI with token or session authentication, and one router per resource
mounted under its own prefix (each app's api.py holds its routers)."""
from django.contrib.auth.decorators import login_required
from django.utils import timezone
from ninja import NinjaAPI, Swagger
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
    # Swagger UI from django-ninja's own static files ("ninja" is an installed app), and no badge
    # fetched from the public validator: the docs page contacts no third party
    docs=Swagger(settings={"validatorUrl": None}),
    urls_namespace="api",
)

from scenarios import api as scenarios_api  # noqa: E402
from skills import api as skills_api  # noqa: E402
from tasks import analytics_api, dataset_api, review_api, rollout_api, team_review_api  # noqa: E402
from tasks import api as tasks_api  # noqa: E402

api.add_router("/skills", skills_api.skills_router)
api.add_router("/categories", skills_api.categories_router)
api.add_router("/runs", scenarios_api.runs_router)
api.add_router("/pairs", scenarios_api.pairs_router)
api.add_router("/scenarios", scenarios_api.scenarios_router)
api.add_router("/tasks", tasks_api.tasks_router)
api.add_router("/tasks", review_api.task_review_router)  # decisions, bulk decisions and locks on tasks
api.add_router("/funnel", tasks_api.funnel_router)
api.add_router("/audit", review_api.audit_router)
api.add_router("/queue", review_api.queue_router)
api.add_router("/team", team_review_api.team_router)  # several reviewers: queues, consensus, agreement, gold
api.add_router("/rollouts", rollout_api.batches_router)
api.add_router("/trajectories", rollout_api.trajectories_router)
api.add_router("/analytics", analytics_api.analytics_router)
api.add_router("/exports", dataset_api.exports_router)
api.add_router("/imports", dataset_api.imports_router)
