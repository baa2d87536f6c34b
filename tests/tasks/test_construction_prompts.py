"""The construction prompts as a model receives them: grounded in the realized environment (a
file inventory, structure-aware previews, the Dockerfile, the installed tools), carrying the rules
the validator enforces, within the context budget on the largest demo task; the solution stage's
partial solutions run by validation; the scenario's difficulty in task.toml and the analytics."""
from __future__ import annotations

import json
import sqlite3
import tempfile
import tomllib
from pathlib import Path

import pytest

from demo import scripted_llm
from demo import scripted_tasks as demo_tasks
from facet_site.lib import docker_engine as de
from facet_site.lib import validation as val
from scenarios.models import LLMCall, Scenario
from tasks import analytics, construction, generation, outputs, versions
from tasks.analytics_selection import AnalyticsFilter
from tasks.apps import base_image
from tasks.environments import _write_context
from tasks.models import LabelKind, Task, TaskLabel, TaskStatus

STAGES = ["task.manifest", "task.materialize", "task.environment_repair", "task.instruction", "task.solution",
          "task.verifier", "task.joint"]
ARTIFACT_STAGES = ["task.instruction", "task.solution", "task.verifier", "task.joint"]
# What each artifact prompt must tell the model, one phrase per validator rule it serves.
RULES = {
    "task.instruction": ["Do not reveal the solution", "Do not state the expected output values",
                         "Name only paths that exist in e0", "must stay unchanged", "whitespace"],
    "task.solution": ["Offline", "never hard-code a result", "current time", "ENTRYPOINT",
                      "never write to\n  /logs/verifier", "partial_solutions"],
    "task.verifier": ["Always write the reward", "Do NOT use `set -e`", "no pip/uv/apt installs",
                      "Compute expected values from the input files at test time",
                      "No dependence on the current time", "Test only what the instruction states",
                      "ENTRYPOINT", "fail on the untouched environment"],
    "task.joint": ["no `set -e`", "computed from the inputs at test time", "no time, randomness or network",
                   "Never commands", "ENTRYPOINT", "partial_solutions", "One test per stated requirement"],
}


# --- previews (no engine needed) ----------------------------------------------------------------


def _sqlite_bytes() -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "shop.db"
        con = sqlite3.connect(path)
        con.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT, amount REAL)")
        con.executemany("INSERT INTO orders (customer, amount) VALUES (?, ?)", [("c1", 10.5), ("c2", 3.0)])
        con.execute("CREATE TABLE customers (id TEXT, name TEXT)")
        con.commit()
        con.close()
        return path.read_bytes()


def test_each_kind_of_fixture_gets_a_preview_of_its_structure():
    rows = "order_id,customer_id,amount,status\n" + "".join(f"{i},c{i % 3},{i * 2},paid\n" for i in range(1, 41))
    csv_preview = de.preview_file("/app/data/orders.csv", rows.encode(), len(rows))
    assert csv_preview["columns"] == ["order_id", "customer_id", "amount", "status"]
    assert (csv_preview["column_count"], csv_preview["rows"]) == (4, 40)
    shown = de.render_preview("/app/data/orders.csv", len(rows), csv_preview)
    assert "columns (4): order_id, customer_id, amount, status" in shown and "data rows: 40" in shown
    assert shown.count("\n  ") == 3  # three sample rows, not forty

    doc = json.dumps({"service": "checkout", "requests": 1200, "status": {"500": 3}, "top_paths": [["/pay", 9]]})
    shown = de.render_preview("/app/s.json", len(doc), de.preview_file("/app/s.json", doc.encode(), len(doc)))
    assert "keys (4): service: string, requests: int, status: object, top_paths: list[list[int|string]]" in shown

    log = "".join(f"2026-03-04T10:{m:02d}:00Z GET /pay 200 0.{m:02d}\n" for m in range(30))
    shown = de.render_preview("/app/logs/access.log", len(log), de.preview_file("/app/logs/access.log", log.encode(), len(log)))
    assert "lines: 30; line format samples:" in shown and "2026-03-04T10:00:00Z GET /pay 200 0.00" in shown

    db = _sqlite_bytes()
    shown = de.render_preview("/app/shop.db", len(db), de.preview_file("/app/shop.db", db, len(db)))
    assert "table orders (2 rows): id INTEGER, customer TEXT, amount REAL" in shown
    assert "table customers (0 rows)" in shown

    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
    assert de.render_preview("/app/logo.png", len(png), de.preview_file("/app/logo.png", png, len(png))) == \
        f"### /app/logo.png ({len(png)} bytes, binary: png image)"

    jsonl = "".join(json.dumps({"id": i, "text": "x"}) + "\n" for i in range(5))
    shown = de.render_preview("/app/c.jsonl", len(jsonl), de.preview_file("/app/c.jsonl", jsonl.encode(), len(jsonl)))
    assert "records: 5" in shown and "record keys: id: int, text: string" in shown


