"""Executable review from the task page: re-validate and check flakiness. Records through the
ORM for the service, the page and its polling; real Docker (marked) for the whole way, with a
tiny handwritten task and a verifier that flips coins."""
import json
import time

import pytest
from django.conf import settings
from django.core.management import call_command

from facet_site.lib import harbor
from tasks import rechecks
from tasks.models import (
    CheckKind,
    Recheck,
    RecheckStatus,
    Step,
    Task,
    TaskStatus,
    TestResult,
    Trial,
    Validation,
    ValidationStatus,
)
from tests.html_safety import active_content

from .test_list_detail import XSS, build_task_with_repairs

CLOSED_SOCKET = "unix:///nonexistent/facet-test-docker.sock"


@pytest.fixture
def task(make_run):
    return build_task_with_repairs(make_run(""))


def progress(client, recheck):
    return client.get(f"/tasks/rechecks/{recheck.pk}/", HTTP_HX_REQUEST="true")


def finished_validation(recheck_or_version, *, accepted, trials, recheck=None):
    """A finished validation with trials: [(kind, passed, reward, [(test, outcome), ...]), ...]."""
    version = recheck_or_version.version if isinstance(recheck_or_version, Recheck) else recheck_or_version
    v = Validation.objects.create(version=version, recheck=recheck, status=ValidationStatus.DONE, accepted=accepted,
                                  failure="" if accepted else "oracle_failed")
    for kind, passed, reward, tests in trials:
        t = Trial.objects.create(validation=v, version=version, kind=kind, passed=passed, reward=reward,
                                 failure="" if passed else "oracle_failed", seconds=1.0)
        TestResult.objects.bulk_create([TestResult(trial=t, name=n, outcome=o) for n, o in tests])
    return v


# --- requests and permissions -----------------------------------------------------------------------


@pytest.mark.django_db
def test_only_reviewers_start_rechecks_and_one_runs_at_a_time_per_version(task, client_as,
                                                                         django_capture_on_commit_callbacks):
    assert client_as("viewer").post(f"/tasks/{task.pk}/recheck/", {"kind": "revalidate"}).status_code == 403
    assert "Re-validate v3" not in client_as("viewer").get(f"/tasks/{task.pk}/?tab=checks").content.decode()
    client = client_as("reviewer")
    assert "Re-validate v3" in client.get(f"/tasks/{task.pk}/?tab=checks").content.decode()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post(f"/tasks/{task.pk}/recheck/", {"kind": "revalidate"})
    recheck = Recheck.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/tasks/{task.pk}/?tab=checks&recheck={recheck.pk}"
    assert (recheck.kind, recheck.runs, recheck.status, recheck.version) == ("revalidate", 1, "queued", task.current_version)
    assert list(recheck.validations.values_list("status", flat=True)) == ["queued"] and len(callbacks) == 1
    # a second one on the same version waits for the first
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        client.post(f"/tasks/{task.pk}/recheck/", {"kind": "flakiness", "runs": "4"})
    assert Recheck.objects.count() == 1 and not callbacks
    assert "is not finished yet" in client.get(f"/tasks/{task.pk}/?tab=checks").content.decode()
    # flakiness on another version: N validations, within bounds
    client.post(f"/tasks/{task.pk}/recheck/", {"kind": "flakiness", "runs": "25", "v": "2"})
    assert "between 2 and 20" in client.get(f"/tasks/{task.pk}/?tab=checks").content.decode()
    with django_capture_on_commit_callbacks(execute=False):
        client.post(f"/tasks/{task.pk}/recheck/", {"kind": "flakiness", "runs": "4", "v": "2"})
    flaky = Recheck.objects.get(kind=CheckKind.FLAKINESS)
    assert flaky.runs == 4 and flaky.validations.count() == 4 and flaky.version.number == 2
    with django_capture_on_commit_callbacks(execute=False):
        client.post(f"/tasks/{task.pk}/recheck/", {"kind": "bogus", "v": "1"})
    assert Recheck.objects.count() == 2
    assert client_as("viewer").post(f"/tasks/rechecks/{recheck.pk}/resume/").status_code == 403


