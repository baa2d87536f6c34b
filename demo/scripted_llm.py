"""A scripted stand-in for an OpenAI-compatible server, for recording cassettes without a real model.

No LLM endpoint is reachable where facet is developed and tested, so the demo's cassette and the
pipeline's end-to-end tests are recorded against this server: it answers Chat Completions over real
HTTP on 127.0.0.1 with schema-valid JSON built deterministically from the prompt it receives (the
skill names, descriptions and outputs it is shown). Its answers are plausible, not intelligent; a
cassette recorded from a real model replaces them without any code change.
"""
from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from demo import scripted_tasks as demo_tasks


def _h(text: str, mod: int) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) % mod


def _skills_in(text: str) -> list[dict]:
    """The skill objects quoted in a prompt (they are pretty-printed JSON with "name" keys)."""
    skills = []
    for m in re.finditer(r'"name":\s*"([^"]+)",\s*"description":\s*"((?:[^"\\]|\\.)*)"', text):
        skills.append({"name": m.group(1), "description": json.loads(f'"{m.group(2)}"')})
    return skills


def _outputs_in(text: str) -> list[str]:
    m = re.search(r'"outputs":\s*\[(.*?)\]', text, re.S)
    return re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(1))[:3] if m else []


def _short(desc: str, words: int = 14) -> str:
    d = re.sub(r"\s+", " ", desc).strip().rstrip(".")
    return " ".join(d.split()[:words])


def hypotheses(user: str) -> dict:
    skills = _skills_in(user)
    s = skills[0] if skills else {"name": "the skill", "description": "process local files"}
    count = int((re.search(r"Propose (\d+) distinct", user) or [None, "3"])[1])
    outputs = _outputs_in(user) or ["a report file"]
    settings_ = ["a small engineering team's shared workstation", "a data operations runbook",
                 "a nightly maintenance job on a build server", "an audit before a release"]
    out = []
    for i in range(count):
        out.append({
            "application_context": f"{settings_[(i + _h(s['name'], 4)) % 4]} where {s['name']} is used",
            "user_goal": f"{_short(s['description'])}",
            "initial_state": f"Input files for {s['name']} exist under /app/data and nothing has been processed yet",
            "desired_final_state": f"{outputs[i % len(outputs)]} is written under /app and matches the inputs",
        })
    return {"hypotheses": out}


def judge(user: str) -> dict:
    skills = _skills_in(user)
    names = " + ".join(s["name"] for s in skills) or "the skills"
    seed = _h(names, 1000)
    scores = [3 + (seed >> k) % 3 for k in (0, 2, 4)]  # 3..5
    executable = 2 if seed % 4 == 0 else 4  # about one candidate in four needs something a terminal lacks
    accept = min(scores + [executable]) >= 3
    rationale = lambda what: f"{what} for {names}."  # noqa: E731
    return {
        "relevance": {"score": scores[0], "rationale": rationale("Each skill serves the shared goal")},
        "complementarity": {"score": scores[1], "rationale": rationale("One skill's output feeds the next")},
        "non_redundancy": {"score": scores[2], "rationale": rationale("The skills do different things")},
        "terminal_executability": {"score": executable, "rationale": rationale(
            "Runs offline with command-line tools" if executable >= 3 else "Needs an interactive service outside the container")},
        "verdict": "accept" if accept else "reject",
        "summary": f"{'Accept' if accept else 'Reject'}: {names}.",
    }


def _names(user: str) -> list[str]:
    return [s["name"] for s in _skills_in(user)] or re.findall(r'"skill":\s*"([^"]+)"', user) or ["skill-a", "skill-b"]


def skill_analysis(user: str) -> dict:
    return {"skills": [
        {"skill": s["name"], "capabilities": [_short(s["description"], 10)],
         "preconditions": [f"input files for {s['name']} exist"], "effects": [f"{s['name']} writes its result file"]}
        for s in _skills_in(user)
    ] or [{"skill": n, "capabilities": ["process files"], "preconditions": [], "effects": []} for n in ("a", "b")]}


def scenario_exploration(user: str) -> dict:
    names = _names(user)
    return {"settings": [
        {"title": f"Release check: {' then '.join(names)}", "description": "Before a release the team runs the steps in order.",
         "shared_objective": "produce a verified release report", "skill_contributions": [f"{n} does its part" for n in names]},
        {"title": "Side by side", "description": "Each skill runs separately.", "shared_objective": "none shared",
         "skill_contributions": [f"{n} alone" for n in names]},
    ]}