def test_a_file_that_does_not_parse_as_its_extension_says_is_previewed_as_text():
    broken = b'{"a": 1,'
    assert de.preview_file("/app/x.json", broken, len(broken))["kind"] == "text"


# --- rendering every stage ------------------------------------------------------------------------


def _scenario(task: demo_tasks.DemoTask, difficulty: str = "hard") -> Scenario:
    """An unsaved scenario as the demo run reconstructs one (its title names the skills)."""
    names = " and ".join(sorted(task.skills))
    return Scenario(title=f"Combine {names}", difficulty=difficulty, integrated=f"The team combines {names}.",
                    goal="Produce the reports", context="An on-call rotation", capability=names,
                    state="inputs under /app", io_tools="bash, python3",
                    solution_reference={"workflow": ["run each skill in order"]},
                    instruction_reference={"outputs": ["/app/out"]})


def _fake_e0(task: demo_tasks.DemoTask) -> dict:
    """e0 as the build step would store it for the demo task's fixtures (COPYed under /app/),
    previews made by the same function the capture uses; for rendering without an engine."""
    files, previews = {}, {}
    for rel, text in task.files.items():
        path = f"/app/{rel}"
        data = text.encode()
        files[path] = {"path": path, "kind": "file", "size": len(data), "mode": 0o644, "sha256": "",
                       "link": "", "text_head": text[:2048]}
        previews[path] = de.preview_file(path, data, len(data))
    return {"workdir": "/app", "roots": ["/app"], "services": [],
            "snapshot": {"roots": ["/app"], "files": files, "previews": previews, "truncated": False},
            "tools": {"os": "Debian GNU/Linux 12 (bookworm)", "tools": {"python3": "Python 3.11.2"},
                      "python_packages": ["pytest==7.2.1"], "python_packages_total": 1}}


def _render_all(task: demo_tasks.DemoTask, e0: dict, difficulty: str = "hard") -> dict[str, list[dict]]:
    """Every construction stage's messages for the demo task, with the values the code passes."""
    scenario = _scenario(task, difficulty)
    spec = generation.scenario_json(scenario)
    env_files = {"Dockerfile": task.dockerfile.format(base=base_image()), **task.files, "init.sh": task.init_script}
    manifest = generation.cap(json.dumps(task.manifest, indent=1), generation.CONTEXT_BUDGET["manifest"])
    env_common = {"scenario_json": spec, "base_image": base_image(), "difficulty": difficulty,
                  "base_packages": ", ".join(de.BASE_PACKAGES)}
    context = {"scenario_json": spec, **generation.grounding(e0, env_files), "difficulty": difficulty,
               "tests_hint": generation.TESTS_HINT[difficulty]}
    instruction = task.instruction
    return {
        "task.manifest": generation.prompt("task.manifest").messages(**env_common),
        "task.materialize": generation.prompt("task.materialize").messages(**env_common, manifest_json=manifest),
        "task.environment_repair": generation.prompt("task.environment_repair").messages(
            scenario_json=spec, manifest_json=manifest,
            files_json=generation.cap(json.dumps(env_files, indent=1), generation.CONTEXT_BUDGET["environment_files"]),
            outcome="init_failed", reason="init check `test -s /app/x` exited 1", evidence="(none)",
            log="x" * 20_000, base_image=base_image()),
        "task.instruction": generation.prompt("task.instruction").messages(**context),
        "task.solution": generation.prompt("task.solution").messages(
            **context, instruction=instruction, verifier_section=""),
        "task.verifier": generation.prompt("task.verifier").messages(
            **context, instruction=instruction, solution_section="## The reference solution\n" + task.solve_sh),
        "task.joint": generation.prompt("task.joint").messages(**context),
    }


