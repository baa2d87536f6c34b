"""Review decisions: bound to a version's hash, the audit log and undo, and bulk decisions with
confirmation, through the review service. Records are made through the ORM (no Docker, no LLM)."""
import pytest

from tasks import review, summary
from tasks.filters import TaskFilter
from tasks.models import AuditEvent, Decision, ReviewState, Step, TaskStatus
from tests.tasks.review_records import XSS, add_version, assert_summary_agrees, last_event, make_task, refreshed

pytestmark = pytest.mark.django_db


# --- decisions ------------------------------------------------------------------------------------


def test_a_decision_is_bound_to_the_current_versions_hash_and_sets_the_review_state(task, users):
    decision = review.decide(task, user=users["reviewer"], verdict="approve", comment="clear and fair")
    assert decision.content_hash == task.current_version.content_hash and decision.version == task.current_version
    assert decision.author == users["reviewer"] and decision.created_at is not None
    assert refreshed(task).review_state == ReviewState.APPROVED


def test_reject_and_needs_fix_need_a_reason_from_the_taxonomy(task, users):
    with pytest.raises(review.InvalidDecision, match="reason: choose why"):
        review.decide(task, user=users["reviewer"], verdict="reject")
    with pytest.raises(review.InvalidDecision, match="reason: choose why"):
        review.decide(task, user=users["reviewer"], verdict="needs_fix", comment="tests too strict")
    with pytest.raises(review.InvalidDecision, match="reason: expected one of"):
        review.decide(task, user=users["reviewer"], verdict="reject", reason="boring")
    with pytest.raises(review.InvalidDecision, match="verdict: expected one of"):
        review.decide(task, user=users["reviewer"], verdict="maybe")
    assert not Decision.objects.exists()
    review.decide(task, user=users["reviewer"], verdict="needs_fix", reason="too_strict")
    assert refreshed(task).review_state == ReviewState.NEEDS_FIX


def test_a_task_without_a_version_cannot_be_decided(run, users):
    task = make_task(run, status=TaskStatus.FAILED, version=False)
    with pytest.raises(review.ReviewError, match="has no version yet"):
        review.decide(task, user=users["admin"], verdict="reject", reason="infeasible")


def test_approving_a_task_that_is_not_validated_is_refused_unless_an_admin_forces_it(run, users):
    task = make_task(run, status=TaskStatus.DISCARDED, accepted=False)
    with pytest.raises(review.ReviewError, match="discarded, not validated"):
        review.decide(task, user=users["reviewer"], verdict="approve")
    with pytest.raises(review.ReviewError, match="Only an admin may force"):
        review.decide(task, user=users["reviewer"], verdict="approve", force=True)
    # confirming the pipeline's rejection is allowed
    review.decide(task, user=users["reviewer"], verdict="reject", reason="infeasible")
    assert refreshed(task).review_state == ReviewState.REJECTED
    review.decide(task, user=users["admin"], verdict="approve", force=True, comment="the verifier was wrong")
    assert refreshed(task).review_state == ReviewState.APPROVED
    assert AuditEvent.objects.filter(action="decide").order_by("-id").first().after["forced"] is True


def test_viewers_cannot_decide(task, users):
    with pytest.raises(review.NotAllowed):
        review.decide(task, user=users["viewer"], verdict="approve")


def test_a_decision_on_a_version_the_reviewer_did_not_see_is_refused(task, users):
    seen = task.current_version.content_hash
    add_version(task)
    with pytest.raises(review.ReviewError, match=r"newer version \(v2\)"):
        review.decide(task, user=users["reviewer"], verdict="approve", content_hash=seen)


def test_a_new_version_reopens_review(task, users):
    review.decide(task, user=users["reviewer"], verdict="approve")
    assert refreshed(task).review_state == ReviewState.APPROVED
    # a repair moves the task to a new version the way construction does (Task.move_to)
    v2 = add_version(task, current=False)
    task.move_to(Step.DONE, status=TaskStatus.VALIDATED, current_version=v2)
    task = refreshed(task)
    assert task.current_version == v2 and task.review_state == ReviewState.UNREVIEWED
    assert summary.standing_decision(task) is None
    # the approval of v1 stays in the history, marked as on an older version
    [old] = review.history(task)
    assert old.verdict == "approve" and not old.current


def test_decisions_are_append_only_and_the_newest_one_stands(task, users):
    review.decide(task, user=users["reviewer"], verdict="reject", reason="flaky")
    review.decide(task, user=users["admin"], verdict="needs_fix", reason="under_specified", comment="say the path")
    review.decide(task, user=users["reviewer"], verdict="approve")
    assert Decision.objects.filter(task=task).count() == 3
    assert refreshed(task).review_state == ReviewState.APPROVED
    assert_summary_agrees(task)
    assert [d.verdict for d in review.history(refreshed(task))] == ["approve", "needs_fix", "reject"]


def test_every_decision_writes_an_audit_event_with_before_and_after(task, users):
    first = review.decide(task, user=users["reviewer"], verdict="reject", reason="leaks_answer", comment=XSS)
    review.decide(task, user=users["reviewer"], verdict="approve", comment="fixed by hand")
    events = list(AuditEvent.objects.filter(task=task).order_by("id"))
    assert [e.action for e in events] == ["decide", "decide"]
    assert events[0].object_id == str(first.pk) and events[0].actor == users["reviewer"]
    assert events[0].before["review_state"] == "unreviewed" and events[0].before["verdict"] is None
    assert events[0].after.items() >= {"review_state": "rejected", "verdict": "reject", "reason": "leaks_answer",
                                       "comment": XSS}.items()
    assert events[1].before["review_state"] == "rejected" and events[1].before["reason"] == "leaks_answer"
    assert events[1].after["review_state"] == "approved" and events[1].after["comment"] == "fixed by hand"


