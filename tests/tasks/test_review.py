"""Review: decisions bound to a version's hash, the audit log and undo, bulk decisions with
confirmation, the queue's locks, the overview, and every page's permissions. Records are made
through the ORM (no Docker, no LLM)."""
import threading
import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from scenarios.models import RunStatus, SynthesisRun
from tasks import funnel as construction_funnel
from tasks import review, review_numbers, review_queue, summary
from tasks.filters import FUNNEL_STAGES, TaskFilter
from tasks.models import (
    AuditEvent,
    Decision,
    Environment,
    EnvironmentBuild,
    ReviewLock,
    ReviewState,
    Step,
    Task,
    TaskStatus,
    TaskVersion,
    TestResult,
    Trial,
    Validation,
    ValidationStatus,
)
from tests.html_safety import active_content

pytestmark = pytest.mark.django_db

XSS = "<script>alert('pwned')</script>"


# --- records --------------------------------------------------------------------------------------


def make_run(name="run one") -> SynthesisRun:
    return SynthesisRun.objects.create(name=name, status=RunStatus.SUCCEEDED)


def add_version(task: Task, *, accepted: bool | None = True, instruction: str = "Sum the paid orders.",
                current: bool = True) -> TaskVersion:
    number = task.versions.count() + 1
    version = TaskVersion.objects.create(
        task=task, number=number, content_hash=f"sha256:{uuid.uuid4().hex}",
        files={"instruction.md": instruction, "task.toml": "version = '1.0'\n",
               "tests/test_outputs.py": "def test_report():\n    assert open('/app/out/report.csv').read()\n"})
    if accepted is not None:
        validation = Validation.objects.create(version=version, status=ValidationStatus.DONE, accepted=accepted,
                                               failure="" if accepted else "oracle_failed")
        oracle = Trial.objects.create(validation=validation, version=version, kind="oracle", reward=1.0 if accepted else 0.0,
                                      passed=accepted, failure="" if accepted else "oracle_failed")
        TestResult.objects.create(trial=oracle, name="test_report", outcome="passed" if accepted else "failed")
        Trial.objects.create(validation=validation, version=version, kind="nop", reward=0.0, passed=True)
    if current:
        Task.objects.filter(pk=task.pk).update(current_version=version)
        summary.refresh_summary(task)
    return version


def make_task(run=None, *, name="Paid orders per customer", status=TaskStatus.VALIDATED, version=True,
              accepted=True, first_build_ok=True, imported=False, instruction="Sum the paid orders.") -> Task:
    env = Environment.objects.create(status="built" if first_build_ok else "failed")
    EnvironmentBuild.objects.create(environment=env, attempt=1, outcome="succeeded" if first_build_ok else "build_failed")
    task = Task.objects.create(run=run, environment=env, name=name, status=status, step=Step.DONE, imported=imported)
    if version:
        add_version(task, accepted=accepted, instruction=instruction)
    task.refresh_from_db()
    return task


@pytest.fixture
def run():
    return make_run()


@pytest.fixture
def task(run):
    return make_task(run)


def refreshed(task: Task) -> Task:
    return Task.objects.select_related("current_version").get(pk=task.pk)


def assert_summary_agrees(task: Task):
    task = refreshed(task)
    assert task.review_state == summary.expected_summary(task)["review_state"]


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


def last_event(task=None, action="decide") -> AuditEvent:
    qs = AuditEvent.objects.filter(action=action)
    if task is not None:
        qs = qs.filter(task=task)
    return qs.order_by("-id").first()


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


@pytest.fixture
def selection(run):
    """Five tasks of one run: three validated (one already approved), one discarded, one with no version."""
    tasks = [make_task(run, name=f"Validated {i}") for i in range(3)]
    discarded = make_task(run, name="Discarded one", status=TaskStatus.DISCARDED, accepted=False)
    empty = make_task(run, name="No version", status=TaskStatus.FAILED, version=False)
    make_task(make_run("other run"), name="Elsewhere")  # not selected
    return {"validated": tasks, "discarded": discarded, "empty": empty}


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

