"""Review by several reviewers: required reviews and consensus, adjudication, blind review,
bulk decisions and undo under consensus, the multi-review queue with per-reviewer locks,
assignments, guidelines, gold checks, agreement figures, the reviewers' page, the export and
every route's permissions. Records are made through the ORM (no Docker, no LLM)."""
import json

import pytest

from facet_site.lib.agreement import agreement, cohen_kappa, fleiss_kappa, raw_agreement
from facet_site.services import ensure_user
from tasks import agreement as team_agreement
from tasks import assignment, consensus, gold, guidelines, review
from tasks.filters import TaskFilter
from tasks.models import (
    AuditEvent,
    Decision,
    DecisionNote,
    ReviewPolicy,
    ReviewState,
    Task,
    TaskLabel,
    TeamLock,
)
from tests.html_safety import active_content
from tests.tasks.review_records import XSS, add_version, make_run, make_task

pytestmark = pytest.mark.django_db


@pytest.fixture
def team(users):
    """admin, lead, and three reviewers (the fixture's reviewer is "reviewer-user")."""
    return {
        "admin": users["admin"], "viewer": users["viewer"], "a": users["reviewer"],
        "lead": ensure_user(username="lead-user", password="lead-password-1", role="lead"),
        "b": ensure_user(username="reviewer-b", password="reviewer-b-password-1", role="reviewer"),
        "c": ensure_user(username="reviewer-c", password="reviewer-c-password-1", role="reviewer"),
    }


@pytest.fixture
def two_reviews(team):
    run = make_run("two reviews")
    policy = assignment.save_policy(user=team["lead"], name="pairs", required_reviews=2, run_id=run.pk)
    return run, policy


def exportable(task: Task) -> Task:
    """Give the task's version the files Harbor requires, so that it can be exported."""
    version = Task.objects.get(pk=task.pk).current_version
    version.files = {**version.files, "tests/test.sh": "#!/bin/sh\npytest /tests\n",
                     "solution/solve.sh": "#!/bin/sh\ntrue\n", "environment/Dockerfile": "FROM debian:bookworm\n"}
    version.save(update_fields=["files"])
    return task


def state(task) -> str:
    return Task.objects.get(pk=task.pk).review_state


# --- the maths --------------------------------------------------------------------------------------


def test_cohens_kappa_matches_the_textbook_example():
    # 50 items: both yes 20, yes/no 5, no/yes 10, both no 15 -> p_o 0.7, p_e 0.5, kappa 0.4
    pairs = [("yes", "yes")] * 20 + [("yes", "no")] * 5 + [("no", "yes")] * 10 + [("no", "no")] * 15
    kappa, (low, high) = cohen_kappa(pairs)
    assert kappa == pytest.approx(0.4)
    assert low < 0.4 < high and -1 <= low and high <= 1


def test_fleiss_kappa_matches_the_published_example():
    # Fleiss (1971) as worked on Wikipedia: 10 items, 14 raters, 5 categories -> 0.210
    table = [[0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0], [2, 2, 8, 1, 1],
             [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2], [6, 5, 2, 1, 0], [0, 2, 2, 3, 7]]
    items = [[j for j, n in enumerate(row) for _ in range(n)] for row in table]
    kappa, (low, high) = fleiss_kappa(items)
    assert kappa == pytest.approx(0.2099, abs=1e-3)
    assert low <= kappa <= high
    assert fleiss_kappa(items) == (kappa, (low, high))  # the bootstrap is seeded: same data, same interval
    raw, _, n = raw_agreement(items)
    assert (raw, n) == (0.1, 10)


def test_kappa_is_undefined_when_every_rating_is_the_same_and_items_need_two_ratings():
    a = agreement([["approve", "approve"], ["approve", "approve"], ["reject"]])
    assert a.items == 2 and a.ratings == 4 and a.raw == 1.0 and a.kappa is None and a.kappa_ci is None
    assert agreement([]).as_dict()["raw"] is None


# --- consensus -----------------------------------------------------------------------------------


def test_one_required_review_keeps_todays_rule(team):
    task = make_task(make_run())
    review.decide(task, user=team["a"], verdict="approve")
    review.decide(task, user=team["b"], verdict="reject", reason="flaky")
    assert state(task) == ReviewState.REJECTED  # the newest decision stands, no adjudication


