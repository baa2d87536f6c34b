"""The task list (filters, sort, columns, counts, pagination, saved views, htmx) and the task
page (one tab per artifact, repair diffs, downloads), over records made through the ORM; and
that nothing a model wrote can run in a reviewer's browser."""
import re

import pytest
from django.urls import reverse

from scenarios import run_config
from scenarios.models import LLMCall
from tasks import construction, diffs, summary, versions
from tasks.models import (
    EnvironmentBuild,
    LabelKind,
    RepairRound,
    ReviewState,
    SavedView,
    Step,
    Task,
    TaskLabel,
    TaskStatus,
    TestResult,
    Trial,
    Validation,
    ValidationStatus,
)
from tasks.list_views import PAGE_SIZE
from tasks.terminal import ansi_to_html, strip_ansi
from tasks.views import COLLAPSE_LINES
from tests.html_safety import active_content

pytestmark = pytest.mark.django_db

XSS = "<script>alert('pwned')</script>"
IMG = '<img src=x onerror="alert(1)">'
EVIL = f"{XSS} {IMG}"
GREEN_PASS = "\x1b[32mPASS\x1b[0m"

E0 = {
    "image_tag": "facet-env:0123456789ab", "workdir": "/app", "roots": ["/app"], "services": ["sleep infinity"],
    "snapshot": {"roots": ["/app"], "missing": [], "processes": [], "truncated": False, "taken_at": 0.0, "files": {
        "/app/data/orders.csv": {"path": "/app/data/orders.csv", "kind": "file", "size": 12, "mode": 0o644, "uid": 0,
                                 "gid": 0, "sha256": "ab" * 32, "link": "", "text_head": f"id,total\n{XSS}\n"}}},
}
FS_DIFF = {
    "added": ["/app/out/report.csv"], "removed": ["/app/tmp.txt"], "modified": {"/app/data/orders.csv": ["content", "size"]},
    "processes_started": [], "processes_ended": [], "truncated": False,
    "files": {"/app/out/report.csv": {"kind": "file", "size": 20, "mode": 0o644, "sha256": "cd" * 32,
                                      "text_head": f"customer,total\n{EVIL}\n"}},
}


def _call(run, stage, **kw):
    return LLMCall.objects.create(run=run, stage=stage, subject="scenario:test", model="scripted",
                                  prompt_version=f"{stage}@1", status="ok", response_text=f"answer {EVIL}", **kw)


def _trial(validation, kind, *, passed=True, reward=1.0, tests=(), index=0, **kw):
    trial = Trial.objects.create(validation=validation, version=validation.version, kind=kind, index=index,
                                 reward=reward, passed=passed, seconds=1.5, verifier_seconds=0.5,
                                 solution_seconds=0.7 if kind != "nop" else None, peak_memory_bytes=32 * 2**20, **kw)
    TestResult.objects.bulk_create([TestResult(trial=trial, name=n, outcome=o, message=m) for n, o, m in tests])
    return trial


