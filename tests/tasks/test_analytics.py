"""The analytics aggregations against values computed by hand on a small dataset, and every
analytics page, chart and CSV as a user gets them.

The dataset (built through the ORM, see `data`):

  task  strategy  status     tags      family      validations (in order)      n_tests
  T1    forward   validated  csv, sql  Structured  oracle_failed, accepted     4
  T2    forward   validated  csv       Structured  accepted                    2
  T3    reverse   discarded  git       Software    nop_unexpected_pass         -
  T4    forward   failed     -         -           (none)                      -

  batch B1 (built-in, model m1): T1 passed/failed/failed, T2 failed ×3 (+1 error), T3 passed ×2
  batch B2 (harbor, model m2, agent claude-code): T1 passed
"""
import csv
import io
import json
import math
import re

import plotly.graph_objects
import pytest
from django.core.cache import cache

from facet_site.lib.stats import wilson_interval
from tasks import analytics as an
from tasks.models import (
    RolloutBatchStatus,
    LabelKind,
    RolloutBatch,
    Task,
    TaskLabel,
    TaskStatus,
    TaskVersion,
    TestResult,
    Trajectory,
    TrajectoryStatus,
    Trial,
    Turn,
    Validation,
    ValidationStatus,
)

pytestmark = pytest.mark.django_db

XSS = "<script>alert('x')</script>"


def cmd(text, program, kind):
    return {"command": text, "program": program, "kind": kind}


def make_task(name, strategy, status, *, tags=(), family=None, category=None, n_tests=None, validations=()):
    task = Task.objects.create(name=name, strategy=strategy, status=status, n_tests=n_tests)
    version = TaskVersion.objects.create(task=task, number=1, content_hash=f"sha256:{name}", files={"instruction.md": name})
    Task.objects.filter(pk=task.pk).update(current_version=version)
    task.refresh_from_db()
    for tag in tags:
        TaskLabel.objects.create(task=task, kind=LabelKind.TAG, value=tag)
    if family:
        TaskLabel.objects.create(task=task, kind=LabelKind.FAMILY, value=family)
    if category:
        TaskLabel.objects.create(task=task, kind=LabelKind.CATEGORY, value=category)
        TaskLabel.objects.create(task=task, kind=LabelKind.DOMAIN, value="data-analysis-and-research")
    for failure in validations:
        Validation.objects.create(version=version, status=ValidationStatus.DONE, accepted=failure is None,
                                  failure=failure or "")
    return task


def attempt(batch, task, n, passed, *, turns=0, failure="", tests=None, turn_rows=(), model=None, agent=None,
            status=TrajectoryStatus.DONE):
    trial = None
    if tests is not None:
        trial = Trial.objects.create(version=task.current_version, kind="rollout", passed=bool(passed),
                                     reward=1.0 if passed else 0.0)
        TestResult.objects.bulk_create([TestResult(trial=trial, name=f"test_{i}", outcome=o) for i, o in enumerate(tests)])
    traj = Trajectory.objects.create(batch=batch, task=task, version=task.current_version, attempt=n,
                                     model=model or batch.model, agent=agent or batch.agent, status=status,
                                     passed=passed if status == TrajectoryStatus.DONE else None,
                                     reward=(1.0 if passed else 0.0) if status == TrajectoryStatus.DONE else None,
                                     failure=failure, n_turns=turns, trial=trial)
    for i, (state, commands) in enumerate(turn_rows, 1):
        Turn.objects.create(trajectory=traj, index=i, state=state, commands=commands, analysis=f"turn {i} {XSS}")
    return traj