@pytest.mark.django_db
def test_a_task_under_construction_is_not_rechecked(task):
    Task.objects.filter(pk=task.pk).update(step=Step.VALIDATE, status=TaskStatus.VALIDATING)
    task.refresh_from_db()
    with pytest.raises(rechecks.RecheckRefused, match="still being constructed"):
        rechecks.request_recheck(task.current_version, kind="revalidate")
    assert not Recheck.objects.exists()


# --- no engine ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_without_docker_the_recheck_waits_and_the_page_says_so(task, client_as, monkeypatch,
                                                               django_capture_on_commit_callbacks):
    monkeypatch.setattr(settings, "DOCKER_HOST", CLOSED_SOCKET)
    recheck = rechecks.request_recheck(task.current_version, kind="revalidate")
    result = rechecks.run_recheck(recheck.pk)
    validation = recheck.validations.get()
    assert validation.status == ValidationStatus.WAITING_FOR_DOCKER
    assert result.status == RecheckStatus.QUEUED and result.message.startswith("Waiting for a Docker Engine: Docker engine not reachable")
    task.refresh_from_db()
    assert task.status == TaskStatus.VALIDATED  # construction status untouched
    client = client_as("reviewer")
    response = progress(client, recheck)
    html = response.content.decode()
    assert response.status_code == 286  # nothing will change by itself: the page stops polling
    assert "Waiting for a Docker Engine" in html and CLOSED_SOCKET in html and "try again now" in html
    assert 'hx-trigger="every 2s"' not in html
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        assert client.post(f"/tasks/rechecks/{recheck.pk}/resume/").status_code == 302
    assert len(callbacks) == 1
    from tasks import jobs

    dispatched = []
    monkeypatch.setattr(jobs.docker_recheck, "delay", dispatched.append)
    with django_capture_on_commit_callbacks(execute=True):
        assert rechecks.resume_queued() == 1
    assert dispatched == [recheck.pk]


# --- progress, comparison, flakiness --------------------------------------------------------------


@pytest.mark.django_db
def test_a_running_recheck_streams_its_trials_and_logs_as_they_appear(task, client_as):
    recheck = rechecks.request_recheck(task.current_version, kind="revalidate")
    validation = recheck.validations.get()
    Validation.objects.filter(pk=validation.pk).update(status=ValidationStatus.RUNNING)
    Recheck.objects.filter(pk=recheck.pk).update(status=RecheckStatus.RUNNING)
    client = client_as("viewer")
    response = progress(client, recheck)
    assert response.status_code == 200 and 'hx-trigger="every 2s"' in response.content.decode()
    logs = rechecks.logs_dir(validation)
    (logs / "trial_nop").mkdir(parents=True)
    (logs / "build.log").write_text("Step 1/2 : FROM facet-base:bookworm\n")
    (logs / "trial_nop" / "verifier.log").write_text(f"\x1b[31mFAILED\x1b[0m test_y {XSS}\n")
    (logs / "trial_nop" / "result.json").write_text(json.dumps({"kind": "nop", "reward": 0.0, "passed": True,
                                                                "failure": None, "total_seconds": 1.24}))
    time.sleep(0.01)  # the oracle's directory is newer
    (logs / "trial_oracle").mkdir()
    (logs / "trial_oracle" / "solution.log").write_text("step 1 of the solution\n")
    response = progress(client, recheck)
    html = response.content.decode()
    assert response.status_code == 200 and 'hx-trigger="every 2s"' in html
    assert "FROM facet-base:bookworm" in html and '<span class="ansi-fg-1">FAILED</span>' in html
    nop, oracle = html.split('<li class="done"><b>nop</b>', 1)[1].split('<li class="running"><b>oracle</b>', 1)
    assert "reward 0.0" in nop and "as expected" in nop and "1.2 s" in nop
    assert "running" in oracle and "step 1 of the solution" in oracle
    assert active_content(html) == [] and XSS not in html
    # without htmx the URL is the task page's tab
    plain = client.get(f"/tasks/rechecks/{recheck.pk}/")
    assert plain.status_code == 302 and plain["Location"] == f"/tasks/{task.pk}/?tab=checks&recheck={recheck.pk}"


