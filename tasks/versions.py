"""Task versions: the files of a task as one immutable, content-hashed version; task.toml made
from them (Harbor's TB 2.0 subset with facet's metadata); the Harbor task directory written from
a version or read back as an imported task."""
from __future__ import annotations

import hashlib
import re
import tomllib
from pathlib import Path

from django.db import transaction
from django.db.models import Count

from facet_site.lib import harbor

from . import summary
from .models import RepairRound, Step, Task, TaskStatus, TaskVersion

SOLVE_SH = "solution/solve.sh"
TEST_SH = "tests/test.sh"
TEST_PY = "tests/test_outputs.py"


def _skills(task: Task) -> list:
    if not task.scenario_id:
        return []
    return task.scenario.pair.ordered_skills()


def task_config(task: Task, artifact_files: dict[str, str], run_cfg: dict) -> harbor.TaskConfig:
    """task.toml: Harbor's TB 2.0 subset with our metadata. `version_hash` is the hash of the
    artifact files without task.toml: content_hash cannot cover itself (harbor.TaskConfig)."""
    skills = _skills(task)
    categories = [s.category.slug for s in skills if s.category_id]
    digest = hashlib.sha256()
    for path in sorted(artifact_files):
        digest.update(f"{hashlib.sha256(artifact_files[path].encode()).hexdigest()}  {path}\n".encode())
    t = run_cfg["timeouts"]
    return harbor.TaskConfig(
        author_name="facet", difficulty="medium", category=categories[0] if categories else "general",
        tags=sorted({s.key.rsplit("/", 1)[-1].split(":")[-1] for s in skills}) or ["facet"],
        scenario_id=str(task.scenario_id) if task.scenario_id else None,
        version_hash="sha256:" + digest.hexdigest(), skills=[s.key for s in skills],
        agent_timeout_sec=float(t["solution_s"]), verifier_timeout_sec=float(t["verifier_s"]),
        build_timeout_sec=float(t["build_s"]),
    )


def make_files(task: Task, *, environment: dict[str, str], instruction: str, solve_sh: str, test_sh: str,
               test_py: str, run_cfg: dict) -> dict[str, str]:
    """The whole task directory as path -> text, task.toml in canonical form."""
    artifacts = {f"environment/{p}": t for p, t in environment.items()}
    artifacts.update({"instruction.md": instruction, SOLVE_SH: solve_sh, TEST_SH: test_sh, TEST_PY: test_py})
    config = task_config(task, artifacts, run_cfg)
    artifacts["task.toml"] = harbor.canonical_task_toml(config)
    return artifacts


def bundle_of(name: str, files: dict[str, str]) -> harbor.TaskBundle:
    """A version's files (path -> text) as the Harbor bundle they describe."""
    other = {p: t.encode("utf-8") for p, t in files.items() if p not in ("instruction.md", "task.toml")}
    config = harbor.TaskConfig.from_toml_dict(tomllib.loads(files.get("task.toml", "")))
    return harbor.TaskBundle(name=name, instruction=files.get("instruction.md", ""), config=config, files=other)


def slug(text: str) -> str:
    """The task's directory name in a Harbor task or job (lowercase, hyphens, at most 60 characters)."""
    return (re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "task")[:60]


def version_bundle(version: TaskVersion) -> harbor.TaskBundle:
    return bundle_of(slug(version.task.name), version.files)


def create_version(task: Task, files: dict[str, str], *, parent: TaskVersion | None = None,
                   repair: RepairRound | None = None, prompt_versions: dict | None = None,
                   llm_calls: dict | None = None) -> TaskVersion:
    """A new immutable version, or the task's existing one with the same content hash."""
    digest = harbor.content_hash(bundle_of(task.name, files))
    existing = TaskVersion.objects.filter(content_hash=digest).first()
    if existing is not None:
        if existing.task_id != task.pk:
            raise ValueError(f"task {task.pk}: its files equal version {existing.pk} of task {existing.task_id}")
        return existing
    number = (task.versions.aggregate(n=Count("id"))["n"] or 0) + 1
    return TaskVersion.objects.create(task=task, number=number, content_hash=digest, files=files, parent=parent,
                                      created_by_repair=repair, prompt_versions=prompt_versions or {},
                                      llm_calls=llm_calls or {})


def write_harbor_task(version: TaskVersion, dest: Path, *, overwrite: bool = False) -> Path:
    """The version as a Harbor task directory. Its task.toml carries category, tags (from the
    skills), the scenario id and the artifact hash; harbor.read_task_dir of the result has
    the version's content_hash."""
    return harbor.write_task_dir(version_bundle(version), Path(dest), overwrite=overwrite)


def import_task_dir(path: Path, *, name: str | None = None) -> Task:
    """A Harbor task made elsewhere, stored as an imported task with one version (to validate)."""
    bundle = harbor.read_task_dir(Path(path))
    files = {p: d.decode("utf-8", errors="replace") for p, d in bundle.files.items()}
    files["instruction.md"] = bundle.instruction
    files["task.toml"] = harbor.canonical_task_toml(bundle)
    with transaction.atomic():
        task = Task.objects.create(name=(name or bundle.name)[:200], imported=True, status=TaskStatus.VALIDATING,
                                   step=Step.DONE)
        version = create_version(task, files)
        Task.objects.filter(pk=task.pk).update(current_version=version)
    task.refresh_from_db()
    summary.set_labels(task)
    return summary.refresh_summary(task)


def text_files(bundle: harbor.TaskBundle) -> dict[str, str]:
    """A Harbor bundle as facet stores a version: path -> text, instruction.md and task.toml included.
    Raises harbor.TaskFormatError for a binary file (facet keeps task files as text)."""
    files: dict[str, str] = {}
    for path, data in sorted(bundle.files.items()):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise harbor.TaskFormatError(path, f"is binary (not UTF-8 at byte {exc.start}); facet keeps task files "
                                               "as text, so this task cannot be imported") from None
        if "\x00" in text:
            raise harbor.TaskFormatError(path, "is binary (contains NUL bytes); facet keeps task files as text, "
                                               "so this task cannot be imported")
        files[path] = text
    files["instruction.md"] = bundle.instruction
    files["task.toml"] = harbor.canonical_task_toml(bundle)
    return files