@pytest.fixture
def data():
    structured, software = "Structured data and databases", "Software development and testing"
    t1 = make_task("T1", "forward", TaskStatus.VALIDATED, tags=("csv", "sql"), family=structured,
                   category="csv-excel-and-spreadsheets", n_tests=4, validations=("oracle_failed", None))
    t2 = make_task("T2", "forward", TaskStatus.VALIDATED, tags=("csv",), family=structured,
                   category="csv-excel-and-spreadsheets", n_tests=2, validations=(None,))
    t3 = make_task(f"T3 {XSS}", "reverse", TaskStatus.DISCARDED, tags=("git",), family=software,
                   validations=("nop_unexpected_pass",))
    t4 = make_task("T4", "forward", TaskStatus.FAILED)
    b1 = RolloutBatch.objects.create(name="ours", source="builtin", model="m1", agent="terminus-2", attempts=3,
                                     status=RolloutBatchStatus.DONE)
    b2 = RolloutBatch.objects.create(name="imported", source="harbor", model="m2", agent="claude-code", attempts=1,
                                     status=RolloutBatchStatus.DONE)
    attempt(b1, t1, 0, True, turns=3, turn_rows=[
        ("observation", [cmd("cat /app/a.csv", "cat", "observation"), cmd("ls /app", "ls", "observation")]),
        ("action", [cmd("python3 solve.py", "python3", "action")]),
        ("none", [])])
    attempt(b1, t1, 1, False, turns=4, failure="tests_failed", tests=["failed", "error", "passed", "passed"],
            turn_rows=[("action", [cmd("rm -rf x", "rm", "action")])])
    attempt(b1, t1, 2, False, turns=5, failure="tests_failed", tests=["failed", "passed"])
    attempt(b1, t2, 0, False, turns=2, failure="turn_budget", tests=["failed", "failed"])
    attempt(b1, t2, 1, False, turns=2, failure="tests_failed", tests=["passed"])
    attempt(b1, t2, 2, False, turns=2, failure="no_reward")
    attempt(b1, t2, 3, None, status=TrajectoryStatus.ERROR, failure="infra_error")  # never counted
    attempt(b1, t3, 0, True, turns=6, turn_rows=[
        ("observation", [cmd("cd /app && cat x", "cat", "observation")]),
        ("mixed", [cmd("echo hi > out.txt", "echo", "action"), cmd("cat out.txt", "cat", "observation")])])
    attempt(b1, t3, 1, True, turns=6, turn_rows=[
        ("action", [cmd("mkdir out", "mkdir", "action")]),
        ("observation", [cmd("cat out", "cat", "observation")])])
    attempt(b2, t1, 0, True, turns=0)
    return {"t1": t1, "t2": t2, "t3": t3, "t4": t4, "b1": b1, "b2": b2}


def af(query=""):
    return an.AnalyticsFilter.from_query(query)


@pytest.fixture(autouse=True)
def _uncached(settings):
    """The aggregates are checked as computed; the cache has its own test."""
    settings.FACET_ANALYTICS_CACHE_S = 0


# --- aggregations -------------------------------------------------------------------------------


def test_pass_at_k_uses_per_task_counts_and_leaves_out_tasks_with_too_few_attempts(data):
    table = an.pass_at_k_table(af())
    by_task = {r["task_id"]: r for r in an.pass_at_k_rows(af())}
    t1, t2, t3 = by_task[data["t1"].pk], by_task[data["t2"].pk], by_task[data["t3"].pk]
    assert (t1["n"], t1["c"], t1["p1"], t1["p3"]) == (4, 2, 0.5, 1.0)  # 1 - C(2,3)/C(4,3) = 1
    assert (t2["n"], t2["c"], t2["p1"], t2["p3"]) == (3, 0, 0.0, 0.0)
    assert (t3["n"], t3["c"], t3["p1"], t3["p3"]) == (2, 2, 1.0, None)
    assert t1["task"] == "T1"
    # sorted and paged in the database: P@3 descending, tasks without it last
    assert [r["task_id"] for r in an.pass_at_k_rows(af(), "-p3")] == [data["t1"].pk, data["t2"].pk, data["t3"].pk]
    assert [r["task_id"] for r in an.pass_at_k_rows(af(), "p1")][0] == data["t2"].pk
    s = table["summary"]
    assert (s["tasks"], s["trajectories"], s["passed"]) == (3, 9, 4)  # the error attempt is not counted
    assert s["p1"] == pytest.approx(0.5) and s["p3"] == pytest.approx(0.5)
    assert (s["p3_tasks"], s["p3_excluded"]) == (2, 1)
    assert [b["tasks"] for b in table["buckets"]] == [1, 0, 1, 0, 1]  # P@1 0, (0,⅓], (⅓,⅔], (⅔,1), 1


