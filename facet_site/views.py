"""Site-wide pages: the home page with the pipeline at a glance, and a user's API tokens."""
from django.contrib import messages
from django.db.models import Count
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from skills.models import IngestBatch, Skill, SkillStatus, Verdict

from .models import ApiToken
from .roles import is_admin


def home(request):
    current = Skill.objects.current()
    counts = dict(current.values_list("status").annotate(n=Count("id")))
    reasons = (
        Verdict.objects.filter(skill__is_current=True).values("kind").annotate(n=Count("skill", distinct=True)).order_by("-n")
    )
    return render(request, "home.html", {
        "total": sum(counts.values()),
        "accepted": counts.get(SkillStatus.ACCEPTED, 0),
        "rejected": counts.get(SkillStatus.REJECTED, 0),
        "reasons": [(Verdict(kind=r["kind"]).get_kind_display(), r["kind"], r["n"]) for r in reasons],
        "batches": IngestBatch.objects.select_related("created_by")[:8],
    })


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
