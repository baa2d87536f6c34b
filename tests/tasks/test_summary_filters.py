"""The task summary columns agree with the records they summarise, labels come from skills or
task.toml, and the shared task filter selects what its query string says."""
import pytest
from django.contrib.auth.models import User

from scenarios.models import CandidatePair, PairSkill, PairVerdict, RunStatus, Scenario, Stage, SynthesisRun, WorkStatus
from skills.models import Category
from tasks import summary
from tasks.filters import TaskFilter
from tasks.models import (
    Decision,
    LabelKind,
    RepairRound,
    ReviewState,
    RolloutBatch,
    Task,
    TaskLabel,
    TaskStatus,
    TaskVersion,
    TestResult,
    Trajectory,
    TrajectoryStatus,
    Trial,
    TrialKind,
    ReviewVerdict,
)

TOML = '''version = "1.0"

[metadata]
category = "databases-and-sql"
tags = ["sqlite", "csv-tools"]
'''


def make_task(name="t", *, status=TaskStatus.VALIDATED, instruction="Sum the paid orders.", toml=TOML, run=None,
              files=None):
    task = Task.objects.create(name=name, status=status, run=run, imported=run is None)
    version = TaskVersion.objects.create(task=task, number=1, content_hash=f"sha256:{name}-1",
                                         files=files or {"instruction.md": instruction, "task.toml": toml})
    Task.objects.filter(pk=task.pk).update(current_version=version)
    task.refresh_from_db()
    return task


def new_version(task, n):
    v = TaskVersion.objects.create(task=task, number=n, content_hash=f"sha256:{task.name}-{n}",
                                   files={"instruction.md": f"v{n}", "task.toml": TOML}, parent=task.current_version)
    Task.objects.filter(pk=task.pk).update(current_version=v)
    task.refresh_from_db()
    return v


def decide(task, verdict, user, **kw):
    return Decision.objects.create(task=task, version=task.current_version, content_hash=task.current_version.content_hash,
                                   verdict=verdict, author=user, **kw)


def oracle(version, outcomes):
    trial = Trial.objects.create(version=version, kind=TrialKind.ORACLE, passed=True, reward=1)
    TestResult.objects.bulk_create([TestResult(trial=trial, name=f"test_{i}", outcome=o) for i, o in enumerate(outcomes)])
    return trial


@pytest.fixture
def reviewer(db):
    return User.objects.create_user("rev")


def test_summary_follows_decisions_trials_repairs_and_rollouts(reviewer):
    task = make_task("orders")
    assert summary.refresh_summary(task).review_state == ReviewState.UNREVIEWED

    oracle(task.current_version, ["passed", "passed", "passed"])
    first = decide(task, ReviewVerdict.REJECT, reviewer, reason="too_strict")
    decide(task, ReviewVerdict.APPROVE, reviewer)
    task = summary.refresh_summary(task)
    assert (task.review_state, task.n_tests) == (ReviewState.APPROVED, 3)

    batch = RolloutBatch.objects.create(name="b")
    for attempt, passed in enumerate([True, False, True, None]):
        Trajectory.objects.create(batch=batch, task=task, version=task.current_version, attempt=attempt, passed=passed,
                                  status=TrajectoryStatus.DONE if passed is not None else TrajectoryStatus.RUNNING)
    task = summary.refresh_summary(task)
    assert task.n_rollouts == 3 and task.pass_rate == pytest.approx(2 / 3)

    # a new version re-opens review and has no tests, rollouts or repairs of its own yet
    RepairRound.objects.create(task=task, number=1, artifact="verifier", failure="nop_passed",
                               from_version=task.current_version)
    new_version(task, 2)
    task = summary.refresh_summary(task)
    assert (task.review_state, task.n_tests, task.n_rollouts, task.pass_rate, task.repair_rounds) == \
        (ReviewState.UNREVIEWED, None, 0, None, 1)
    assert task.search_document == "orders\nv2"

    # the stored columns are exactly what the records say
    stored = Task.objects.values(*summary.expected_summary(task)).get(pk=task.pk)
    assert stored == summary.expected_summary(task)
    assert first.task_id == task.pk


def test_undo_withdraws_a_decision_and_restores_the_earlier_one(reviewer):
    task = make_task("undo")
    decide(task, ReviewVerdict.NEEDS_FIX, reviewer, reason="under_specified")
    approval = decide(task, ReviewVerdict.APPROVE, reviewer)
    assert summary.refresh_summary(task).review_state == ReviewState.APPROVED
    Decision.objects.create(task=task, version=task.current_version, content_hash=approval.content_hash,
                            verdict=approval.verdict, author=reviewer, withdraws=approval, comment="undo")
    assert summary.refresh_summary(task).review_state == ReviewState.NEEDS_FIX