@pytest.mark.parametrize("n,c", [(3, 1), (5, 1), (6, 2), (7, 4), (10, 0), (10, 8), (12, 3)])
def test_pass_at_3_in_sql_equals_the_unbiased_estimator(n, c, db):
    from facet_site.lib.stats import pass_at_k

    task = make_task("T", "forward", TaskStatus.VALIDATED)
    batch = RolloutBatch.objects.create(name="b", model="m", status=RolloutBatchStatus.DONE)
    for i in range(n):
        attempt(batch, task, i, i < c)
    row = an.pass_at_k_rows(af()).get()
    assert row["p3"] == pytest.approx(pass_at_k(n, c, 3)) and row["p1"] == pytest.approx(c / n)
    assert an.pass_at_k_table(af())["summary"]["p3"] == pytest.approx(pass_at_k(n, c, 3))


def test_pass_at_k_per_model_and_with_the_model_filter(data):
    by_model = {r["model"]: r for r in an.pass_at_k_table(af())["by_model"]}
    assert by_model["m1"]["p1"] == pytest.approx((1 / 3 + 0 + 1) / 3)
    assert by_model["m1"]["p3"] == pytest.approx(0.5)  # T1 1 - C(2,3)/C(3,3) = 1, T2 0
    assert (by_model["m2"]["tasks"], by_model["m2"]["p1"], by_model["m2"]["p3"]) == (1, 1.0, None)
    only_m1 = an.pass_at_k_table(af("model=m1"))["summary"]
    assert only_m1["p1"] == pytest.approx(4 / 9) and only_m1["trajectories"] == 8
    assert an.pass_at_k_table(af("source=harbor"))["summary"]["trajectories"] == 1
    assert an.pass_at_k_table(af(f"batch={data['b2'].pk}"))["summary"]["tasks"] == 1
    assert an.pass_at_k_table(af("agent=claude-code"))["summary"]["passed"] == 1


def test_tag_pass_rates_with_wilson_intervals_and_the_overall_rate(data):
    result = an.label_pass_rates(af(), [LabelKind.TAG])
    assert [(r["label"], r["rollouts"], r["passed"], r["tasks"]) for r in result["rows"]] == [
        ("git", 2, 2, 1), ("sql", 4, 2, 1), ("csv", 7, 2, 2)]  # ordered by observed rate
    csv_row = result["rows"][2]
    assert csv_row["rate"] == pytest.approx(2 / 7)
    assert (csv_row["low"], csv_row["high"]) == pytest.approx(wilson_interval(2, 7))
    assert result["overall"]["rollouts"] == 9 and result["overall"]["rate"] == pytest.approx(4 / 9)
    assert [r["label"] for r in an.label_pass_rates(af(), [LabelKind.TAG], top=1)["rows"]] == ["csv"]  # most frequent


def test_tag_pass_rates_follow_the_task_filter(data):
    forward = an.label_pass_rates(af("strategy=forward"), [LabelKind.TAG])
    assert {r["label"] for r in forward["rows"]} == {"csv", "sql"}
    assert forward["overall"]["rollouts"] == 7
    cats = an.label_pass_rates(af("family=Structured data and databases"), [LabelKind.CATEGORY])
    assert [(r["label"], r["rollouts"], r["passed"]) for r in cats["rows"]] == [("csv-excel-and-spreadsheets", 7, 2)]


def test_failed_checks_among_unsuccessful_rollouts(data):
    result = an.failed_checks(af())
    assert [(r["failed_checks"], r["rollouts"]) for r in result["rows"]] == [(1, 1), (2, 2)]
    assert result["rows"][1]["share"] == pytest.approx(2 / 3)
    assert result["omitted"] == 2  # one trial without a failed check, one attempt without a trial
    assert (result["unsuccessful"], result["failed"], result["errored"]) == (5, 4, 1)
    assert {r["failure"]: r["rollouts"] for r in result["reasons"]} == {"tests_failed": 3, "turn_budget": 1,
                                                                          "no_reward": 1}


def test_initial_validation_failures_per_strategy(data):
    rows = an.initial_failures(af())["rows"]
    assert [(r["strategy"], r["failure"], r["tasks"], r["share"]) for r in rows] == [
        ("forward", "oracle_failed", 1, 1.0), ("reverse", "nop_unexpected_pass", 1, 1.0)]