def build_task_with_repairs(run) -> Task:
    """A generated task with two repairs (verifier, then solution), three versions, their
    validations, trials, tests, builds (one failed, repaired), e0, LLM calls; model text carrying
    <script> and onerror= everywhere a model or a task writes."""
    construction.create_tasks(run)
    task = Task.objects.get(run=run)
    manifest_call = _call(run, "task.manifest", tokens_in=1000, tokens_out=200, latency_ms=1500, cost_usd=0.0125)
    instruction_call = _call(run, "task.instruction", tokens_in=800, tokens_out=300, latency_ms=900, cost_usd=0.01)
    repair_call = _call(run, "task.repair.verifier", tokens_in=500, tokens_out=250, latency_ms=700)
    env_files = {"Dockerfile": "FROM facet-base:bookworm\nWORKDIR /app\nCOPY data/ /app/data/\n",
                 "data/orders.csv": "id,total\n1,5\n", "data/nested/notes.txt": f"notes {EVIL}\n",
                 "data/big.txt": "0123456789abcdef\n" * 20000}
    broken = {"Dockerfile": "FROM facet-base:bookworm\nRUN pip install nothing-here\n", "data/orders.csv": "id,total\n1,5\n"}
    env = task.environment
    env.files, env.status, env.initial_state = env_files, "built", E0
    env.llm_calls, env.prompt_versions = {"manifest": manifest_call.pk, "missing": None}, {"task.manifest": "manifest@7"}
    env.manifest, env.init_checks = {"directories": ["/app/data"], "note": EVIL}, ["test -f /app/data/orders.csv"]
    env.save()
    EnvironmentBuild.objects.create(environment=env, attempt=1, outcome="build_failed", files=broken,
                                    reason=f"pip failed {XSS}", log=f"\x1b[31mERROR\x1b[0m: no such package {XSS}\n")
    EnvironmentBuild.objects.create(environment=env, attempt=2, outcome="succeeded", files=env_files, seconds=3.2,
                                    log="Step 1/3 : FROM facet-base:bookworm\n")
    solve = "#!/bin/bash\nset -e\n" + "".join(f"echo step {i}\n" for i in range(COLLAPSE_LINES + 40))
    cfg = run_config.construction_config(run)
    files1 = versions.make_files(task, environment=env_files, instruction=f"# Paid orders\n\nTotal them. {EVIL}\n\n"
                                 "[click](javascript:alert(1))\n", solve_sh=solve,
                                 test_sh="#!/bin/bash\npytest /tests/test_outputs.py\n",
                                 test_py="def test_x():\n    pass\n", run_cfg=cfg)
    v1 = versions.create_version(task, files1, llm_calls={"instruction": instruction_call.pk},
                                 prompt_versions={"instruction": "task.instruction@2"})
    files2 = dict(files1, **{"tests/test_outputs.py": f"def test_y():\n    assert open('/app/out').read() == '{XSS}'\n"})
    files3 = dict(files2, **{"solution/solve.sh": solve + f"echo '{XSS}' > /app/out\n"})

    val1 = Validation.objects.create(version=v1, status=ValidationStatus.DONE, accepted=False,
                                     failure="nop_unexpected_pass", reason=f"nop: reward 1 {XSS}",
                                     build_log=f"\x1b[1mbuilding\x1b[0m {XSS}", initial_state=E0)
    _trial(val1, "nop", passed=False, failure="nop_unexpected_pass", reason=XSS,
           tests=[("test_x", "passed", "")], verifier_output=f"{GREEN_PASS} {XSS}")
    _trial(val1, "oracle", tests=[("test_x", "passed", "")], fs_diff=FS_DIFF)
    repair1 = RepairRound.objects.create(task=task, number=1, artifact="verifier", failure="nop_unexpected_pass",
                                         failure_reason=f"the verifier passes without a solution {XSS}",
                                         triggered_by=val1, from_version=v1, outcome="still_failing",
                                         router_reason="always the verifier", prompt_version="repair.verifier@3",
                                         llm_calls={"verifier": repair_call.pk})
    v2 = versions.create_version(task, files2, parent=v1, repair=repair1,  # as step_repair: the calls accumulate
                                 prompt_versions={**v1.prompt_versions, "verifier": "repair.verifier@3"},
                                 llm_calls={**v1.llm_calls, "verifier": repair_call.pk})
    RepairRound.objects.filter(pk=repair1.pk).update(to_version=v2)

    val2 = Validation.objects.create(version=v2, status=ValidationStatus.DONE, accepted=False,
                                     failure="oracle_failed", reason="oracle: reward 0 (failed: test_y)")
    _trial(val2, "nop", reward=0.0, tests=[("test_y", "failed", "no output")])
    _trial(val2, "oracle", passed=False, reward=0.0, failure="oracle_failed", reason="test_y failed",
           tests=[("test_y", "failed", f"AssertionError {XSS}")], solution_output=f"{GREEN_PASS} {EVIL}", fs_diff=FS_DIFF)
    repair2 = RepairRound.objects.create(task=task, number=2, artifact="solution", failure="oracle_failed",
                                         failure_reason="the solution does not write /app/out", triggered_by=val2,
                                         from_version=v2, outcome="fixed", routed_by="llm", router_reason=EVIL)
    v3 = versions.create_version(task, files3, parent=v2, repair=repair2, prompt_versions=v2.prompt_versions,
                                 llm_calls=v2.llm_calls)
    RepairRound.objects.filter(pk=repair2.pk).update(to_version=v3)

    val3 = Validation.objects.create(version=v3, status=ValidationStatus.DONE, accepted=True, image_tag="facet-env:abc",
                                     total_seconds=9.5, build_seconds=0.1, build_cached=True, initial_state=E0,
                                     static_findings=[{"check": "tests_hardcode", "severity": "warning", "message": EVIL}])
    _trial(val3, "nop", passed=True, reward=0.0, tests=[("test_y", "failed", "")])
    _trial(val3, "oracle", tests=[("test_y", "passed", "")], fs_diff=FS_DIFF, solution_output="done\n")
    _trial(val3, "partial", index=1, reward=0.0, tests=[("test_y", "failed", "")])
    Task.objects.filter(pk=task.pk).update(current_version=v3, status=TaskStatus.VALIDATED, step=Step.DONE,
                                           name=f"Orders {XSS}")
    task.refresh_from_db()
    summary.set_labels(task)
    summary.refresh_summary(task)
    task.refresh_from_db()
    return task