def association_filtering(user: str) -> dict:
    titles = re.findall(r'"title":\s*"([^"]+)"', user)
    return {"chosen_setting": titles[0] if titles else "Release check", "why": ["the second step consumes the first step's output"],
            "discarded": [{"title": t, "reason": "the skills do not depend on each other"} for t in titles[1:]]}


def evolution_recovery(user: str) -> dict:
    names = re.findall(r'"skill":\s*"([^"]+)"', user) or ["skill-a", "skill-b"]
    names = list(dict.fromkeys(names))
    if len(names) < 2:  # two skills of one name (different authors): still a two-step workflow
        names.append(names[0])
    return {"workflow": [{"step": i + 1, "skill": n, "action": f"run {n} on the current files", "produces": f"/app/out/step{i + 1}.txt"}
                         for i, n in enumerate(names)],
            "dependencies": [f"{b} reads what {a} produced" for a, b in zip(names, names[1:])],
            "intermediate_artifacts": [f"/app/out/step{i + 1}.txt" for i in range(len(names))],
            "state_transitions": ["raw inputs → intermediate files → final report"]}


def information_expansion(user: str) -> dict:
    return {"resources": [{"path": "/app/data/input.csv", "format": "CSV", "description": "records with distractor rows"},
                          {"path": "/app/out/report.md", "format": "Markdown", "description": "the final report"}],
            "constraints": ["work offline", "do not modify /app/data"],
            "success_conditions": ["/app/out/report.md exists and lists every valid record"],
            "tools": ["bash", "python3", "jq"], "services": []}


def dimensions(user: str) -> dict:
    names = re.findall(r'"skill":\s*"([^"]+)"', user)
    names = list(dict.fromkeys(names)) or ["the skills"]
    joined = " and ".join(names)
    return {
        "title": f"Combine {joined}"[:120],
        "goal": f"Produce a verified report by chaining {joined}.",
        "context": "A small team's release checklist on a Linux workstation.",
        "capability": "; ".join(f"{n} handles one step and hands its output on" for n in names),
        "state": "Initial: raw inputs in /app/data. Intermediate: files in /app/out. Final: /app/out/report.md.",
        "io_tools": "Inputs /app/data/input.csv; output /app/out/report.md; tools bash, python3, jq.",
        "integrated_scenario": f"## Scenario\n\nThe team uses {joined} in sequence: the first step prepares the data, "
                               "the last writes **/app/out/report.md**.",
        # three skills chain more dependent steps than two; the v2 prompt asks for the label and a reason
        "difficulty": "hard" if len(names) >= 3 else "medium",
        "difficulty_rationale": f"{len(names)} dependent steps, with distractor rows in the input.",
    }


def references(user: str) -> dict:
    return {
        "solution_reference": {"setup_actions": ["inspect /app/data"], "workflow": ["run each step in order", "write the report"],
                               "state_transitions": ["/app/data → /app/out/report.md"]},
        "instruction_reference": {"goal": "Write /app/out/report.md from /app/data/input.csv", "inputs": ["/app/data/input.csv"],
                                  "outputs": ["/app/out/report.md"], "constraints": ["offline", "keep inputs unchanged"]},
    }


def consistency(user: str) -> dict:
    return {"consistent": True, "shared_initial_state": "raw inputs in /app/data",
            "shared_outcome": "/app/out/report.md written", "issues": []}


# --- task construction (tasks app) ------------------------------------------------------------
# The demo run's eight scenarios get the tasks of scripted_tasks (grounded in the demo skills,
# with the first answers a model gets wrong). Any other scenario gets a small, real task: total the
# paid orders per customer (cancelled orders are the distractors, customers.csv the cross-file
# relation); one whose text carries "facet-test-case: <case>" gets a deliberately broken first
# answer, so the end-to-end tests exercise each repair path.

def _case(user: str) -> str:
    m = re.search(r"facet-test-case:\s*([a-z-]+)", user)
    return m.group(1) if m else ""


def _base_image(user: str) -> str:
    m = re.search(r"FROM (\S+?)`", user)
    return m.group(1) if m else "facet-base:bookworm"