@pytest.mark.django_db
def test_a_revalidation_shows_its_result_beside_the_stored_one(task, client_as):
    recheck = Recheck.objects.create(version=task.current_version, kind="revalidate", status=RecheckStatus.RUNNING)
    finished_validation(recheck, recheck=recheck, accepted=False, trials=[
        ("nop", True, 0.0, [("test_y", "failed")]), ("oracle", False, 0.0, [("test_y", "failed")])])
    done = rechecks._finish(recheck.pk)
    assert done.status == RecheckStatus.DONE and done.finished_at is not None
    assert rechecks._finish(recheck.pk).finished_at == done.finished_at  # the transition happens once
    response = progress(client_as("viewer"), recheck)
    html = response.content.decode()
    assert response.status_code == 286
    table = html.split('class="data comparison"', 1)[1].split("</table>", 1)[0]
    rows = {r.split("<b>", 1)[1].split("</b>", 1)[0]: r for r in table.split("<tr class=")[1:]}
    assert rows["verdict"].startswith('"differs"') and "accepted" in rows["verdict"] and "oracle_failed" in rows["verdict"]
    assert rows["nop"].startswith('"same"')
    assert rows["oracle"].startswith('"differs"') and "1/1 tests passed" in rows["oracle"] and "0/1 tests passed" in rows["oracle"]
    assert rows["partial 1"].startswith('"differs"')  # not run this time (the oracle failed)
    # on the task page too, with the stored validation's number
    page = client_as("viewer").get(f"/tasks/{task.pk}/?tab=checks").content.decode()
    stored = Validation.objects.filter(version=task.current_version, recheck=None).get()
    assert f"Stored (validation #{stored.pk})" in page and "New result beside the stored one" in page


@pytest.mark.django_db
def test_flakiness_gives_the_pass_rate_and_the_tests_that_varied(task, client_as):
    recheck = Recheck.objects.create(version=task.current_version, kind="flakiness", runs=3, status=RecheckStatus.RUNNING)
    for passed_b in (True, False, True):
        finished_validation(recheck, recheck=recheck, accepted=passed_b, trials=[
            ("nop", True, 0.0, [("test_a", "failed"), ("test_b", "failed")]),
            ("oracle", passed_b, 1.0 if passed_b else 0.0, [("test_a", "passed"), ("test_b", "passed" if passed_b else "failed")])])
    rechecks._finish(recheck.pk)
    result = rechecks.flakiness(list(recheck.validations.order_by("id").prefetch_related("trials__tests")))
    assert (result["accepted"], result["finished"], round(result["pass_rate"], 3)) == (2, 3, 0.667)
    assert [(t["trial"], t["name"], t["passed"], t["runs"]) for t in result["varied"]] == [("oracle", "test_b", 2, 3)]
    assert [r["varied"] for r in result["rewards"]] == [False, True]
    html = progress(client_as("viewer"), recheck).content.decode()
    assert '<b class="pass-rate">2/3</b>' in html and "pass rate 0.67" in html
    assert '<code class="varied-test">test_b</code>' in html and '<code class="varied-test">test_a</code>' not in html
    assert html.count('<tr class="varied">') == 1


