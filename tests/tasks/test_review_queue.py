"""The review queue: locks held by one reviewer and reclaimed only after the timeout, moving
through the queue, and reviewers racing for the queue and deciding at once on PostgreSQL. Records
are made through the ORM (no Docker, no LLM)."""
from datetime import timedelta

import pytest
from django.utils import timezone

from tasks import review, review_queue
from tasks.filters import TaskFilter
from tasks.models import AuditEvent, Decision, ReviewLock, TaskStatus
from tests.tasks.review_records import (
    _in_threads,
    assert_summary_agrees,
    last_event,
    make_run,
    make_task,
    postgres_only,
    refreshed,
)

pytestmark = pytest.mark.django_db


# --- locks and the queue -----------------------------------------------------------------------------


def test_a_lock_is_held_by_one_reviewer_and_reclaimed_only_after_the_timeout(task, users, settings):
    settings.FACET_REVIEW_LOCK_MINUTES = 15
    assert review_queue.take_lock(task.pk, users["reviewer"])
    assert not review_queue.take_lock(task.pk, users["admin"])
    assert review_queue.take_lock(task.pk, users["reviewer"])  # renewing one's own
    ReviewLock.objects.filter(task=task).update(acquired_at=timezone.now() - timedelta(minutes=14))
    assert not review_queue.take_lock(task.pk, users["admin"])
    ReviewLock.objects.filter(task=task).update(acquired_at=timezone.now() - timedelta(minutes=16))
    assert review_queue.lock_of(task) is None  # stale: nobody is shown as reviewing it
    assert review_queue.take_lock(task.pk, users["admin"])
    assert ReviewLock.objects.get(task=task).holder == users["admin"]
    event = last_event(action="reclaim_lock")
    assert event.before["holder"] == "reviewer-user" and event.after["holder"] == "admin-user"
    settings.FACET_REVIEW_LOCK_MINUTES = 60  # the timeout comes from settings
    ReviewLock.objects.filter(task=task).update(acquired_at=timezone.now() - timedelta(minutes=30))
    assert not review_queue.take_lock(task.pk, users["reviewer"])


def test_a_reclaim_never_steals_a_lock_renewed_after_it_was_read(task, users, monkeypatch):
    old = timezone.now() - timedelta(hours=1)
    ReviewLock.objects.create(task=task, holder=users["reviewer"], acquired_at=old)
    real_filter = ReviewLock.objects.filter
    calls = []

    def renew_between_read_and_write(*args, **kwargs):
        qs = real_filter(*args, **kwargs)
        if "acquired_at" in kwargs and not calls:  # the conditional write: renew just before it
            calls.append(1)
            real_filter(task=task).update(acquired_at=timezone.now())
        return qs

    monkeypatch.setattr(ReviewLock.objects, "filter", renew_between_read_and_write)
    assert not review_queue.take_lock(task.pk, users["admin"])
    monkeypatch.undo()
    assert calls == [1]
    assert ReviewLock.objects.get(task=task).holder == users["reviewer"]


def test_two_reviewers_never_get_the_same_task_from_the_queue(run, users):
    tasks = [make_task(run, name=f"T{i}") for i in range(3)]
    queue = review_queue.queue_filter("")
    first = review_queue.advance(users["reviewer"], queue)
    second = review_queue.advance(users["admin"], queue)
    assert first is not None and second is not None and first.pk != second.pk
    assert first.pk == tasks[-1].pk  # the default order: newest first
    # a reload resumes the reviewer's own task instead of taking another
    assert review_queue.advance(users["reviewer"], queue).pk == first.pk
    third = review_queue.advance(users["reviewer"], queue, current=first.pk)
    assert third.pk not in (first.pk, second.pk)
    assert not ReviewLock.objects.filter(task=first, holder=users["reviewer"]).exists()  # one task at a time
    # the task the reviewer let go of is free again; the one the reviewer holds is not
    assert review_queue.advance(users["admin"], queue, current=second.pk).pk == first.pk
    assert review_queue.advance(users["admin"], queue, current=first.pk).pk == second.pk


def test_the_queue_moves_forward_and_back_and_says_where_the_reviewer_is(run, users):
    a, b, c = (make_task(run, name=n) for n in ("A", "B", "C"))
    queue = TaskFilter.from_query("status=validated&review=unreviewed&sort=id")
    ids = review_queue.queue_ids(queue)
    assert ids == [a.pk, b.pk, c.pk] and review_queue.position(b.pk, ids) == (2, 3)
    assert review_queue.advance(users["reviewer"], queue, current=a.pk).pk == b.pk
    assert review_queue.advance(users["reviewer"], queue, current=b.pk, direction="previous").pk == a.pk
    review_queue.take_lock(b.pk, users["admin"])
    assert review_queue.advance(users["reviewer"], queue, current=a.pk).pk == c.pk  # b is someone else's
    assert review_queue.advance(users["reviewer"], queue, current=a.pk, direction="previous") is None
    # after a decision takes a task out of the queue, "next" continues from where it was
    before = review_queue.queue_ids(queue)
    review.decide(c, user=users["reviewer"], verdict="approve")
    assert review_queue.position(c.pk, review_queue.queue_ids(queue)) == (None, 2)
    assert review_queue.advance(users["reviewer"], queue, current=c.pk, before=before).pk == a.pk  # wraps, b is locked


def test_the_default_queue_is_validated_unreviewed_tasks(run, users):
    waiting = make_task(run, name="waiting")
    make_task(run, name="discarded", status=TaskStatus.DISCARDED, accepted=False)
    done = make_task(run, name="done")
    review.decide(done, user=users["reviewer"], verdict="approve")
    assert review_queue.queue_ids(review_queue.queue_filter("")) == [waiting.pk]
    assert review_queue.queue_filter("sort=id").sort == "id"
    assert review_queue.queue_ids(review_queue.queue_filter("review=approved")) == [done.pk]


# --- concurrency on PostgreSQL -------------------------------------------------------------------------


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_reviewers_racing_for_the_queue_never_share_a_task(users):
    from facet_site.services import ensure_user

    run = make_run()
    for i in range(6):
        make_task(run, name=f"race {i}")
    reviewers = [ensure_user(username=f"racer-{i}", password="racer-password-1", role="reviewer") for i in range(6)]
    queue = review_queue.queue_filter("")
    results, errors = _in_threads(6, lambda i: review_queue.advance(reviewers[i], queue))
    assert not errors
    got = [t.pk for t in results if t is not None]
    assert len(got) == 6 and len(set(got)) == 6
    assert ReviewLock.objects.count() == 6


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_reviewers_deciding_at_once_leave_the_summary_equal_to_the_decisions(users):
    from facet_site.services import ensure_user

    task = make_task(make_run())
    reviewers = [ensure_user(username=f"decider-{i}", password="decider-password-1", role="reviewer") for i in range(6)]
    verdicts = ["approve", "reject", "needs_fix"] * 2
    results, errors = _in_threads(6, lambda i: review.decide(task.pk, user=reviewers[i], verdict=verdicts[i],
                                                             reason="" if verdicts[i] == "approve" else "flaky"))
    assert not errors
    assert Decision.objects.filter(task=task).count() == 6
    assert_summary_agrees(task)
    newest = Decision.objects.filter(task=task).order_by("-id").first()
    assert refreshed(task).review_state == review.STATE_OF_VERDICT[newest.verdict]
    events = AuditEvent.objects.filter(task=task, action="decide").order_by("id")
    # serialised by the row lock: each event's "before" is the previous event's "after"
    for prev, nxt in zip(events, events[1:]):
        assert nxt.before["decision"] == prev.after["decision"]