def test_two_agreeing_reviews_approve_and_a_third_does_not_move_it(team, two_reviews):
    run, _ = two_reviews
    task = make_task(run)
    review.decide(task, user=team["a"], verdict="approve")
    assert state(task) == ReviewState.IN_REVIEW
    review.decide(task, user=team["b"], verdict="approve")
    assert state(task) == ReviewState.APPROVED
    c = consensus.consensus_of(Task.objects.get(pk=task.pk))
    assert (c.required, len(c.reviews), c.agreed) == (2, 2, True)
    review.decide(task, user=team["c"], verdict="reject", reason="flaky")  # e.g. a gold calibration
    assert state(task) == ReviewState.APPROVED


def test_different_reasons_for_a_rejection_go_to_adjudication_which_a_lead_settles(team, two_reviews):
    run, _ = two_reviews
    task = make_task(run)
    review.decide(task, user=team["a"], verdict="reject", reason="flaky")
    review.decide(task, user=team["b"], verdict="reject", reason="leaks_answer")
    assert state(task) == ReviewState.DISPUTED
    assert list(consensus.adjudication_queue()) == [Task.objects.get(pk=task.pk)]
    with pytest.raises(review.ReviewError, match="Only admins and leads adjudicate"):
        review.decide(task, user=team["c"], verdict="approve", adjudicate=True)
    decision = review.decide(task, user=team["lead"], verdict="reject", reason="leaks_answer", adjudicate=True)
    assert state(task) == ReviewState.REJECTED
    assert DecisionNote.objects.get(decision=decision).adjudication
    event = AuditEvent.objects.get(object_id=str(decision.pk), action="decide")
    assert event.after["adjudication"] is True and event.after["adjudicated"] == "reject"
    with pytest.raises(review.ReviewError, match="not in adjudication"):
        review.decide(task, user=team["admin"], verdict="approve", adjudicate=True)


def test_a_new_version_reopens_every_review(team, two_reviews):
    run, _ = two_reviews
    task = make_task(run)
    review.decide(task, user=team["a"], verdict="approve")
    review.decide(task, user=team["b"], verdict="approve")
    add_version(task)
    assert state(task) == ReviewState.UNREVIEWED
    review.decide(task, user=team["a"], verdict="approve")
    assert state(task) == ReviewState.IN_REVIEW


def test_undo_and_bulk_decisions_say_what_they_do_to_consensus(team, two_reviews, client):
    run, _ = two_reviews
    tasks = [make_task(run, name=f"bulk {i}") for i in range(2)]
    for t in tasks:
        review.decide(t, user=team["a"], verdict="approve")
    client.force_login(team["b"])
    page = client.get(f"/tasks/bulk/?run={run.pk}&verdict=approve")
    expected = page.context["plan"].eligible
    r = client.post(f"/tasks/bulk/?run={run.pk}&verdict=approve", {"confirm": "1", "expected": len(expected)},
                    follow=True)
    assert "2 approved" in r.content.decode()
    assert all(state(t) == ReviewState.APPROVED for t in tasks)
    bulk_event = AuditEvent.objects.get(action=review.BULK_DECIDE)
    assert bulk_event.after["consensus"] == {"approved": 2}
    # b undoes their bulk decision: each task awaits its second review again
    r = client.post(f"/tasks/audit/{bulk_event.pk}/undo/", follow=True)
    assert all(state(t) == ReviewState.IN_REVIEW for t in tasks)
    single = Decision.objects.filter(task=tasks[0], author=team["a"]).get()
    client.force_login(team["a"])
    event = AuditEvent.objects.get(object_id=str(single.pk), action="decide")
    r = client.post(f"/tasks/audit/{event.pk}/undo/", follow=True)
    assert "0 of 2 reviews; not reviewed" in r.content.decode()
    undo = AuditEvent.objects.filter(action="undo").order_by("-id").first()
    assert undo.before["reviews"] == 1 and undo.after["reviews"] == 0


