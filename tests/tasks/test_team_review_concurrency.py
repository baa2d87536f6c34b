"""Several reviewers at the same moment on PostgreSQL: two and three reviewers deciding one
two-review task at once, and three racing for the locks of a task that needs two reviews. Each
thread has its own database connection and goes through the services as a request would."""
import pytest

from facet_site.services import ensure_user
from tasks import assignment, consensus, review
from tasks.models import AuditEvent, Decision, ReviewState, Task, TeamLock
from tests.tasks.review_records import _in_threads, make_run, make_task, postgres_only

pytestmark = [postgres_only, pytest.mark.django_db(transaction=True)]


def _setup(n):
    admin = ensure_user(username="race-admin", password="race-admin-password-1", role="admin")
    run = make_run("race")
    policy = assignment.save_policy(user=admin, name="race", required_reviews=2, run_id=run.pk)
    reviewers = [ensure_user(username=f"racer-{i}", password="racer-password-1", role="reviewer") for i in range(n)]
    return run, policy, reviewers


def _summary_is_the_consensus(task):
    task = Task.objects.select_related("current_version").get(pk=task.pk)
    assert task.review_state == consensus.consensus_of(task).state
    events = AuditEvent.objects.filter(task=task, action="decide").order_by("id")
    # serialised by the task's row lock: each event starts where the previous one ended
    for prev, nxt in zip(events, events[1:]):
        assert nxt.before["reviews"] == prev.after["reviews"]
        assert nxt.before["decision"] == prev.after["decision"]
    return task


def test_two_reviewers_approving_at_once_approve_the_task():
    run, _, reviewers = _setup(2)
    task = make_task(run)
    _, errors = _in_threads(2, lambda i: review.decide(task.pk, user=reviewers[i], verdict="approve"))
    assert not errors
    task = _summary_is_the_consensus(task)
    assert task.review_state == ReviewState.APPROVED  # neither transaction saw "1 of 2" last


def test_three_reviewers_deciding_at_once_count_the_first_two():
    run, _, reviewers = _setup(3)
    task = make_task(run)
    verdicts = ["approve", "reject", "approve"]
    _, errors = _in_threads(3, lambda i: review.decide(task.pk, user=reviewers[i], verdict=verdicts[i],
                                                       reason="flaky" if verdicts[i] == "reject" else ""))
    assert not errors
    assert Decision.objects.filter(task=task).count() == 3
    task = _summary_is_the_consensus(task)
    first_two = list(Decision.objects.filter(task=task).order_by("id")[:2])
    expected = ReviewState.APPROVED if {d.verdict for d in first_two} == {"approve"} else ReviewState.DISPUTED
    assert task.review_state == expected


def test_three_reviewers_racing_for_a_two_review_task_leave_one_without_it():
    run, policy, reviewers = _setup(3)
    task = make_task(run)
    results, errors = _in_threads(3, lambda i: assignment.next_task(reviewers[i], policy))
    assert not errors
    got = [t.pk for t in results if t is not None]
    assert got == [task.pk, task.pk]
    assert TeamLock.objects.filter(task=task).count() == 2