ORDERS_CSV = "order_id,customer_id,amount,status\n1,c1,10,paid\n2,c2,5,paid\n3,c1,7,cancelled\n4,c2,3,paid\n"
CUSTOMERS_CSV = "customer_id,name\nc1,Ada\nc2,Bob\nc3,Cy\n"
GOOD_SOLVE = """#!/bin/bash
set -euo pipefail
cd /app
mkdir -p out
python3 - <<'PY'
import csv
names = {r["customer_id"]: r["name"] for r in csv.DictReader(open("data/customers.csv"))}
totals = {}
for r in csv.DictReader(open("data/orders.csv")):
    if r["status"] == "paid":
        totals[r["customer_id"]] = totals.get(r["customer_id"], 0) + int(r["amount"])
with open("out/report.csv", "w") as f:
    f.write("name,total\\n")
    for c in sorted(totals):
        f.write(f"{names[c]},{totals[c]}\\n")
PY
echo done > out/status.txt
"""
GOOD_TEST_SH = """#!/bin/bash
cd /app
python3 -m pytest -q -p no:cacheprovider --junitxml=/logs/verifier/junit.xml /tests/test_outputs.py
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""
GOOD_TEST_PY = """from pathlib import Path


def test_report_totals_paid_orders_per_customer():
    assert Path("/app/out/report.csv").read_text() == "name,total\\nAda,10\\nBob,8\\n"


def test_cancelled_orders_are_left_out():
    assert "Ada,17" not in Path("/app/out/report.csv").read_text()


def test_status_is_done():
    assert Path("/app/out/status.txt").read_text().strip() == "done"
"""


def _materialization(user: str, *, broken: str = "") -> dict:
    base = _base_image(user)
    if broken == "other-base":
        base = "debian:bookworm"
    run_line = "RUN bash /usr/local/bin/facet-init.sh"
    if broken in ("build-fail", "env-hopeless"):
        run_line = 'RUN python3 -c "import facet_module_that_does_not_exist"'
    if broken == "build-hang":
        run_line = "RUN sleep 300"
    return {
        "dockerfile": f"FROM {base}\nWORKDIR /app\nCOPY data/ /app/data/\nCOPY init.sh /usr/local/bin/facet-init.sh\n{run_line}\n",
        "files": [{"path": "data/orders.csv", "content": ORDERS_CSV}, {"path": "data/customers.csv", "content": CUSTOMERS_CSV}],
        "init_script": "#!/bin/bash\nset -e\nmkdir -p /app/out\n",
        "init_checks": ["test -s /app/data/orders.csv", "test -d /app/out"],
    }


def task_manifest(user: str) -> dict:
    if demo := demo_tasks.find(user):
        return demo_tasks.manifest(demo, user)
    return {"workdir": "/app", "directories": ["/app/data", "/app/out"],
            "files": [{"path": "/app/data/orders.csv", "purpose": "orders with cancelled distractors", "format": "CSV"},
                      {"path": "/app/data/customers.csv", "purpose": "customer names by id", "format": "CSV"}],
            "services": [], "dependencies": ["python3"], "distractors": ["cancelled orders"],
            "cross_file_relations": ["orders.customer_id -> customers.customer_id"]}


def task_materialize(user: str) -> dict:
    if demo := demo_tasks.find(user):
        return demo_tasks.materialize(demo, user, _base_image(user))
    return _materialization(user, broken=_case(user))


def task_environment_repair(user: str) -> dict:
    if demo := demo_tasks.find(user):
        return demo_tasks.environment_repair(demo, user, _base_image(user))
    if _case(user) == "env-hopeless":  # a repair that never finds the fault
        return {**_materialization(user, broken="env-hopeless"), "diagnosis": "Tried the same module again."}
    return {**_materialization(user), "diagnosis": "Rebuilt the context from the manifest on the configured base image."}


def task_instruction(user: str) -> dict:
    if demo := demo_tasks.find(user):
        return demo_tasks.instruction(demo, user)
    return {"instruction": "Total the **paid** orders of `/app/data/orders.csv` per customer, using the names in "
                           "`/app/data/customers.csv`. Write `/app/out/report.csv` with the header `name,total` and one "
                           "row per customer (sorted by customer id), then write `done` to `/app/out/status.txt`."}


# The partial solutions the solution stage returns beside GOOD_SOLVE: each leaves one stated
# requirement undone (the cancelled orders counted; the status file never written).
GOOD_PARTIALS = [
    {"name": "counts-cancelled-orders", "stops_before": "Total the **paid** orders",
     "solve_sh": GOOD_SOLVE.replace('    if r["status"] == "paid":\n        totals', '    totals')},
    {"name": "stops-before-status", "stops_before": "then write `done` to `/app/out/status.txt`",
     "solve_sh": GOOD_SOLVE.replace("echo done > out/status.txt\n", "")},
]


def task_solution(user: str) -> dict:
    if demo := demo_tasks.find(user):
        return demo_tasks.solution(demo, user)
    if _case(user) == "solution-fail" and "Repair the solution" not in user:
        return {"solve_sh": "#!/bin/bash\nset -euo pipefail\ncd /app\npython3 -c 'import facet_module_that_does_not_exist'\n"}
    return {"solve_sh": GOOD_SOLVE, "partial_solutions": GOOD_PARTIALS}


def task_verifier(user: str) -> dict:
    if demo := demo_tasks.find(user):
        return demo_tasks.verifier(demo, user)
    case = _case(user)
    if "Repair the verifier" in user:
        if case == "hopeless":  # a verifier that never accepts anything, a new variant each round
            tag = hashlib.sha256(user.encode()).hexdigest()[:8]
            return {"test_sh": GOOD_TEST_SH, "test_py": f"# variant {tag}\n" + GOOD_TEST_PY.replace("Bob,8", "Bob,80")}
        return {"test_sh": GOOD_TEST_SH, "test_py": GOOD_TEST_PY}
    if case == "nop-pass":  # only checks the input is there: passes without any work
        return {"test_sh": GOOD_TEST_SH,
                "test_py": "from pathlib import Path\n\n\ndef test_orders_exist():\n    assert Path('/app/data/orders.csv').exists()\n"}
    if case == "hopeless":
        return {"test_sh": GOOD_TEST_SH, "test_py": GOOD_TEST_PY.replace("Bob,8", "Bob,80")}
    return {"test_sh": GOOD_TEST_SH, "test_py": GOOD_TEST_PY}


def task_joint(user: str) -> dict:
    return {**task_instruction(user), **task_solution(user), **task_verifier(user)}


def _tests_at_fault(user: str) -> list[str]:
    """The test names the repair prompts' evidence lists under "### Tests that ..." (tasks/repair_evidence.py)."""
    m = re.search(r"^### Tests that .*?\n((?:- .*\n(?:  .*\n)*)+)", user, re.M)
    return re.findall(r"^- (\S+) \[\w+\]$", m.group(1), re.M) if m else []