@pytest.mark.django_db
def test_a_validation_that_errors_ends_the_recheck_in_error(task, monkeypatch):
    recheck = rechecks.request_recheck(task.current_version, kind="flakiness", runs=2)

    def broken(validation_id, **kwargs):
        Validation.objects.filter(pk=validation_id).update(status=ValidationStatus.RUNNING)
        raise RuntimeError("boom")

    monkeypatch.setattr(rechecks, "validate", broken)
    result = rechecks.run_recheck(recheck.pk)
    assert result.status == RecheckStatus.ERROR and "2 of 2 validations" in result.message
    assert set(recheck.validations.values_list("status", flat=True)) == {"error"}
    assert rechecks.run_recheck(recheck.pk).status == RecheckStatus.ERROR  # over: a redelivery does nothing


# --- real Docker ------------------------------------------------------------------------------------

CHECKED = (b'#!/bin/bash\nif grep -qx ok /app/out.txt 2>/dev/null; then r=1; c=\'<testcase classname="t" '
           b'name="test_out_written"/>\'; else r=0; c=\'<testcase classname="t" name="test_out_written">'
           b'<failure message="no ok in /app/out.txt"/></testcase>\'; fi\n'
           b'echo "<testsuite name=\\"t\\">$c</testsuite>" > /logs/verifier/junit.xml\necho $r > /logs/verifier/reward.txt\n')
# four coins per run after the solution: which tests pass differs from run to run
COINS = (b'#!/bin/bash\nok=0; grep -qx ok /app/out.txt 2>/dev/null && ok=1\nreward=$ok\n'
         b'if [ $ok = 1 ]; then c=\'<testcase classname="t" name="test_out_written"/>\'; '
         b'else c=\'<testcase classname="t" name="test_out_written"><failure message="missing"/></testcase>\'; fi\n'
         b'for n in 1 2 3 4; do\n'
         b'  if [ $ok = 1 ] && [ $((RANDOM % 2)) = 0 ]; then c="$c<testcase classname=\\"t\\" name=\\"test_coin_$n\\"/>"\n'
         b'  else c="$c<testcase classname=\\"t\\" name=\\"test_coin_$n\\"><failure message=\\"tails\\"/></testcase>"; reward=0; fi\n'
         b'done\necho "<testsuite name=\\"t\\">$c</testsuite>" > /logs/verifier/junit.xml\necho $reward > /logs/verifier/reward.txt\n')


def imported_task(tmp_path, test_sh: bytes) -> Task:
    cfg = harbor.TaskConfig(agent_timeout_sec=20.0, verifier_timeout_sec=20.0)
    bundle = harbor.TaskBundle(name=f"recheck-{len(test_sh)}", instruction="Write ok to /app/out.txt.", config=cfg, files={
        "environment/Dockerfile": b"FROM facet-base:bookworm\nWORKDIR /app\n",
        "solution/solve.sh": b"#!/bin/bash\necho ok > /app/out.txt\n", "tests/test.sh": test_sh})
    path = harbor.write_task_dir(bundle, tmp_path / "task")
    call_command("validate", "--import", str(path))
    return Task.objects.get(imported=True)


@pytest.mark.docker
@pytest.mark.django_db
def test_revalidation_on_fresh_containers_end_to_end(engine, tmp_path, client_as, django_capture_on_commit_callbacks):
    task = imported_task(tmp_path, CHECKED)
    assert task.status == TaskStatus.VALIDATED and task.n_tests == 1
    client = client_as("reviewer")
    with django_capture_on_commit_callbacks(execute=False):
        client.post(f"/tasks/{task.pk}/recheck/", {"kind": "revalidate"})
    recheck = Recheck.objects.get()
    assert rechecks.run_recheck(recheck.pk).status == RecheckStatus.DONE
    new = recheck.validations.get()
    assert new.accepted and new.trials.count() == 2 and new.logs_dir
    task.refresh_from_db()
    assert task.status == TaskStatus.VALIDATED and task.step == Step.DONE and task.n_tests == 1
    response = progress(client, recheck)
    html = response.content.decode()
    assert response.status_code == 286 and "Done" in html
    table = html.split('class="data comparison"', 1)[1].split("</table>", 1)[0]
    assert table.count('<tr class="same">') == 3 and "differs" not in table  # verdict, nop, oracle
    assert "1/1 tests passed" in table
    page = client.get(f"/tasks/{task.pk}/?tab=validation").content.decode()
    assert f"Re-validation #{recheck.pk}" in page and page.count('class="card validation"') == 2


