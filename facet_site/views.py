"""Site-wide pages: the home page with the state of the work at a glance (skills, the task funnel,
tasks waiting for review, recent validations, workers and queues), and a user's API tokens."""
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_not_required
from django.http import HttpResponsePermanentRedirect
from django.templatetags.static import static
from django.db.models import Count
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from skills.models import IngestBatch, Skill, SkillStatus, Verdict
from tasks import charts as task_charts
from tasks import review_numbers
from tasks.models import ReviewState, Task, TaskStatus, Validation

from . import stamps, workers
from .models import ApiToken
from .roles import is_admin

RECENT = 8


def home(request):
    current = Skill.objects.current()
    counts = dict(current.values_list("status").annotate(n=Count("id")))
    reasons = (
        Verdict.objects.filter(skill__is_current=True).values("kind").annotate(n=Count("skill", distinct=True)).order_by("-n")
    )
    funnel = stamps.cached("review-funnel", stamps.TASKS_STAMP, lambda: review_numbers.funnel(None), None)
    waiting = Task.objects.filter(status=TaskStatus.VALIDATED, review_state=ReviewState.UNREVIEWED)
    return render(request, "home.html", {
        "total": sum(counts.values()),
        "accepted": counts.get(SkillStatus.ACCEPTED, 0),
        "rejected": counts.get(SkillStatus.REJECTED, 0),
        "reasons": [(Verdict(kind=r["kind"]).get_kind_display(), r["kind"], r["n"]) for r in reasons],
        "batches": IngestBatch.objects.select_related("created_by")[:8],
        "funnel": funnel,
        "funnel_chart": task_charts.funnel_chart(funnel) if any(r["count"] for r in funnel) else None,
        "waiting_count": waiting.count(),
        "waiting": waiting.order_by("id").only("id", "name", "n_tests")[:RECENT],
        "validations": (Validation.objects.select_related("version__task").order_by("-id")
                        .only("id", "status", "accepted", "failure", "created_at", "finished_at", "recheck_id",
                              "version__number", "version__task__id", "version__task__name")[:RECENT]),
        "failed_tasks": (Task.objects.filter(status__in=[TaskStatus.FAILED, TaskStatus.DISCARDED])
                         .order_by("-updated_at").only("id", "name", "status", "discard_reason", "message",
                                                       "updated_at")[:5]),
        "workers": workers.seen(within_s=15 * 60),
        "worker_seen_s": int(settings.FACET_WORKER_SEEN_S),
        "queues": workers.queue_depths(),
    })


@login_not_required
def favicon(request):
    """Browsers ask for /favicon.ico whatever the page says; the icon is a static SVG."""
    return HttpResponsePermanentRedirect(static("favicon.svg"))


def tokens(request):
    new_secret = None
    if request.method == "POST":
        token, new_secret = ApiToken.issue(user=request.user, name=request.POST.get("name", ""))
        messages.success(request, f"Token “{token.name}” created. Copy it now: it is not shown again.")
    visible = ApiToken.objects.select_related("user")
    if not is_admin(request.user):
        visible = visible.filter(user=request.user)
    return render(request, "tokens.html", {"tokens": visible, "new_secret": new_secret})


@require_POST
def revoke_token(request, token_id: int):
    qs = ApiToken.objects.all() if is_admin(request.user) else ApiToken.objects.filter(user=request.user)
    token = get_object_or_404(qs, pk=token_id)
    token.revoke()
    messages.success(request, f"Token “{token.name}” revoked.")
    return redirect("tokens")