def _evidence_cites(user: str) -> str:
    tests = _tests_at_fault(user)
    return f"{tests[0]} fails" if tests else "the validation failed"


def task_router(user: str) -> dict:
    if demo := demo_tasks.find(user):
        answer = demo_tasks.router(demo, user)
        return {**answer, "reason": f"{answer['reason']} ({_evidence_cites(user)})"}
    code = re.search(r"solve\.sh exit code (-?\d+)", user)
    if code and code.group(1) != "0":
        return {"artifact": "solution", "reason": f"solve.sh exited {code.group(1)}: the reference solution is at fault"}
    return {"artifact": "verifier", "reason": "the reference solution exits 0 and writes the requested files; the tests "
                                              f"expect other values ({_evidence_cites(user)})"}


# The repair answers: the construction answer for the artifact (canned), with a diagnosis that
# quotes the evidence the prompt gave (the first test at fault, or the last line of solve.sh's output).

def _output_tail_line(user: str) -> str:
    m = re.search(r"^### Output of solve\.sh .*?\n```\n(.*?)\n```", user, re.M | re.S)
    lines = [line for line in (m.group(1).splitlines() if m else []) if line.strip()]
    return lines[-1].strip() if lines else ""


def task_solution_repair(user: str) -> dict:
    cause = _output_tail_line(user) or _evidence_cites(user)
    return {**task_solution(user), "diagnosis": f"solve.sh failed: {cause}. Rewrote the failing step."}


def task_verifier_repair(user: str) -> dict:
    tests = _tests_at_fault(user)
    changes = [{"test": tests[0].rsplit("::", 1)[-1], "change": "corrected",
                "justification": "the expected value contradicted what the instruction's inputs produce"}] if tests else []
    if re.search(r"^Failure type: (nop|partial)_unexpected_pass$", user, re.M):
        changes = [{"test": "test_report_totals_paid_orders_per_customer", "change": "added",
                    "justification": "the instruction asks for the totals; the old tests only checked the inputs"}]
    return {**task_verifier(user), "blame": "verifier", "diagnosis": f"{_evidence_cites(user)}.",
            "assertion_changes": changes}


