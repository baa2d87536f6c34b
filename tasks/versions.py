"""Task versions: the files of a task as one immutable, content-hashed version; task.toml made
from them (Harbor's TB 2.0 subset with facet's metadata); the Harbor task directory written from
a version or read back as an imported task."""
from __future__ import annotations

import hashlib
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from django.db import transaction
from django.db.models import Count

from facet_site.lib import harbor
from facet_site.lib.harbor.binary import is_text

from . import summary
from .blobs import blobs_of, put_blobs
from .generation import difficulty_of
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
        author_name="facet", difficulty=difficulty_of(task.scenario if task.scenario_id else None), category=categories[0] if categories else "general",
        tags=sorted({s.key.rsplit("/", 1)[-1].split(":")[-1] for s in skills}) or ["facet"],
        scenario_id=str(task.scenario_id) if task.scenario_id else None,
        version_hash="sha256:" + digest.hexdigest(), skills=[s.key for s in skills],
        agent_timeout_sec=float(t["solution_s"]), verifier_timeout_sec=float(t["verifier_s"]),
        build_timeout_sec=float(t["build_s"]),
    )


def make_files(task: Task, *, environment: dict[str, str], instruction: str, solve_sh: str, test_sh: str,
               test_py: str, run_cfg: dict, partials: dict[str, str] | None = None) -> dict[str, str]:
    """The whole task directory as path -> text, task.toml in canonical form. `partials` are the
    model's partial solutions (solution/partials/*.sh, validation.partial_solution_files)."""
    artifacts = {f"environment/{p}": t for p, t in environment.items()}
    artifacts.update({"instruction.md": instruction, SOLVE_SH: solve_sh, TEST_SH: test_sh, TEST_PY: test_py})
    artifacts.update(partials or {})
    config = task_config(task, artifacts, run_cfg)
    artifacts["task.toml"] = harbor.canonical_task_toml(config)
    return artifacts


def bundle_of(name: str, files: dict[str, str], *, binary: dict[str, bytes] | None = None,
              modes: dict[str, int] | None = None, empty_dirs: list[str] | None = None) -> harbor.TaskBundle:
    """A version's files (path -> text, plus binary path -> bytes) as the Harbor bundle they describe.
    task.toml keeps its stored text, so an imported task is written back as it came."""
    other = {p: t.encode("utf-8") for p, t in files.items() if p not in ("instruction.md", "task.toml")}
    other.update(binary or {})
    toml_text = files.get("task.toml", "")
    config = harbor.TaskConfig.from_toml_dict(tomllib.loads(toml_text), text=toml_text)
    return harbor.TaskBundle(name=name, instruction=files.get("instruction.md", ""), config=config, files=other,
                             modes={p: int(m) for p, m in (modes or {}).items()}, empty_dirs=empty_dirs,
                             toml_text=toml_text)


def slug(text: str) -> str:
    """The task's directory name in a Harbor task or job (lowercase, hyphens, at most 60 characters)."""
    return (re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "task")[:60]


def version_bundle(version: TaskVersion, *, name: str | None = None) -> harbor.TaskBundle:
    """The version as a Harbor bundle, binary files read from their blobs."""
    return bundle_of(name if name is not None else slug(version.task.name), version.files,
                     binary=blobs_of(version.binary_files or {}), modes=version.file_modes or {},
                     empty_dirs=version.empty_dirs)