postgres_only = pytest.mark.skipif(connection.vendor != "postgresql",
                                   reason="SQLite serialises every writer; the race needs PostgreSQL")


def _in_threads(n, work):
    barrier = threading.Barrier(n)
    results, errors = [None] * n, []

    def run(i):
        from django.db import connections

        try:
            barrier.wait()
            results[i] = work(i)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results, errors


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


# --- the funnel ----------------------------------------------------------------------------------------


def test_every_funnel_stage_is_a_task_filter_that_lists_what_it_counts(run, users):
    make_task(run, name="first pass")
    repaired = make_task(run, name="repaired")
    Validation.objects.filter(version__task=repaired).update(accepted=False)  # its first validation failed
    add_version(repaired)  # the repair validated
    env_repaired = make_task(run, name="env repaired")
    EnvironmentBuild.objects.filter(environment=env_repaired.environment).update(outcome="build_failed")
    EnvironmentBuild.objects.create(environment=env_repaired.environment, attempt=2, outcome="succeeded")
    make_task(run, name="never built", first_build_ok=False, status=TaskStatus.FAILED, version=False)
    make_task(run, name="discarded", status=TaskStatus.DISCARDED, accepted=False)
    make_task(None, name="imported", imported=True)
    review.decide(repaired, user=users["reviewer"], verdict="approve")
    rows = review_numbers.funnel(run)
    assert [r["stage"] for r in rows[:-2]] == list(FUNNEL_STAGES) == [s for s, _, _ in construction_funnel.FUNNEL_STAGES]
    for row in rows:
        listed = TaskFilter.from_query(row["query"]).queryset().count()
        assert listed == row["count"], row
    counts = {r["stage"]: r["count"] for r in rows}
    assert counts["seeds"] == 5 and counts["final_validated"] == 3 and counts["task_repair_recovery"] == 1
    assert counts["environment_repair_recovery"] == 1 and counts["reviewed"] == 1 and counts["approved"] == 1
    overall = {r["stage"]: r["count"] for r in review_numbers.funnel()}
    assert overall["seeds"] == 5  # the imported task is not a seed
    assert TaskFilter.from_query("stage=nonsense").errors == ["stage: unknown funnel stage 'nonsense'"]


def test_reasons_and_throughput_count_what_their_links_open(run, users):
    a, b, c = (make_task(run, name=n) for n in "abc")
    review.decide(a, user=users["reviewer"], verdict="reject", reason="flaky")
    review.decide(b, user=users["reviewer"], verdict="needs_fix", reason="flaky")
    review.decide(c, user=users["admin"], verdict="reject", reason="unsafe")
    review.undo(last_event(c), user=users["admin"])
    d = make_task(run, name="d")  # rejected for a reason, then approved: that reason is no longer in force
    review.decide(d, user=users["reviewer"], verdict="reject", reason="flaky")
    review.decide(d, user=users["reviewer"], verdict="approve", reason="other", comment="fine after all")
    rows = {r["reason"]: r for r in review_numbers.reasons(run)}
    assert [cell["count"] for cell in rows["flaky"]["cells"]] == [1, 1, 0] and rows["flaky"]["total"] == 2
    assert rows["unsafe"]["total"] == 0  # undone
    assert [cell["count"] for cell in rows["other"]["cells"]] == [0, 0, 1]
    for row in rows.values():
        for cell in row["cells"]:
            assert TaskFilter.from_query(cell["query"]).queryset().count() == cell["count"]
        assert TaskFilter.from_query(row["query"]).queryset().count() == row["total"]
    data = review_numbers.throughput(run)
    table = {r["reviewer"]: r for r in data["table"]}
    assert table["reviewer-user"]["total"] == 4 and table["admin-user"]["total"] == 1  # the undo is not work
    assert data["series"]["reviewer-user"][-1] == 4 and len(data["days"]) == 30