def task_instruction_repair(user: str) -> dict:
    return {**task_instruction(user), "diagnosis": f"{_evidence_cites(user)}: the instruction now states the checked detail."}


# --- skill categories (stage classify_category, skills/prompts/classify_category.v1.md) ----------


def skill_category(user: str) -> dict:
    """One of the two categories the classifier guessed (the prompt lists them, most likely first):
    its first guess when it was fairly sure, otherwise the runner-up for about half the skills, so a
    run's stage both confirms and changes categories. The confidence varies by skill name, so some
    answers land in the Taxonomy page's low-confidence queue."""
    guess = re.search(r"most likely first: ([a-z0-9-]+) \(([0-9.]+)\), ([a-z0-9-]+) \(([0-9.]+)\)", user)
    name = (re.search(r"^Name: (.*)$", user, re.M) or [None, "the skill"])[1]
    if guess is None:
        raise ValueError("no classifier guess in the prompt")
    first, first_confidence, runner_up = guess[1], float(guess[2]), guess[3]
    pick = runner_up if first_confidence < 0.5 and _h(name, 2) else first
    return {"category": pick, "confidence": round(0.3 + _h(name, 65) / 100, 2),
            "reason": f"{name} reads as {pick.replace('-', ' ')}"}


# --- rollouts (stage rollout.turn) --------------------------------------------------------------
# A conversation is the rollout loop's messages: the instruction, then after each turn the output
# of its commands ending "[turn n of m done ...]". The demo tasks are worked through as
# scripted_tasks.rollout_turn says; any other task gets the orders report of the scripted
# construction (observe, write the script, run it, finish). Sampling is what makes the k attempts
# at one task differ, and the server cannot see which attempt asks: the n-th conversation it sees
# about a task is attempt n (recordings run the attempts in order, scripts/record-demo-cassette),
# and its first answer says which, so the later turns of that conversation follow it.

_conversations: dict[str, int] = {}
_conversations_lock = threading.Lock()


def _new_attempt(key: str) -> int:
    with _conversations_lock:
        _conversations[key] = _conversations.get(key, 0) + 1
        return (_conversations[key] - 1) % demo_tasks.ROLLOUT_ATTEMPTS + 1


def rollout_turn(body: dict) -> dict:
    messages = body.get("messages", [])
    users = [m.get("content", "") for m in messages if m.get("role") == "user"]
    replies = [m.get("content", "") for m in messages if m.get("role") == "assistant"]
    turn = sum("[turn " in u for u in users) + 1
    confirming = bool(users) and "You marked the task as complete" in users[-1]
    instruction = users[0] if users else ""
    demo = demo_tasks.find(instruction)
    key = demo.key if demo else "orders"
    attempt = _new_attempt(key) if turn == 1 else demo_tasks._attempt_of(replies[0] if replies else "")
    if demo is not None:
        return demo_tasks.rollout_turn(demo, turn, attempt, confirming=confirming)
    if confirming:
        return {"analysis": "Done.", "plan": "Confirm.", "commands": [], "task_complete": True}
    if turn == 1:
        return {"analysis": "Nothing read yet.", "plan": demo_tasks.OPENING_PLANS[attempt - 1],
                "commands": [{"command": "ls -la /app /app/data", "timeout_s": 10},
                             {"command": "head -n 5 /app/data/orders.csv /app/data/customers.csv", "timeout_s": 10}],
                "task_complete": False}
    if turn == 2:
        return {"analysis": "Orders with a status, customers by id.", "plan": "Total the paid orders per customer.",
                "commands": [{"command": f"cat > /tmp/report.sh <<'SH'\n{GOOD_SOLVE}SH", "timeout_s": 10},
                             {"command": "bash /tmp/report.sh && cat /app/out/report.csv", "timeout_s": 30}],
                "task_complete": True}
    return {"analysis": "The report is written.", "plan": "Finish.", "commands": [], "task_complete": True}


