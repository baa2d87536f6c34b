"""What an export says about each task: the provenance manifest rows (skills, labels, decisions,
the last validation with its trials, rollout counts and pass@k) loaded in bulk per chunk of
tasks, their Parquet schemas, the successful rollouts as SFT conversations, and the dataset card
(README.md) made from the export's summary."""
from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field

import pyarrow as pa
from django.db.models import Count, Q

from facet_site.lib import harbor
from facet_site.lib import rollout as rollout_lib
from facet_site.lib.agreement import agreement as agreement_of
from facet_site.lib.stats import pass_at_k
from scenarios.models import PairSkill

from .models import (
    Decision,
    DecisionNote,
    LabelKind,
    Task,
    TaskLabel,
    Trajectory,
    TrajectoryStatus,
    Trial,
    Turn,
    Validation,
    ValidationStatus,
)

PASS_AT = (1, 3)
# review_state in the manifest of an approved version that has error-level findings and no
# admin override (the findings came after the approval)
APPROVAL_BLOCKED = "approval_blocked"


def _iso(value) -> str | None:
    return value.isoformat() if value is not None else None


def _pass_at(n: int, c: int, k: int) -> float | None:
    return pass_at_k(n, c, k) if n >= k else None


@dataclass
class _Chunk:
    """What the manifest says about a chunk of tasks, from a fixed number of queries."""

    skills: dict[int, list[dict]] = field(default_factory=dict)  # pair id -> skills
    labels: dict[int, dict[str, list[str]]] = field(default_factory=dict)
    decisions: dict[int, list[dict]] = field(default_factory=dict)  # version id -> decisions
    validations: dict[int, dict] = field(default_factory=dict)  # version id -> latest finished validation
    rollouts: dict[int, list[dict]] = field(default_factory=dict)  # version id -> per-model counts


def load_chunk(tasks: list[Task]) -> _Chunk:
    chunk = _Chunk()
    task_ids = [t.pk for t in tasks]
    versions = {t.current_version_id: t.current_version for t in tasks}
    pair_ids = [t.scenario.pair_id for t in tasks if t.scenario_id]
    for ps in (PairSkill.objects.filter(pair_id__in=pair_ids).select_related("skill__category")
               .order_by("pair_id", "position")):
        chunk.skills.setdefault(ps.pair_id, []).append({
            "key": ps.skill.key, "name": ps.skill.name,
            "category": ps.skill.category.slug if ps.skill.category_id else None})

    kinds = {LabelKind.TAG: "tags", LabelKind.CATEGORY: "categories", LabelKind.DOMAIN: "domains",
             LabelKind.FAMILY: "families"}
    # (the difficulty label is not among them: the manifest takes difficulty from task.toml)
    for task_id, kind, value in (TaskLabel.objects.filter(task_id__in=task_ids, kind__in=list(kinds))
                                 .order_by("task_id", "kind", "value").values_list("task_id", "kind", "value")):
        chunk.labels.setdefault(task_id, {k: [] for k in kinds.values()})[kinds[kind]].append(value)

    hashes = {v.content_hash: v.pk for v in versions.values()}
    rows = list(Decision.objects.filter(task_id__in=task_ids, content_hash__in=list(hashes))
                .select_related("author").order_by("id"))
    withdrawn = {d.withdraws_id for d in rows if d.withdraws_id}
    adjudications = set(DecisionNote.objects.filter(decision_id__in=[d.pk for d in rows], adjudication=True)
                        .values_list("decision_id", flat=True))
    for d in rows:
        if d.withdraws_id:
            continue  # an undo's compensating entry: shown as `withdrawn` on the decision it undoes
        chunk.decisions.setdefault(hashes[d.content_hash], []).append({
            "id": d.pk, "verdict": d.verdict, "reason": d.reason, "comment": d.comment,
            "reviewer": d.author.get_username() if d.author_id else None, "bulk": d.bulk,
            "created_at": _iso(d.created_at), "withdrawn": d.pk in withdrawn,
            "override_reason": d.override_reason or None, "adjudication": d.pk in adjudications})

    finished = [ValidationStatus.DONE, ValidationStatus.ERROR]
    latest: dict[int, Validation] = {}
    for v in Validation.objects.filter(version_id__in=list(versions), status__in=finished).order_by("id"):
        latest[v.version_id] = v
    trials: dict[int, list[dict]] = defaultdict(list)
    counted = (Trial.objects.filter(validation_id__in=[v.pk for v in latest.values()]).order_by("id")
               .annotate(n_tests=Count("tests"), n_passed=Count("tests", filter=Q(tests__outcome="passed"))))
    for t in counted:
        trials[t.validation_id].append({"kind": t.kind, "index": t.index, "reward": t.reward, "passed": t.passed,
                                        "failure": t.failure, "n_tests": t.n_tests, "n_passed": t.n_passed})
    for version_id, v in latest.items():
        chunk.validations[version_id] = {
            "id": v.pk, "status": v.status, "accepted": v.accepted, "failure": v.failure, "reason": v.reason,
            "finished_at": _iso(v.finished_at), "trials": trials.get(v.pk, [])}

    counts = (Trajectory.objects.filter(version_id__in=list(versions), status=TrajectoryStatus.DONE)
              .values("version_id", "model").order_by("version_id", "model")
              .annotate(n=Count("id"), c=Count("id", filter=Q(passed=True))))
    for row in counts:
        chunk.rollouts.setdefault(row["version_id"], []).append(row)
    return chunk