def test_labels_of_an_imported_task_come_from_task_toml(db):
    task = make_task("imported")
    summary.set_labels(task)
    labels = set(TaskLabel.objects.filter(task=task).values_list("kind", "value"))
    assert (LabelKind.TAG, "sqlite") in labels and (LabelKind.TAG, "csv-tools") in labels
    assert (LabelKind.CATEGORY, "databases-and-sql") in labels
    assert (LabelKind.DOMAIN, "data-analysis-and-research") in labels
    assert (LabelKind.FAMILY, "Structured data and databases") in labels
    # idempotent, and stale labels go when task.toml changes
    summary.set_labels(task)
    assert TaskLabel.objects.filter(task=task).count() == len(labels)


def test_labels_of_a_generated_task_come_from_its_skills(db):
    from skills.models import Skill

    cat = Category.objects.get(slug="csv-excel-and-spreadsheets")
    a = Skill.objects.create(key="clawhub:ann/csv-report", name="csv report", source="t", source_kind="directory",
                             content_hash="a", category=cat)
    b = Skill.objects.create(key="clawhub:bob/sqlite-query", name="sqlite", source="t", source_kind="directory",
                             content_hash="b")
    run = SynthesisRun.objects.create(name="r", status=RunStatus.SUCCEEDED, stage=Stage.DONE)
    pair = CandidatePair.objects.create(run=run, skill_set=f"{a.pk},{b.pk}", verdict=PairVerdict.ACCEPTED,
                                        status=WorkStatus.DONE)
    PairSkill.objects.bulk_create([PairSkill(pair=pair, skill=a, position=0), PairSkill(pair=pair, skill=b, position=1)])
    scenario = Scenario.objects.create(pair=pair, run=run, status=WorkStatus.DONE, title="s")
    task = Task.objects.create(name="gen", scenario=scenario, run=run)
    summary.set_labels(task)
    assert set(TaskLabel.objects.filter(task=task).values_list("kind", "value")) == {
        (LabelKind.TAG, "csv-report"), (LabelKind.TAG, "sqlite-query"),
        (LabelKind.CATEGORY, "csv-excel-and-spreadsheets"), (LabelKind.DOMAIN, "data-analysis-and-research"),
        (LabelKind.FAMILY, "Structured data and databases"),
        (LabelKind.DIFFICULTY, "medium")}  # the scenario names no difficulty: medium


def test_filter_selects_what_the_query_says(reviewer):
    run = SynthesisRun.objects.create(name="r", status=RunStatus.SUCCEEDED, stage=Stage.DONE)
    a = make_task("alpha", instruction="Join the orders ledger with customers")
    b = make_task("beta", status=TaskStatus.DISCARDED, run=run)
    c = make_task("gamma", toml='version = "1.0"\n[metadata]\ncategory = "documents-and-markdown"\ntags = ["md"]\n')
    for t in (a, b, c):
        summary.set_labels(t)
    oracle(a.current_version, ["passed"] * 4)
    decide(c, ReviewVerdict.REJECT, reviewer, reason="flaky")
    for t in (a, b, c):
        summary.refresh_summary(t)

    def names(query):
        f = TaskFilter.from_query(query)
        assert not f.errors, f.errors
        return [t.name for t in f.queryset()]

    assert names("") == ["gamma", "beta", "alpha"]
    assert names("status=validated") == ["gamma", "alpha"]
    assert names(f"run={run.pk}") == ["beta"]
    assert names("origin=generated") == ["beta"]
    assert names("category=data-analysis-and-research") == ["beta", "alpha"]
    assert names("tag=md") == ["gamma"]
    assert names("family=Documents and reports") == ["gamma"]
    assert names("review=rejected&reason=flaky") == ["gamma"]
    assert names("reason=too_strict") == []
    assert names("tests_min=3") == ["alpha"]
    assert names("q=ledger customers") == ["alpha"]
    assert names("sort=name") == ["alpha", "beta", "gamma"]
    assert names("sort=-tests") == ["alpha", "gamma", "beta"]  # unknown counts last
    assert names(f"ids={a.pk},{c.pk}") == ["gamma", "alpha"]


def test_filter_reports_bad_values_and_round_trips():
    f = TaskFilter.from_query("status=validated&status=bogus&run=x&pass_min=2&sort=nope&cols=name,zzz&tests_min=-1")
    assert f.status == ["validated"]
    assert f.errors == ["status: unknown value 'bogus'", "run: 'x' is not a number",
                        "tests_min: '-1' is not a whole number", "pass_min: '2' is not a rate between 0 and 1",
                        "sort: unknown column 'nope'", "cols: unknown column 'zzz'"]
    assert f.cols == ["name"]
    g = TaskFilter.from_query("review=approved&tag=sqlite&tag=csv&pass_max=0.5&sort=-pass&q=orders")
    assert TaskFilter.from_query(g.query_string()).params() == g.params()
    assert g.describe() == "review=approved, tag=sqlite, tag=csv, q=orders, pass_max=0.5"
    assert TaskFilter.from_query("").is_empty
