"""Ingestion as the CLI and the workers run it: stored records, verdicts, versions and bad input."""
import io
import json
import tarfile
import zipfile

import pytest
from django.core.management import call_command

from skills import services
from skills.models import IngestBatchStatus, IngestProblem, Skill, SkillStatus, Verdict, VerdictKind
from tests.conftest import DEMO_CORPUS, write_skill

from .samples import BAD_YAML_SKILL, CSV_SKILL, NO_FRONTMATTER, SQLITE_SKILL, UNSAFE_SKILL

pytestmark = pytest.mark.django_db


def meta(owner, slug, version="1.0.0"):
    return {"owner": owner, "slug": slug, "displayName": slug.title(),
            "latest": {"version": version, "publishedAt": 1760000000000, "commit": "a" * 40}, "history": []}


@pytest.fixture
def corpus(tmp_path):
    root = tmp_path / "corpus"
    write_skill(root, "alice/csv-dedupe", CSV_SKILL, meta("alice", "csv-dedupe"), files={"scripts/run.sh": "#!/bin/sh\necho hi\n"})
    write_skill(root, "bob/sqlite-report", SQLITE_SKILL, meta("bob", "sqlite-report"))
    write_skill(root, "mallory/disk-reclaimer", UNSAFE_SKILL, meta("mallory", "disk-reclaimer"))
    write_skill(root, "carol/csv-dedupe-copy", CSV_SKILL, meta("carol", "csv-dedupe-copy"), files={"scripts/run.sh": "#!/bin/sh\necho hi\n"})
    return root


def test_it_stores_structured_records_with_provenance_and_files(corpus):
    batch = services.ingest_path(corpus)
    assert batch.status == IngestBatchStatus.SUCCEEDED
    skill = Skill.objects.get(key="clawhub:alice/csv-dedupe")
    assert skill.name == "csv-dedupe"
    assert skill.owner == "alice" and skill.slug == "csv-dedupe"
    assert "python3" in skill.required_tools and "sort" in skill.required_tools
    assert any("orders.clean.csv" in o for o in skill.outputs)
    assert len(skill.steps) >= 3
    assert skill.provenance["commit"] == "a" * 40
    assert skill.license == "MIT-0"
    assert len(skill.content_hash) == 64
    script = skill.files.get(path="scripts/run.sh")
    assert script.text.startswith("#!/bin/sh") and script.size == len("#!/bin/sh\necho hi\n")
    assert skill.vector is not None and skill.vector.shape == (384,)
    assert skill.category is not None and skill.category.parent is not None
    assert 0 < skill.category_confidence <= 1


def test_it_rejects_unsafe_and_duplicate_skills_with_reasons_and_keeps_them(corpus):
    services.ingest_path(corpus)
    unsafe = Skill.objects.get(key="clawhub:mallory/disk-reclaimer")
    assert unsafe.status == SkillStatus.REJECTED
    assert unsafe.verdicts.filter(kind=VerdictKind.UNSAFE).exists()
    copy = Skill.objects.get(key="clawhub:carol/csv-dedupe-copy")
    verdict = copy.verdicts.get(kind=VerdictKind.DUPLICATE)
    assert verdict.duplicate_of.key == "clawhub:alice/csv-dedupe"
    assert Skill.objects.get(key="clawhub:alice/csv-dedupe").status == SkillStatus.ACCEPTED
    assert Skill.objects.count() == 4  # nothing deleted


def test_status_always_agrees_with_verdicts(corpus):
    services.ingest_path(corpus)
    for skill in Skill.objects.all():
        assert (skill.status == SkillStatus.REJECTED) == skill.verdicts.exists()


def test_reingesting_the_same_corpus_adds_nothing(corpus):
    services.ingest_path(corpus)
    rows, verdicts = Skill.objects.count(), Verdict.objects.count()
    batch = services.ingest_path(corpus)
    assert Skill.objects.count() == rows and Verdict.objects.count() == verdicts
    assert batch.summary["unchanged"] == 4 and batch.summary["ingested"] == 0


def test_a_changed_skill_becomes_a_new_version_and_the_old_one_is_kept(corpus, users):
    services.ingest_path(corpus)
    old = Skill.objects.get(key="clawhub:bob/sqlite-report")
    reviewer_pick = old.category.parent.children.exclude(pk=old.category_id).first()
    services.override_category(skill=old, category=reviewer_pick, user=users["reviewer"])
    (corpus / "bob/sqlite-report/SKILL.md").write_text(SQLITE_SKILL + "\n4. Print the report with `cat report.tsv`.\n")
    batch = services.ingest_path(corpus)
    assert batch.summary["updated"] == 1
    versions = list(Skill.objects.filter(key="clawhub:bob/sqlite-report").order_by("version_number"))
    assert [v.version_number for v in versions] == [1, 2]
    assert [v.is_current for v in versions] == [False, True]
    assert versions[1].previous_version == versions[0]
    assert versions[1].category == reviewer_pick  # the reviewer's override carries over