def test_reviewers_decide_blind_until_their_own_review_is_in(team, two_reviews, client):
    run, _ = two_reviews
    task = make_task(run)
    review.decide(task, user=team["a"], verdict="reject", reason="flaky", comment="the clock test flips")
    client.force_login(team["b"])
    assert "the clock test flips" not in client.get(f"/tasks/{task.pk}/review/").content.decode()
    api = client.get(f"/api/team/tasks/{task.pk}/consensus").json()
    assert api["reviews"] == [] and api["required"] == 2
    assert client.get(f"/api/tasks/{task.pk}/decisions").json() == []
    review.decide(task, user=team["b"], verdict="approve")
    assert "the clock test flips" in client.get(f"/tasks/{task.pk}/review/").content.decode()
    client.force_login(team["lead"])  # leads adjudicate: they see the reviews
    body = client.get(f"/tasks/{task.pk}/review/").content.decode()
    assert "the clock test flips" in body and 'name="adjudicate" value="1"' in body


def test_the_audit_log_hides_others_reviews_from_a_reviewer_who_has_not_reviewed(team, two_reviews, client):
    run, _ = two_reviews
    task = make_task(run)
    review.decide(task, user=team["a"], verdict="reject", reason="leaks_answer", comment="answer in the image")
    client.force_login(team["b"])
    page = client.get(f"/tasks/audit/?task={task.pk}").content.decode()
    assert "hidden" in page and "leaks_answer" not in page and "answer in the image" not in page
    assert client.get(f"/api/audit?task={task.pk}").json()["count"] == 0
    review.decide(task, user=team["b"], verdict="reject", reason="leaks_answer")
    assert "answer in the image" in client.get(f"/tasks/audit/?task={task.pk}").content.decode()
    assert client.get(f"/api/audit?task={task.pk}").json()["count"] == 2


def test_the_api_takes_the_next_task_adjudicates_and_publishes_guidelines(team, two_reviews, client, token_for):
    run, policy = two_reviews
    task = make_task(run)
    client.force_login(team["a"])
    r = client.post(f"/api/team/policies/{policy.pk}/next")
    assert r.status_code == 200 and r.json()["task_id"] == task.pk and r.json()["required"] == 2
    assert client.post(f"/api/tasks/{task.pk}/decisions", {"verdict": "approve", "content_hash": r.json()["content_hash"]},
                       content_type="application/json").status_code == 201
    assert client.post(f"/api/team/policies/{policy.pk}/next").status_code == 204  # decided: not handed out again
    client.force_login(team["b"])
    client.post(f"/api/tasks/{task.pk}/decisions", {"verdict": "needs_fix", "reason": "under_specified"},
                content_type="application/json")
    assert client.get("/api/team/adjudication").json()[0]["task_id"] == task.pk
    assert client.post(f"/api/team/tasks/{task.pk}/adjudication", {"verdict": "approve"},
                       content_type="application/json").status_code == 403
    assert client.post("/api/team/guidelines", {"text": "# x"}, content_type="application/json").status_code == 403
    client.force_login(team["lead"])
    r = client.post(f"/api/team/tasks/{task.pk}/adjudication", {"verdict": "approve"}, content_type="application/json")
    assert r.status_code == 201 and r.json()["review_state"] == "approved"
    assert r.json()["adjudication"]["reviewer"] == "lead-user" and r.json()["agreed"] is False
    assert client.post(f"/api/team/tasks/{task.pk}/adjudication", {"verdict": "approve"},
                       content_type="application/json").status_code == 409
    r = client.post("/api/team/guidelines", {"text": "# Be strict", "note": "v1"}, content_type="application/json")
    assert r.status_code == 201 and r.json()["number"] == 1
    assert client.get("/api/team/guidelines").json()[0]["text"] == "# Be strict"
    r = client.post("/api/team/gold", {"task_id": task.pk, "verdict": "maybe"}, content_type="application/json")
    assert r.status_code == 422 and "verdict" in r.json()["detail"]
    viewer = token_for("viewer")
    assert client.post(f"/api/team/policies/{policy.pk}/next",
                       HTTP_AUTHORIZATION=f"Bearer {viewer}").status_code == 403


# --- the queue ------------------------------------------------------------------------------------