def test_strategy_comparison(data):
    rows = {r["strategy"]: r for r in an.strategy_comparison(af())}
    f = rows["forward"]
    assert (f["selected"], f["reached"], f["initially_valid"], f["final"]) == (3, 2, 1, 2)
    assert f["initial_rate"] == pytest.approx(0.5) and f["yield"] == pytest.approx(2 / 3)
    r = rows["reverse"]
    assert (r["selected"], r["reached"], r["initially_valid"], r["final"], r["yield"]) == (1, 1, 0, 0, 0.0)
    assert f["paper"]["initially_valid"] == 46


def test_dataset_statistics_per_batch_and_pooled(data):
    result = an.dataset_statistics(af())
    rows = {r["dataset"]: r for r in result["rows"] + result["totals"]}
    ours = rows["ours"]
    assert (ours["trajectories"], ours["successful"], ours["tasks"]) == (8, 3, 3)
    assert ours["turns"] == pytest.approx(30 / 8)
    assert ours["tests"] == pytest.approx(3.0)  # T1 4 and T2 2; T3 has no oracle count
    assert ours["p1"] == pytest.approx(4 / 9) and ours["p3"] == pytest.approx(0.5)
    imported = rows["imported"]
    assert (imported["trajectories"], imported["tasks"], imported["p1"], imported["p3"]) == (1, 1, 1.0, None)
    assert rows["All built-in rollouts"]["trajectories"] == 8
    assert rows["All imported (Harbor)"]["tests"] == 4


def test_command_patterns_of_successful_trajectories(data):
    result = an.command_patterns(af())
    assert result["trajectories"] == 4 and result["occurrences"] == 8  # the failed attempt's rm is not counted
    commands = [(c["command"], c["occurrences"]) for c in result["commands"]]
    assert commands[0] == ("cat", 4)
    assert result["commands"][0]["share"] == 0.5
    assert set(commands[1:]) == {("echo", 1), ("ls", 1), ("mkdir", 1), ("python3", 1)}
    assert result["top3"]["occurrences"] == 6 and result["top3"]["share"] == 0.75
    assert result["observation"]["occurrences"] == 5 and result["action"]["occurrences"] == 3
    assert {s["state"]: s["turns"] for s in result["states"]} == {"observation": 3, "action": 2, "mixed": 1, "none": 1}
    assert (result["first_turn_observation"]["turns"], result["first_turn_observation"]["of"]) == (2, 3)
    p = {(t["from"], t["to"]): t["probability"] for t in result["transitions"] if t["count"]}
    assert p == {("observation", "action"): 0.5, ("observation", "mixed"): 0.5, ("action", "none"): 0.5,
                 ("action", "observation"): 0.5}
    assert sum(t["count"] for t in result["transitions"]) == 4


def test_family_distribution_counts_validated_tasks_unless_asked(data):
    result = an.family_distribution(af())
    assert result["total"] == 2 and [(r["family"], r["tasks"], r["share"]) for r in result["rows"]] == [
        ("Structured data and databases", 2, 1.0)]
    discarded = an.family_distribution(af("status=discarded"))
    assert [(r["family"], r["tasks"]) for r in discarded["rows"]] == [("Software development and testing", 1)]
    assert an.family_distribution(af("status=failed"))["without_family"] == 1


def test_the_filter_reports_bad_values_and_builds_links(data):
    f = af("batch=x&source=elsewhere&version=old&strategy=sideways&model=m1")
    assert len(f.errors) == 4
    assert f.model == ["m1"] and f.query_string() == "model=m1"
    f = af("strategy=forward&model=m1")
    assert f.task_list_url(tag=["csv"]) == "/tasks/?strategy=forward&tag=csv"
    assert f.trajectory_list_url(passed="no") == "/tasks/rollouts/trajectories/?strategy=forward&model=m1&passed=no"
    assert an.pass_at_k_table(af("version=current"))["summary"]["trajectories"] == 9