# --- undo -------------------------------------------------------------------------------------------


def test_undo_returns_the_state_to_what_it_was_and_cannot_be_repeated(task, users):
    review.decide(task, user=users["reviewer"], verdict="approve")
    rejection = review.decide(task, user=users["reviewer"], verdict="reject", reason="duplicate")
    event = last_event(task)
    compensation = review.undo(event, user=users["reviewer"])
    assert compensation.undoes == event and compensation.action == "undo"
    assert compensation.before["review_state"] == "rejected" and compensation.after["review_state"] == "approved"
    withdrawal = Decision.objects.get(withdraws=rejection)
    assert (withdrawal.verdict, withdrawal.reason, withdrawal.comment) == ("reject", "duplicate", "undo")
    assert refreshed(task).review_state == ReviewState.APPROVED
    assert_summary_agrees(task)
    assert Decision.objects.filter(task=task).count() == 3  # nothing deleted
    with pytest.raises(review.ReviewError, match="already been undone"):
        review.undo(AuditEvent.objects.get(pk=event.pk), user=users["admin"])
    with pytest.raises(review.ReviewError, match="an undo cannot be undone"):
        review.undo(compensation, user=users["reviewer"])


def test_undoing_the_only_decision_leaves_the_task_unreviewed(task, users):
    review.decide(task, user=users["reviewer"], verdict="approve")
    review.undo(last_event(task), user=users["reviewer"])
    assert refreshed(task).review_state == ReviewState.UNREVIEWED
    assert summary.standing_decision(refreshed(task)) is None


def test_reviewers_undo_only_their_own_entries_and_admins_any(task, users, django_user_model):
    from facet_site.services import ensure_user

    other = ensure_user(username="other-reviewer", password="other-password-1", role="reviewer")
    review.decide(task, user=other, verdict="approve")
    event = last_event(task)
    with pytest.raises(review.NotAllowed, match="only their own"):
        review.undo(event, user=users["reviewer"])
    with pytest.raises(review.NotAllowed):
        review.undo(event, user=users["viewer"])
    review.undo(event, user=users["admin"])
    assert refreshed(task).review_state == ReviewState.UNREVIEWED


# --- bulk -------------------------------------------------------------------------------------------


def test_a_bulk_plan_says_what_would_be_decided_and_what_is_skipped_and_why(selection, run, users):
    review.decide(selection["validated"][0], user=users["reviewer"], verdict="approve")
    plan = review.plan_bulk(TaskFilter.from_query(f"run={run.pk}"), verdict="approve")
    assert plan.total == 5 and sorted(plan.eligible) == sorted(t.pk for t in selection["validated"][1:])
    skipped = {s["why"]: s["count"] for s in plan.skipped}
    assert skipped == {"no version yet: nothing to decide on": 1,
                       "not validated: only validated tasks can be approved": 1,
                       "already approved on their current version": 1}
    reject = review.plan_bulk(TaskFilter.from_query(f"run={run.pk}"), verdict="reject")
    assert len(reject.eligible) == 4  # the discarded task may be rejected


def test_a_bulk_decision_writes_one_bulk_decision_and_event_per_task_and_a_summary(selection, run, users):
    task_filter = TaskFilter.from_query(f"run={run.pk}")
    result = review.apply_bulk(task_filter, user=users["reviewer"], verdict="reject", reason="duplicate",
                               comment="same as run 1", expected=4, chunk_size=2)
    assert result.decided == 4 and sum(result.skipped.values()) == 1
    decisions = Decision.objects.filter(task__run=run)
    assert decisions.count() == 4 and all(d.bulk for d in decisions)
    per_task = AuditEvent.objects.filter(action="decide", after__bulk_id=result.event.after["bulk_id"])
    assert per_task.count() == 4
    assert result.event.action == "bulk_decide" and result.event.before["filter"] == f"run={run.pk}"
    assert result.event.after["decided"] == 4
    for t in selection["validated"]:
        assert refreshed(t).review_state == ReviewState.REJECTED
        assert_summary_agrees(t)
    # undoing the summary entry undoes every decision it made
    review.undo(result.event, user=users["reviewer"])
    assert all(refreshed(t).review_state == ReviewState.UNREVIEWED for t in selection["validated"])
    assert AuditEvent.objects.filter(action="undo", undoes__in=per_task).count() == 4
    with pytest.raises(review.ReviewError, match="already been undone"):
        review.undo(AuditEvent.objects.get(pk=result.event.pk), user=users["admin"])


def test_a_bulk_decision_refuses_when_the_selection_changed_since_the_confirmation(selection, run, users):
    task_filter = TaskFilter.from_query(f"run={run.pk}")
    plan = review.plan_bulk(task_filter, verdict="approve")
    make_task(run, name="Arrived meanwhile")
    with pytest.raises(review.ReviewError, match="selection changed"):
        review.apply_bulk(task_filter, user=users["reviewer"], verdict="approve", expected=len(plan.eligible))
    assert not Decision.objects.exists()
    with pytest.raises(review.NotAllowed):
        review.apply_bulk(task_filter, user=users["viewer"], verdict="approve")
    # a mistyped parameter is ignored by the filter, which would widen the selection: refused
    with pytest.raises(review.InvalidDecision, match="selection has errors"):
        review.apply_bulk(TaskFilter.from_query(f"run={run.pk}&status=validatd"), user=users["reviewer"], verdict="reject",
                          reason="duplicate")
    assert not Decision.objects.exists()