def test_the_queue_hands_a_task_only_to_reviewers_who_have_not_decided_it(team, two_reviews):
    run, policy = two_reviews
    first, second = make_task(run, name="first"), make_task(run, name="second")
    got_a = assignment.next_task(team["a"], policy)
    got_b = assignment.next_task(team["b"], policy)
    assert got_a.pk == got_b.pk  # two reviews needed: both may hold their own lock on it
    assert TeamLock.objects.filter(task=got_a).count() == 2
    got_c = assignment.next_task(team["c"], policy)
    assert got_c.pk != got_a.pk  # full: the third reviewer gets the other task
    review.decide(got_a, user=team["a"], verdict="approve")
    assignment.release(team["a"], got_a.pk)
    nxt = assignment.next_task(team["a"], policy)
    assert nxt.pk == got_c.pk  # never the task already decided
    review.decide(got_a, user=team["b"], verdict="approve")
    assert {t for t in assignment.queue_for(team["b"], policy)} == {got_c.pk}
    assert {first.pk, second.pk} == {got_a.pk, got_c.pk}


def test_assigned_tasks_come_first_by_priority_and_round_robin_spreads_them(team, two_reviews):
    run, policy = two_reviews
    tasks = [make_task(run, name=f"t{i}") for i in range(4)]
    result = assignment.assign(TaskFilter.from_query(f"run={run.pk}"), user=team["lead"],
                               reviewers=["reviewer-b", "reviewer-c"], mode="round_robin")
    assert result["per_reviewer"] == {"reviewer-b": 2, "reviewer-c": 2}
    assignment.assign(TaskFilter.from_query(f"run={run.pk}&q=t0"), user=team["lead"], reviewers=["reviewer-user"],
                      priority=5)
    assert assignment.queue_for(team["a"], policy)[0] == tasks[0].pk
    # round-robin in the selection's order (newest first): b, c, b, c
    order = list(TaskFilter.from_query(f"run={run.pk}").queryset().values_list("id", flat=True))
    assert set(assignment.queue_for(team["b"], policy)[:2]) == {order[0], order[2]}
    assert set(assignment.queue_for(team["c"], policy)[:2]) == {order[1], order[3]}
    with pytest.raises(review.NotAllowed):
        assignment.assign(TaskFilter.from_query(""), user=team["a"], reviewers=["reviewer-b"])
    with pytest.raises(review.ReviewError, match="no such user nobody"):
        assignment.assign(TaskFilter.from_query(""), user=team["lead"], reviewers=["nobody"])


def test_gold_tasks_are_mixed_in_at_the_rate_and_accuracy_is_reported(team, users):
    run = make_run("gold run")
    policy = assignment.save_policy(user=team["admin"], name="gold", required_reviews=2, gold_rate=0.5,
                                    query=f"run={run.pk}&q=regular")
    regular = [make_task(run, name=f"regular {i}") for i in range(3)]
    known = make_task(make_run("elsewhere"), name="known bad")
    gold.mark(known, user=team["admin"], verdict="reject", reason="leaks_answer")
    first = assignment.next_task(team["a"], policy)
    assert first.pk in {t.pk for t in regular}
    review.decide(first, user=team["a"], verdict="approve")
    second = assignment.next_task(team["a"], policy, after=first.pk)
    assert second.pk == known.pk  # every second hand-out at a rate of 0.5
    review.decide(second, user=team["a"], verdict="approve")
    note = DecisionNote.objects.get(decision__task=known)
    assert note.gold_correct is False and note.gold_verdict == "reject"
    assert gold.accuracy() == [{"reviewer": "reviewer-user", "n": 1, "correct": 0, "accuracy": 0.0,
                                "low": pytest.approx(0.0), "high": pytest.approx(0.7935, abs=1e-3)}]


# --- guidelines -----------------------------------------------------------------------------------


def test_guidelines_are_versioned_sanitised_and_recorded_with_each_decision(team, client):
    with pytest.raises(review.NotAllowed):
        guidelines.publish(user=team["a"], text="mine")
    client.force_login(team["lead"])
    r = client.post("/tasks/team/guidelines/", {"text": f"# Rules\n\nReject **leaks**. {XSS}", "note": "first"},
                    follow=True)
    assert "Guidelines version 1 is in force" in r.content.decode()
    client.post("/tasks/team/guidelines/", {"text": f"# Rules\n\nReject **leaks** and flaky tests. {XSS}"})
    task = make_task(make_run())
    client.force_login(team["a"])
    page = client.get(f"/tasks/{task.pk}/review/").content.decode()
    assert "Review guidelines, version 2" in page and "<strong>leaks</strong>" in page
    assert not active_content(page.split('id="guideline"')[1].split("</details>")[0])
    decision = review.decide(task, user=team["a"], verdict="approve")
    assert DecisionNote.objects.get(decision=decision).guideline.number == 2
    assert client.post("/tasks/team/guidelines/", {"text": "x"}).status_code == 403