# --- pages ---------------------------------------------------------------------------------------------

PAGES = ["/tasks/queue/", "/tasks/overview/", "/tasks/audit/"]


@pytest.mark.parametrize("role", ["viewer", "reviewer", "admin"])
def test_every_review_page_is_readable_by_every_role(task, client_as, role):
    client = client_as(role)
    for url in PAGES + [f"/tasks/{task.pk}/review/", f"/tasks/{task.pk}/review/?queue=status%3Dvalidated"]:
        assert client.get(url).status_code == 200, url
    for part in ("summary", "reasons", "throughput"):
        assert client.get(f"/tasks/overview/?part={part}", HTTP_HX_REQUEST="true").status_code == 200


def test_review_pages_need_a_login(task, client):
    for url in PAGES + [f"/tasks/{task.pk}/review/", "/tasks/bulk/?verdict=approve"]:
        response = client.get(url)
        assert response.status_code == 302 and "/login/" in response["Location"], url


def test_the_bulk_page_is_for_reviewers_and_admins(task, client_as):
    assert client_as("viewer").get("/tasks/bulk/?verdict=approve").status_code == 403
    assert client_as("viewer").post("/tasks/bulk/?verdict=approve", {"confirm": "1"}).status_code == 403
    assert client_as("reviewer").get("/tasks/bulk/?verdict=approve").status_code == 200
    assert client_as("admin").get("/tasks/bulk/").status_code == 200


def test_viewers_get_403_on_every_review_post(task, users, client_as):
    review.decide(task, user=users["reviewer"], verdict="approve")
    event = last_event(task)
    client = client_as("viewer")
    posts = [(f"/tasks/{task.pk}/decide/", {"verdict": "reject", "reason": "flaky"}),
             (f"/tasks/audit/{event.pk}/undo/", {}), ("/tasks/queue/next/", {}),
             (f"/tasks/{task.pk}/release/", {}), (f"/tasks/{task.pk}/renew/", {}),
             ("/tasks/bulk/?verdict=approve", {"confirm": "1"})]
    for url, data in posts:
        assert client.post(url, data).status_code == 403, url
    assert refreshed(task).review_state == ReviewState.APPROVED and not AuditEvent.objects.filter(action="undo").exists()


def test_every_review_post_needs_the_csrf_token(task, users):
    client = Client(enforce_csrf_checks=True)
    client.force_login(users["reviewer"])
    for url in (f"/tasks/{task.pk}/decide/", "/tasks/queue/next/", "/tasks/bulk/?verdict=approve",
                f"/tasks/{task.pk}/release/"):
        assert client.post(url, {"verdict": "approve", "confirm": "1"}).status_code == 403, url
    assert not Decision.objects.exists()
    page = client.get(f"/tasks/{task.pk}/review/").content.decode()
    assert 'name="csrfmiddlewaretoken"' in page and "X-CSRFToken" in page  # forms and htmx


def test_a_reviewer_decides_on_the_review_page_and_sees_the_history(task, client_as):
    client = client_as("reviewer")
    page = client.get(f"/tasks/{task.pk}/review/").content.decode()
    assert "Sum the paid orders." in page and "test_report" in page and 'id="decision-form"' in page
    response = client.post(f"/tasks/{task.pk}/decide/", {"verdict": "reject", "reason": "too_strict", "comment": XSS,
                                                         "content_hash": task.current_version.content_hash})
    assert response.status_code == 302 and response["Location"] == f"/tasks/{task.pk}/"
    page = client.get(f"/tasks/{task.pk}/review/").content.decode()
    assert "Verifier too strict" in page and "Rejected" in page
    assert XSS not in page and "&lt;script&gt;" in page and active_content(page) == []