RESPONDERS = {
    "HypothesesOut": hypotheses, "JudgeOut": judge, "SkillAnalysisOut": skill_analysis,
    "ScenarioExplorationOut": scenario_exploration, "AssociationFilteringOut": association_filtering,
    "EvolutionRecoveryOut": evolution_recovery, "InformationExpansionOut": information_expansion,
    "DimensionsOut": dimensions, "ReferencesOut": references, "ConsistencyOut": consistency,
    "ManifestOut": task_manifest, "MaterializationOut": task_materialize, "EnvironmentRepairOut": task_environment_repair,
    "InstructionOut": task_instruction, "SolutionOut": task_solution, "VerifierOut": task_verifier,
    "ArtifactsOut": task_joint, "RouterOut": task_router, "SolutionRepairOut": task_solution_repair,
    "VerifierRepairOut": task_verifier_repair, "InstructionRepairOut": task_instruction_repair, "LLMCategory": skill_category,
}
# Responders that need the whole conversation (the turns so far), not just the user text.
CONVERSATION_RESPONDERS = {"TurnAnswer": rollout_turn}


def answer(body: dict) -> str:
    schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("name", "")
    if schema in CONVERSATION_RESPONDERS:
        return json.dumps(CONVERSATION_RESPONDERS[schema](body), ensure_ascii=False)
    user = "\n".join(m.get("content", "") for m in body.get("messages", []) if m.get("role") == "user")
    responder = RESPONDERS.get(schema)
    if responder is None:
        raise KeyError(f"no scripted answer for schema {schema!r}")
    return json.dumps(responder(user), ensure_ascii=False)


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # keep test output quiet
        pass

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.server.throttled():
            data = b'{"error": {"message": "rate limited (scripted)", "type": "rate_limit_error"}}'
            self.send_response(429)
            self.send_header("Retry-After", f"{self.server.retry_after:g}")
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        with self.server.lock:
            self.server.in_flight += 1
            self.server.peak_in_flight = max(self.server.peak_in_flight, self.server.in_flight)
        started = time.monotonic()
        try:
            time.sleep(self.server.latency)  # a model's think time; the request is in flight meanwhile
            self._answer(body)
        finally:
            with self.server.lock:
                self.server.in_flight -= 1
                self.server.spans.append((started, time.monotonic()))

    def _answer(self, body: dict):
        try:
            content = answer(body)
            status, payload = 200, {
                "id": f"chatcmpl-scripted-{time.monotonic_ns()}", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model", "scripted"),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": len(json.dumps(body["messages"])) // 4, "completion_tokens": len(content) // 4,
                          "total_tokens": len(json.dumps(body["messages"])) // 4 + len(content) // 4},
            }
        except Exception as exc:
            status, payload = 400, {"error": {"message": str(exc), "type": "invalid_request_error"}}
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        with self.server.lock:
            self.server.requests += 1


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # hundreds of workers' threads connect at once; the default backlog is 5

    def throttled(self) -> bool:
        """Every `throttle_every`-th request is refused with a 429 (0: never)."""
        with self.lock:
            self.arrivals += 1
            return bool(self.throttle_every) and self.arrivals % self.throttle_every == 0


class ScriptedLLMServer:
    """`with ScriptedLLMServer() as url:` serves /v1/chat/completions on 127.0.0.1 until the block ends.

    `latency` seconds pass before each answer, as with a real model, and every `throttle_every`-th
    request gets a 429 with Retry-After `retry_after`; `peak_in_flight` and `spans` (start, end of
    each answered request) show how many requests the clients kept in flight."""

    def __init__(self, *, latency: float = 0.0, throttle_every: int = 0, retry_after: float = 1.0,
                 port: int = 0):
        self.latency, self.throttle_every, self.retry_after, self.port = latency, throttle_every, retry_after, port

    def __enter__(self) -> str:
        with _conversations_lock:
            _conversations.clear()  # a new server samples attempt 1 first again
        self.httpd = _Server(("127.0.0.1", self.port), _Handler)
        self.httpd.requests = 0
        self.httpd.lock = threading.Lock()
        self.httpd.latency, self.httpd.throttle_every = self.latency, self.throttle_every
        self.httpd.retry_after, self.httpd.arrivals = self.retry_after, 0
        self.httpd.in_flight = self.httpd.peak_in_flight = 0
        self.httpd.spans = []
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    @property
    def requests(self) -> int:
        return self.httpd.requests

    @property
    def peak_in_flight(self) -> int:
        return self.httpd.peak_in_flight

    @property
    def spans(self) -> list[tuple[float, float]]:
        with self.httpd.lock:
            return list(self.httpd.spans)

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