def test_every_construction_stage_has_a_v2_prompt_the_code_picks():
    for stage in STAGES:
        assert generation.prompt(stage).version == "v2", stage


@pytest.mark.parametrize("task", demo_tasks.DEMO_TASKS, ids=lambda t: t.key)
def test_each_demo_task_s_prompts_stay_within_the_token_budget(task):
    rendered = _render_all(task, _fake_e0(task))
    sizes = {stage: generation.estimate_tokens(messages) for stage, messages in rendered.items()}
    assert max(sizes.values()) <= generation.PROMPT_TOKEN_BUDGET, sizes
    # the scripted model still finds the demo task (by the scenario's title) in every stage
    for stage, messages in rendered.items():
        user = "\n".join(m["content"] for m in messages if m["role"] == "user")
        assert demo_tasks.find(user) is task, stage
        if stage in ("task.manifest", "task.materialize", "task.environment_repair"):
            assert scripted_llm._base_image(user) == base_image(), stage  # what its Dockerfile starts FROM


def test_a_section_past_its_cap_is_cut_with_a_note_and_the_prompt_stays_in_budget():
    task = max(demo_tasks.DEMO_TASKS, key=lambda t: sum(len(c) for c in t.files.values()))
    e0 = _fake_e0(task)
    # 2,000 fixtures, each with a preview: the inventory and the previews are cut, not the budget
    for i in range(2000):
        path = f"/app/data/part-{i:04d}.csv"
        e0["snapshot"]["files"][path] = {"path": path, "kind": "file", "size": 60, "text_head": "a,b\n1,2\n"}
        e0["snapshot"]["previews"][path] = de.preview_file(path, b"a,b\n1,2\n", 8)
    context = generation.grounding(e0, {"Dockerfile": "FROM x\n" + "RUN true\n" * 2000})
    assert "more entries" in context["e0_inventory"]
    assert "more files were previewed at capture and are not shown" in context["e0_previews"]
    assert "characters of this Dockerfile cut to fit the context budget" in context["dockerfile"]
    assert context["e0_previews"].count("### ") == generation.CONTEXT_BUDGET["previews"]


def test_no_artifact_prompt_can_exceed_the_budget_whatever_the_environment_holds():
    """Every section at its cap at once: a huge scenario, 2,000 fixtures with long previews and
    long lines, a huge Dockerfile, init.sh, tool list and process list, and instruction,
    solution and tests far past their caps, cut the way construction cuts them."""
    huge = "y" * 200_000
    scenario = Scenario(title="Combine a and b", difficulty="hard", integrated=huge, goal=huge, context=huge,
                        capability=huge, state=huge, io_tools=huge)
    files, previews = {}, {}
    for i in range(2000):
        path = f"/app/data/{'deep/' * 40}part-{i:04d}-{'n' * 100}.log"
        files[path] = {"path": path, "kind": "file", "size": 10**6, "text_head": "z" * 2048}
        previews[path] = de.preview_file(path, ("2026-01-01 00:00:00 " + "w" * 400 + "\n").encode() * 50, 10**6)
    e0 = {"workdir": "/app", "services": [huge[:300]] * 50,
          "snapshot": {"files": files, "previews": previews, "truncated": True},
          "tools": {"os": "x", "tools": {f"t{i}": "v" * 120 for i in range(200)},
                    "python_packages": ["p" * 100] * 80, "python_packages_total": 400}}
    context = {"scenario_json": generation.scenario_json(scenario),
               **generation.grounding(e0, {"Dockerfile": huge, "init.sh": huge}),
               "difficulty": "hard", "tests_hint": "15-25"}
    budget = generation.CONTEXT_BUDGET
    instruction = generation.cap(huge, budget["instruction"])
    rendered = {
        "task.instruction": generation.prompt("task.instruction").messages(**context),
        "task.solution": generation.prompt("task.solution").messages(
            **context, instruction=instruction,
            verifier_section="## The verifier\n" + generation.cap(huge, budget["tests"])),
        "task.verifier": generation.prompt("task.verifier").messages(
            **context, instruction=instruction,
            solution_section="## The reference solution\n" + generation.cap(huge, budget["solution"])),
        "task.joint": generation.prompt("task.joint").messages(**context),
    }
    sizes = {stage: generation.estimate_tokens(m) for stage, m in rendered.items()}
    assert max(sizes.values()) <= generation.PROMPT_TOKEN_BUDGET, sizes
    assert min(sizes.values()) > generation.PROMPT_TOKEN_BUDGET // 2  # the caps were reached, not skipped


