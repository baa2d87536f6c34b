"""What the LLM steps of construction and repair share: the prompts, the task's stable subject
(cassettes replay by it), the scenario and e0 as the prompts see them (the grounding: an inventory
of the realized working directory, structure-aware previews of its fixtures, the Dockerfile, the
installed tools), the context budget every section is cut to, one client per job that records its
calls, and the environment files a materialization answer describes."""
from __future__ import annotations

import json
import math
import posixpath
from pathlib import Path

from facet_site.lib import docker_engine as de
from facet_site.lib.llm import load_prompt
from scenarios import llm as scenario_llm
from scenarios.models import Scenario
from scenarios.services import pair_subject

from . import outputs
from .models import Task

PROMPTS_DIR = Path(__file__).resolve().parent / "prompts"
INIT_SH = "init.sh"


def prompt(stage: str):
    return load_prompt(PROMPTS_DIR, stage)


def task_subject(task: Task) -> str:
    """Stable across databases (skill keys), so a cassette replays anywhere."""
    if task.scenario_id:
        return "scenario:" + pair_subject(task.scenario.pair).removeprefix("pair:")
    return f"task:{task.name}"


# --- the context budget ---------------------------------------------------------------------------
# One place for every cap the construction prompts' context is cut to (characters per section,
# counts for lists) and for the budget a whole prompt must stay within (estimated tokens, as the
# endpoint limits count them: about four characters a token). The sections' caps add up to less
# than the budget, so no prompt can exceed it whatever the environment holds; a test renders each
# stage for the largest demo task and checks it.
CONTEXT_BUDGET = {
    "scenario": 12_000,        # the specification Z = (C, R_S, R_I) as JSON
    "skill_description": 400,  # per source skill, inside the scenario
    "manifest": 6_000,
    "inventory_entries": 160,  # inventory lines before "N more"
    "inventory": 9_000,
    "previews": 24,            # fixtures previewed
    "preview": 1_000,          # per preview
    "previews_total": 14_000,
    "dockerfile": 4_000,
    "init_script": 3_000,
    "tools": 3_000,
    "services": 1_500,
    "instruction": 8_000,
    "solution": 14_000,
    "tests": 16_000,
    "environment_files": 40_000,  # the current build context (environment repair)
    "build_log": 6_000,
}
PROMPT_TOKEN_BUDGET = 24_000  # estimated tokens of one construction prompt, system and user together
E0_PREVIEWS_STORED = 64  # previews the build step stores with e0; the prompts show CONTEXT_BUDGET["previews"]
DEFAULT_DIFFICULTY = "medium"
DIFFICULTIES = ("easy", "medium", "hard")
TESTS_HINT = {"easy": "5-8", "medium": "8-15", "hard": "15-25"}  # the verifier's test count per difficulty


def estimate_tokens(text_or_messages) -> int:
    """Tokens of a prompt as the endpoint limits estimate them (four characters a token)."""
    if isinstance(text_or_messages, list):
        text_or_messages = "".join(str(m.get("content") or "") for m in text_or_messages)
    return math.ceil(len(text_or_messages) / 4)


def cap(text: str, limit: int, what: str = "text") -> str:
    """`text` within `limit` characters: the head and the tail, and a line saying what was cut."""
    if len(text) <= limit:
        return text
    note = f"\n[... {len(text) - limit} characters of this {what} cut to fit the context budget ...]\n"
    keep = max(limit - len(note), 0)
    head = keep * 2 // 3
    return text[:head] + note + text[len(text) - (keep - head):]


def difficulty_of(scenario: Scenario | None) -> str:
    """The scenario's intended difficulty (easy, medium, hard); medium when it has none (older
    scenarios, imported tasks)."""
    value = (getattr(scenario, "difficulty", "") or "").strip().lower() if scenario is not None else ""
    return value if value in DIFFICULTIES else DEFAULT_DIFFICULTY


def _skills_of(scenario: Scenario) -> list[dict]:
    try:
        skills = scenario.pair.ordered_skills()
    except Exception:  # a scenario without its pair (tests, deleted skills): no skills to show
        return []
    return [{"key": s.key, "name": s.name,
             "description": cap(" ".join((s.description or "").split()), CONTEXT_BUDGET["skill_description"],
                                "description")} for s in skills]


