"""Rollouts through their pages, the API and the CLI, with the permissions of each role: starting,
watching and cancelling a batch, the transcripts on the task page, and importing over the API."""
import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from tasks import rollouts
from tasks.models import RolloutBatch, RolloutBatchStatus
from tests.tasks.rollout_samples import CLOSED_SOCKET, XSS, Recorder, fake_result, make_task, zipped


# --- pages, permissions, API, CLI ---------------------------------------------------------------


@pytest.fixture
def finished_batch(tmp_path, db):
    task = make_task(tmp_path, f"sum {XSS}")
    batch = rollouts.create_batch(query=f"ids={task.pk}", model="m1", attempts=2)
    for traj, passed in zip(batch.trajectories.order_by("id"), (True, False)):
        claimed, token = rollouts._claim(traj.pk)
        rollouts._record(claimed, token, fake_result(passed=passed), Recorder([]), "s")
    rollouts.finish_if_done(batch.pk)
    return RolloutBatch.objects.get(pk=batch.pk)


@pytest.mark.django_db
def test_viewers_read_but_cannot_start_cancel_resume_or_import(finished_batch, client_as):
    c = client_as("viewer")
    assert c.get("/tasks/rollouts/").status_code == 200
    page = c.get("/tasks/rollouts/new/")
    assert page.status_code == 200
    assert "Your role can read rollouts but not start them" in page.content.decode()
    assert c.post("/tasks/rollouts/new/", {"query": "status=validated", "model": "m", "attempts": 1, "max_turns": 5,
                                           "timeout_s": 60}).status_code == 403
    assert c.post(f"/tasks/rollouts/{finished_batch.pk}/cancel/").status_code == 403
    assert c.post(f"/tasks/rollouts/{finished_batch.pk}/resume/").status_code == 403
    assert c.post("/tasks/rollouts/import/", {}).status_code == 403
    assert RolloutBatch.objects.count() == 1


@pytest.mark.django_db
def test_a_reviewer_starts_a_batch_from_the_task_list_filter_and_watches_it(tmp_path, client_as,
                                                                            django_capture_on_commit_callbacks,
                                                                            monkeypatch):
    from tasks import jobs

    task = make_task(tmp_path)
    c = client_as("reviewer")
    form = c.get(f"/tasks/rollouts/new/?ids={task.pk}").content.decode()
    assert f'value="ids={task.pk}"' in form and "1 task with a version" in form
    queued: list[int] = []
    monkeypatch.setattr(jobs.docker_rollout, "delay", queued.append)
    with django_capture_on_commit_callbacks(execute=True):
        response = c.post("/tasks/rollouts/new/", {"query": f"ids={task.pk}", "model": "m1", "attempts": 2,
                                                   "max_turns": 10, "timeout_s": 120, "name": ""})
    batch = RolloutBatch.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/tasks/rollouts/{batch.pk}/"
    assert sorted(queued) == sorted(batch.trajectories.values_list("id", flat=True))
    page = c.get(response["Location"]).content.decode()
    assert "0 of 2" in page and 'hx-trigger="every 2s"' in page and "Cancel batch" in page
    partial = c.get(f"/tasks/rollouts/{batch.pk}/?part=progress", HTTP_HX_REQUEST="true")
    assert partial.status_code == 200 and "<h1>" not in partial.content.decode()
    bad = c.post("/tasks/rollouts/new/", {"query": "strategy=sideways", "model": "m1", "attempts": 2,
                                          "max_turns": 10, "timeout_s": 120})
    assert bad.status_code == 400 and "strategy: unknown value" in bad.content.decode()
    response = c.post(f"/tasks/rollouts/{batch.pk}/cancel/")
    assert response.status_code == 302
    assert RolloutBatch.objects.get(pk=batch.pk).status == RolloutBatchStatus.CANCELLED
    partial = c.get(f"/tasks/rollouts/{batch.pk}/?part=progress", HTTP_HX_REQUEST="true")
    assert partial.status_code == 286  # finished: polling stops