def review_facts(decisions: list[dict]) -> dict:
    """The reviews of one exported version (each reviewer's latest live decision, adjudications
    aside, as tasks.agreement counts them), whether they agree (verdict, and reason unless it
    approves; None with fewer than two) and the adjudication in force, if any."""
    latest: dict = {}
    adjudication = None
    for d in decisions:
        if d["withdrawn"]:
            continue
        if d.get("adjudication"):
            adjudication = d
        else:
            latest[d["reviewer"]] = d
    keys = {(d["verdict"], "" if d["verdict"] == "approve" else d["reason"]) for d in latest.values()}
    return {"n_reviews": len(latest), "reviews_agree": len(keys) == 1 if len(latest) >= 2 else None,
            "adjudication": {"verdict": adjudication["verdict"], "reason": adjudication["reason"],
                             "reviewer": adjudication["reviewer"]} if adjudication else None,
            "_verdicts": [d["verdict"] for d in latest.values()]}


def review_agreement(manifest: list[dict]) -> dict:
    """Agreement over the exported tasks with two or more reviews (Fleiss' kappa of the verdicts,
    facet_site.lib.agreement), for the export's summary and dataset card."""
    facts = [review_facts(row["decisions"]) for row in manifest]
    figures = agreement_of([f["_verdicts"] for f in facts]).as_dict()
    return figures | {"agreed": sum(1 for f in facts if f["reviews_agree"]),
                      "adjudicated": sum(1 for f in facts if f["adjudication"])}


def manifest_row(task: Task, directory: str, chunk: _Chunk, config: harbor.TaskConfig) -> dict:
    version = task.current_version
    labels = chunk.labels.get(task.pk, {"tags": [], "categories": [], "domains": [], "families": []})
    decisions = chunk.decisions.get(version.pk, [])
    standing = next((d for d in reversed(decisions) if not d["withdrawn"]), None)
    reviews = review_facts(decisions)
    findings = [k for k in task.finding_kinds.split(",") if k]
    override = standing["override_reason"] if standing and standing["verdict"] == "approve" else None
    review_state = task.review_state
    # A version with error-level findings is exported as approved only on an admin's override
    # (findings a later validation found after the approval block it too).
    if review_state == "approved" and findings and not override:
        review_state = APPROVAL_BLOCKED
    per_model = []
    n_all = c_all = 0
    for row in chunk.rollouts.get(version.pk, []):
        n, c = row["n"], row["c"]
        n_all, c_all = n_all + n, c_all + c
        per_model.append({"model": row["model"], "n": n, "passed": c,
                          **{f"pass_at_{k}": _pass_at(n, c, k) for k in PASS_AT}})
    return {
        "task_id": task.pk,
        "name": task.name,
        "directory": f"tasks/{directory}",
        "content_hash": version.content_hash,
        "version": version.number,
        "version_id": version.pk,
        "origin": "imported" if task.imported else "generated",
        "source": task.source,
        "status": task.status,
        "review_state": review_state,
        "standing_verdict": standing["verdict"] if standing else None,
        "strategy": task.strategy,
        "scenario_id": task.scenario_id,
        "scenario_title": task.scenario.title if task.scenario_id else None,
        "run_id": task.run_id,
        "run_name": task.run.name if task.run_id else None,
        "skills": chunk.skills.get(task.scenario.pair_id, []) if task.scenario_id else [],
        "tags": labels["tags"],
        "categories": labels["categories"],
        "domains": labels["domains"],
        "families": labels["families"],
        "difficulty": config.difficulty,
        "category": config.category,
        "n_tests": task.n_tests,
        "repair_rounds": task.repair_rounds,
        "validation_failure": task.validation_failure or None,
        "findings": findings,
        "approval_override": override,
        "validation": chunk.validations.get(version.pk),
        "decisions": decisions,
        "n_reviews": reviews["n_reviews"],
        "reviews_agree": reviews["reviews_agree"],
        "adjudication": reviews["adjudication"],
        "rollouts": per_model,
        "n_rollouts": n_all,
        "n_rollouts_passed": c_all,
        **{f"pass_at_{k}": _pass_at(n_all, c_all, k) for k in PASS_AT},
    }


