"""JSON API of review by several reviewers, mounted at /team: queues (review policies) and their
next task, consensus and adjudication, agreement and reviewers' figures, assignments, guidelines
and gold tasks. Reviewers review; admins and leads adjudicate, assign, set policies and edit
guidelines and gold (403 otherwise). Decisions themselves go through POST /tasks/{id}/decisions."""
from datetime import datetime

from django.shortcuts import get_object_or_404
from ninja import Field, Router, Schema, Status
from ninja.errors import HttpError

from facet_site.roles import can_lead, can_review

from . import agreement, assignment, consensus, gold, guidelines, review
from .filters import TaskFilter
from .models import ReviewPolicy, Task

team_router = Router(tags=["review by several reviewers"])


def _need(check, request, action: str):
    if not check(request.auth):
        who = "reviewers, leads and admins" if check is can_review else "admins and leads"
        raise HttpError(403, f"Only {who} may {action}.")


def _refused(exc: review.ReviewError):
    return HttpError(exc.status, str(exc))


class PolicyIn(Schema):
    name: str
    required_reviews: int = Field(2, ge=1, le=consensus.MAX_REQUIRED)
    gold_rate: float = Field(0.0, ge=0.0, le=0.5)
    run_id: int | None = None
    saved_view_id: int | None = None
    query: str = ""  # a task-list query string, when neither run nor saved view is given


class PolicyOut(Schema):
    id: int
    name: str
    required_reviews: int
    gold_rate: float
    run_id: int | None = None
    saved_view_id: int | None = None
    query: str


class ReviewOut(Schema):
    decision_id: int
    reviewer: str | None
    verdict: str
    reason: str


class ConsensusOut(Schema):
    task_id: int
    review_state: str
    required: int
    reviews: list[ReviewOut]
    agreed: bool | None = None
    adjudication: ReviewOut | None = None


class NextOut(Schema):
    task_id: int
    name: str
    content_hash: str
    required: int


class AdjudicationIn(Schema):
    verdict: str
    reason: str = ""
    comment: str = ""
    content_hash: str | None = None


class AssignIn(Schema):
    query: str = ""
    reviewers: list[str]
    mode: str = "named"  # named | round_robin
    priority: int = 0


class GuidelineIn(Schema):
    text: str
    note: str = ""


class GuidelineOut(Schema):
    number: int
    text: str
    note: str
    author: str | None = Field(None, alias="author.username")
    created_at: datetime


class GoldIn(Schema):
    task_id: int
    verdict: str
    reason: str = ""
    note: str = ""


class GoldOut(Schema):
    task_id: int
    content_hash: str
    verdict: str
    reason: str
    note: str


def _review(d) -> dict:
    return {"decision_id": d.pk, "reviewer": d.author.get_username() if d.author_id else None,
            "verdict": d.verdict, "reason": d.reason}


def _consensus(task: Task, user) -> dict:
    c = consensus.consensus_of(task)
    blind = consensus.is_blind(task, user)
    reviews = [d for d in c.reviews if not blind or d.author_id == user.pk]
    return {"task_id": task.pk, "review_state": task.review_state, "required": c.required,
            "reviews": [_review(d) for d in reviews], "agreed": None if blind else c.agreed,
            "adjudication": _review(c.adjudication) if c.adjudication else None}


@team_router.get("/policies", response=list[PolicyOut], summary="Queues that need several reviews per task")
def list_policies(request):
    return ReviewPolicy.objects.order_by("name")


@team_router.post("/policies", response={201: PolicyOut}, summary="Create or update (same name) a queue (admins, leads)")
def save_policy(request, payload: PolicyIn):
    _need(can_lead, request, "set the required reviews")
    try:
        policy = assignment.save_policy(user=request.auth, **payload.dict())
    except review.ReviewError as exc:
        raise _refused(exc) from None
    return Status(201, policy)


@team_router.post("/policies/{int:policy_id}/next", response={200: NextOut, 204: None},
                  summary="Take your lock on the next task of the queue that still needs your review; 204 when none")
def next_task(request, policy_id: int, after: int | None = None):
    _need(can_review, request, "take tasks from a queue")
    policy = get_object_or_404(ReviewPolicy, pk=policy_id)
    task = assignment.next_task(request.auth, policy, after=after)
    if task is None:
        return Status(204, None)
    return {"task_id": task.pk, "name": task.name, "content_hash": task.current_version.content_hash,
            "required": consensus.required_reviews(task)}