def scenario_json(scenario: Scenario | None) -> str:
    """The specification every stage shares: title, intended difficulty, the integrated scenario C,
    the five dimensions, the references R_S and R_I and the source skills."""
    if scenario is None:
        return "{}"
    text = json.dumps({
        "title": scenario.title, "difficulty": difficulty_of(scenario), "scenario": scenario.integrated,
        "dimensions": {"goal": scenario.goal, "context": scenario.context, "capability": scenario.capability,
                       "state": scenario.state, "io_tools": scenario.io_tools},
        "solution_reference": scenario.solution_reference, "instruction_reference": scenario.instruction_reference,
        "skills": _skills_of(scenario),
    }, ensure_ascii=False, indent=1)
    return cap(text, CONTEXT_BUDGET["scenario"], "specification")


def e0_summary(initial_state: dict | None, max_files: int = 40, head: int = 600) -> str:
    """What the generation steps see of e0: the files (size, head of text) and the services."""
    if not initial_state:
        return "{}"
    snap = initial_state.get("snapshot") or {}
    files = []
    for path, entry in sorted((snap.get("files") or {}).items())[:max_files]:
        files.append({"path": path, "kind": entry.get("kind"), "size": entry.get("size"),
                      "head": (entry.get("text_head") or "")[:head] or None})
    return json.dumps({"workdir": initial_state.get("workdir") or (initial_state.get("roots") or ["/app"])[0],
                       "files": files, "services": initial_state.get("services") or []},
                      ensure_ascii=False, indent=1)


def _file_type(path: str, entry: dict, previews: dict) -> str:
    if entry.get("kind") != "file":
        return entry.get("kind") or "other"
    preview = previews.get(path)
    if preview:
        return preview.get("type") if preview.get("kind") == "binary" else preview.get("kind", "file")
    if entry.get("text_head") is None and entry.get("size"):
        return "binary"
    ext = posixpath.splitext(path)[1].lstrip(".")
    return ext or "text"


def e0_inventory(initial_state: dict | None) -> str:
    """Every path of the realized working directory with its size and type, one a line; machinery
    directories (.git, node_modules, ...) as one line each with their file count; cut by count."""
    snap = (initial_state or {}).get("snapshot") or {}
    files = snap.get("files") or {}
    if not files:
        return "(e0 was not captured)"
    previews = snap.get("previews") or {}
    lines: list[str] = []
    machinery: dict[str, list[int]] = {}
    for path, entry in sorted(files.items()):
        parts = path.split("/")
        hidden = next((i for i, part in enumerate(parts) if part in de.MACHINERY_DIRS), None)
        if hidden is not None:
            root = "/".join(parts[:hidden + 1])
            count = machinery.setdefault(root, [0, 0])
            if root != path:
                count[0] += entry.get("kind") == "file"
                count[1] += entry.get("size") or 0
            continue
        kind = _file_type(path, entry, previews)
        size = "" if entry.get("kind") == "dir" else f"{entry.get('size') or 0} B"
        suffix = f" -> {entry.get('link')}" if entry.get("link") else ""
        lines.append(f"{path}{'/' if entry.get('kind') == 'dir' else ''}\t{size}\t{kind}{suffix}".rstrip())
    for root, (count, total) in sorted(machinery.items()):
        lines.append(f"{root}/\t{total} B in {count} files\t(not listed: tool data)")
    limit = CONTEXT_BUDGET["inventory_entries"]
    shown = lines[:limit]
    if len(lines) > limit:
        shown.append(f"... {len(lines) - limit} more entries")
    if snap.get("truncated"):
        shown.append("(the capture stopped early: the working directory holds more than was read)")
    return cap("\n".join(shown), CONTEXT_BUDGET["inventory"], "inventory")