_TRIAL = pa.struct([("kind", pa.string()), ("index", pa.int32()), ("reward", pa.float64()), ("passed", pa.bool_()),
                    ("failure", pa.string()), ("n_tests", pa.int32()), ("n_passed", pa.int32())])
MANIFEST_SCHEMA = pa.schema([
    ("task_id", pa.int64()), ("name", pa.string()), ("directory", pa.string()), ("content_hash", pa.string()),
    ("version", pa.int32()), ("version_id", pa.int64()), ("origin", pa.string()), ("source", pa.string()),
    ("status", pa.string()), ("review_state", pa.string()), ("standing_verdict", pa.string()),
    ("strategy", pa.string()), ("scenario_id", pa.int64()), ("scenario_title", pa.string()), ("run_id", pa.int64()),
    ("run_name", pa.string()),
    ("skills", pa.list_(pa.struct([("key", pa.string()), ("name", pa.string()), ("category", pa.string())]))),
    ("tags", pa.list_(pa.string())), ("categories", pa.list_(pa.string())), ("domains", pa.list_(pa.string())),
    ("families", pa.list_(pa.string())), ("difficulty", pa.string()), ("category", pa.string()),
    ("n_tests", pa.int32()), ("repair_rounds", pa.int32()),
    ("validation_failure", pa.string()), ("findings", pa.list_(pa.string())), ("approval_override", pa.string()),
    ("validation", pa.struct([("id", pa.int64()), ("status", pa.string()), ("accepted", pa.bool_()),
                              ("failure", pa.string()), ("reason", pa.string()), ("finished_at", pa.string()),
                              ("trials", pa.list_(_TRIAL))])),
    ("decisions", pa.list_(pa.struct([("id", pa.int64()), ("verdict", pa.string()), ("reason", pa.string()),
                                      ("comment", pa.string()), ("reviewer", pa.string()), ("bulk", pa.bool_()),
                                      ("created_at", pa.string()), ("withdrawn", pa.bool_()),
                                      ("override_reason", pa.string()), ("adjudication", pa.bool_())]))),
    ("n_reviews", pa.int32()), ("reviews_agree", pa.bool_()),
    ("adjudication", pa.struct([("verdict", pa.string()), ("reason", pa.string()), ("reviewer", pa.string())])),
    ("rollouts", pa.list_(pa.struct([("model", pa.string()), ("n", pa.int32()), ("passed", pa.int32()),
                                     ("pass_at_1", pa.float64()), ("pass_at_3", pa.float64())]))),
    ("n_rollouts", pa.int32()), ("n_rollouts_passed", pa.int32()),
    ("pass_at_1", pa.float64()), ("pass_at_3", pa.float64()),
    # issue 17 (tasks/exports.py): the image the exported Dockerfile starts FROM, the content hash of
    # the task as written (differs from content_hash when facet's local base was made portable), and
    # task.toml's [metadata] facet_version_hash, which hashes the files other than task.toml
    ("base_image", pa.string()), ("exported_content_hash", pa.string()), ("artifact_hash", pa.string()),
])
_FILES = pa.list_(pa.struct([("path", pa.string()), ("content", pa.string())]))
TASKS_SCHEMA = pa.schema(list(MANIFEST_SCHEMA) + [pa.field("instruction", pa.string()),
                                                  pa.field("task_toml", pa.string()), pa.field("files", _FILES)])
_MESSAGES = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
SFT_SCHEMA = pa.schema([
    ("task_id", pa.int64()), ("task", pa.string()), ("content_hash", pa.string()), ("trajectory_id", pa.int64()),
    ("model", pa.string()), ("agent", pa.string()), ("attempt", pa.int32()), ("reward", pa.float64()),
    ("n_turns", pa.int32()), ("messages", _MESSAGES),
])