@pytest.fixture
def task(make_run):
    return build_task_with_repairs(make_run(""))


def _bulk(n, **fields):
    Task.objects.bulk_create([Task(name=f"bulk task {i:03d}", imported=True, step=Step.DONE,
                                   search_document=f"bulk task {i:03d}\nsort the ledger", **fields) for i in range(n)])


def page_of(client, url, **headers) -> str:
    response = client.get(url, **headers)
    assert response.status_code == 200, (url, response.status_code)
    return response.content.decode()


def row_ids(html: str) -> list[int]:
    """Task ids in the list's table, top to bottom."""
    body = html.split('<table class="data tasks">', 1)[1].split("</table>", 1)[0]
    return [int(m) for m in re.findall(r'<td class="num"><a href="/tasks/(\d+)/">', body)]


# --- the list ------------------------------------------------------------------------------------


def test_the_list_filters_by_every_field_and_counts_what_matches(task, client_as):
    _bulk(3, status=TaskStatus.DISCARDED, n_tests=7, repair_rounds=0, review_state=ReviewState.REJECTED)
    client = client_as("viewer")
    assert row_ids(page_of(client, "/tasks/?status=validated")) == [task.pk]
    assert len(row_ids(page_of(client, "/tasks/?status=discarded"))) == 3
    assert len(row_ids(page_of(client, "/tasks/?status=discarded&status=validated"))) == 4  # repeated, as forms send
    assert len(row_ids(page_of(client, "/tasks/?cols=name&cols=tests&status=validated&status=discarded",
                               HTTP_HX_REQUEST="true"))) == 4
    assert row_ids(page_of(client, f"/tasks/?run={task.run_id}")) == [task.pk]
    assert row_ids(page_of(client, "/tasks/?repairs_min=2&repairs_max=2")) == [task.pk]
    assert len(row_ids(page_of(client, "/tasks/?tests_min=5"))) == 3
    assert row_ids(page_of(client, "/tasks/?tests_max=1")) == [task.pk]  # one test in v3's oracle trial
    assert len(row_ids(page_of(client, "/tasks/?review=rejected"))) == 3
    assert len(row_ids(page_of(client, "/tasks/?origin=imported"))) == 3
    assert row_ids(page_of(client, "/tasks/?origin=generated&strategy=forward")) == [task.pk]
    assert row_ids(page_of(client, "/tasks/?q=paid+orders")) == [task.pk]  # words of the instruction
    assert len(row_ids(page_of(client, "/tasks/?q=ledger"))) == 3
    assert row_ids(page_of(client, "/tasks/?pass_min=0.5")) == []  # no rollouts: a pass rate is unknown
    tag = TaskLabel.objects.filter(task=task, kind=LabelKind.TAG).values_list("value", flat=True).first()
    assert tag, "the scenario's skills give the task its tags"
    html = page_of(client, "/tasks/")
    assert f'<option value="{tag}"' in html  # offered from TaskLabel
    assert row_ids(page_of(client, f"/tasks/?tag={tag}")) == [task.pk]
    TaskLabel.objects.create(task=task, kind=LabelKind.CATEGORY, value="data-processing")
    assert row_ids(page_of(client, "/tasks/?category=data-processing")) == [task.pk]
    # counts: the total for the filter, and per status for the same filter without its status
    html = page_of(client, "/tasks/?status=discarded&origin=imported")
    assert '<b class="total">3</b>' in html
    chips = html.split('id="status-chips"', 1)[1].split("</div>", 1)[0]
    assert re.search(r"Discarded <span class=\"n\">3</span>", chips) and re.search(r"Validated <span class=\"n\">0</span>", chips)
    assert re.search(r"Validated <span class=\"n\">1</span>", page_of(client, "/tasks/?status=discarded"))
    # what the form has no field for rides along hidden, so changing a filter keeps it
    html = page_of(client, f"/tasks/?stage=final_validated&ids={task.pk}&sort=name")
    assert row_ids(html) == [task.pk]
    for name, value in (("stage", "final_validated"), ("ids", str(task.pk)), ("sort", "name")):
        assert f'<input type="hidden" name="{name}" value="{value}" form="task-filters">' in html
    # nonsense is reported, never a 500
    html = page_of(client, "/tasks/?status=bogus&tests_min=many&sort=nope")
    assert "status: unknown value &#x27;bogus&#x27;" in html and "tests_min" in html and "sort: unknown column" in html