def test_bad_files_get_clear_errors_and_the_rest_is_ingested(tmp_path):
    root = tmp_path / "mixed"
    write_skill(root, "good", CSV_SKILL)
    write_skill(root, "yaml", BAD_YAML_SKILL)
    write_skill(root, "nofm", NO_FRONTMATTER)
    (root / "binary").mkdir()
    (root / "binary" / "SKILL.md").write_bytes(b"\xff\xfe\x00\x01garbage\x00")
    (root / "big").mkdir()
    (root / "big" / "SKILL.md").write_text("---\nname: big\ndescription: big\n---\n" + "x" * 1_100_000)
    (root / "link").mkdir()
    (root / "link" / "SKILL.md").symlink_to(root / "good" / "SKILL.md")
    batch = services.ingest_path(root)
    assert batch.status == IngestBatchStatus.SUCCEEDED
    problems = {p.path.split("/")[0]: p.message for p in IngestProblem.objects.filter(batch=batch, severity="error")}
    warnings = {p.path.split("/")[0]: p.message for p in IngestProblem.objects.filter(batch=batch, severity="warning")}
    assert "yaml" in problems and "YAML" in problems["yaml"]
    # A SKILL.md without frontmatter is still ingested, named from its heading, with a warning that says so.
    assert "nofm" not in problems and "frontmatter" in warnings["nofm"].lower()
    assert Skill.objects.filter(name="Just a heading").exists()
    assert "big" in problems and ("limit" in problems["big"].lower() or "bytes" in problems["big"].lower())
    assert "link" in problems and "symlink" in problems["link"].lower()
    assert Skill.objects.filter(name="csv-dedupe", status=SkillStatus.ACCEPTED).exists()
    unreadable = Skill.objects.filter(verdicts__kind=VerdictKind.UNREADABLE).get()
    assert unreadable.status == SkillStatus.REJECTED


def test_archives_are_ingested_and_dangerous_entries_reported(tmp_path, settings):
    archive = tmp_path / "skills.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        def add(name, data: bytes):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        add("pack/csv-dedupe/SKILL.md", CSV_SKILL.encode())
        add("../escape/SKILL.md", SQLITE_SKILL.encode())
        add("/abs/SKILL.md", SQLITE_SKILL.encode())
        link = tarfile.TarInfo("pack/evil/SKILL.md")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/passwd"
        tar.addfile(link)
    batch = services.ingest_path(archive)
    assert batch.status == IngestBatchStatus.SUCCEEDED
    assert Skill.objects.filter(name="csv-dedupe").count() == 1
    messages = " ".join(IngestProblem.objects.filter(batch=batch).values_list("message", flat=True))
    assert ".." in messages and "absolute" in messages.lower() and "link" in messages.lower()
    assert not (tmp_path / "escape").exists() and not (settings.DATA_DIR / "escape").exists()
    extracted = services.ingest_area(batch)
    assert extracted.is_relative_to(settings.DATA_DIR / "ingest")


def test_zip_archives_are_ingested(tmp_path):
    archive = tmp_path / "skills.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("one/SKILL.md", CSV_SKILL)
        z.writestr("two/SKILL.md", SQLITE_SKILL)
    batch = services.ingest_path(archive)
    assert batch.summary["ingested"] == 2


def test_a_missing_source_fails_the_batch_with_its_path(tmp_path):
    batch = services.ingest_path(tmp_path / "nope")
    assert batch.status == IngestBatchStatus.FAILED
    assert "nope" in batch.message and "no such file" in batch.message


def test_the_cli_prints_a_summary(corpus, capsys):
    call_command("ingest", str(corpus), "--no-progress")
    out = capsys.readouterr().out
    assert "skills found     4" in out
    assert "rejected: unsafe" in out
    assert "duplicates       1" in out


def test_the_demo_corpus_shows_every_filter(tmp_path):
    batch = services.ingest_path(DEMO_CORPUS, label="demo")
    reasons = batch.summary["rejected_by_reason"]
    for kind in ("unsafe", "private", "duplicate", "near_duplicate", "non_actionable"):
        assert reasons.get(kind, 0) >= 1, (kind, reasons)
    top_levels = set(Skill.objects.accepted().values_list("category__parent__slug", flat=True))
    assert len(top_levels) == 5
