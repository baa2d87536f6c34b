"""Evidence-driven repair, read from the requests the scripted model actually received over HTTP:
every repair and router prompt carries the failing tests with their assertion messages and the
tail of the failed step's output; the router also sees the Dockerfile and e0; earlier rounds come
with their diffs and outcomes; prompts stay within the token budget on the largest demo task; and
the task page's repair timeline shows what each round was given."""
import json
import re

import pytest
from django.utils.html import escape

from demo import scripted_llm
from demo.scripted_tasks import DEMO_TASKS
from scenarios import run_config
from tasks import construction, repair, repair_evidence, validating, versions
from tasks.models import Environment, Step, Task, TaskStatus, Trial, Validation, ValidationStatus
from tasks.versions import TEST_PY

from .conftest import CONSTRUCTION


@pytest.fixture
def requests_seen(monkeypatch):
    """Every request body the scripted server answers, in order (the server runs in this process)."""
    seen = []
    answer = scripted_llm.answer

    def recording(body):
        seen.append(body)
        return answer(body)

    monkeypatch.setattr(scripted_llm, "answer", recording)
    return seen


def sent(requests, schema: str) -> list[str]:
    """The whole prompt (system and user) of each request made with this output schema."""
    return ["\n".join(m["content"] for m in body["messages"])
            for body in requests if body["response_format"]["json_schema"]["name"] == schema]


def failing_tests(validation: Validation) -> list[tuple[str, str]]:
    trial = validation.trials.filter(kind="oracle").order_by("id").first()
    return list(trial.tests.filter(outcome__in=["failed", "error"]).values_list("name", "message"))


def first_line(text: str) -> str:
    return next(line for line in text.splitlines() if line.strip())


def last_line(text: str) -> str:
    return [line for line in text.splitlines() if line.strip()][-1]


def test_logs_keep_their_tail_and_messages_their_head():
    log = "".join(f"step {i}\n" for i in range(5000)) + "Traceback: the real error\n"
    kept = repair_evidence.keep_tail(log, 100)
    assert kept.endswith("Traceback: the real error\n") and "step 0\n" not in kept
    assert repair_evidence.tokens(kept) <= 100
    message = "AssertionError: assert totals == expected\n" + "x" * 10_000
    kept = repair_evidence.keep_head(message, 50)
    assert kept.startswith("AssertionError: assert totals == expected") and repair_evidence.tokens(kept) <= 50


def test_a_prompt_over_the_budget_is_cut_to_it_keeping_the_heads_of_its_largest_parts():
    from tasks.generation import prompt

    router = prompt("task.router")
    values = {name: f"({name})" for name in router.placeholders}
    values["test_py"] = "def test_first():\n    assert True\n" + "# filler line\n" * 200_000
    values["evidence"] = "Failure type: oracle_failed\n" + "- detail\n" * 50_000
    assert repair_evidence.prompt_tokens(router.messages(**values)) > repair_evidence.PROMPT_TOKENS
    fitted, size = repair_evidence.fit(router, values)
    assert size == repair_evidence.prompt_tokens(router.messages(**fitted)) <= repair_evidence.PROMPT_TOKENS
    assert fitted["test_py"].startswith("def test_first():") and fitted["evidence"].startswith("Failure type:")
    assert fitted["instruction"] == values["instruction"]  # small parts are left whole


@pytest.mark.docker
def test_the_solution_repair_prompt_has_the_failed_step_s_output_and_the_failing_tests(
        engine, make_run, llm_url, requests_seen):
    run = make_run("solution-fail", url=llm_url)
    construction.construct_run(run.pk)
    task = Task.objects.get(run=run)
    assert task.status == TaskStatus.VALIDATED, task.message
    [repair] = task.repairs.all()
    failed = repair.triggered_by
    oracle = failed.trials.filter(kind="oracle").order_by("id").first()
    assert oracle.solution_exit_code not in (0, None)
    [prompt] = sent(requests_seen, "SolutionRepairOut")
    # the tail of what solve.sh printed (stdout and stderr together) when it failed
    assert last_line(oracle.solution_output) in prompt
    assert f"solve.sh exit code {oracle.solution_exit_code}" in prompt
    # the tests the broken run failed, each with the head of its assertion message
    tests = failing_tests(failed)
    assert tests
    for name, message in tests:
        assert name in prompt and first_line(message) in prompt
    # the round keeps what its prompt was given
    evidence = repair.evidence
    assert evidence["failed_step"] == "solution" and evidence["trial"] == oracle.name
    assert last_line(oracle.solution_output) in evidence["solution_output"]["text"]
    assert evidence["prompt_tokens"]["solution"] == repair_evidence.prompt_tokens(
        [m for b in requests_seen if b["response_format"]["json_schema"]["name"] == "SolutionRepairOut"
         for m in b["messages"]])