def test_headers_sort_and_the_column_chooser_changes_columns(task, client_as):
    _bulk(3, status=TaskStatus.VALIDATED)
    Task.objects.filter(name="bulk task 001").update(n_tests=9)
    client = client_as("viewer")
    html = page_of(client, "/tasks/")
    assert row_ids(html)[0] == Task.objects.order_by("-id").first().pk  # newest first by default
    # the Tests header links to the same filter sorted by tests
    assert 'href="?sort=tests"' in html
    by_tests = row_ids(page_of(client, "/tasks/?sort=-tests"))
    assert by_tests[0] == Task.objects.get(name="bulk task 001").pk and by_tests[1] == task.pk
    by_name = row_ids(page_of(client, "/tasks/?sort=name&status=validated"))
    assert by_name == list(Task.objects.filter(status="validated").order_by("name").values_list("id", flat=True))
    assert by_name != sorted(by_name, reverse=True)
    html = page_of(client, "/tasks/?sort=name&status=validated")
    assert 'href="?status=validated&amp;sort=-name"' in html  # clicking again reverses, the filter kept
    # columns
    html = page_of(client, "/tasks/?cols=name,category,strategy")
    head = html.split('<table class="data tasks">', 1)[1].split("</thead>", 1)[0]
    assert "Category" in head and "Strategy" in head and "Note" not in head and "Pass rate" not in head
    assert 'value="category" checked' in html and 'value="note" checked' not in html
    default_head = page_of(client, "/tasks/").split('<table class="data tasks">', 1)[1].split("</thead>", 1)[0]
    assert "Note" in default_head and "Category" not in default_head