def _workdir(files: dict[str, str]) -> str:
    """The agent's starting directory: the Dockerfile's last WORKDIR, as the rollout saw it."""
    found = re.findall(r"(?im)^\s*WORKDIR\s+(\S+)", files.get("environment/Dockerfile", ""))
    return found[-1] if found else "/"


def _asked(command: dict) -> dict:
    """A stored command as the model wrote it: Turn.commands also keeps what running it gave
    (exit code, seconds, kind), which the model never wrote and must not learn to."""
    if "keystrokes" in command and "command" not in command:  # Terminus-2's own keys (Harbor imports)
        return {k: command[k] for k in ("keystrokes", "duration") if command.get(k) is not None}
    out = {"command": command.get("command", "")}
    if command.get("timeout_s"):
        out["timeout_s"] = command["timeout_s"]
    return out


def sft_messages(trajectory: Trajectory, turns: list[Turn], instruction: str, workdir: str) -> list[dict]:
    """The rollout as the model saw it: the system prompt and the task (lib.rollout's texts, with
    the batch's budgets), then per turn the model's answer (its JSON object) and the terminal
    output it saw next. It ends with the model's last answer. Trajectories imported from a Harbor
    job ran another agent whose prompt we do not have: they start with the instruction alone."""
    batch = trajectory.batch
    if batch.source == "builtin":
        config = batch.config or {}
        cap = float(config.get("command_timeout_cap_s", 120))
        default = min(float(config.get("default_command_timeout_s", rollout_lib.DEFAULT_COMMAND_TIMEOUT_S)), cap)
        system = rollout_lib.SYSTEM_PROMPT.format(default_timeout=default, cap=cap)
        first = rollout_lib.INITIAL.format(instruction=instruction.strip(), cwd=workdir, max_turns=batch.max_turns,
                                           budget=rollout_lib.format_duration(float(batch.timeout_s)))
        messages = [{"role": "system", "content": system}, {"role": "user", "content": first}]
    else:
        messages = [{"role": "user", "content": instruction.strip()}]
    for i, turn in enumerate(turns):
        answer = {"analysis": turn.analysis, "plan": turn.plan,
                  "commands": [_asked(c) for c in turn.commands or [] if isinstance(c, dict)],
                  "task_complete": turn.task_complete}
        messages.append({"role": "assistant", "content": json.dumps(answer, ensure_ascii=False)})
        if i + 1 < len(turns):
            messages.append({"role": "user", "content": turn.output or "(no commands ran)"})
    return messages


def sft_rows(tasks: list[Task], directories: dict[int, str]) -> list[dict]:
    versions = {t.current_version_id: t for t in tasks}
    trajectories = list(Trajectory.objects.filter(version_id__in=list(versions), status=TrajectoryStatus.DONE,
                                                  passed=True).select_related("batch").order_by("task_id", "id"))
    turns: dict[int, list[Turn]] = defaultdict(list)
    for turn in Turn.objects.filter(trajectory_id__in=[t.pk for t in trajectories]).order_by("trajectory_id", "index"):
        turns[turn.trajectory_id].append(turn)
    rows = []
    for traj in trajectories:
        if not turns.get(traj.pk):
            continue  # e.g. an imported Harbor trial without a trajectory file: nothing to learn from
        task = versions[traj.version_id]
        files = task.current_version.files
        rows.append({
            "task_id": task.pk, "task": directories[task.pk], "content_hash": task.current_version.content_hash,
            "trajectory_id": traj.pk, "model": traj.model, "agent": traj.agent, "attempt": traj.attempt,
            "reward": traj.reward, "n_turns": len(turns[traj.pk]),
            "messages": sft_messages(traj, turns[traj.pk], files.get("instruction.md", ""), _workdir(files)),
        })
    return rows


def _size_category(n: int) -> str:
    for limit, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < limit:
            return label
    return "n>1M"