def create_version(task: Task, files: dict[str, str], *, parent: TaskVersion | None = None,
                   repair: RepairRound | None = None, prompt_versions: dict | None = None,
                   llm_calls: dict | None = None, binary: dict[str, bytes] | None = None,
                   modes: dict[str, int] | None = None, empty_dirs: list[str] | None = None) -> TaskVersion:
    """A new immutable version, or the task's existing one with the same content hash. A repair
    passes the parent's binary files and layout on unless it gives its own."""
    if parent is not None and binary is None:
        binary = blobs_of(parent.binary_files or {})
        modes = parent.file_modes if modes is None else modes
        empty_dirs = parent.empty_dirs if empty_dirs is None else empty_dirs
    binary = binary or {}
    modes = {p: m for p, m in (modes or {}).items() if p in files or p in binary}
    digest = harbor.content_hash(bundle_of(task.name, files, binary=binary, modes=modes, empty_dirs=empty_dirs))
    existing = TaskVersion.objects.filter(content_hash=digest).first()
    if existing is not None:
        if existing.task_id != task.pk:
            raise ValueError(f"task {task.pk}: its files equal version {existing.pk} of task {existing.task_id}")
        return existing
    number = (task.versions.aggregate(n=Count("id"))["n"] or 0) + 1
    refs = put_blobs(binary)
    return TaskVersion.objects.create(task=task, number=number, content_hash=digest, files=files, parent=parent,
                                      created_by_repair=repair, prompt_versions=prompt_versions or {},
                                      llm_calls=llm_calls or {}, binary_files=refs, file_modes=modes,
                                      empty_dirs=empty_dirs)


def write_harbor_task(version: TaskVersion, dest: Path, *, overwrite: bool = False) -> Path:
    """The version as a Harbor task directory. Its task.toml carries category, tags (from the
    skills), the scenario id and the artifact hash; harbor.read_task_dir of the result has
    the version's content_hash."""
    return harbor.write_task_dir(version_bundle(version), Path(dest), overwrite=overwrite)


def import_task_dir(path: Path, *, name: str | None = None) -> Task:
    """A Harbor task made elsewhere, stored as an imported task with one version (to validate)."""
    bundle = harbor.read_task_dir(Path(path))
    stored = split_files(bundle)
    with transaction.atomic():
        task = Task.objects.create(name=(name or bundle.name)[:200], imported=True, status=TaskStatus.VALIDATING,
                                   step=Step.DONE)
        version = create_version(task, stored.files, binary=stored.binary, modes=stored.modes,
                                 empty_dirs=stored.empty_dirs)
        Task.objects.filter(pk=task.pk).update(current_version=version)
    task.refresh_from_db()
    summary.set_labels(task)
    return summary.refresh_summary(task)


@dataclass
class StoredFiles:
    """A bundle as a version stores it: text files (instruction.md and task.toml included), binary
    files, non-default modes and empty directories."""

    files: dict[str, str]
    binary: dict[str, bytes] = field(default_factory=dict)
    modes: dict[str, int] = field(default_factory=dict)
    empty_dirs: list[str] | None = None


def split_files(bundle: harbor.TaskBundle, *, max_task_bytes: int | None = None) -> StoredFiles:
    """A Harbor bundle as facet stores a version. task.toml keeps the text it was read with (its
    canonical form for a converted or facet-made task). Raises harbor.TaskFormatError naming every
    file when the task is over `max_task_bytes` in all."""
    files: dict[str, str] = {}
    binary: dict[str, bytes] = {}
    for path, data in sorted(bundle.files.items()):
        if is_text(data):
            files[path] = data.decode("utf-8")
        else:
            binary[path] = data
    files["instruction.md"] = bundle.instruction
    files["task.toml"] = bundle.toml_text if bundle.toml_text is not None else harbor.canonical_task_toml(bundle)
    if max_task_bytes is not None:
        sizes = sorted(((len(d), p) for p, d in bundle.files.items()), reverse=True)
        total = sum(n for n, _ in sizes)
        if total > max_task_bytes:
            biggest = ", ".join(f"{p} ({n} bytes)" for n, p in sizes[:10])
            raise harbor.TaskFormatError(sizes[0][1], f"the task's files add up to {total} bytes, over the "
                                         f"{max_task_bytes}-byte per-task limit; largest: {biggest}")
    return StoredFiles(files=files, binary=binary, modes=dict(bundle.modes), empty_dirs=bundle.empty_dirs)