def test_pages_keep_the_query_and_cost_the_same_number_of_queries_at_any_size(client_as, django_assert_max_num_queries,
                                                                              settings):
    settings.FACET_PAGE_CACHE_S = 0  # count every query, not what a warm cache saves
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client = client_as("viewer")
    _bulk(5, status=TaskStatus.VALIDATED)
    with CaptureQueriesContext(connection) as few:
        page_of(client, "/tasks/?status=validated&cols=name,category,version")
    _bulk(PAGE_SIZE * 2 + 7, status=TaskStatus.VALIDATED)
    with CaptureQueriesContext(connection) as many:
        html = page_of(client, "/tasks/?status=validated&cols=name,category,version")
    assert len(many.captured_queries) == len(few.captured_queries), "no query per row"
    assert len(row_ids(html)) == PAGE_SIZE and "page 1 of 3" in html
    assert 'href="?status=validated&amp;cols=name%2Ccategory%2Cversion&amp;page=2"' in html
    third = page_of(client, "/tasks/?status=validated&cols=name,category,version&page=3")
    assert len(row_ids(third)) == 12 and "page 3 of 3" in third


def test_htmx_gets_the_results_partial_with_fresh_counts(task, client_as):
    client = client_as("viewer")
    html = page_of(client, "/tasks/?status=validated", HTTP_HX_REQUEST="true")
    assert html.lstrip().startswith('<div id="results">') and "<html" not in html and "Funnel" not in html
    assert 'id="status-chips" class="status-chips" role="group" aria-label="Status" hx-swap-oob="true"' in html
    response = client.get("/tasks/?q=&run=&status=validated&cols=name&cols=status&cols=review&cols=run&cols=findings&cols=tests"
                          "&cols=repairs&cols=pass&cols=version&cols=note&tests_min=&page=1", HTTP_HX_REQUEST="true")
    assert response["HX-Push-Url"] == "/tasks/?status=validated"  # the URL worth sharing, not every empty field
    # a form submitted without JavaScript lands on the same URL
    response = client.get("/tasks/?q=&run=&status=validated&tests_min=&page=2")
    assert response.status_code == 302 and response["Location"] == "/tasks/?status=validated&page=2"
    full = page_of(client, "/tasks/?status=validated")
    assert 'hx-push-url="true"' in full and 'hx-target="#results"' in full and 'hx-get="/tasks/funnel/"' in full


def test_the_list_links_its_query_to_review_bulk_export_and_rollouts(task, client_as):
    q = f"status=validated&amp;run={task.run_id}"
    viewer = page_of(client_as("viewer"), f"/tasks/?status=validated&run={task.run_id}&sort=name")
    assert f'href="{reverse("tasks:queue")}?{q}"' in viewer
    assert f'href="{reverse("tasks:export-new")}?{q}"' in viewer and f'href="{reverse("tasks:rollout-new")}?{q}"' in viewer
    assert reverse("tasks:bulk") not in viewer  # bulk decisions are for reviewers
    reviewer = page_of(client_as("reviewer"), f"/tasks/?status=validated&run={task.run_id}")
    assert f'href="{reverse("tasks:bulk")}?{q}"' in reviewer


def test_saved_views_private_for_viewers_shared_by_reviewers(task, client_as, users):
    viewer = client_as("viewer")
    response = viewer.post("/tasks/views/save/", {"name": "mine", "query": "status=validated&sort=name&page=4"})
    assert response.status_code == 302 and response["Location"] == "/tasks/?status=validated&sort=name"
    view = SavedView.objects.get(name="mine")
    assert view.owner == users["viewer"] and not view.shared and view.query == "status=validated&sort=name"
    assert viewer.post("/tasks/views/save/", {"name": "everyone", "query": "", "shared": "on"}).status_code == 403
    html = page_of(viewer, "/tasks/")
    assert 'href="/tasks/?status=validated&amp;sort=name">mine</a>' in html and 'name="shared"' not in html
    reviewer = client_as("reviewer")
    assert "mine" not in page_of(reviewer, "/tasks/").split('class="saved-views"', 1)[1].split("</div>", 1)[0]
    reviewer.post("/tasks/views/save/", {"name": "to review", "query": "review=unreviewed", "shared": "on"})
    shared = SavedView.objects.get(name="to review")
    assert shared.shared and shared.owner == users["reviewer"]
    viewer = client_as("viewer")
    assert ">to review</a>" in page_of(viewer, "/tasks/")
    assert viewer.post(f"/tasks/views/{shared.pk}/delete/").status_code == 403
    assert viewer.post(f"/tasks/views/{view.pk}/delete/").status_code == 302
    assert not SavedView.objects.filter(pk=view.pk).exists() and SavedView.objects.filter(pk=shared.pk).exists()
    # saving under the same name updates the view
    reviewer = client_as("reviewer")
    reviewer.post("/tasks/views/save/", {"name": "to review", "query": "review=needs_fix"})
    shared.refresh_from_db()
    assert shared.query == "review=needs_fix" and not shared.shared
    assert client_as("viewer").get("/tasks/views/save/").status_code == 405