def e0_previews(initial_state: dict | None) -> str:
    """Structure-aware previews of up to CONTEXT_BUDGET["previews"] fixtures (CSV header, column
    and row counts and rows; JSON keys and types; log line samples; SQLite tables; binary type and
    size). Data files first, then the rest, each cut to CONTEXT_BUDGET["preview"]."""
    snap = (initial_state or {}).get("snapshot") or {}
    previews = snap.get("previews") or {}
    files = snap.get("files") or {}
    if not previews:
        # an e0 captured before previews existed: the heads of the text files it kept
        heads = []
        for path, entry in sorted(files.items()):
            if entry.get("kind") == "file" and entry.get("text_head") and not de.in_machinery(path):
                heads.append(f"### {path} ({entry.get('size')} bytes)\n" + entry["text_head"][:600])
        return cap("\n\n".join(heads[:CONTEXT_BUDGET["previews"]]) or "(no previews)",
                   CONTEXT_BUDGET["previews_total"], "previews")
    data_kinds = ("csv", "tsv", "json", "jsonl", "log", "sqlite")
    order = sorted(previews, key=lambda p: (previews[p].get("kind") not in data_kinds, p))
    chosen = order[:CONTEXT_BUDGET["previews"]]
    blocks = [cap(de.render_preview(p, (files.get(p) or {}).get("size") or 0, previews[p]),
                  CONTEXT_BUDGET["preview"], "preview") for p in sorted(chosen)]
    if len(order) > len(chosen):
        blocks.append(f"({len(order) - len(chosen)} more files were previewed at capture and are not shown; "
                      "the inventory lists every file)")
    return cap("\n\n".join(blocks), CONTEXT_BUDGET["previews_total"], "previews")


def grounding(initial_state: dict | None, environment_files: dict[str, str] | None) -> dict[str, str]:
    """The realized environment as the prompts' placeholders: workdir, e0_inventory, e0_previews,
    dockerfile (with init.sh), tools and services."""
    state = initial_state or {}
    env = environment_files or {}
    dockerfile = cap(env.get("Dockerfile", "(no Dockerfile)"), CONTEXT_BUDGET["dockerfile"], "Dockerfile")
    if env.get(INIT_SH):
        dockerfile += ("\n\nenvironment/init.sh (the Dockerfile copies and runs it at build time):\n"
                       + cap(env[INIT_SH], CONTEXT_BUDGET["init_script"], "init script"))
    services = state.get("services") or []
    return {
        "workdir": state.get("workdir") or (state.get("roots") or ["/app"])[0],
        "e0_inventory": e0_inventory(state),
        "e0_previews": e0_previews(state),
        "dockerfile": dockerfile,
        "tools": cap(de.render_tools(state.get("tools")), CONTEXT_BUDGET["tools"], "tool list"),
        "services": cap("\n".join(f"- {s}" for s in services) or "(no processes running at the start)",
                        CONTEXT_BUDGET["services"], "process list"),
    }


class Generator:
    """One LLM client per job, and the calls it made, for the records that name them."""

    def __init__(self, task: Task):
        self.task = task
        self.client, self.recorder = scenario_llm.client_for(task.run)
        self.subject = task_subject(task)
        self.versions: dict[str, str] = {}
        self.calls: dict[str, int] = {}

    def __call__(self, key: str, stage: str, schema, subject_suffix: str = "", **values):
        p = prompt(stage)
        self.versions[key] = p.version
        result = scenario_llm.stage_client(self.client, self.task.run, stage).complete(
            stage=stage, subject=self.subject + subject_suffix, prompt_version=p.version,
            messages=p.messages(**values), schema=schema)
        if self.recorder.last is not None:
            self.calls[key] = self.recorder.last.pk
        return result.parsed

    def close(self):
        self.client.close()


def environment_files(out: outputs.MaterializationOut) -> tuple[dict[str, str], list[str]]:
    """The environment/ files (path -> text, the Dockerfile and init.sh included) and init checks."""
    files = {"Dockerfile": out.dockerfile if out.dockerfile.endswith("\n") else out.dockerfile + "\n"}
    for f in out.files:
        rel = f.path.strip().lstrip("/")
        if rel.startswith("environment/"):
            rel = rel[len("environment/"):]
        if rel and rel != "Dockerfile":
            files[rel] = f.content
    if out.init_script.strip():
        files[INIT_SH] = out.init_script if out.init_script.endswith("\n") else out.init_script + "\n"
    return files, [c for c in out.init_checks if c.strip()]