def test_aggregations_are_grouped_queries_not_row_loops(data, django_assert_max_num_queries):
    # more rollouts do not mean more queries
    for i in range(30):
        attempt(data["b1"], data["t2"], 10 + i, i % 2 == 0, turns=1, tests=["failed"],
                turn_rows=[("observation", [cmd("cat f", "cat", "observation")])])
    with django_assert_max_num_queries(2):
        an.pass_at_k_table(af())
    with django_assert_max_num_queries(2):
        an.label_pass_rates(af(), [LabelKind.TAG])
    with django_assert_max_num_queries(6):
        an.failed_checks(af())
    with django_assert_max_num_queries(6):
        an.command_patterns(af())


def test_a_cached_result_is_reused_until_the_data_changes(data, settings, django_assert_max_num_queries):
    settings.FACET_ANALYTICS_CACHE_S = 60
    cache.clear()
    first = an.command_patterns(af())
    with django_assert_max_num_queries(1):  # the data stamp only
        assert an.command_patterns(af()) == first
    assert an.command_patterns(af("model=m2"))["occurrences"] == 0  # another selection, another entry
    attempt(data["b1"], data["t3"], 5, True, turns=1, turn_rows=[("action", [cmd("rm x", "rm", "action")])])
    assert an.command_patterns(af())["occurrences"] == 9
    cache.clear()


# --- pages, charts, CSV -------------------------------------------------------------------------


def figure(response, name):
    html = response.content.decode()
    marker = f'<script id="{name}" type="application/json">'
    start = html.index(marker) + len(marker)
    return json.loads(html[start:html.index("</script>", start)])


def rows_of(response):
    assert response["Content-Type"].startswith("text/csv")
    return list(csv.DictReader(io.StringIO(response.content.decode())))


PAGES = [("/tasks/analytics/", "tags-data"), ("/tasks/analytics/pass-at-k/", "buckets-data"),
         ("/tasks/analytics/tags/", "tags-data"), ("/tasks/analytics/failures/", "checks-data"),
         ("/tasks/analytics/strategies/", "strategies-data"), ("/tasks/analytics/datasets/", "datasets-data"),
         ("/tasks/analytics/commands/", "commands-data"), ("/tasks/analytics/families/", "families-data")]


@pytest.mark.parametrize("url,chart", PAGES)
def test_every_analytics_page_renders_its_chart_with_links_and_escapes_task_text(data, client_as, url, chart):
    response = client_as("viewer").get(url)
    assert response.status_code == 200
    html = response.content.decode()
    assert XSS not in html
    fig = figure(response, chart)
    for name in re.findall(r'<script id="([a-z]+-data)" type="application/json">', html):
        plotly.graph_objects.Figure(figure(response, name))  # written as plain dicts: still valid figures
    links = [c for trace in fig["data"] for c in (trace.get("customdata") or []) if c]
    assert links and all(link.startswith("/tasks/") for link in links)
    assert "format=csv" in html  # every page offers its tables as CSV


def test_the_tag_chart_has_error_bars_the_reference_line_and_opens_the_task_list(data, client_as):
    response = client_as("viewer").get("/tasks/analytics/tags/?strategy=forward")
    fig = figure(response, "tags-data")
    bar = fig["data"][0]
    assert bar["x"] == ["sql", "csv"]
    assert bar["customdata"] == ["/tasks/?strategy=forward&tag=sql", "/tasks/?strategy=forward&tag=csv"]
    low, high = wilson_interval(2, 7)
    assert bar["error_y"]["array"][1] == pytest.approx(100 * high - 100 * 2 / 7, abs=0.01)
    assert bar["error_y"]["arrayminus"][1] == pytest.approx(100 * 2 / 7 - 100 * low, abs=0.01)
    line = fig["layout"]["shapes"][0]
    assert line["line"]["dash"] == "dash" and line["y0"] == pytest.approx(100 * 2 / 7, abs=0.01)
    # the link opens exactly the tasks counted
    listing = client_as("viewer").get(bar["customdata"][1])
    assert listing.status_code == 200 and "T1" in listing.content.decode() and "T2" in listing.content.decode()


