"""The Harbor task and job formats (Terminal-Bench 2.x), Django-free.

facet keeps a generated task as a `TaskBundle` (independent of disk) and exchanges it with Harbor as a
task directory:

    <task>/instruction.md   task.toml   environment/...   solution/solve.sh ...   tests/test.sh ...

From the research notes in docs harbor-format.md ("the spec"), by concern:

* task_format.py: `TaskConfig` (task.toml, both generations), `TaskBundle`, `TaskFormatError`.
* task_files.py: path rules and safe reading of a task directory's files (untrusted input: symlinks
  leaving the directory, absolute symlinks, special files and oversized files are refused).
* task_dir.py: `content_hash` (a task version's identity in facet's DB), Harbor's `task_checksum`,
  `write_task_dir` / `task_dir_entries`, `read_task_dir`, `read_dataset`.
* tb1.py: Terminal-Bench 1.x tasks converted on read (each TB1 parser becomes a reward-writing test.sh).
* binary.py: binary task files (media types, previews, hex/strings peeks, a content-addressed store).
* portable.py: an exported Dockerfile's local base made a pinned public image (and back on import).
* lint.py: `lint_task`, static checks named like `harbor lint`'s rules, plus ours.
* jobs.py: the one reader of a Harbor job directory (`find_job_dirs`, `read_job`), its trials'
  result.json and verifier output (read by facet_site.lib.verifier_output).
* agent_logs.py: an agent's turns from a trial's agent/ logs.

This module re-exports the public names callers use.
"""
from __future__ import annotations

from facet_site.lib.harbor.agent_logs import ImportedTurn, agent_turns
from facet_site.lib.harbor.jobs import (HarborTrialResult, JobFormatError, JobRead, TrialRead, find_job_dirs,
                                        read_job, read_trial_result)
from facet_site.lib.harbor.lint import LintFinding, lint_task
from facet_site.lib.harbor.task_dir import (HASH_SCHEME, content_hash, dirhash, looks_like_task, read_dataset,
                                            read_task_dir,
                                            task_checksum, task_dir_entries, write_task_dir)
from facet_site.lib.harbor.task_format import (DEFAULT_MAX_FILE_BYTES, DEFAULT_MAX_TOTAL_BYTES, TaskBundle,
                                               TaskConfig, TaskFormatError, canonical_task_toml)

__all__ = [
    "DEFAULT_MAX_FILE_BYTES",
    "DEFAULT_MAX_TOTAL_BYTES",
    "HASH_SCHEME",
    "HarborTrialResult",
    "ImportedTurn",
    "JobFormatError",
    "JobRead",
    "LintFinding",
    "TaskBundle",
    "TaskConfig",
    "TaskFormatError",
    "TrialRead",
    "agent_turns",
    "canonical_task_toml",
    "content_hash",
    "dirhash",
    "find_job_dirs",
    "lint_task",
    "looks_like_task",
    "read_dataset",
    "read_job",
    "read_task_dir",
    "read_trial_result",
    "task_checksum",
    "task_dir_entries",
    "write_task_dir",
]
