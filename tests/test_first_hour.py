"""What a reviewer meets in the first hour, as they see it: the overview's state of the work, a
favicon, logs that open in the browser, repair counts that include the environment, a discarded
task's reason said once, an imported task that says it was never validated, a queue's places told
apart from task ids, undo that asks first and does not repeat the reason it withdraws, category
names in Analytics, and whole-number ticks on a count axis."""
from datetime import timedelta

import pytest
from django.utils import timezone

from facet_site.models import WorkerHeartbeat
from tasks import analytics_charts, review
from tasks.models import AuditEvent, Task, TaskStatus, Trial, Validation, ValidationStatus
from tests.tasks.conftest import make_run, skills  # noqa: F401 (fixtures)
from tests.tasks.test_analytics import data  # noqa: F401 (fixture)
from tests.tasks.test_list_detail import build_task_with_repairs

pytestmark = pytest.mark.django_db


@pytest.fixture
def task(make_run):  # noqa: F811
    return build_task_with_repairs(make_run(""))


def html(client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    return response.content.decode()


def test_the_overview_shows_the_state_of_the_work_at_a_glance(client_as, task):
    now = timezone.now()
    WorkerHeartbeat.objects.create(hostname="serve-1@box", queues="default,docker", beat=True, started_at=now,
                                   seen_at=now - timedelta(seconds=5))
    WorkerHeartbeat.objects.create(hostname="gone@box", queues="llm", started_at=now, seen_at=now - timedelta(hours=2))
    Task.objects.create(name="a task that failed", status=TaskStatus.FAILED, step="done", message="build: no space left")
    page = html(client_as("viewer"), "/")
    assert 'data-figure="home-funnel-data"' in page and '"type":"funnel"' in page.replace(" ", "")
    waiting = page.split('id="waiting-for-review"', 1)[1].split("</section>", 1)[0]
    assert "Waiting for review: 1" in waiting and f'href="/tasks/{task.pk}/review/"' in waiting
    validations = page.split('id="recent-validations"', 1)[1].split("</section>", 1)[0]
    assert validations.count("<tr>") == 1 + 3 and "nop_unexpected_pass" in validations and "accepted" in validations
    failures = page.split('id="recent-failures"', 1)[1].split("</section>", 1)[0]
    assert "a task that failed" not in failures and "build: no space left" in failures  # the reason, by task id
    workers = page.split('id="workers"', 1)[1].split("</section>", 1)[0]
    assert "serve-1@box" in workers and "default, docker" in workers and "gone@box" not in workers
    assert "waiting on <code>default</code>" in workers and "waiting on <code>docker</code>" in workers


def test_the_overview_says_when_no_worker_was_seen(client_as):
    page = html(client_as("viewer"), "/")
    assert "No worker seen in the last 15 minutes" in page and "make serve" in page


def test_favicon_is_served_without_a_login(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response["Location"] == "/static/favicon.svg"
    icon = client.get("/static/favicon.svg")
    assert icon.status_code == 200 and b"<svg" in b"".join(icon.streaming_content)


def test_a_trial_log_opens_in_the_browser_and_downloads_on_request(client_as, task, tmp_path):
    trial = Trial.objects.filter(validation__version=task.current_version).first()
    logs = tmp_path / "trial-logs"
    logs.mkdir()
    (logs / "verifier.log").write_text("<b>not html</b> 3 passed\n")
    Trial.objects.filter(pk=trial.pk).update(logs_path=str(logs))
    client = client_as("viewer")
    shown = client.get(f"/tasks/trials/{trial.pk}/logs/verifier.log")
    assert shown.status_code == 200 and shown["Content-Type"] == "text/plain; charset=utf-8"
    assert not shown["Content-Disposition"].startswith("attachment") and shown["X-Content-Type-Options"] == "nosniff"
    saved = client.get(f"/tasks/trials/{trial.pk}/logs/verifier.log?download=1")
    assert saved["Content-Disposition"].startswith("attachment")


def test_a_repaired_environment_counts_as_a_repair(client_as, task):
    Task.objects.filter(pk=task.pk).update(repair_rounds=0)
    type(task.environment).objects.filter(pk=task.environment_id).update(repair_count=1)
    client = client_as("viewer")
    detail = html(client, f"/tasks/{task.pk}/")
    assert 'Repairs <span class="n" title="task and environment repairs">1</span>' in detail
    row = html(client, "/tasks/").split(f'href="/tasks/{task.pk}/"', 1)[1].split("</tr>", 1)[0]
    assert '<td class="num">0 <span class="desc" title="environment repairs">+ 1 env</span></td>' in row
    assert "environment repaired 1×" in html(client, f"/tasks/{task.pk}/review/")


def test_a_discarded_task_says_why_once(client_as, task):
    reason = "still invalid after 5 repair rounds; last failure oracle_failed"
    Task.objects.filter(pk=task.pk).update(status=TaskStatus.DISCARDED, discard_reason=reason, message=reason)
    page = html(client_as("viewer"), f"/tasks/{task.pk}/")
    assert page.count(reason) == 1 and "<dt>Note</dt>" not in page


def test_an_imported_task_never_validated_says_so(client_as):
    imported = Task.objects.create(name="from elsewhere", imported=True, source="harbor.tar.gz",
                                   status=TaskStatus.VALIDATING, step="done")
    client = client_as("reviewer")
    page = html(client, f"/tasks/{imported.pk}/")
    status = page.split("<dt>Status</dt>", 1)[1].split("</dd>", 1)[0]
    assert "Imported, not validated yet" in status and "Validating" not in status
    assert "<dt>Strategy</dt>" not in page and "imported from <code>harbor.tar.gz</code>" in page
    assert 'hx-trigger="every 2s"' not in page  # nothing runs: nothing to poll
    row = html(client, "/tasks/").split(f'href="/tasks/{imported.pk}/"', 1)[1].split("</tr>", 1)[0]
    assert "Imported, awaiting validation" in row and ">Validating<" not in row


def test_the_queue_numbers_places_not_task_ids(client_as, task):
    page = html(client_as("reviewer"), "/tasks/queue/")
    upcoming = page.split("<h2>Next up</h2>", 1)[1].split("</table>", 1)[0]
    assert '<th class="num">Place</th>' in upcoming and "<th>#</th>" not in upcoming
    assert f'<span class="desc">#{task.pk}</span>' in upcoming


def test_undo_asks_first_and_its_row_does_not_repeat_the_reason(client_as, task, users):
    review.decide(task, user=users["reviewer"], verdict="reject", reason="under_specified", comment="unclear")
    event = AuditEvent.objects.get(action="decide")
    client = client_as("reviewer")
    audit = html(client, "/tasks/audit/")
    form = audit.split(f'action="/tasks/audit/{event.pk}/undo/"', 1)[1].split(">", 1)[0]
    assert f'data-confirm="Undo entry #{event.pk} (decide)?' in form
    review.undo(event, user=users["reviewer"])
    history = html(client, f"/tasks/{task.pk}/?tab=review").split("<h3>Review history</h3>", 1)[1].split("</table>", 1)[0]
    undo_row, decision_row = history.split("<tbody>", 1)[1].split("</tr>")[:2]
    assert "withdraws #" in undo_row and "withdraws the reject above" in undo_row
    assert "Under-specified" not in undo_row and "Under-specified" in decision_row


def test_analytics_shows_category_names_where_taxonomy_does(client_as, data):  # noqa: F811
    page = html(client_as("viewer"), "/tasks/analytics/tags/")
    table = page.split("<th>Category</th>", 1)[1].split("</table>", 1)[0]
    assert ">CSV, Excel and spreadsheets<" in table or ">CSV, Excel, and spreadsheets<" in table, table
    assert ">csv-excel-and-spreadsheets<" not in table
    assert "category=csv-excel-and-spreadsheets" in table  # the link still filters by the slug


def test_the_families_chart_counts_in_whole_tasks():
    figure = analytics_charts.family_bars([{"family": "A", "tasks": 2, "share": 0.5},
                                           {"family": "B", "tasks": 1, "share": 0.25}], lambda r: "/tasks/")
    assert figure["layout"]["xaxis"]["dtick"] == 1 and figure["layout"]["xaxis"]["tickformat"] == "d"
    many = analytics_charts.family_bars([{"family": "A", "tasks": 180, "share": 1.0}], lambda r: "/tasks/")
    assert many["layout"]["xaxis"]["dtick"] == 20


def test_validation_rows_for_the_overview_include_queued_ones(client_as, task):
    Validation.objects.create(version=task.current_version, status=ValidationStatus.QUEUED)
    validations = html(client_as("viewer"), "/").split('id="recent-validations"', 1)[1].split("</section>", 1)[0]
    assert "Queued" in validations