# --- the task page ---------------------------------------------------------------------------------


def tab(client, task, name, **params) -> str:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return page_of(client, f"/tasks/{task.pk}/?tab={name}" + (f"&{query}" if query else ""))


def test_every_tab_renders_its_artifact(task, client_as):
    client = client_as("viewer")
    v3 = task.current_version
    html = tab(client, task, "instruction")
    assert "<h1>Paid orders</h1>" in html and "task.toml" in html and 'aria-current="page" data-tab="instruction"' in html
    assert 'href="javascript' not in html

    html = tab(client, task, "environment")
    assert '<span class="k">FROM</span>' in html  # the Dockerfile lexer
    assert 'id="f-environment-Dockerfile-2"' in html and 'href="#f-environment-Dockerfile-2"' in html  # line links
    assert "nested/" in html and "notes.txt" in html and "orders.csv" in html  # the tree
    assert "Build failed" in html and '<span class="ansi-fg-1">ERROR</span>' in html  # build attempts, colours
    assert "/app/data/orders.csv" in html and "facet-env:0123456789ab" in html and "sleep infinity" in html  # e0
    assert "test -f /app/data/orders.csv" in html
    chosen = tab(client, task, "environment", file="data/nested/notes.txt")
    assert 'class="chosen" aria-current="true">notes.txt' in chosen and "notes &lt;script&gt;" in chosen
    big = tab(client, task, "environment", file="data/big.txt")
    assert "Too large to show here" in big
    assert f'href="/tasks/{task.pk}/versions/3/files/environment/data/big.txt"' in big

    html = tab(client, task, "solution")
    assert "solution/solve.sh" in html and "The first lines only" in html and "Show all" in html
    assert f'id="f-solution-solve-sh-{COLLAPSE_LINES}"' in html and f'id="f-solution-solve-sh-{COLLAPSE_LINES + 1}"' not in html
    full = tab(client, task, "solution", all="solution/solve.sh")
    assert f'id="f-solution-solve-sh-{COLLAPSE_LINES + 30}"' in full and "The first lines only" not in full

    html = tab(client, task, "verifier")
    assert "tests/test_outputs.py" in html and "tests/test.sh" in html
    matrix = html.split('class="data test-matrix"', 1)[1].split("</table>", 1)[0]
    assert "test_y" in matrix and "partial 1" in matrix and 'test-passed">passed' in matrix and 'test-failed">failed' in matrix

    html = tab(client, task, "validation")
    assert html.count('class="card validation"') == 1  # v3 has one validation
    assert "tests_hardcode" in html and "/app/out/report.csv" in html and "added" in html and "modified" in html
    assert "32.0\xa0MB" in html  # peak memory
    v1_html = tab(client, task, "validation", v=1)
    assert '<span class="ansi-fg-2">PASS</span>' in v1_html and "nop_unexpected_pass" in v1_html
    assert "Showing v1, not the current version." in v1_html

    html = tab(client, task, "repairs")
    assert "Repair 1: v1 → v2" in html and "Repair 2: v2 → v3" in html
    assert "the verifier passes without a solution" in html and "nop_unexpected_pass" in html
    assert html.count('class="file-diff"') >= 2 and "tests/test_outputs.py" in html and "solution/solve.sh" in html
    assert 'class="diff unified"' in html and "validated" in html
    assert "Build attempt 1 → 2" in html and "pip install nothing-here" in html  # the environment repair
    split = tab(client, task, "repairs", diff="split")
    assert 'class="diff split"' in split and 'class="diff unified"' not in split
    compare = tab(client, task, "repairs", **{"from": 1, "to": 3})
    assert "v1 → v3" in compare

    html = tab(client, task, "provenance")
    skill = task.scenario.pair.ordered_skills()[0]
    assert f'href="/skills/{skill.pk}/"' in html and "Report paid totals per customer" in html  # skill link, dimensions
    assert "Capability" in html and "manifest@7" in html and "task.instruction@2" in html and "repair.verifier@3" in html
    assert f"/scenarios/runs/{task.run_id}/" in html or f'href="{reverse("scenarios:run", args=[task.run_id])}"' in html

    html = tab(client, task, "llm")
    assert "task.manifest" in html and "task.instruction" in html and "task.repair.verifier" in html
    assert "Environment: manifest" in html and "v1: instruction" in html and "Repair 1: verifier" in html
    assert "<b>2300</b>" in html and "<b>750</b>" in html and "$0.0225" in html  # totals

    for name in ("checks", "review", "rollouts"):
        assert 'aria-current="page"' in tab(client, task, name)
    assert 'id="review-panel"' in tab(client, task, "review")  # the review area's panel, with its own context
    assert client.get(f"/tasks/{task.pk}/?v=9").status_code == 404
    assert v3.number == 3