def test_a_refused_decision_is_explained_on_the_page(run, client_as):
    task = make_task(run, status=TaskStatus.DISCARDED, accepted=False)
    client = client_as("reviewer")
    page = client.post(f"/tasks/{task.pk}/decide/", {"verdict": "approve", "next": f"/tasks/{task.pk}/review/"},
                       follow=True).content.decode()
    assert "only a validated task can be approved" in page and not Decision.objects.exists()
    response = client.post(f"/tasks/{task.pk}/decide/", {"verdict": "reject", "next": "https://evil.example/"})
    assert response["Location"] == f"/tasks/{task.pk}/"  # never an outside redirect
    assert "choose why the task is rejected" in client.get(f"/tasks/{task.pk}/review/").content.decode()


def test_the_admin_sees_the_force_option_and_reviewers_do_not(run, client_as):
    task = make_task(run, status=TaskStatus.DISCARDED, accepted=False)
    assert "Force the approval" in client_as("admin").get(f"/tasks/{task.pk}/review/").content.decode()
    assert "Force the approval" not in client_as("reviewer").get(f"/tasks/{task.pk}/review/").content.decode()
    client_as("admin").post(f"/tasks/{task.pk}/decide/", {"verdict": "approve", "force": "1"})
    assert refreshed(task).review_state == ReviewState.APPROVED


def test_the_queue_page_takes_the_next_task_and_deciding_moves_on_and_releases_the_lock(run, client_as, users):
    a, b = make_task(run, name="Queue A"), make_task(run, name="Queue B")
    client = client_as("reviewer")
    page = client.get("/tasks/queue/").content.decode()
    assert "Next task to review" in page and 'id="queue-total">2<' in page
    response = client.post("/tasks/queue/next/", {"queue": ""})
    assert response.status_code == 302 and response["Location"].startswith(f"/tasks/{b.pk}/review/?queue=")
    assert ReviewLock.objects.get(task=b).holder == users["reviewer"]
    page = client.get(response["Location"]).content.decode()
    assert "1 of 2" in page and 'id="queue-next"' in page and "You are reviewing this task" in page
    assert "Resume task" in client.get("/tasks/queue/").content.decode()
    queue = review_queue.DEFAULT_QUEUE
    response = client.post(f"/tasks/{b.pk}/decide/", {"verdict": "approve", "queue": queue})
    assert response["Location"].startswith(f"/tasks/{a.pk}/review/?queue=")
    assert not ReviewLock.objects.filter(task=b).exists() and ReviewLock.objects.get(task=a).holder == users["reviewer"]
    response = client.post(f"/tasks/{a.pk}/decide/", {"verdict": "needs_fix", "reason": "under_specified", "queue": queue})
    assert response["Location"] == f"/tasks/queue/?{queue}" and not ReviewLock.objects.exists()
    page = client.get(response["Location"]).content.decode()
    assert "Nothing left in this queue" in page and 'id="queue-total">0<' in page


def test_another_reviewer_sees_who_holds_the_lock_and_gets_another_task(run, client_as, users):
    a, b = make_task(run, name="Locked A"), make_task(run, name="Free B")
    review_queue.take_lock(b.pk, users["admin"])
    client = client_as("reviewer")
    assert "admin-user</b> is reviewing this task" in client.get(f"/tasks/{b.pk}/review/").content.decode()
    response = client.post("/tasks/queue/next/", {"queue": review_queue.DEFAULT_QUEUE})
    assert response["Location"].startswith(f"/tasks/{a.pk}/review/")
    response = client.post("/tasks/queue/next/", {"queue": review_queue.DEFAULT_QUEUE, "current": str(a.pk)}, follow=True)
    assert "No next task in this queue" in response.content.decode()
    client.post(f"/tasks/{a.pk}/release/", {"queue": review_queue.DEFAULT_QUEUE})
    assert not ReviewLock.objects.filter(task=a).exists()


