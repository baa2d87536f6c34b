"""What reviewers see of the defect findings and what they can do (issue 13): the findings and the
failure type on the task list (column, "has findings" and by-kind filters) and on the task page,
approval blocked by an error-level finding unless an admin overrides it with a reason (audit log,
export manifest), the task's status over every validation of its version, tests per task, and the
repair loop routing each defect to its artifact with the evidence in the prompt. Records are made
through the ORM (no Docker, no LLM)."""
import uuid

import pytest

from facet_site.lib import harbor
from tasks import export_records, repair, repair_evidence, review, summary, validating
from tasks.filters import TaskFilter
from tasks.models import (
    ArtifactKind,
    AuditEvent,
    Environment,
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

pytestmark = pytest.mark.django_db

LEAK = {"check": "leaked_answer", "severity": "error",
        "message": "the oracle writes /app/out.json, and the same content is already in the image at /opt/.a",
        "file": "/opt/.a", "line": None, "evidence": '{"total": 17}'}
FLAKY = {"check": "flaky", "severity": "error",
         "message": "the verifier is flaky: 2 oracle trials of the same state disagree (tests that varied: test_x)",
         "file": "tests/", "line": None, "evidence": "test_x: passed, failed"}
WARNING = {"check": "existence_only_tests", "severity": "warning", "message": "only checks existence",
           "file": "tests/test_outputs.py", "line": 4, "evidence": "assert Path('/app/out').exists()"}


def make_task(name="Paid orders", *, n_tests=3) -> Task:
    task = Task.objects.create(name=name, status=TaskStatus.VALIDATED, step=Step.DONE,
                               environment=Environment.objects.create(status="built"))
    version = TaskVersion.objects.create(task=task, number=1, content_hash=f"sha256:{uuid.uuid4().hex}",
                                         files={"instruction.md": "Sum the paid orders.", "task.toml": "version = '1.0'\n"})
    Task.objects.filter(pk=task.pk).update(current_version=version)
    validate(version, accepted=True, n_tests=n_tests)
    return Task.objects.select_related("current_version").get(pk=task.pk)


def validate(version, *, accepted: bool, failure: str = "", findings=(), n_tests=3, recheck=None) -> Validation:
    validation = Validation.objects.create(version=version, status=ValidationStatus.DONE, accepted=accepted,
                                           failure=failure, reason=f"{failure}: details" if failure else "",
                                           static_findings=list(findings), recheck=recheck)
    oracle = Trial.objects.create(validation=validation, version=version, kind="oracle", reward=1.0, passed=True)
    TestResult.objects.bulk_create([TestResult(trial=oracle, name=f"test_{i}", outcome="passed") for i in range(n_tests)])
    summary.refresh_summary(version.task_id)
    return validation


def refreshed(task) -> Task:
    return Task.objects.select_related("current_version").get(pk=task.pk)


# --- the summary: over every validation of the version ---------------------------------------------


def test_a_later_lucky_pass_does_not_hide_an_earlier_flaky_fail(users):
    task = make_task()
    validate(task.current_version, accepted=False, failure="flaky", findings=[FLAKY, WARNING])
    validate(task.current_version, accepted=True)  # lucky
    task = refreshed(task)
    assert task.finding_kinds == ",flaky," and task.validation_failure == "flaky"
    assert summary.expected_summary(task)["finding_kinds"] == task.finding_kinds

    # construction's decision over the version says the same: not validated, a repair is due
    task.imported = True
    Task.objects.filter(pk=task.pk).update(imported=True, status=TaskStatus.VALIDATING, step=Step.VALIDATE)
    last = task.current_version.validations.order_by("-id").first()
    validating.apply_outcome(refreshed(task), last)
    task = refreshed(task)
    assert task.status == TaskStatus.DISCARDED and task.discard_reason.startswith("flaky: an earlier validation")


def test_warnings_are_not_findings_that_block(users):
    task = make_task()
    validate(task.current_version, accepted=True, findings=[WARNING])
    assert refreshed(task).finding_kinds == ""


# --- the task list ------------------------------------------------------------------------------------


def test_the_list_filters_by_has_findings_and_by_kind_and_shows_them(client_as):
    clean, leaky, flaky = make_task("clean"), make_task("leaky"), make_task("flaky")
    validate(leaky.current_version, accepted=False, failure="leaked_answer", findings=[LEAK])
    validate(flaky.current_version, accepted=False, failure="flaky", findings=[FLAKY])

    def names(query):
        return set(TaskFilter.from_query(query).queryset().values_list("name", flat=True))

    assert names("finding=any") == {"leaky", "flaky"}
    assert names("finding=none") == {"clean"}
    assert names("finding=leaked_answer") == {"leaky"}
    assert names("failure=flaky") == {"flaky"}
    assert TaskFilter.from_query("finding=<b>").errors == ["finding: '<b>' is not any, none or a check id"]
    assert TaskFilter.from_query("failure=bogus").errors == ["failure: unknown value 'bogus'"]

    html = client_as("viewer").get("/tasks/?finding=any").content.decode()
    assert 'href="?finding=leaked_answer"' in html and 'href="?failure=flaky"' in html
    assert ">clean<" not in html
    assert '<option value="any" selected>Has findings</option>' in html


def test_tests_per_task_sort_and_filter(users):
    make_task("few", n_tests=2)
    make_task("many", n_tests=23)
    assert list(TaskFilter.from_query("sort=-tests").queryset().values_list("name", flat=True)) == ["many", "few"]
    assert list(TaskFilter.from_query("tests_min=20").queryset().values_list("name", flat=True)) == ["many"]


# --- the task page ------------------------------------------------------------------------------------


def test_the_task_page_default_view_shows_findings_with_their_evidence(client_as):
    task = make_task()
    validate(task.current_version, accepted=False, failure="leaked_answer", findings=[LEAK, WARNING])
    html = client_as("viewer").get(f"/tasks/{task.pk}/").content.decode()
    assert "leaked_answer" in html and "<code>/opt/.a</code>" in html
    assert "{&quot;total&quot;: 17}" in html  # the evidence, escaped
    assert "<code>tests/test_outputs.py:4</code>" in html
    assert "an error-level finding blocks approval" in html


# --- approval gating ------------------------------------------------------------------------------------


def test_an_error_finding_blocks_approval_until_an_admin_overrides_with_a_reason(users):
    task = make_task()
    validate(task.current_version, accepted=False, failure="flaky", findings=[FLAKY])
    with pytest.raises(review.ReviewError, match=r"error-level findings \(flaky\).*cannot be approved"):
        review.decide(task, user=users["reviewer"], verdict="approve")
    with pytest.raises(review.ReviewError, match="Only an admin may override"):
        review.decide(task, user=users["reviewer"], verdict="approve", override_reason="looks fine to me")
    with pytest.raises(review.ReviewError, match="cannot be approved"):
        review.decide(task, user=users["admin"], verdict="approve", override_reason="   ")
    # rejecting needs no override
    review.decide(task, user=users["reviewer"], verdict="reject", reason=review.RejectReason.values[0])

    decision = review.decide(task, user=users["admin"], verdict="approve",
                             override_reason="the varying test is a timing check we accept")
    assert refreshed(task).review_state == ReviewState.APPROVED
    assert decision.override_reason == "the varying test is a timing check we accept"
    assert decision.overridden_findings == ["flaky"]
    event = AuditEvent.objects.filter(object_type="decision", object_id=str(decision.pk)).get()
    assert event.after["override"] == {"reason": "the varying test is a timing check we accept", "findings": ["flaky"]}

    task = Task.objects.select_related("current_version", "scenario", "run").get(pk=task.pk)
    row = export_records.manifest_row(task, "paid-orders", export_records.load_chunk([task]), harbor.TaskConfig())
    assert row["review_state"] == "approved" and row["findings"] == ["flaky"]
    assert row["approval_override"] == "the varying test is a timing check we accept"
    assert row["validation_failure"] == "flaky" and row["n_tests"] == 3


def test_findings_after_an_approval_block_exporting_it_as_approved(users):
    task = make_task()
    review.decide(task, user=users["reviewer"], verdict="approve")
    validate(task.current_version, accepted=False, failure="leaked_answer", findings=[LEAK])
    task = Task.objects.select_related("current_version", "scenario", "run").get(pk=task.pk)
    row = export_records.manifest_row(task, "paid-orders", export_records.load_chunk([task]), harbor.TaskConfig())
    assert row["review_state"] == export_records.APPROVAL_BLOCKED and row["approval_override"] is None


def test_bulk_approval_skips_tasks_with_findings(users):
    clean, leaky = make_task("clean"), make_task("leaky")
    validate(leaky.current_version, accepted=False, failure="leaked_answer", findings=[LEAK])
    result = review.apply_bulk(TaskFilter.from_query(""), user=users["admin"], verdict="approve")
    assert result.decided == 1
    assert refreshed(clean).review_state == ReviewState.APPROVED
    assert refreshed(leaky).review_state == ReviewState.UNREVIEWED
    assert any("error-level findings" in why for why in result.skipped)


def test_the_review_panel_asks_an_admin_for_the_override_reason(client_as):
    task = make_task()
    validate(task.current_version, accepted=False, failure="flaky", findings=[FLAKY])
    admin_html = client_as("admin").get(f"/tasks/{task.pk}/review/").content.decode()
    assert 'name="override_reason"' in admin_html
    response = client_as("admin").post(f"/tasks/{task.pk}/decide/", {"verdict": "approve", "override_reason": ""})
    assert response.status_code == 302 and refreshed(task).review_state == ReviewState.UNREVIEWED
    client_as("admin").post(f"/tasks/{task.pk}/decide/", {"verdict": "approve", "override_reason": "checked by hand"})
    assert refreshed(task).review_state == ReviewState.APPROVED


# --- repair routing and evidence ---------------------------------------------------------------------------


@pytest.mark.parametrize("failure, findings, artifact", [
    ("leaked_answer", [LEAK], ArtifactKind.ENVIRONMENT),
    ("flaky", [FLAKY], ArtifactKind.VERIFIER),
    ("verifier_network_attempt", [], ArtifactKind.VERIFIER),
    ("grade_time_network", [], ArtifactKind.VERIFIER),
    ("instruction_reveals_solution", [], ArtifactKind.INSTRUCTION),
    ("static_check_failed", [{**LEAK, "check": "answer_file_in_environment"}], ArtifactKind.ENVIRONMENT),
])
def test_each_defect_routes_to_the_artifact_the_repair_regenerates(failure, findings, artifact):
    task = make_task()
    validation = validate(task.current_version, accepted=False, failure=failure, findings=findings)
    assert repair.preclassify(validation) == artifact


def test_the_repair_prompt_receives_the_evidence():
    task = make_task()
    validation = validate(task.current_version, accepted=False, failure="leaked_answer", findings=[WARNING, LEAK])
    text = "\n".join(f"- {line}" for line in repair_evidence.findings(validation))
    assert text.splitlines()[0].startswith("- [error] leaked_answer at /opt/.a: the oracle writes /app/out.json")
    assert '{"total": 17}' in text and "tests/test_outputs.py:4" in text
    # every repair prompt has a place for it
    from tasks.generation import prompt
    for stage in ("task.router", "task.repair.verifier", "task.repair.solution", "task.repair.instruction",
                  "task.environment_repair"):
        assert "evidence" in prompt(stage).placeholders