@team_router.delete("/tasks/{int:task_id}/lock", response={204: None}, summary="Let go of your lock in a queue")
def release(request, task_id: int):
    _need(can_review, request, "hold locks")
    assignment.release(request.auth, task_id)
    return Status(204, None)


@team_router.get("/tasks/{int:task_id}/consensus", response=ConsensusOut,
                 summary="Where the task's reviews stand (others' reviews hidden until yours is in)")
def task_consensus(request, task_id: int):
    task = get_object_or_404(Task.objects.select_related("current_version"), pk=task_id)
    return _consensus(task, request.auth)


@team_router.get("/adjudication", response=list[ConsensusOut], summary="Tasks whose reviews disagree")
def adjudication_queue(request):
    return [_consensus(t, request.auth) for t in consensus.adjudication_queue()[:500]]


@team_router.post("/tasks/{int:task_id}/adjudication", response={201: ConsensusOut},
                  summary="Settle a disagreement (admins, leads): recorded as an adjudication")
def adjudicate(request, task_id: int, payload: AdjudicationIn):
    _need(can_lead, request, "adjudicate")
    task = get_object_or_404(Task, pk=task_id)
    try:
        review.decide(task, user=request.auth, verdict=payload.verdict, reason=payload.reason, comment=payload.comment,
                      content_hash=payload.content_hash, adjudicate=True)
    except review.ReviewError as exc:
        raise _refused(exc) from None
    task = Task.objects.select_related("current_version").get(pk=task_id)
    return Status(201, _consensus(task, request.auth))


@team_router.get("/agreement", summary="Agreement overall, per reviewer pair, reason, category and task")
def agreement_figures(request, run: int | None = None, days: str = "all"):
    if days not in agreement.PERIODS:
        raise HttpError(422, f"days: expected one of {', '.join(agreement.PERIODS)}")
    from scenarios.models import SynthesisRun

    run_obj = get_object_or_404(SynthesisRun, pk=run) if run is not None else None
    return agreement.figures(run=run_obj, since=agreement.since(agreement.PERIODS[days]))


@team_router.get("/reviewers", summary="Per reviewer: throughput, median time, agreement with the final "
                                       "decision, share overturned, gold accuracy")
def reviewer_figures(request, days: str = "30"):
    if days not in agreement.PERIODS:
        raise HttpError(422, f"days: expected one of {', '.join(agreement.PERIODS)}")
    return agreement.reviewers(days=agreement.PERIODS[days])


@team_router.post("/assignments", response={201: dict}, summary="Assign a filtered set to reviewers (admins, leads)")
def assign(request, payload: AssignIn):
    _need(can_lead, request, "assign tasks")
    try:
        result = assignment.assign(TaskFilter.from_query(payload.query), user=request.auth, reviewers=payload.reviewers,
                                   mode=payload.mode, priority=payload.priority)
    except review.ReviewError as exc:
        raise _refused(exc) from None
    return Status(201, result)


@team_router.get("/guidelines", response=list[GuidelineOut], summary="Every version of the guidelines, newest first")
def list_guidelines(request):
    return guidelines.history()


@team_router.post("/guidelines", response={201: GuidelineOut}, summary="Publish a new version (admins, leads)")
def publish_guideline(request, payload: GuidelineIn):
    _need(can_lead, request, "edit the guidelines")
    try:
        return Status(201, guidelines.publish(user=request.auth, text=payload.text, note=payload.note))
    except review.ReviewError as exc:
        raise _refused(exc) from None


@team_router.get("/gold", response=list[GoldOut], summary="Gold tasks and their known verdicts (admins, leads)")
def list_gold(request):
    _need(can_lead, request, "see gold verdicts")
    return gold.gold_tasks()


@team_router.post("/gold", response={201: GoldOut}, summary="Mark a task as gold (admins, leads)")
def mark_gold(request, payload: GoldIn):
    _need(can_lead, request, "mark gold tasks")
    task = get_object_or_404(Task.objects.select_related("current_version"), pk=payload.task_id)
    try:
        return Status(201, gold.mark(task, user=request.auth, verdict=payload.verdict, reason=payload.reason,
                                     note=payload.note))
    except review.ReviewError as exc:
        raise _refused(exc) from None


@team_router.delete("/gold/{int:task_id}", response={204: None}, summary="Unmark a gold task (admins, leads)")
def unmark_gold(request, task_id: int):
    _need(can_lead, request, "mark gold tasks")
    gold.unmark(get_object_or_404(Task, pk=task_id), user=request.auth)
    return Status(204, None)


@team_router.get("/gold/accuracy", summary="Each reviewer's accuracy on gold tasks")
def gold_accuracy(request):
    return gold.accuracy()