def test_the_lock_heartbeat_renews_only_ones_own_lock(task, client_as, users):
    ReviewLock.objects.create(task=task, holder=users["admin"], acquired_at=timezone.now() - timedelta(hours=1))
    assert client_as("reviewer").post(f"/tasks/{task.pk}/renew/").status_code == 204
    assert ReviewLock.objects.get(task=task).holder == users["admin"]  # a heartbeat never reclaims


def test_the_bulk_page_confirms_then_applies(selection, run, client_as):
    client = client_as("reviewer")
    page = client.get(f"/tasks/bulk/?verdict=approve&run={run.pk}").content.decode()
    assert f"run={run.pk}" in page and 'id="eligible">3<' in page and "of 5 selected tasks" in page
    assert "Validated 0" in page and "not validated: only validated tasks can be approved" in page
    assert "Discarded one" in page and "No version" in page
    # POST without the confirmation does nothing
    page = client.post(f"/tasks/bulk/?verdict=approve&run={run.pk}", {"expected": "3"}, follow=True).content.decode()
    assert "Tick the confirmation" in page and not Decision.objects.exists()
    response = client.post(f"/tasks/bulk/?verdict=approve&run={run.pk}", {"expected": "3", "confirm": "1",
                                                                         "comment": "looked at all three"})
    assert response.status_code == 302 and response["Location"] == "/tasks/audit/?action=bulk_decide"
    assert Decision.objects.filter(bulk=True, verdict="approve").count() == 3
    page = client.get(response["Location"]).content.decode()
    assert "bulk_decide" in page and "Undo" in page


def test_bulk_reject_needs_a_reason_and_a_stale_confirmation_is_refused(selection, run, client_as):
    client = client_as("admin")
    url = f"/tasks/bulk/?verdict=reject&run={run.pk}"
    page = client.post(url, {"expected": "4", "confirm": "1"}, follow=True).content.decode()
    assert "choose why the task is rejected" in page and not Decision.objects.exists()
    page = client.post(url, {"expected": "9", "confirm": "1", "decision_reason": "duplicate"}, follow=True).content.decode()
    assert "The selection changed" in page and not Decision.objects.exists()
    client.post(url, {"expected": "4", "confirm": "1", "decision_reason": "duplicate"})
    assert Decision.objects.filter(reason="duplicate", bulk=True).count() == 4


def test_the_audit_log_filters_and_undoes(task, run, client_as, users):
    other = make_task(run, name="Other task")
    review.decide(task, user=users["reviewer"], verdict="reject", reason="unsafe", comment=XSS)
    review.decide(other, user=users["admin"], verdict="approve")
    client = client_as("reviewer")
    page = client.get("/tasks/audit/").content.decode()
    assert page.count("<tr id=\"event-") == 2 and XSS not in page and active_content(page) == []
    assert "unreviewed" in page and "rejected" in page  # before and after
    page = client.get(f"/tasks/audit/?task={other.pk}").content.decode()
    assert page.count("<tr id=\"event-") == 1 and "Undo</button>" not in page  # the admin's entry
    assert client.get("/tasks/audit/?actor=reviewer-user&action=decide").content.decode().count("<tr id=\"event-") == 1
    mine = last_event(task)
    response = client.post(f"/tasks/audit/{mine.pk}/undo/", {"next": "/tasks/audit/"}, follow=True)
    page = response.content.decode()
    assert f"Entry #{mine.pk} undone" in page and "undone by #" in page and "an undo cannot be undone" in page
    assert refreshed(task).review_state == ReviewState.UNREVIEWED
    page = client.post(f"/tasks/audit/{mine.pk}/undo/", follow=True).content.decode()
    assert "already been undone" in page
    theirs = last_event(other)
    assert client.post(f"/tasks/audit/{theirs.pk}/undo/").status_code == 403