# --- on the real engine ---------------------------------------------------------------------------

@pytest.mark.docker
@pytest.mark.parametrize("key", ["storefront-incident", "git-release"])
def test_the_prompts_show_the_realized_environment_captured_from_the_built_image(engine, key):
    """The largest demo fixtures (a 40 KB access log) and a task whose init.sh makes a git history:
    built for real, e0 captured with previews and tool versions, every artifact prompt rendered."""
    task = next(t for t in demo_tasks.DEMO_TASKS if t.key == key)
    env_files = {"Dockerfile": task.dockerfile.format(base=base_image()), **task.files, "init.sh": task.init_script}
    with tempfile.TemporaryDirectory() as tmp:
        context_dir = _write_context(env_files, Path(tmp) / "task")
        result = de.build_image(engine, context_dir, base_image=base_image(), timeout_s=600)
    e0 = val.capture_initial_state(engine, result.image_tag, paths=["/app"], owner="tests:prompts",
                                   max_previews=generation.E0_PREVIEWS_STORED, tool_versions=True)
    assert e0["tools"]["tools"]["python3"].startswith("Python 3.")
    assert any(p.startswith("pytest==") for p in e0["tools"]["python_packages"])
    rendered = _render_all(task, e0)
    realized = {p: f for p, f in e0["snapshot"]["files"].items() if f["kind"] == "file" and "/.git/" not in p}
    assert realized
    for stage in ARTIFACT_STAGES:
        user = rendered[stage][-1]["content"]
        for path, entry in realized.items():  # every file of the working directory, with its size
            assert f"{path}\t{entry['size']} B\t" in user, (stage, path)
        assert f"FROM {base_image()}" in user and "environment/init.sh (the Dockerfile copies and runs it" in user
        assert "- python3: Python 3." in user and "Python packages (" in user and "pytest==" in user
        for phrase in RULES[stage]:
            assert phrase in user or phrase in rendered[stage][0]["content"], (stage, phrase)
        assert generation.estimate_tokens(rendered[stage]) <= generation.PROMPT_TOKEN_BUDGET
    user = rendered["task.instruction"][-1]["content"]
    if key == "storefront-incident":
        lines = task.files["logs/access.log"].count("\n")
        assert f"### /app/logs/access.log ({len(task.files['logs/access.log'].encode())} bytes, log)" in user
        assert f"lines: {lines}; line format samples:" in user
        assert task.files["logs/access.log"].splitlines()[0][:80] in user
        # init.sh gzipped yesterday's log: e0 has the .gz, a binary shown by type and size only
        assert "/app/logs/access.log.1\t" not in user
        gz = e0["snapshot"]["files"]["/app/logs/access.log.1.gz"]["size"]
        assert f"/app/logs/access.log.1.gz\t{gz} B\tgzip data" in user
        assert f"### /app/logs/access.log.1.gz ({gz} bytes, binary: gzip data)" in user
    else:
        # the repository init.sh made: its files listed, git's own data as one line
        assert "/app/repo/CHANGELOG.md\t" in user
        assert "/app/repo/.git/\t" in user and "(not listed: tool data)" in user
        assert "/app/repo/.git/HEAD" not in user


# --- the pipeline: partial solutions, difficulty, recorded requests --------------------------------