def test_no_model_or_task_text_is_active_on_any_tab(task, client_as):
    client = client_as("reviewer")
    pages = [tab(client, task, name) for name in
             ("instruction", "environment", "solution", "verifier", "validation", "repairs", "provenance", "llm", "checks")]
    pages += [tab(client, task, "validation", v=1), tab(client, task, "validation", v=2),
              tab(client, task, "repairs", diff="split"), tab(client, task, "environment", file="data/nested/notes.txt"),
              page_of(client, "/tasks/?cols=name,note,category")]
    for html in pages:
        assert active_content(html) == []
        assert XSS not in html and "<img src=x" not in html
    assert any("&lt;script&gt;alert(" in html for html in pages)


def test_the_header_shows_the_chain_and_the_latest_validation_with_its_logs(task, client_as):
    html = tab(client_as("viewer"), task, "instruction")
    assert "v1 → v2" in html and "v2 → v3" in html and "oracle_failed" in html
    oracle = Trial.objects.get(version=task.current_version, kind="oracle")
    assert f"/tasks/trials/{oracle.pk}/logs/verifier.log" in html and "accepted" in html


def test_a_version_file_downloads_and_only_its_own_files(task, client_as):
    client = client_as("viewer")
    response = client.get(f"/tasks/{task.pk}/versions/3/files/solution/solve.sh")
    assert response.status_code == 200 and response["Content-Disposition"] == 'attachment; filename="solve.sh"'
    assert response.content.decode() == task.current_version.files["solution/solve.sh"]
    assert response["Content-Type"].startswith("text/plain")
    assert client.get(f"/tasks/{task.pk}/versions/1/files/solution/solve.sh").content.decode() \
        == task.versions.get(number=1).files["solution/solve.sh"]
    assert client.get(f"/tasks/{task.pk}/versions/3/files/etc/passwd").status_code == 404
    assert client.get(f"/tasks/{task.pk}/versions/3/files/../../settings.py").status_code == 404
    assert client.get(f"/tasks/{task.pk}/versions/7/files/solution/solve.sh").status_code == 404


def test_a_task_under_construction_still_has_a_page(make_run, client_as):
    run = make_run("")
    construction.create_tasks(run)
    task = Task.objects.get(run=run)
    client = client_as("reviewer")
    for name in ("instruction", "solution", "verifier", "validation", "repairs"):
        assert "No version yet" in tab(client, task, name), name
    assert "No environment files yet." in tab(client, task, "environment")
    assert "Report paid totals per customer" in tab(client, task, "provenance")
    assert "No LLM call is recorded" in tab(client, task, "llm")
    checks = tab(client, task, "checks")
    assert "No re-check of this task yet." in checks and "Re-validate" not in checks
    assert client.get(f"/tasks/{task.pk}/", HTTP_HX_REQUEST="true").status_code == 200  # still polling