def test_failure_and_strategy_charts_open_the_matching_lists(data, client_as):
    c = client_as("viewer")
    checks = figure(c.get("/tasks/analytics/failures/"), "checks-data")["data"][0]
    assert checks["x"] == ["1", "2"] and checks["y"] == [1, 2]
    page = c.get(checks["customdata"][1]).content.decode()
    assert "2 finished trajectories" in page
    initial = figure(c.get("/tasks/analytics/failures/"), "initial-data")
    forward = next(t for t in initial["data"] if t["name"] == "forward")
    link = next(x for x in forward["customdata"] if x)
    opened = c.get(link)
    assert opened.status_code == 302 and opened["Location"] == f"/tasks/?strategy=forward&ids={data['t1'].pk}"
    strategies = figure(c.get("/tasks/analytics/strategies/"), "strategies-data")
    final = next(t for t in strategies["data"] if t["name"] == "Final yield")
    assert final["customdata"][0] == "/tasks/?strategy=forward&stage=final_validated"
    assert "T2" in c.get(final["customdata"][0]).content.decode()


CSVS = [
    ("/tasks/analytics/?format=csv", "trajectories", "9"),
    ("/tasks/analytics/pass-at-k/?format=csv", "n", None),
    ("/tasks/analytics/pass-at-k/?format=csv&table=pass-at-k-models", "model", "m1"),
    ("/tasks/analytics/tags/?format=csv", "label", "git"),
    ("/tasks/analytics/tags/?format=csv&table=categories", "label", "csv-excel-and-spreadsheets"),
    ("/tasks/analytics/tags/?format=csv&table=domains", "label", "data-analysis-and-research"),
    ("/tasks/analytics/failures/?format=csv", "failed_checks", "1"),
    ("/tasks/analytics/failures/?format=csv&table=failure-reasons", "failure", "tests_failed"),
    ("/tasks/analytics/failures/?format=csv&table=initial-failures", "strategy", "forward"),
    ("/tasks/analytics/strategies/?format=csv", "strategy", "forward"),
    ("/tasks/analytics/datasets/?format=csv", "dataset", "All built-in rollouts"),
    ("/tasks/analytics/datasets/?format=csv&table=paper", "dataset", "Nemotron-Terminal"),
    ("/tasks/analytics/commands/?format=csv", "command", "cat"),
    ("/tasks/analytics/commands/?format=csv&table=turn-states", "state", "observation"),
    ("/tasks/analytics/commands/?format=csv&table=transitions", "from", "observation"),
    ("/tasks/analytics/families/?format=csv", "family", "Structured data and databases"),
]


@pytest.mark.parametrize("url,column,first", CSVS)
def test_every_table_downloads_as_csv(data, client_as, url, column, first):
    response = client_as("viewer").get(url)
    assert response.status_code == 200
    assert "attachment" in response["Content-Disposition"]
    rows = rows_of(response)
    assert rows and column in rows[0]
    if first is not None:
        assert rows[0][column] == first


def test_csv_values_match_the_aggregates(data, client_as):
    c = client_as("viewer")
    passk = {r["task_id"]: r for r in rows_of(c.get("/tasks/analytics/pass-at-k/?format=csv"))}
    assert float(passk[str(data["t1"].pk)]["p3"]) == 1.0 and passk[str(data["t3"].pk)]["p3"] == ""
    tags = {r["label"]: r for r in rows_of(c.get("/tasks/analytics/tags/?format=csv"))}
    assert math.isclose(float(tags["csv"]["rate"]), 2 / 7, rel_tol=1e-5)
    assert c.get("/tasks/analytics/tags/?format=csv&table=nonsense").status_code == 404


def test_bad_filter_values_are_shown_not_a_500(data, client_as):
    response = client_as("viewer").get("/tasks/analytics/tags/?batch=abc&strategy=sideways")
    assert response.status_code == 200
    html = response.content.decode()
    assert "batch: &#x27;abc&#x27; is not a number" in html and "strategy: unknown value" in html


def test_empty_database_pages_render(client_as, db):
    c = client_as("viewer")
    for url, _chart in PAGES:
        assert c.get(url).status_code == 200, url


def test_the_analytics_api_returns_the_tables(data, client, token_for):
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token_for('viewer')}"}
    body = client.get("/api/analytics/tags?strategy=forward", **auth).json()
    assert [r["label"] for r in body["rows"]] == ["sql", "csv"]
    assert client.get("/api/analytics/strategies", **auth).json()["rows"][0]["strategy"] == "forward"
    assert client.get("/api/analytics/nope", **auth).status_code == 404
    assert client.get("/api/analytics/tags?batch=x", **auth).status_code == 422
