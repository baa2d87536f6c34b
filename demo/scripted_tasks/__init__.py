"""The scripted model's task construction answers and rollout turns for the demo's eight scenarios
(skills/demo_corpus): one module per task holds its fixtures, scripts and verifier; this one indexes
them and shapes the answers.

Each scenario of the demo run combines two or three demo skills; here is the small terminal task a
model would write for it: fixture files with distractors and cross-file relations, an init script,
an instruction naming exact paths, a solve.sh that follows the skills' own scripts, and a pytest
verifier. Some first answers are wrong on purpose, the way real models are wrong, so that
constructing the demo run for real (Docker builds, nop/oracle/partial trials) shows every path of
the funnel:

  git-history-audit + changelog-from-git      the first build fails (git has no identity in a fresh
                                              image); environment repair fixes init.sh
  csv-clean-dedupe + csv-column-stats         the first solve.sh crashes on an empty cell; solution
                                              repair fixes it
  task-due-digest + ops-checklist-audit       the first verifier only checks formats and passes the
                                              untouched environment (nop); verifier repair
  incident + chunker + json-config-validate   the verifier keeps assuming the chunker's default
                                              window sizes instead of the task's config file; after
                                              five repair rounds the task is discarded
  the other four                              valid at the first validation

scripts/record-demo-cassette records these answers (with the synthesis run before them) into
scenarios/fixtures/demo.cassette.jsonl; `facet demo` replays it. Everything is deterministic: the
expected values in the verifiers are computed in each task's module from the same fixture data.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from facet_site.lib.validation.partials import solution_steps

from .checkout_incident import _checkout
from .common import TEST_SH, DemoTask
from .crm_export import _customers
from .git_release import _git
from .login_incident import _login
from .ops_review import _ops
from .payments_docs import _payments
from .search_kb import _search
from .storefront_incident import _storefront


DEMO_TASKS = [_checkout(), _payments(), _git(), _login(), _customers(), _search(), _ops(), _storefront()]
BY_SKILLS = {t.skills: t for t in DEMO_TASKS}


def find(user: str) -> DemoTask | None:
    """The demo task a prompt is about: by the scenario's title ("Combine a and b and c"), else (the
    router's prompt has no scenario) by a path only that task's instruction names."""
    m = re.search(r'"title":\s*"Combine ([^"]+)"', user)
    if m:
        return BY_SKILLS.get(frozenset(m.group(1).split(" and ")))
    for task in DEMO_TASKS:
        if task.marker in user:
            return task
    return None


def _verifier_revision(user: str) -> int:
    m = re.search(r"verifier revision (\d+)", user)
    return int(m.group(1)) if m else 1


# --- the answers, one per schema --------------------------------------------------------------------

def manifest(task: DemoTask, user: str) -> dict:
    return task.manifest


def _materialization(task: DemoTask, base: str, init_script: str) -> dict:
    return {"dockerfile": task.dockerfile.format(base=base),
            "files": [{"path": p, "content": c} for p, c in task.files.items()],
            "init_script": init_script, "init_checks": task.init_checks}


def materialize(task: DemoTask, user: str, base: str) -> dict:
    return _materialization(task, base, task.first_init_script or task.init_script)


def environment_repair(task: DemoTask, user: str, base: str) -> dict:
    return {**_materialization(task, base, task.init_script),
            "diagnosis": task.repair_diagnosis or "Rebuilt the context from the manifest."}


def instruction(task: DemoTask, user: str) -> dict:
    return {"instruction": task.instruction}


def solution(task: DemoTask, user: str) -> dict:
    solve_sh = task.first_solve_sh if task.first_solve_sh and "Repair the solution" not in user else task.solve_sh
    return {"solve_sh": solve_sh, "partial_solutions": partial_solutions(task, solve_sh)}


_DEFINITION = re.compile(r"^\w+\(\) \{")


def _substantive_steps(solve_sh: str) -> tuple[list[str], list[int]]:
    steps = solution_steps(solve_sh)
    work = [i for i, step in enumerate(steps) if not all(
        not line.strip() or line.strip().startswith("#") or line.split()[0] in ("set", "cd", "export")
        for line in step.splitlines())]
    return steps, work


def partial_solutions(task: DemoTask, solve_sh: str) -> list[dict]:
    """Two partial solutions the way the model would write them: the workflow without its last
    step, and the slip a rollout attempt makes at this task (a distractor let in, a marker in the
    wrong place) or, without one, the first half of the workflow. Both leave a requirement the
    verifier checks undone, as the rollouts with the same slips show."""
    steps, work = _substantive_steps(solve_sh)
    if len(work) < 2:
        return []
    last = steps[work[-1]].strip().splitlines()[0][:120]
    out = [{"name": "stops-before-last-step", "stops_before": f"the workflow's last step (`{last}`)",
            "solve_sh": "".join(steps[:work[-1]])}]
    slip = next((s for s in (ROLLOUT_PLANS.get(task.key) or RolloutPlan([], [])).slips.values()
                 if s[0] == "mistake" and s[1] in solve_sh), None)
    if slip is not None:
        out.append({"name": "includes-what-it-should-leave-out", "stops_before": "the rule the instruction "
                    "states for which inputs count and where the result goes",
                    "solve_sh": solve_sh.replace(slip[1], slip[2])})
    elif len([i for i in work if not _DEFINITION.match(steps[i])]) >= 3:
        calls = [i for i in work if not _DEFINITION.match(steps[i])]
        half = calls[len(calls) // 2]
        out.append({"name": "first-half-of-the-workflow", "stops_before": "the second half of the workflow "
                    f"(`{steps[half].strip().splitlines()[0][:120]}` and after)", "solve_sh": "".join(steps[:half])})
    return out


def verifier(task: DemoTask, user: str) -> dict:
    repairing = "Repair the verifier" in user
    if task.hopeless_verifiers:
        index = min(_verifier_revision(user) if repairing else 0, len(task.hopeless_verifiers) - 1)
        return {"test_sh": TEST_SH, "test_py": task.hopeless_verifiers[index]}
    if task.first_test_py and not repairing:
        return {"test_sh": TEST_SH, "test_py": task.first_test_py}
    return {"test_sh": TEST_SH, "test_py": task.test_py}


def router(task: DemoTask, user: str) -> dict:
    return {"artifact": "verifier", "reason": task.router_reason or
            "the reference solution exits 0 and writes the requested files; the tests expect other values"}


# --- rollouts: how the scripted model works through each validated demo task -------------------------
#
# The demo's rollout batch (k = 3) replays these turns from the cassette. Each attempt is a small
# Terminus-2-style session: an observation turn (ls and the heads of the input files), a turn that
# writes the skills' scripts from solve.sh as helper files, one or two turns that run solve.sh's
# steps with them, a check of the outputs with task_complete, and the confirmation. Some attempts
# go wrong the way sampled attempts do (a wrong input set, a step forgotten, a marker in the wrong
# place), so the batch has tasks solved every time and tasks solved sometimes.

ROLLOUT_ATTEMPTS = 3
AGENT_DIR = "/tmp/agent"
_FUNCTION = re.compile(r"^(\w+)\(\) \{\npython3 - (\"\$@\" )?<<'PY'\n(.*?)\nPY\n\}\n", re.S | re.M)
# The first plan of attempt n; later turns find their attempt by it (the server sees no subject).
OPENING_PLANS = [
    "List /app and read the heads of the input files first; then reuse the skills' scripts step by step.",
    "Have a quick look at the inputs, then go straight to producing the requested outputs.",
    "Survey the files under /app before touching anything, then build each output and check it.",
]


@dataclass
class RolloutPlan:
    look: list  # the observation turn's commands
    check: list  # the commands that look at the outputs before task_complete
    # attempt (1-based) -> what goes wrong: ("mistake", old, new) replaces text in a step,
    # ("early", n) stops after the first n workflow steps
    slips: dict = field(default_factory=dict)


ROLLOUT_PLANS = {
    "checkout-incident": RolloutPlan(
        look=["ls -la /app /app/incident /app/docs", "head -n 12 /app/incident/summary.json",
              "cat /app/incident/timeline.txt", "grep -n '^#' /app/docs/runbook.md /app/docs/escalation.md"],
        check=["ls -la /app/out", "head -n 20 /app/out/incident-2026-03-12.md",
               "cut -c1-120 /app/out/chunks.jsonl | head -n 5"],
        # chunks the whole docs folder, the archived report in docs/archive included
        slips={2: ("mistake", "/app/out/incident-2026-03-12.md /app/docs/*.md",
                   "/app/out/incident-2026-03-12.md /app/docs")}),
    "payments-docs": RolloutPlan(
        look=["ls -la /app/docs /app/incident", "sed -n '1,20p' /app/docs/README.md",
              "head -n 8 /app/incident/summary.json", "cat /app/incident/timeline.txt"],
        check=["ls -la /app/docs/incidents /app/out", "sed -n '/<!-- toc -->/,/<!-- tocstop -->/p' /app/docs/README.md",
               "wc -l /app/out/docs-chunks.jsonl"],
        # forgets to chunk the docs again after the postmortem and the TOC
        slips={3: ("early", 3)}),
    "git-release": RolloutPlan(
        look=["ls -la /app /app/repo", "git -C /app/repo log --oneline --graph --all | head -n 20",
              "git -C /app/repo tag", "head -n 12 /app/repo/CHANGELOG.md"],
        check=["head -c 600 /app/out/git-audit.json", "head -n 16 /app/repo/CHANGELOG.md",
               "git -C /app/repo status --short"]),
    "login-incident": RolloutPlan(
        look=["ls -la /app/reports /app/incident", "head -n 15 /app/reports/incident-2025-11-02.md",
              "head -n 8 /app/incident/summary.json", "cat /app/incident/timeline.txt"],
        check=["head -n 14 /app/reports/incident-2026-01-19.md", "grep -c '^## ' /app/reports/incident-2026-01-19.md"],
        # 2: puts the TOC markers above the title instead of before the first section;
        # 3: writes the report and never adds the table of contents
        slips={2: ("mistake", "sed -i '0,/^## /s//<!-- toc -->\\n<!-- tocstop -->\\n\\n## /'",
                   "sed -i '1i <!-- toc -->\\n<!-- tocstop -->\\n'"),
               3: ("early", 1)}),
    "crm-export": RolloutPlan(
        look=["ls -la /app/data", "head -n 8 /app/data/customers_export.csv", "cat /app/data/README.txt",
              "wc -l /app/data/customers_export.csv"],
        check=["ls -la /app/out", "head -n 5 /app/out/customers.clean.csv", "head -c 400 /app/out/stats.json"]),
    "ops-review": RolloutPlan(
        look=["ls -la /app/project /app/ops /app/ops/state", "head -n 8 /app/project/tasks.csv",
              "cat /app/ops/checks.tsv", "cat /app/ops/checklist.md"],
        check=["cat /app/out/digest.md", "cat /app/ops/checklist.md", "tail -n 3 /app/ops/audit-trail.jsonl"]),
    "storefront-incident": RolloutPlan(
        look=["ls -la /app/logs /app/incident", "head -n 3 /app/logs/access.log", "wc -l /app/logs/access.log",
              "cat /app/incident/timeline.txt"],
        check=["head -c 500 /app/out/summary.json", "head -n 12 /app/out/incident-2026-03-04.md",
               "wc -l /app/out/incident-chunks.jsonl"],
        # summarises yesterday's rotated log together with today's
        slips={2: ("mistake", "python3 /tmp/agent/access_report.py /app/logs/access.log",
                   "zcat -f /app/logs/access.log.1.gz /app/logs/access.log > /tmp/agent/access.all.log && "
                   "python3 /tmp/agent/access_report.py /tmp/agent/access.all.log")}),
}


def agent_workflow(solve_sh: str) -> tuple[list[str], list[str]]:
    """solve.sh as an agent would type it: (commands writing each skill script to a helper file,
    the workflow's steps calling those helpers). Each command runs in a fresh bash, so shell
    functions become files; a `cd` joins the step after it, and a variable assignment joins
    everything after it into one command."""
    helpers, names = [f"mkdir -p {AGENT_DIR}"], {}
    for m in _FUNCTION.finditer(solve_sh):
        name, body = m.group(1), m.group(3)
        names[name] = f"python3 {AGENT_DIR}/{name}.py"
        helpers.append(f"cat > {AGENT_DIR}/{name}.py <<'PY'\n{body}\nPY")
    rest = _FUNCTION.sub("", solve_sh)
    statements: list[str] = []
    for line in rest.splitlines():
        if not line.strip() or line.startswith("#!") or line.strip() == "set -euo pipefail":
            continue
        if statements and statements[-1].endswith("\\"):
            statements[-1] += "\n" + line
        else:
            statements.append(line)
    if statements and statements[0] == "cd /app":
        statements = statements[1:]  # the agent starts in /app
    steps: list[str] = []
    pending_cd = ""
    for statement in statements:
        word = statement.split()[0]
        if word in names:
            statement = names[word] + statement[len(word):]
        if statement.startswith("cd ") and "&&" not in statement:
            pending_cd = statement
            continue
        if pending_cd:
            statement, pending_cd = f"{pending_cd} && {statement}", ""
        if steps and re.match(r"^[A-Z_]+=", steps[-1].splitlines()[0]) or (steps and "\nPREV=" in steps[-1]):
            steps[-1] += "\n" + statement
        else:
            steps.append(statement)
    return helpers, steps


def _attempt_of(first_reply: str) -> int:
    for n, plan in enumerate(OPENING_PLANS, 1):
        if plan in first_reply:
            return n
    return 1


def rollout_turn(task: DemoTask, turn: int, attempt: int, *, confirming: bool) -> dict:
    """The scripted model's answer for turn `turn` (from 1) of attempt `attempt` at `task`."""
    plan = ROLLOUT_PLANS.get(task.key) or RolloutPlan(look=["ls -la /app"], check=["ls -la /app"])
    skills = " and ".join(sorted(task.skills))
    if confirming:
        return {"analysis": "The outputs are in place and I checked them.", "plan": "Confirm.", "commands": [],
                "task_complete": True}
    if turn == 1:
        return {"analysis": f"Nothing is known about /app yet. The task combines {skills}.",
                "plan": OPENING_PLANS[(attempt - 1) % len(OPENING_PLANS)],
                "commands": [{"command": c, "timeout_s": 10} for c in plan.look], "task_complete": False}
    helpers, steps = agent_workflow(task.solve_sh)
    slip = plan.slips.get(attempt)
    if slip and slip[0] == "mistake":
        steps = [s.replace(slip[1], slip[2]) for s in steps]
    if slip and slip[0] == "early":
        steps = steps[:slip[1]]
    half = (len(steps) + 1) // 2
    batches = [b for b in (steps[:half], steps[half:]) if b]
    if turn == 2:
        names = ", ".join(re.findall(rf"{AGENT_DIR}/(\w+)\.py", " ".join(h.split("\n", 1)[0] for h in helpers)))
        return {"analysis": "The inputs are where the instruction says, with the distractors it mentions.",
                "plan": f"Write the skills' scripts ({names}) as helper files under {AGENT_DIR}, then run them.",
                "commands": [{"command": h, "timeout_s": 10} for h in helpers], "task_complete": False}
    index = turn - 3
    if index < len(batches):
        first = index == 0
        commands = [{"command": s, "timeout_s": 60} for s in batches[index]]
        if not first:  # a glance at what the steps wrote
            commands.append({"command": plan.check[0], "timeout_s": 10})
        return {"analysis": "The helpers are written." if first else "The first steps finished without errors.",
                "plan": "Run the first steps of the workflow." if first else "Run the remaining steps and look at "
                                                                             "what they wrote.",
                "commands": commands, "task_complete": False}
    return {"analysis": "Every step ran; the outputs should be complete.",
            "plan": "Look at the outputs once more, then finish.",
            "commands": [{"command": c, "timeout_s": 10} for c in plan.check], "task_complete": True}


def expected_rollout_passes() -> dict[str, list[bool]]:
    """What the cassette's attempts do per task key, attempt 1..k: solved or not."""
    return {key: [attempt not in plan.slips for attempt in range(1, ROLLOUT_ATTEMPTS + 1)]
            for key, plan in ROLLOUT_PLANS.items()}