# --- agreement, the reviewers' page, the export ----------------------------------------------------


def _disagreement(team, run):
    agreed, disputed = make_task(run, name="agreed"), make_task(run, name="disputed")
    TaskLabel.objects.create(task=agreed, kind="category", value="data-processing")
    TaskLabel.objects.create(task=disputed, kind="category", value="data-processing")
    review.decide(agreed, user=team["a"], verdict="approve")
    review.decide(agreed, user=team["b"], verdict="approve")
    review.decide(disputed, user=team["a"], verdict="approve")
    review.decide(disputed, user=team["b"], verdict="reject", reason="flaky")
    return agreed, disputed


def test_agreement_per_task_pair_reason_and_category_on_the_page_csv_and_api(team, two_reviews, client):
    run, _ = two_reviews
    agreed, disputed = _disagreement(team, run)
    f = team_agreement.figures()
    assert f["overall"]["items"] == 2 and f["overall"]["raw"] == 0.5
    assert [(p["a"], p["b"], p["items"]) for p in f["pairs"]] == [("reviewer-b", "reviewer-user", 2)]
    assert [r["reason"] for r in f["reasons"]] == ["flaky"]
    assert f["categories"][0]["category"] == "data-processing" and f["categories"][0]["items"] == 2
    assert {t["task_id"]: t["agreed"] for t in f["tasks"]} == {agreed.pk: True, disputed.pk: False}
    client.force_login(team["viewer"])
    page = client.get("/tasks/team/reviewers/?days=all").content.decode()
    assert "reviewer-b + reviewer-user" in page and 'id="tasks-agreed">1<' in page
    csv = client.get("/tasks/team/agreement.csv?days=all").content.decode()
    assert csv.splitlines()[0].startswith("kind,scope,items") and "pair,reviewer-b + reviewer-user,2" in csv
    api = client.get("/api/team/agreement?days=all").json()
    assert api["overall"]["raw"] == 0.5
    overview = client.get("/tasks/overview/?part=agreement").content.decode()
    assert '<td class="num agreement-raw">50%</td>' in overview


def test_reviewers_page_reports_agreement_with_the_final_decision_and_overturns(team, two_reviews, client):
    run, _ = two_reviews
    _, disputed = _disagreement(team, run)
    review.decide(disputed, user=team["admin"], verdict="reject", reason="flaky", adjudicate=True)
    rows = {r["reviewer"]: r for r in team_agreement.reviewers(days=None)}
    assert rows["reviewer-user"]["overturned_share"] == 1.0 and rows["reviewer-b"]["overturned_share"] == 0.0
    assert rows["reviewer-user"]["final_agreement"] == 0.5 and rows["reviewer-b"]["final_agreement"] == 1.0
    assert rows["admin-user"]["adjudications"] == 1 and rows["admin-user"]["decisions"] == 0
    assert rows["reviewer-b"]["decisions"] == 2
    client.force_login(team["a"])
    assert client.get("/api/team/reviewers?days=all").status_code == 200
    assert client.get("/api/team/reviewers?days=weird").status_code == 422