def _md(text: str) -> str:
    """A value inside a Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _agreement_lines(a: dict | None) -> list[str]:
    """Table rows on agreement between reviewers, when some exported task has two reviews."""
    if not a or not a["items"]:
        return []
    kappa = f"{a['kappa']:.2f}" if a["kappa"] is not None else "undefined"
    ci = f" (95% CI {a['kappa_low']:.2f}–{a['kappa_high']:.2f})" if a["kappa_low"] is not None else ""
    return [f"| Tasks with two or more reviews | {a['items']} ({a['ratings']} reviews) |",
            f"| Reviewers agreed | {a['agreed']} of {a['items']} ({100 * a['raw']:.0f}%, 95% CI "
            f"{100 * a['raw_low']:.0f}–{100 * a['raw_high']:.0f}%) |",
            f"| Fleiss' κ of the verdicts | {kappa}{ci} |",
            f"| Settled by adjudication | {a['adjudicated']} |"]


def dataset_card(s: dict) -> str:
    """README.md: the Hugging Face dataset card (YAML header with the Parquet configs), and what
    the archive holds. Made from the summary only, so it is as reproducible as the rest."""
    configs = []
    if "hf" in s["parts"]:
        configs = ["configs:",
                   "- config_name: tasks", "  default: true", "  data_files:", "  - split: train",
                   "    path: data/tasks.parquet",
                   "- config_name: sft", "  data_files:", "  - split: train", "    path: data/sft.parquet"]
    header = ["---", "pretty_name: facet terminal tasks", "language:", "- en", "tags:", "- terminal-agents",
              "- harbor", "- terminal-bench", "- facet", "size_categories:", f"- {_size_category(s['tasks'])}",
              *configs, "---", ""]
    lines = [
        "# facet terminal tasks", "",
        "Executable terminal tasks in the Harbor format (Terminal-Bench 2.x), synthesised from public agent skills "
        "and verified in Docker by facet (the FACET method), with their provenance and review record.", "",
        f"**Selection:** `{s['filter']}` (task-list query `{s['query'] or '(none)'}`).", "",
        "| | |", "|---|---|",
        f"| Tasks | {s['tasks']} |",
        f"| Generated / imported | {s['generated']} / {s['imported']} |",
        f"| Approved by a reviewer | {s['approved']} |",
        *_agreement_lines(s.get("review_agreement")),
        f"| With rollouts | {s['with_rollouts']} |",
        f"| Successful trajectories (SFT) | {s['sft_trajectories']} |", "",
        "## Categories", "",
    ]
    if s["domains"]:
        lines += ["| Top-level category | Tasks |", "|---|---|"]
        lines += [f"| {_md(k)} | {v} |" for k, v in s["domains"].items()]
        lines.append("")
    if s["categories"]:
        lines += ["| Category | Tasks |", "|---|---|"]
        lines += [f"| {_md(k)} | {v} |" for k, v in s["categories"].items()]
        lines.append("")
    if s["uncategorised"]:
        lines += [f"{s['uncategorised']} task(s) have no category.", ""]
    if not s["domains"] and not s["categories"] and not s["uncategorised"]:
        lines += ["No tasks.", ""]
    lines += ["## Contents", ""]
    if "harbor" in s["parts"]:
        lines += ["- `tasks/<name>/`: one Harbor task per directory (`task.toml`, `instruction.md`, `environment/`, "
                  "`solution/solve.sh`, `tests/test.sh`). Run them with `harbor run -p tasks -a oracle`. "
                  "Their Dockerfiles start `FROM` facet's base image (`facet-base:bookworm`, built by "
                  "`facet base-image`); have it on the Docker host that builds them."]
    if "manifest" in s["parts"]:
        lines += ["- `manifest.jsonl`, `manifest.parquet`: one row per task with its provenance: skills, categories, "
                  "scenario, run, strategy, version hash, last validation with its trials, review decisions with "
                  "reviewers, rollout counts and pass@1/pass@3 (null with fewer attempts than k); per task the number of "
                  "independent reviews (`n_reviews`), whether they agree (`reviews_agree`) and the adjudication that "
                  "settled a disagreement (`adjudication`)."]
    if "hf" in s["parts"]:
        lines += ["- `data/tasks.parquet`: the manifest columns plus `instruction`, `task_toml` and `files` "
                  "(path and text of every other file); `data/sft.parquet`: the SFT conversations."]
    if "sft" in s["parts"]:
        lines += ["- `sft.jsonl`: successful rollouts (reward 1) of the exported versions as chat messages "
                  "(system, user task, then the model's JSON answers and the terminal output it saw), with the "
                  "task, trajectory and model."]
    if "hf" in s["parts"]:
        lines += ["", "## Loading", "", "```python", "from datasets import load_dataset", "",
                  'tasks = load_dataset("parquet", data_files="data/tasks.parquet", split="train")',
                  'sft = load_dataset("parquet", data_files="data/sft.parquet", split="train")', "```"]
    if s["warnings"]:
        lines += ["", "## Warnings", ""] + [f"- {_md(w)}" for w in s["warnings"]]
    return "\n".join(header + lines) + "\n"
