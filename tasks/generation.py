"""What the LLM steps of construction and repair share: the prompts, the task's stable subject
(cassettes replay by it), the scenario and e0 as the prompts see them, one client per job that
records its calls, and the environment files a materialization answer describes."""
from __future__ import annotations

import json
from pathlib import Path

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


def scenario_json(scenario: Scenario | None) -> str:
    if scenario is None:
        return "{}"
    return json.dumps({
        "title": scenario.title, "scenario": scenario.integrated,
        "dimensions": {"goal": scenario.goal, "context": scenario.context, "capability": scenario.capability,
                       "state": scenario.state, "io_tools": scenario.io_tools},
        "solution_reference": scenario.solution_reference, "instruction_reference": scenario.instruction_reference,
    }, ensure_ascii=False, indent=1)


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