@pytest.mark.docker
@pytest.mark.django_db
def test_flakiness_of_a_coin_flipping_verifier_shows_the_tests_that_varied(engine, tmp_path, client_as):
    task = imported_task(tmp_path, COINS)
    status = task.status
    recheck = rechecks.request_recheck(task.current_version, kind="flakiness", runs=5)
    assert rechecks.run_recheck(recheck.pk).status == RecheckStatus.DONE
    runs = list(recheck.validations.order_by("id"))
    assert [v.status for v in runs] == ["done"] * 5
    accepted = sum(bool(v.accepted) for v in runs)
    html = progress(client_as("viewer"), recheck).content.decode()
    assert f'<b class="pass-rate">{accepted}/5</b>' in html
    varied = {name.split("</code>")[0] for name in html.split('<code class="varied-test">')[1:]}
    assert varied and varied <= {f"t::test_coin_{n}" for n in range(1, 5)}, varied  # a coin each run; the file test never
    outcomes = {(t.name, t.outcome) for t in TestResult.objects.filter(trial__validation__recheck=recheck,
                                                                      trial__kind="oracle")}
    assert ("t::test_out_written", "failed") not in outcomes
    for name in varied:
        assert {(name, "passed"), (name, "failed")} <= outcomes
    assert Task.objects.get(pk=task.pk).status == status


@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
def test_a_recheck_runs_on_the_docker_queue(engine, tmp_path, client_as, docker_worker):
    task = imported_task(tmp_path, CHECKED)
    client = client_as("reviewer")
    response = client.post(f"/tasks/{task.pk}/recheck/", {"kind": "revalidate"})  # commits: the job is sent
    assert response.status_code == 302
    recheck = Recheck.objects.get()
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        recheck.refresh_from_db()
        if recheck.status not in rechecks.OPEN:
            break
        assert docker_worker.poll() is None, docker_worker.log_tail()
        time.sleep(0.5)
    assert recheck.status == RecheckStatus.DONE, (recheck.status, recheck.message, docker_worker.log_tail())
    assert recheck.validations.get().accepted
    assert Task.objects.get(pk=task.pk).status == TaskStatus.VALIDATED
    assert progress(client, recheck).status_code == 286


@pytest.mark.docker
@pytest.mark.django_db
def test_a_recheck_that_waited_for_docker_resumes_in_its_own_job_and_never_decides_the_task(
        engine, monkeypatch, django_capture_on_commit_callbacks):
    """An imported task's status is decided by its own validation; a reviewer's re-check of it
    that waited for Docker goes back to the re-check job, not to docker_validate."""
    from tasks import construction, jobs

    task = Task.objects.create(name="imported", imported=True, status=TaskStatus.VALIDATED, step=Step.DONE)
    version = task.versions.create(number=1, content_hash="sha256:imported-1", files={"instruction.md": "x"})
    Task.objects.filter(pk=task.pk).update(current_version=version)
    recheck = Recheck.objects.create(version=version, kind=CheckKind.REVALIDATE, status=RecheckStatus.QUEUED)
    Validation.objects.create(version=version, recheck=recheck, status=ValidationStatus.WAITING_FOR_DOCKER)
    sent = []
    monkeypatch.setattr(jobs.docker_recheck, "delay", lambda rid: sent.append(("recheck", rid)))
    monkeypatch.setattr(jobs.docker_validate, "delay", lambda vid: sent.append(("validate", vid)))
    with django_capture_on_commit_callbacks(execute=True):
        construction.resume_waiting()
    assert sent == [("recheck", recheck.pk)]
    assert construction.validate_pending() == []  # the CLI's --pending leaves re-checks to their job
    task.refresh_from_db()
    assert task.status == TaskStatus.VALIDATED