@pytest.mark.django_db
def test_the_task_page_shows_transcripts_beside_the_per_test_result(finished_batch, client_as):
    task = finished_batch.trajectories.first().task
    html = client_as("viewer").get(f"/tasks/{task.pk}/?tab=rollouts").content.decode()
    assert XSS not in html and "Read it first &lt;script&gt;" in html and "rollouts_context" not in html
    assert "test_outputs.py::test_total" in html and "assert &#x27;11&#x27; == &#x27;10&#x27;" in html
    assert "$ cd /app &amp;&amp; cat data.csv" in html and "task complete" in html
    assert "1/2 tests failed" in html or "1 failed or errored" in html
    detail = client_as("viewer").get(f"/tasks/rollouts/trajectories/{finished_batch.trajectories.first().pk}/")
    assert detail.status_code == 200 and "Verifier: 2 tests" in detail.content.decode()
    listing = client_as("viewer").get(f"/tasks/rollouts/trajectories/?batch={finished_batch.pk}&passed=no")
    assert "1 finished trajectory" in listing.content.decode()


@pytest.mark.django_db
def test_the_api_lists_starts_cancels_and_imports_with_roles(finished_batch, tmp_path, client, token_for, job_dir):
    viewer = {"HTTP_AUTHORIZATION": f"Bearer {token_for('viewer')}"}
    reviewer = {"HTTP_AUTHORIZATION": f"Bearer {token_for('reviewer')}"}
    listing = client.get("/api/rollouts", **viewer).json()
    assert listing["items"][0]["id"] == finished_batch.pk and listing["items"][0]["progress"]["passed"] == 1
    traj = finished_batch.trajectories.order_by("id").first()
    detail = client.get(f"/api/trajectories/{traj.pk}", **viewer).json()
    assert [t["state"] for t in detail["turns"]] == ["observation", "action", "none"] and len(detail["tests"]) == 2
    body = {"query": f"ids={finished_batch.trajectories.first().task_id}", "model": "m9", "attempts": 1}
    assert client.post("/api/rollouts", body, content_type="application/json", **viewer).status_code == 403
    created = client.post("/api/rollouts", body, content_type="application/json", **reviewer)
    assert created.status_code == 201 and created.json()["progress"]["total"] == 1
    assert client.post("/api/rollouts", {**body, "attempts": 99}, content_type="application/json",
                       **reviewer).status_code == 422
    bid = created.json()["id"]
    assert client.post(f"/api/rollouts/{bid}/cancel", **viewer).status_code == 403
    assert client.post(f"/api/rollouts/{bid}/cancel", **reviewer).json()["status"] == "cancelled"
    assert client.post(f"/api/rollouts/{bid}/cancel", **reviewer).status_code == 409
    assert client.post("/api/rollouts/import", {"archive": zipped(job_dir["job"])}, **viewer).status_code == 403
    imported = client.post("/api/rollouts/import", {"archive": zipped(job_dir["job"])}, **reviewer)
    assert imported.status_code == 201 and imported.json()["batches"][0]["report"]["matched"] == 4
    again = client.post("/api/rollouts/import", {"archive": zipped(job_dir["job"])}, **reviewer)
    assert again.status_code == 422 and "already imported" in again.json()["refused"][0]["error"]


@pytest.mark.django_db
def test_the_rollout_command_starts_reports_and_cancels(tmp_path, capsys, monkeypatch):
    task = make_task(tmp_path)
    monkeypatch.setattr(settings, "DOCKER_HOST", CLOSED_SOCKET)
    call_command("rollout", "start", "--query", f"ids={task.pk}", "--model", "m1", "-k", "2", "--wait")
    out = capsys.readouterr().out
    batch = RolloutBatch.objects.get()
    assert f"Batch #{batch.pk}" in out and "2 waiting for Docker" in out
    call_command("rollout", "status")
    assert f"#{batch.pk}" in capsys.readouterr().out
    call_command("rollout", "cancel", str(batch.pk))
    assert "cancelled" in capsys.readouterr().out
    with pytest.raises(CommandError, match="already finished"):
        call_command("rollout", "cancel", str(batch.pk))
    with pytest.raises(CommandError, match="no rollout batch"):
        call_command("rollout", "status", "999")
    with pytest.raises(CommandError, match="unknown value"):
        call_command("rollout", "start", "--query", "strategy=sideways", "--model", "m1")
