"""Reconstruction starts per accepted pair while the judge goes on (scenarios/throughput.py): the
pair's scenario is made and its job queued once, however often the judge's job is delivered, and
only for an accepted pair of a live run."""
import pytest

from scenarios import services, throughput
from scenarios.models import PairVerdict, RunStatus, Scenario, Stage, SynthesisRun, WorkStatus
from scenarios.run_config import DEFAULT_CONFIG
from tests.scenarios.conftest import make_pair

pytestmark = pytest.mark.django_db


@pytest.fixture
def judging(corpus):
    """A run in its judge stage: one pair accepted, one rejected, one not judged yet."""
    csv, sqlite, xss = corpus["csv-dedupe"], corpus["sqlite-report"], corpus["html-report-writer"]
    run = SynthesisRun.objects.create(name="judging", status=RunStatus.RUNNING, stage=Stage.JUDGE, config=DEFAULT_CONFIG)
    accepted = make_pair(run, [csv, sqlite], text="dedupe then load", verdict=PairVerdict.ACCEPTED, status=WorkStatus.DONE)
    rejected = make_pair(run, [csv, xss], text="csv as html", verdict=PairVerdict.REJECTED, status=WorkStatus.DONE)
    waiting = make_pair(run, [sqlite, xss], text="report as html", status=WorkStatus.QUEUED)
    return run, accepted, rejected, waiting


def test_an_accepted_pairs_scenario_is_queued_once_while_the_judge_goes_on(judging, django_capture_on_commit_callbacks):
    run, accepted, rejected, waiting = judging
    with django_capture_on_commit_callbacks(execute=False) as first:
        scenario_id = throughput.reconstruct_when_accepted(accepted.pk)
    assert scenario_id is not None and len(first) == 1
    scenario = Scenario.objects.get(pk=scenario_id)
    assert (scenario.pair_id, scenario.run_id, scenario.status) == (accepted.pk, run.pk, WorkStatus.QUEUED)

    # a redelivered judge job, and the advance that makes the remaining scenarios, hand out nothing more
    with django_capture_on_commit_callbacks(execute=False) as again:
        assert throughput.reconstruct_when_accepted(accepted.pk) is None
        services._create_scenarios(run)
        assert services._mark_queued(run, Scenario) == []
    assert len(again) == 0
    assert Scenario.objects.filter(run=run).count() == 1

    # a rejected pair, and one not judged yet, start nothing
    with django_capture_on_commit_callbacks(execute=False) as none:
        assert throughput.reconstruct_when_accepted(rejected.pk) is None
        assert throughput.reconstruct_when_accepted(waiting.pk) is None
    assert len(none) == 0 and Scenario.objects.filter(run=run).count() == 1


def test_a_cancelled_run_starts_no_reconstruction(judging, django_capture_on_commit_callbacks):
    run, accepted, _, _ = judging
    services.cancel_run(run=run)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        assert throughput.reconstruct_when_accepted(accepted.pk) is None
    assert len(callbacks) == 0 and not Scenario.objects.filter(run=run).exists()