# --- diffs and terminal output ---------------------------------------------------------------------


def test_file_diffs_number_lines_and_pair_changes_side_by_side():
    old = "a\nb\nc\nd\ne\nf\ng\nh\n"
    new = "a\nb\nC\nd\ne\nf\ng\nh\ni\n"
    d = diffs.file_diff("x.txt", old, new, context=1)
    assert (d.status, d.added, d.removed) == ("modified", 2, 1)
    assert [(r.kind, r.old_no, r.new_no, r.text) for r in d.unified] == [
        ("hunk", None, None, "@@ -2,3 +2,3 @@"), ("context", 2, 2, "b"), ("removed", 3, None, "c"), ("added", None, 3, "C"),
        ("context", 4, 4, "d"),
        ("hunk", None, None, "@@ -8,1 +8,2 @@"), ("context", 8, 8, "h"), ("added", None, 9, "i")]
    split = [(r.kind, r.old_no, r.old_text, r.new_no, r.new_text) for r in d.split if r.kind != "hunk"]
    assert split == [("context", 2, "b", 2, "b"), ("changed", 3, "c", 3, "C"), ("context", 4, "d", 4, "d"),
                     ("context", 8, "h", 8, "h"), ("added", None, None, 9, "i")]
    assert diffs.file_diff("same", "x", "x") is None
    many = diffs.files_diff({"keep": "1", "gone": "x\n", "edit": "1\n"}, {"keep": "1", "new": "y\n", "edit": "2\n"})
    assert [(d.path, d.status) for d in many] == [("edit", "modified"), ("gone", "removed"), ("new", "added")]
    assert [r.kind for r in many[1].unified] == ["hunk", "removed"] and many[2].unified[1].text == "y"
    patch = diffs.unified_text({"f": "1\n2\n"}, {"f": "1\n3\n", "g": "new\n"})
    assert patch.splitlines() == ["--- a/f", "+++ b/f", "@@ -1,2 +1,2 @@", " 1", "-2", "+3",
                                  "--- /dev/null", "+++ b/g", "@@ -0,0 +1 @@", "+new"]
    huge = diffs.file_diff("big", "x\n" * 5000, "y\n" * 5000, max_rows=100)
    assert huge.truncated and len(huge.unified) == 100


def test_terminal_output_keeps_its_colours_and_nothing_else():
    html = str(ansi_to_html(f"\x1b[1;31mfail\x1b[0m {XSS}\n\x1b[38;5;10mok\x1b[39m \x1b]0;title\x07done\x1b[K"))
    assert html == ('<span class="ansi-bold ansi-fg-1">fail</span> &lt;script&gt;alert(\'pwned\')&lt;/script&gt;\n'
                    '<span class="ansi-fg-10">ok</span> done')
    assert str(ansi_to_html("10%\r50%\r100%\n")) == "100%\n"
    assert str(ansi_to_html("\x1b[38;2;255;0;0mred\x1b[0m")) == "red"  # 24-bit colour: no style from the log
    assert str(ansi_to_html('\x1b[31m"><img src=x onerror=alert(1)>')) == \
        '<span class="ansi-fg-1">"&gt;&lt;img src=x onerror=alert(1)&gt;</span>'
    assert strip_ansi("\x1b[32mPASS\x1b[0m") == "PASS"


def test_the_list_loads_its_funnel_after_itself(client_as):
    from tasks.models import Task, TaskStatus

    Task.objects.create(name="seeded", status=TaskStatus.VALIDATED)  # imported=False: a funnel seed
    c = client_as("viewer")
    page = c.get("/tasks/").content.decode()
    assert 'hx-get="/tasks/funnel/"' in page and "Scenario–skill seeds" not in page
    table = c.get("/tasks/funnel/").content.decode()
    assert "Scenario–skill seeds" in table and '<td class="num">1</td>' in table
