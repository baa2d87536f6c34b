"""The real public corpus in ../shared: nearly every skill ingested or rejected with a reason."""
import pytest

from skills import services
from skills.models import IngestBatchStatus, Skill, SkillStatus
from tests.conftest import SAMPLE_CORPUS

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.corpus,
    pytest.mark.skipif(not SAMPLE_CORPUS.is_dir(), reason="../shared/corpus/openclaw-sample is absent"),
]


def skill_dirs():
    names = {"SKILL.md", "skill.md", "Skill.md", "_meta.json"}
    return {p.parent for p in SAMPLE_CORPUS.rglob("*") if p.name in names and ".git" not in p.parts}


def test_the_sample_corpus_is_ingested_or_rejected_with_reasons():
    dirs = skill_dirs()
    batch = services.ingest_path(SAMPLE_CORPUS, label="openclaw-sample")
    assert batch.status == IngestBatchStatus.SUCCEEDED, batch.message

    stored = Skill.objects.filter(batch=batch)
    # Held skills are accounted for by their safety report: every one names the rule that fired.
    held = list(stored.filter(status=SkillStatus.HELD))
    assert all(s.safety_level == "suspicious" and s.safety_report["findings"] for s in held)
    accounted = stored.filter(status=SkillStatus.ACCEPTED).count() + stored.filter(
        status=SkillStatus.REJECTED, verdicts__isnull=False).distinct().count() + len(held)
    assert accounted >= 0.98 * len(dirs), (accounted, len(dirs), batch.summary)
    assert stored.filter(safety_level="unsafe", verdicts__kind="unsafe").distinct().count() >= 7

    # every file that did not become a skill is named with its reason
    for problem in batch.problems.filter(severity="error"):
        assert problem.path and problem.message

    accepted = stored.filter(status=SkillStatus.ACCEPTED)
    assert accepted.exists()
    assert not accepted.filter(category=None).exists()
    assert stored.filter(verdicts__kind="private").exists()
    assert stored.filter(verdicts__kind="non_actionable").exists()


def test_reingesting_the_sample_corpus_is_idempotent():
    services.ingest_path(SAMPLE_CORPUS, label="openclaw-sample")
    rows = Skill.objects.count()
    batch = services.ingest_path(SAMPLE_CORPUS, label="openclaw-sample")
    assert Skill.objects.count() == rows
    assert batch.summary["ingested"] == 0 and batch.summary["updated"] == 0