@pytest.mark.docker
@pytest.mark.django_db
def test_partial_solutions_difficulty_and_grounding_travel_through_construction(engine, make_run, llm_url,
                                                                                  client_as, tmp_path):
    run = make_run("", url=llm_url)
    Scenario.objects.filter(run=run).update(difficulty="hard")
    construction.construct_run(run.pk)
    task = Task.objects.get(run=run)
    assert task.status == TaskStatus.VALIDATED, task.message
    version = task.current_version

    # the solution stage's two partial solutions, stored beside solve.sh, each saying what it skips
    partial_paths = sorted(p for p in version.files if p.startswith(val.PARTIALS_DIR))
    assert partial_paths == ["solution/partials/01-counts-cancelled-orders.sh",
                             "solution/partials/02-stops-before-status.sh"]
    assert "# facet partial solution: stops before: Total the **paid** orders" in version.files[partial_paths[0]]
    # validation ran both beside the cut of solve.sh, and the verifier gave each reward 0
    validation = version.validations.get()
    assert validation.settings["partials_grain"] == "commands+written"
    partials = list(validation.trials.filter(kind="partial").order_by("index"))
    assert [(p.reward, p.passed) for p in partials] == [(0.0, True)] * 3

    # the scenario's difficulty: task.toml, the label, the analytics share and filter
    meta = tomllib.loads(version.files["task.toml"])["metadata"]
    assert meta["difficulty"] == "hard"
    assert TaskLabel.objects.filter(task=task, kind=LabelKind.DIFFICULTY).values_list("value", flat=True).get() == "hard"
    shares = {r["difficulty"]: (r["tasks"], r["share"]) for r in
              analytics.difficulty_distribution(AnalyticsFilter.from_query({}))["rows"]}
    assert shares == {"easy": (0, 0.0), "medium": (0, 0.0), "hard": (1, 1.0)}
    page = client_as("viewer").get("/tasks/analytics/families/").content.decode()
    assert '<h2>Difficulty</h2>' in page and "difficulty=hard" in page
    assert AnalyticsFilter.from_query({"difficulty": "easy"}).task_queryset().count() == 0
    assert list(AnalyticsFilter.from_query({"difficulty": "hard"}).task_queryset()) == [task]
    csv_rows = client_as("viewer").get("/tasks/analytics/families/?format=csv&table=difficulty").content.decode()
    assert "hard,1,1\r\n" in csv_rows and "easy,0,0\r\n" in csv_rows

    # the recorded requests: what the instruction, solution and verifier stages were shown
    for stage in ("task.instruction", "task.solution", "task.verifier"):
        call = LLMCall.objects.get(run=run, stage=stage)
        user = call.messages[-1]["content"]
        assert "/app/data/orders.csv\t" in user and "/app/data/customers.csv\t" in user
        assert "columns (4): order_id, customer_id, amount, status" in user and "data rows: 4" in user
        assert "COPY data/ /app/data/" in user and "- python3: Python 3." in user
        assert '"difficulty": "hard"' in user
        if stage != "task.solution":  # the solution has no difficulty target of its own: the tests set it
            assert "Difficulty target: hard" in user


@pytest.mark.docker
@pytest.mark.django_db
def test_a_partial_solution_the_verifier_accepts_fails_validation(engine, make_run, llm_url, tmp_path):
    """A model's partial solution that in fact does all the work passes the verifier: that is a
    weak-verifier finding (partial_unexpected_pass), as for the mechanical cuts."""
    run = make_run("", url=llm_url)
    construction.construct_run(run.pk)
    version = Task.objects.get(run=run).current_version
    task_dir = versions.write_harbor_task(version, tmp_path / "task")
    (task_dir / val.PARTIALS_DIR / "03-claims-to-stop-early.sh").write_text(scripted_llm.GOOD_SOLVE)
    report = val.validate_task(engine, task_dir, base_image=base_image(), max_partials=3, owner="tests:prompts")
    assert report.failure == val.PARTIAL_UNEXPECTED_PASS, report.reason
    passed = [t for t in report.trials if t.kind == "partial" and t.reward == 1.0]
    assert len(passed) == 1


def test_outputs_describe_every_field():
    for schema in (outputs.ManifestOut, outputs.ManifestFile, outputs.MaterializationOut, outputs.FixtureFile,
                   outputs.EnvironmentRepairOut, outputs.InstructionOut, outputs.SolutionOut,
                   outputs.PartialSolution, outputs.VerifierOut, outputs.ArtifactsOut, outputs.RouterOut):
        missing = [name for name, f in schema.model_fields.items() if not (f.description or "").strip()]
        assert not missing, (schema.__name__, missing)
        properties = schema.model_json_schema()["properties"]
        assert all("description" in p for p in properties.values()), schema.__name__