@pytest.mark.docker
def test_the_router_sees_the_dockerfile_e0_and_the_evidence_and_later_rounds_see_earlier_ones(
        engine, make_run, llm_url, requests_seen, client_as):
    run = make_run("hopeless", url=llm_url, construction={**CONSTRUCTION, "max_repair_rounds": 2})
    construction.construct_run(run.pk)
    task = Task.objects.get(run=run)
    assert task.status == TaskStatus.DISCARDED
    rounds = list(task.repairs.order_by("number"))
    routers, verifiers = sent(requests_seen, "RouterOut"), sent(requests_seen, "VerifierRepairOut")
    assert len(rounds) == len(routers) == len(verifiers) == 2
    env = task.environment
    e0_files = env.initial_state["snapshot"]["files"]
    for r, router, verifier in zip(rounds, routers, verifiers):
        version, failed = r.from_version, r.triggered_by
        oracle = failed.trials.filter(kind="oracle").order_by("id").first()
        for prompt in (router, verifier):
            # the failing tests with their messages, and the tail of test.sh's output
            tests = failing_tests(failed)
            assert tests
            for name, message in tests:
                assert name in prompt and first_line(message) in prompt
            assert last_line(oracle.verifier_output) in prompt
        # the router can blame the environment only having seen it: the Dockerfile and e0
        for line in version.files["environment/Dockerfile"].splitlines():
            assert line in router
        for path in ("/app/data/orders.csv", "/app/data/customers.csv"):  # e0's inventory: path and size
            assert re.search(rf"{re.escape(path)}\b.*\b{e0_files[path]['size']}\b", router), path
        assert "never remove or relax an assertion merely to make the oracle pass" in verifier
    # the second round is told what the first changed and what came of it
    first, second = rounds
    diff = repair_evidence.round_diff(first.from_version.files, first.to_version.files)
    added = next(line for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++"))
    for prompt in (routers[1], verifiers[1]):
        assert "Round 1: regenerated the verifier after oracle_failed" in prompt
        assert added in prompt and "Outcome: still failing: oracle_failed" in prompt
    assert second.evidence["previous_rounds"][0]["number"] == 1

    # the task page's repair timeline shows each round's evidence, escaped
    html = client_as("viewer").get(f"/tasks/{task.pk}/?tab=repairs").content.decode()
    for r in rounds:
        assert f'id="repair-{r.number}-evidence"' in html
        for name, message in failing_tests(r.triggered_by):
            assert escape(name) in html and escape(first_line(message)) in html
        oracle = r.triggered_by.trials.filter(kind="oracle").order_by("id").first()
        assert escape(last_line(oracle.verifier_output)) in html
        assert escape(r.evidence["diagnosis"]) in html and r.evidence["diagnosis"]
    assert escape(added[1:]) in html  # the line the round added, in its diff


def _size(task) -> int:
    return (sum(len(c) for c in task.files.values()) + len(task.solve_sh) + len(task.test_py)
            + len(task.instruction) + len(task.dockerfile) + len(task.init_script))


@pytest.mark.docker
def test_repair_prompts_stay_within_the_token_budget_on_the_largest_demo_task(
        engine, make_run, llm_url, requests_seen):
    demo = max(DEMO_TASKS, key=_size)
    run = make_run("", url=llm_url)
    scenario = run.scenarios.get()
    scenario.title = "Combine " + " and ".join(sorted(demo.skills))
    scenario.save(update_fields=["title"])
    construction.construct_run(run.pk)
    task = Task.objects.get(run=run)
    assert task.status == TaskStatus.VALIDATED, task.message
    # A verbose failing test a model might write: it prints the whole working directory many times
    # and fails with a long message, so the log and the message are far over their budgets.
    version = task.current_version
    planted = version.files[TEST_PY] + (
        "\n\ndef test_planted_listing_matches():\n"
        "    from pathlib import Path\n"
        "    listing = '\\n'.join(sorted(str(p) for p in Path('/app').rglob('*')))\n"
        "    print(listing * 100)\n"
        "    assert False, 'the listing differs: ' + listing * 100\n")
    files = {**version.files, TEST_PY: planted}
    new = versions.create_version(task, files, parent=version)
    validation = Validation.objects.create(version=new)
    Task.objects.filter(pk=task.pk).update(current_version=new)
    validating.validate(validation.pk)
    validation.refresh_from_db()
    assert validation.failure == "oracle_failed"
    task.refresh_from_db()
    validating.apply_outcome(task, validation)
    construction.construct_run(run.pk)
    task.refresh_from_db()
    [r] = task.repairs.all()
    prompts = [b for b in requests_seen
               if b["response_format"]["json_schema"]["name"] in ("RouterOut", "VerifierRepairOut")]
    assert len(prompts) == 2
    for body in prompts:
        size = repair_evidence.prompt_tokens(body["messages"])
        assert size <= repair_evidence.PROMPT_TOKENS, size
        text = "\n".join(m["content"] for m in body["messages"])
        assert "test_planted_listing_matches" in text and "AssertionError" in text
    assert set(r.evidence["prompt_tokens"]) == {"router", "verifier"}
    assert max(r.evidence["prompt_tokens"].values()) <= repair_evidence.PROMPT_TOKENS
    # the planted message and the verifier's log were cut: the message keeps its head, the log its tail
    oracle = r.triggered_by.trials.filter(kind="oracle").order_by("id").first()
    [(name, message)] = [t for t in failing_tests(r.triggered_by) if t[0].endswith("test_planted_listing_matches")]
    [shown] = [t for t in r.evidence["tests"]["shown"] if t["name"] == name]
    assert repair_evidence.tokens(message) > repair_evidence.BUDGET["test_message"]
    assert repair_evidence.tokens(shown["message"]) <= repair_evidence.BUDGET["test_message"]
    assert shown["message"].startswith(message[:200])
    kept = r.evidence["verifier_output"]["text"]
    assert len(oracle.verifier_output) > len(kept) and kept.endswith(oracle.verifier_output.rstrip()[-300:])
    assert json.dumps(r.evidence)  # stored as plain JSON


XSS = "<script>alert('evidence')</script>"


def test_a_leaked_answer_sends_its_findings_to_the_environment_repair_and_the_page_escapes_them(
        make_run, llm_url, requests_seen, client_as):
    run = make_run("", url=llm_url)
    construction.create_tasks(run)
    task = Task.objects.get(run=run)
    env_files = {"Dockerfile": "FROM facet-base:bookworm\nWORKDIR /app\nCOPY data/ /app/data/\n",
                 "data/orders.csv": scripted_llm.ORDERS_CSV, "data/.cache.csv": "name,total\nAda,10\nBob,8\n"}
    Environment.objects.filter(pk=task.environment_id).update(files=env_files, status="built")
    files = versions.make_files(task, environment=env_files, instruction="Total the paid orders per customer.",
                                solve_sh=scripted_llm.GOOD_SOLVE, test_sh=scripted_llm.GOOD_TEST_SH,
                                test_py=scripted_llm.GOOD_TEST_PY, run_cfg=run_config.construction_config(run))
    version = versions.create_version(task, files)
    finding = {"check": "leaked_answer", "severity": "error", "file": "/app/data/.cache.csv", "line": 1,
               "message": f"the oracle's /app/out/report.csv is already in the image {XSS}",
               "evidence": "name,total\nAda,10\nBob,8"}
    failed = Validation.objects.create(version=version, status=ValidationStatus.DONE, accepted=False,
                                       failure="leaked_answer", reason="an answer is in the image",
                                       static_findings=[finding])
    Trial.objects.create(validation=failed, version=version, kind="nop", reward=0.0, passed=True, seconds=1)
    Task.objects.filter(pk=task.pk).update(current_version=version, step=Step.REPAIR, status=TaskStatus.REPAIRING)
    task.refresh_from_db()
    repair.step_repair(task)

    [prompt] = sent(requests_seen, "EnvironmentRepairOut")
    assert not sent(requests_seen, "RouterOut")  # a leak is always the environment's fault
    assert "leaked_answer at /app/data/.cache.csv:1" in prompt and finding["message"] in prompt
    assert "Ada,10" in prompt.split("leaked_answer at", 1)[1]  # the matching content, under the finding
    [r] = task.repairs.all()
    assert r.artifact == "environment" and r.evidence["failure"] == "leaked_answer"
    assert r.evidence["prompt_tokens"]["environment"] <= repair_evidence.PROMPT_TOKENS
    html = client_as("viewer").get(f"/tasks/{task.pk}/?tab=repairs").content.decode()
    assert 'id="repair-1-evidence"' in html and XSS not in html
    assert escape(finding["message"]) in html


def _orders_task(run) -> Task:
    construction.create_tasks(run)
    task = Task.objects.get(run=run)
    env_files = {"Dockerfile": "FROM facet-base:bookworm\nWORKDIR /app\nCOPY data/ /app/data/\n",
                 "data/orders.csv": scripted_llm.ORDERS_CSV, "data/customers.csv": scripted_llm.CUSTOMERS_CSV}
    Environment.objects.filter(pk=task.environment_id).update(files=env_files, status="built")
    files = versions.make_files(task, environment=env_files, instruction="Total the paid orders per customer.",
                                solve_sh=scripted_llm.GOOD_SOLVE.replace('== "paid"', '!= "cancelledX"'),
                                test_sh=scripted_llm.GOOD_TEST_SH, test_py=scripted_llm.GOOD_TEST_PY,
                                run_cfg=run_config.construction_config(run))
    version = versions.create_version(task, files)
    Task.objects.filter(pk=task.pk).update(current_version=version, step=Step.REPAIR, status=TaskStatus.REPAIRING)
    task.refresh_from_db()
    return task


def test_a_verifier_repair_that_finds_the_tests_right_hands_the_round_to_the_solution(
        make_run, llm_url, requests_seen, monkeypatch):
    # The model, asked to repair the verifier, finds the tests right and blames the solution.
    def tests_are_right(user):
        answer = scripted_llm.task_verifier(user)
        return {**answer, "blame": "solution", "assertion_changes": [],
                "diagnosis": "Ada's total counts a cancelled order; the instruction says paid orders only."}

    monkeypatch.setitem(scripted_llm.RESPONDERS, "VerifierRepairOut", tests_are_right)
    task = _orders_task(make_run("", url=llm_url))
    version = task.current_version
    failed = Validation.objects.create(version=version, status=ValidationStatus.DONE, accepted=False,
                                       failure="oracle_failed", reason="oracle: the verifier gave reward 0")
    oracle = Trial.objects.create(validation=failed, version=version, kind="oracle", reward=0.0, passed=False,
                                  failure="oracle_failed", solution_exit_code=0, seconds=1,
                                  verifier_output="F..\n1 failed, 2 passed in 0.03s\n")
    message = "AssertionError: assert 'name,total\\nAda,17\\nBob,8\\n' == 'name,total\\nAda,10\\nBob,8\\n'"
    oracle.tests.create(name="test_outputs::test_report_totals_paid_orders_per_customer", outcome="failed",
                        message=message)
    oracle.tests.create(name="test_outputs::test_status_is_done", outcome="passed")
    repair.step_repair(task)

    [r] = task.repairs.all()
    assert (r.artifact, r.routed_by) == ("solution", "verifier repair")
    assert set(r.llm_calls) == {"router", "verifier", "solution"}
    [solution_prompt] = sent(requests_seen, "SolutionRepairOut")
    assert "the instruction says paid orders only" in solution_prompt  # why the solution was chosen
    assert message in solution_prompt and "1 failed, 2 passed in 0.03s" in solution_prompt
    new = r.to_version
    assert new.files["tests/test_outputs.py"] == version.files["tests/test_outputs.py"]  # the tests stay
    assert new.files["solution/solve.sh"] != version.files["solution/solve.sh"]
