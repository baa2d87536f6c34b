"""`facet run …` and `facet pairs …` as a shell user runs them."""
import io
import json

import pytest
from django.core.management import CommandError, call_command

from scenarios.models import CandidatePair, RunStatus, SynthesisRun

from .conftest import jsonl_lines

pytestmark = pytest.mark.django_db


def run_cli(*args) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_run_list_shows_each_run(repo):
    out = run_cli("run", "list")
    assert f"{repo.run.pk:>5}  succeeded" in out and "nightly" in out and "3,600" in out


def test_run_list_says_when_there_is_none(db):
    assert "No run yet" in run_cli("run", "list")


def test_run_status_summarises_progress_usage_and_errors(repo):
    repo.unjudged.status = "failed"
    repo.unjudged.error = "the judge answered prose"
    repo.unjudged.save()
    out = run_cli("run", "status", str(repo.run.pk))
    assert f"Run #{repo.run.pk}" in out and "Finished" in out
    assert "1. Scenario hypotheses" in out and "3. Judge" in out
    assert "LLM calls 3, tokens in 3,000, out 600, cost $0.0036" in out
    assert "the judge answered prose" in out


def test_run_status_of_an_unknown_run_fails_clearly(db):
    with pytest.raises(CommandError, match="no run with id 999"):
        run_cli("run", "status", "999")


def test_run_start_prints_the_run_id_and_queues_it(corpus, users, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        out = run_cli("run", "start", "--name", "cli run", "--strategy", "reverse", "--max-pairs", "9",
                      "--max-tokens", "5000", "--model", "m-1", "--user", "reviewer-user")
    run = SynthesisRun.objects.get()
    assert out.strip() == str(run.pk)
    assert run.strategy == "reverse" and run.config["limits"]["max_pairs"] == 9 and run.config["llm"]["model"] == "m-1"
    assert run.created_by == users["reviewer"] and len(callbacks) == 1


def test_run_start_reports_a_config_error(corpus):
    with pytest.raises(CommandError, match="skills.max_skills: must be an integer of at least 2"):
        run_cli("run", "start", "--name", "x", "--max-skills", "1")
    with pytest.raises(CommandError, match="skills.categories: no category with slug nope"):
        run_cli("run", "start", "--name", "x", "--category", "nope")
    assert not SynthesisRun.objects.exists()


def test_run_cancel(repo):
    run = SynthesisRun.objects.create(name="live", status=RunStatus.RUNNING)
    assert "cancelled" in run_cli("run", "cancel", str(run.pk)).lower()
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    with pytest.raises(CommandError, match="already finished"):
        run_cli("run", "cancel", str(run.pk))


def test_pairs_export_to_stdout_and_to_a_file(repo, tmp_path):
    lines = run_cli("pairs", "export", "--run", str(repo.run.pk)).splitlines()
    assert [json.loads(x)["quality"]["overall_status"] for x in lines] == ["ACCEPTED"]
    target = tmp_path / "all.jsonl"
    run_cli("pairs", "export", "--verdict", "all", "-o", str(target))
    assert len(target.read_text().splitlines()) == 3


def test_pairs_import_reports_created_skipped_and_bad_lines(corpus, tmp_path):
    run = SynthesisRun.objects.create(name="imports")
    source = tmp_path / "pairs.jsonl"
    source.write_bytes(jsonl_lines({"pair_id": "r1", "skill_ids": ["csv-dedupe", "sqlite-report"], "scenario_texts": ["x"]},
                                   "not json") + b"\xff\xfe broken bytes\n")
    out = run_cli("pairs", "import", str(source), "--run", str(run.pk))
    assert f"Run #{run.pk}: 1 created, 0 skipped, 2 lines with errors." in out
    assert f"{source}:2: line 2: not valid JSON" in out and f"{source}:3:" in out
    assert CandidatePair.objects.filter(run=run).count() == 1


def test_pairs_round_trip_between_runs(repo, tmp_path):
    target = tmp_path / "accepted.jsonl"
    run_cli("pairs", "export", "--run", str(repo.run.pk), "-o", str(target))
    fresh = SynthesisRun.objects.create(name="again")
    assert "1 created" in run_cli("pairs", "import", str(target), "--run", str(fresh.pk))
    assert CandidatePair.objects.get(run=fresh).skill_set == repo.accepted.skill_set


def test_run_start_wait_runs_in_process_and_prints_a_summary(corpus, monkeypatch, django_capture_on_commit_callbacks):
    from scenarios import services
    from scenarios.models import Stage

    inline = []

    def execute_run_inline(run_id):
        inline.append(run_id)
        SynthesisRun.objects.filter(pk=run_id).update(status=RunStatus.SUCCEEDED, stage=Stage.DONE, message="All done.")
        return SynthesisRun.objects.get(pk=run_id)

    monkeypatch.setattr(services, "execute_run_inline", execute_run_inline)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        out = run_cli("run", "start", "--name", "waited", "--provider", "replay", "--cassette", "/tmp/none.jsonl", "--wait")
    run = SynthesisRun.objects.get()
    assert out.splitlines()[0] == str(run.pk) and inline == [run.pk]
    assert "Finished" in out and "All done." in out and "4. Reconstruction" in out
    assert run.config["llm"] == {**run.config["llm"], "provider": "replay", "cassette": "/tmp/none.jsonl"}
    assert callbacks == []  # nothing queued for a worker to race the inline run


def test_a_cassette_needs_the_replay_provider(corpus):
    with pytest.raises(CommandError, match="--cassette"):
        run_cli("run", "start", "--name", "x", "--cassette", "c.jsonl")