def test_the_overview_shows_the_funnel_per_run_reasons_and_throughput(run, client_as, users):
    a = make_task(run, name="Overview A")
    make_task(run, name="Overview B")
    other = make_run("second run")
    make_task(other, name="Overview C")
    client = client_as("viewer")
    page = client.get("/tasks/overview/").content.decode()
    assert "Final validated tasks" in page and "Reviewed by a person" in page and "/static/vendor/plotly/plotly.min.js" in page
    assert 'id="funnel-data"' in page and "?stage=final_validated" in page and active_content(page) == []
    assert "By run" in page and f'<a href="?run={other.pk}">#{other.pk} second run</a>' in page
    # reasons and throughput load into the page right after it (htmx)
    assert 'hx-get="/tasks/overview/?part=reasons"' in page and 'hx-get="/tasks/overview/?part=throughput"' in page
    assert "Nobody decided anything" in client.get("/tasks/overview/?part=throughput", HTTP_HX_REQUEST="true").content.decode()
    assert "No decision with a reason yet" in client.get("/tasks/overview/?part=reasons").content.decode()
    review.decide(a, user=users["reviewer"], verdict="reject", reason="leaks_answer", comment=XSS)
    page = client.get(f"/tasks/overview/?run={run.pk}").content.decode()
    assert f'hx-get="/tasks/overview/?part=reasons&amp;run={run.pk}"' in page
    assert page.count('<tr class="stage-') == 11 and "By run" not in page  # one run: no by-run table
    reasons = client.get(f"/tasks/overview/?part=reasons&run={run.pk}", HTTP_HX_REQUEST="true").content.decode()
    assert "Leaks the answer" in reasons and 'id="reasons-data"' in reasons and active_content(reasons) == []
    assert f"/tasks/?run={run.pk}&amp;review=rejected&amp;reason=leaks_answer" in reasons
    throughput = client.get(f"/tasks/overview/?part=throughput&run={run.pk}", HTTP_HX_REQUEST="true").content.decode()
    assert "reviewer-user" in throughput and 'id="throughput-data"' in throughput
    assert "1 decision in the last 30 days" in throughput
    other_run = client.get(f"/tasks/overview/?part=throughput&run={other.pk}").content.decode()
    assert "Nobody decided anything" in other_run
    funnel = {r["stage"]: r["count"] for r in review_numbers.funnel(run)}
    assert funnel["final_validated"] == 2 and funnel["reviewed"] == 1 and funnel["approved"] == 0
    summary_card = client.get("/tasks/overview/?part=summary", HTTP_HX_REQUEST="true").content.decode()
    assert 'id="summary-approved">0<' in summary_card and "reviewed" in summary_card
    home = client.get("/").content.decode()
    assert 'hx-get="/tasks/overview/?part=summary"' in home


def test_the_review_panel_renders_for_the_task_page_with_queue_controls(task, users, rf):
    from django.contrib.messages.storage.fallback import FallbackStorage
    from django.template.loader import render_to_string

    from tasks.review_views import panel_context

    review.decide(task, user=users["reviewer"], verdict="needs_fix", reason="flaky", comment=XSS)
    request = rf.get(f"/tasks/{task.pk}/", {"queue": "status=validated&review=unreviewed"})
    request.user = users["reviewer"]
    request.session = {}
    request._messages = FallbackStorage(request)
    html = render_to_string("tasks/_review_panel.html", panel_context(request, refreshed(task)), request=request)
    assert 'id="decision-form"' in html and "Not in this queue any more" in html and 'id="queue-next"' in html
    assert "Flaky" in html and XSS not in html and active_content(html) == []
    assert '<script src="/static/js/review.js"' in html
    request = rf.get(f"/tasks/{task.pk}/")
    request.user = users["viewer"]
    html = render_to_string("tasks/_review_panel.html", panel_context(request, refreshed(task)), request=request)
    assert 'id="decision-form"' not in html and "Your role reads only" in html and 'id="queue-next"' not in html