def test_the_export_carries_reviews_agreement_and_adjudication(team, two_reviews, tmp_path):
    from tasks import export_records, exports

    run, _ = two_reviews
    agreed, disputed = _disagreement(team, run)
    exportable(agreed), exportable(disputed)
    review.decide(disputed, user=team["admin"], verdict="reject", reason="flaky", adjudicate=True)
    result = exports.write_archive(tmp_path / "out.tar.gz", query=f"run={run.pk}", parts=["manifest"])
    import tarfile

    with tarfile.open(result.path) as tf:
        rows = [json.loads(line) for line in tf.extractfile("facet-dataset/manifest.jsonl").read().splitlines()]
        card = tf.extractfile("facet-dataset/README.md").read().decode()
    by = {r["task_id"]: r for r in rows}
    assert (by[agreed.pk]["n_reviews"], by[agreed.pk]["reviews_agree"], by[agreed.pk]["adjudication"]) == (2, True, None)
    assert by[disputed.pk]["reviews_agree"] is False
    assert by[disputed.pk]["adjudication"] == {"verdict": "reject", "reason": "flaky", "reviewer": "admin-user"}
    assert "| Reviewers agreed | 1 of 2 (50%" in card and "| Settled by adjudication | 1 |" in card
    assert result.summary["review_agreement"]["items"] == 2
    assert export_records.review_agreement([])["items"] == 0


# --- pages and permissions --------------------------------------------------------------------------


def test_every_team_page_renders_and_writes_need_the_right_role(team, two_reviews, client):
    run, policy = two_reviews
    task = make_task(run, name=f"Queue me {XSS}")
    client.force_login(team["viewer"])
    for url in ("/tasks/team/", f"/tasks/team/{policy.pk}/", "/tasks/team/adjudication/", "/tasks/team/reviewers/",
                "/tasks/team/guidelines/", "/tasks/team/gold/"):
        r = client.get(url)
        assert r.status_code == 200, url
        assert not active_content(r.content.decode()), url
    assert client.post(f"/tasks/team/{policy.pk}/next/").status_code == 403
    assert client.get("/tasks/team/assign/").status_code == 403
    client.force_login(team["a"])
    assert client.post("/tasks/team/policies/save/", {"name": "x", "required_reviews": 2, "scope": "query",
                                                     "query": "status=validated"}).status_code == 403
    assert client.post("/tasks/team/gold/", {"task": task.pk, "verdict": "approve"}).status_code == 403
    assert client.post("/api/team/gold", {"task_id": task.pk, "verdict": "approve"},
                       content_type="application/json").status_code == 403
    assert client.get("/api/team/gold").status_code == 403
    r = client.post(f"/tasks/team/{policy.pk}/next/")
    assert r.status_code == 302 and r["Location"] == f"/tasks/team/{policy.pk}/tasks/{task.pk}/"
    page = client.get(r["Location"]).content.decode()
    assert "2 independent reviews per task" in page and not active_content(page)
    r = client.post(f"/tasks/team/{policy.pk}/tasks/{task.pk}/decide/", {"verdict": "approve"}, follow=True)
    assert "1 of 2 reviews; awaiting reviews" in r.content.decode()
    client.force_login(team["lead"])
    r = client.post("/tasks/team/policies/save/", {"name": "three", "required_reviews": 9, "scope": "query",
                                                  "query": "status=validated"}, follow=True)
    assert "required_reviews: between 1 and 5" in r.content.decode()
    r = client.post("/tasks/team/policies/save/", {"name": "odd", "required_reviews": 2, "gold_rate": "lots",
                                                  "scope": "query", "query": "status=validated"}, follow=True)
    assert "gold_rate: expected a number, not &#x27;lots&#x27;" in r.content.decode()
    assert "reviewer-user" in client.get("/tasks/team/reviewers/?days=7").content.decode()
    r = client.post("/api/team/policies", {"name": "api", "required_reviews": 3, "query": "status=validated"},
                    content_type="application/json")
    assert r.status_code == 201 and r.json()["required_reviews"] == 3
    assert client.post("/api/team/policies", {"name": "bad", "run_id": 1, "query": "status=validated"},
                       content_type="application/json").status_code == 422
    assert ReviewPolicy.objects.filter(name="api").exists()


def test_a_policy_on_a_saved_view_reopens_tasks_approved_by_one_reviewer(team):
    from tasks.models import SavedView

    run = make_run("view run")
    task = make_task(run)
    review.decide(task, user=team["a"], verdict="approve")
    assert state(task) == ReviewState.APPROVED
    view = SavedView.objects.create(name="mine", owner=team["lead"], query=f"run={run.pk}", shared=True)
    assignment.save_policy(user=team["lead"], name="view", required_reviews=2, saved_view_id=view.pk)
    assert state(task) == ReviewState.IN_REVIEW
