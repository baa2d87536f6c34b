"""The static task-defect detectors, which read the task's files: answer files copied into the
environment, an instruction that pastes the solution, network use at grade time, tests that only
check existence, all of them through static_task_defects, and validation's static checks. For
each class a planted defect is caught with readable evidence, and its clean twin is not (no false
rejections)."""
from __future__ import annotations

import pytest

from facet_site.lib import task_defects as td
from facet_site.lib.validation import instruction_paths, leak_search_roots, static_checks


# ---------------------------------------------------------------------------- answer files


DOCKERFILE = "FROM facet-base:bookworm\nWORKDIR /app\nCOPY data/ /app/data/\n"
SOLVE = ("#!/bin/bash\nset -e\ncd /app\npython3 - <<'EOF'\nimport json\nrows = json.load(open("
         "'data/in.json'))\njson.dump(sorted(rows), open('out.json', 'w'))\nEOF\n")
TEST_PY = ("import json\n\ndef test_sorted():\n    expected = json.load(open('/tests/"
           "expected_output.json'))\n    assert json.load(open('/app/out.json')) == expected\n")
EXPECTED = "[1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233]\n"


def _task_files(env_extra: dict[str, str], dockerfile: str = DOCKERFILE):
    env = {"environment/Dockerfile": dockerfile, "environment/data/in.json": "[3, 1, 2]",
           **env_extra}
    return (env, {"solution/solve.sh": SOLVE},
            {"tests/test_outputs.py": TEST_PY, "tests/expected_output.json": EXPECTED})


def test_it_flags_a_copied_file_with_the_tests_expected_output():
    env, sol, tests = _task_files({"environment/data/cache.json": EXPECTED.replace(", ", ",")})
    findings = td.find_answer_files_in_environment(env, sol, tests)
    assert [f["check"] for f in findings] == [td.ANSWER_FILE_IN_ENVIRONMENT]
    f = findings[0]
    assert f["severity"] == "error" and f["file"] == "environment/Dockerfile" and f["line"] == 3
    assert "tests/expected_output.json" in f["message"] and "environment/data/cache.json" in \
        f["message"]


def test_it_flags_a_copy_of_solve_sh_and_a_file_named_like_the_expected_output():
    env, sol, tests = _task_files({"environment/helper.sh": SOLVE,
                                   "environment/data/expected_output.json": "[0]\n"},
                                  dockerfile=DOCKERFILE + "COPY helper.sh /usr/local/bin/\n")
    findings = td.find_answer_files_in_environment(env, sol, tests)
    messages = {f["line"]: f["message"] for f in findings}
    assert "solution/solve.sh" in messages[4]
    assert "expected_output.json" in messages[3]


def test_copy_everything_counts_and_copy_from_a_stage_does_not():
    env, sol, tests = _task_files({"environment/notes/expected_output.json": EXPECTED},
                                  dockerfile="FROM facet-base:bookworm\nCOPY . /app\n")
    assert [f["line"] for f in td.find_answer_files_in_environment(env, sol, tests)] == [2]
    env, sol, tests = _task_files({"environment/notes/expected_output.json": EXPECTED},
                                  dockerfile=DOCKERFILE + "COPY --from=build notes/ /app/notes/\n")
    assert td.find_answer_files_in_environment(env, sol, tests) == []


def test_the_clean_twin_and_files_never_copied_are_not_flagged():
    env, sol, tests = _task_files({"environment/notes/expected_output.json": EXPECTED,
                                   "environment/data/reference.csv": "id,name\n1,a\n"})
    # notes/ is in the build context but no COPY takes it into the image; reference data is input.
    assert td.find_answer_files_in_environment(env, sol, tests) == []
    env, sol, tests = _task_files({})
    assert td.find_answer_files_in_environment(env, sol, tests) == []


# ---------------------------------------------------------------------------- reveals solution

REAL_SOLVE = """#!/bin/bash
set -euo pipefail
cd /app
mkdir -p out
awk -F, 'NR > 1 { total[$1] += $3 } END { for (r in total) print r "," total[r] }' sales.csv \\
  | sort -t, -k2 -nr > out/totals.csv
head -n 3 out/totals.csv > out/top3.csv
gzip -k out/totals.csv
"""
GOAL_INSTRUCTION = """# Regional totals

`/app/sales.csv` has one sale per line (`region,product,amount`, with a header). Write
`/app/out/totals.csv` with one `region,total` line per region, largest total first, the three
largest in `/app/out/top3.csv`, and keep a gzip copy of the totals next to it.
"""
LEAKY_INSTRUCTION = GOAL_INSTRUCTION + """
Run exactly this:

```
mkdir -p out
awk -F, 'NR > 1 { total[$1] += $3 } END { for (r in total) print r "," total[r] }' sales.csv \\
  | sort -t, -k2 -nr > out/totals.csv
head -n 3 out/totals.csv > out/top3.csv
gzip -k out/totals.csv
```
"""


def test_it_flags_an_instruction_that_pastes_the_solution():
    f = td.instruction_reveals_solution(LEAKY_INSTRUCTION, REAL_SOLVE)
    assert f is not None and f["check"] == td.INSTRUCTION_REVEALS_SOLUTION
    assert f["severity"] == "error" and f["file"] == "solution/solve.sh"
    assert f["line"] == 4  # `mkdir -p out`, the first line it quotes
    assert "head -n 3 out/totals.csv > out/top3.csv" in f["evidence"]


def test_an_instruction_that_states_the_goal_is_not_flagged():
    assert td.instruction_reveals_solution(GOAL_INSTRUCTION, REAL_SOLVE) is None
    c = td.solution_containment(GOAL_INSTRUCTION, REAL_SOLVE)
    assert c["line_share"] == 0 and c["gram_share"] < 0.05


def test_quoting_one_sanity_check_command_is_not_flagged():
    # Real tasks quote a check command the solution also runs (build-pov-ray does).
    instruction = GOAL_INSTRUCTION + "\nCheck with `head -n 3 out/totals.csv > out/top3.csv`.\n"
    assert td.instruction_reveals_solution(instruction, REAL_SOLVE) is None


# ---------------------------------------------------------------------------- network at grade time

TEST_SH_ONLINE = """#!/bin/bash
# pip install would be wrong here, but this is a comment
apt-get update && apt-get install -y curl
curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh
uv run --with pytest==8.4.1 pytest /tests/test_outputs.py
bash /tests/helpers/setup.sh
"""
HELPER_SH = "#!/bin/bash\ngit clone https://github.com/example/fixtures.git /tmp/fx\n"
HELPER_PY = ("import subprocess, sys, urllib.request\n"
             "subprocess.run([sys.executable, '-m', 'pip', 'install', 'requests'])\n"
             "DATA = urllib.request.urlopen('https://example.org/data.json').read()\n")
TEST_SH_OFFLINE = """#!/bin/bash
cd /app
curl -fsS http://localhost:8080/health
curl -fsS http://api:5000/items > /tmp/items.json
git clone user@server:/git/server /tmp/checkout
pip install --no-index --find-links /tests/wheels pytest
python3 -m pytest /tests/test_outputs.py -q && echo 1 > /logs/verifier/reward.txt
"""


def test_it_flags_installs_and_downloads_in_every_tests_file_with_their_lines():
    findings = td.grade_time_network({"tests/test.sh": TEST_SH_ONLINE,
                                      "tests/helpers/setup.sh": HELPER_SH,
                                      "tests/conftest.py": HELPER_PY})
    where = {(f["file"], f["line"]) for f in findings}
    assert where == {("tests/test.sh", 3), ("tests/test.sh", 4), ("tests/test.sh", 5),
                     ("tests/helpers/setup.sh", 2), ("tests/conftest.py", 2),
                     ("tests/conftest.py", 3)}
    assert all(f["severity"] == "error" and f["check"] == td.GRADE_TIME_NETWORK for f in findings)
    by_line = {(f["file"], f["line"]): f for f in findings}
    assert "uv run --with" in by_line[("tests/test.sh", 5)]["message"]
    assert "github.com" in by_line[("tests/helpers/setup.sh", 2)]["message"]
    assert by_line[("tests/conftest.py", 3)]["evidence"].startswith("DATA = urllib")


def test_local_servers_sidecars_and_offline_installs_are_not_flagged():
    tests = {"tests/test.sh": TEST_SH_OFFLINE + "npx jest --ci /tests/app.test.js\n",
             "tests/Dockerfile": "FROM python:3.12\nRUN pip install pytest\n",
             "tests/test_api.py": "import requests\n\ndef test_up():\n    assert requests.get("
                                  "'http://127.0.0.1:8000/').status_code == 200\n"}
    assert td.grade_time_network(tests) == []


# ---------------------------------------------------------------------------- existence only

EXISTENCE_PY = '''
import os
from pathlib import Path

OUT = Path("/app/out/summary.json")

def test_summary_exists():
    assert OUT.exists()

def test_report_written():
    assert os.path.isfile("/app/out/report.md") and os.path.getsize("/app/out/report.md") > 0

def test_chunks_not_empty():
    text = Path("/app/out/chunks.jsonl").read_text()
    assert len(text) > 0

def test_model_file():
    with open("/app/model.bin", "rb") as f:
        header = f.read(100)
    assert Path("/app/model.bin").stat().st_size > 100000 and len(header) > 50

class TestDigest:
    def test_digest(self):
        self.assertTrue(os.path.exists(os.path.join("/app", "digest.txt")))
'''
CONTENT_PY = '''
import json, os
from pathlib import Path

OUT = Path("/app/out/summary.json")

def test_summary_exists():
    assert OUT.exists()
    assert json.loads(OUT.read_text())["requests"] == 98

def test_report_written():
    text = Path("/app/out/report.md").read_text()
    assert text.startswith("# Incident")

def test_chunks_not_empty():
    lines = Path("/app/out/chunks.jsonl").read_text().splitlines()
    assert len(lines) == 4

GREETING = "hello world"

def test_greeting():
    assert Path("/app/hello.txt").read_text() == GREETING

def test_report_mentions_path():
    content = open("/app/out/report.md").read()
    assert "/search" in content
'''


def test_it_warns_about_tests_that_only_check_existence_by_name():
    findings = td.existence_only_tests({"tests/test_outputs.py": EXISTENCE_PY})
    assert len(findings) == 1
    f = findings[0]
    assert f["check"] == td.EXISTENCE_ONLY_TESTS and f["severity"] == "warning"
    assert f["file"] == "tests/test_outputs.py" and f["line"] == 7
    assert "5 of its 5 tests" in f["message"]
    for name in ("test_summary_exists", "test_report_written", "test_chunks_not_empty",
                 "test_model_file", "TestDigest.test_digest"):
        assert name in f["message"]
    assert f["evidence"].startswith("8: assert OUT.exists()")


def test_tests_that_read_content_are_not_flagged():
    assert td.existence_only_tests({"tests/test_outputs.py": CONTENT_PY}) == []


def test_a_shell_verifier_made_only_of_file_tests_is_flagged_and_a_real_one_is_not():
    weak = ("#!/bin/bash\nif [ -f /app/out.txt ] && test -s /app/report.md; then\n"
            "  echo 1 > /logs/verifier/reward.txt\nelse\n"
            "  echo 0 > /logs/verifier/reward.txt\nfi\n")
    f = td.existence_only_tests({"tests/test.sh": weak})
    assert len(f) == 1 and "[ -f /app/out.txt" in f[0]["message"] and f[0]["line"] == 2
    real = weak.replace("test -s /app/report.md", "grep -q '^# Incident' /app/report.md")
    assert td.existence_only_tests({"tests/test.sh": real}) == []


# ---------------------------------------------------------------------------- all static checks


def test_static_task_defects_is_clean_on_a_clean_task_and_routes_each_check():
    env, sol, tests = _task_files({})
    tests = {**tests, "tests/test.sh": TEST_SH_OFFLINE}
    assert td.static_task_defects(instruction=GOAL_INSTRUCTION, solve_sh=SOLVE,
                                  environment_files=env, solution_files=sol,
                                  tests_files=tests) == []
    findings = td.static_task_defects(
        instruction=LEAKY_INSTRUCTION, solve_sh=REAL_SOLVE, environment_files=env,
        solution_files={"solution/solve.sh": REAL_SOLVE},
        tests_files={"tests/test.sh": TEST_SH_ONLINE, "tests/test_outputs.py": EXISTENCE_PY})
    checks = {f["check"] for f in findings}
    assert checks == {td.INSTRUCTION_REVEALS_SOLUTION, td.GRADE_TIME_NETWORK,
                      td.EXISTENCE_ONLY_TESTS}
    assert all(f["check"] in td.REPAIR_TARGET for f in findings)
    assert all(set(f) == {"check", "severity", "message", "file", "line", "evidence"}
               for f in findings)


@pytest.mark.parametrize("host, remote", [
    ("localhost", False), ("127.0.0.1", False), ("api", False), ("10.1.2.3", False),
    ("pypi.org", True), ("8.8.8.8", True), ("deb.debian.org", True)])
def test_remote_hosts_are_told_from_the_tasks_own(host, remote):
    assert td.is_remote_host(host) is remote


# ---------------------------------------------------------------------------- validation's static checks
# The false alarms of issue 17, and the defect detectors wired into validation.static_checks.


STATIC_TASK = {
    "instruction.md": "In /app, sort data/orders.csv and write out/report.csv.\n",
    "task.toml": 'version = "1.0"\n',
    "environment/Dockerfile": "FROM facet-base:bookworm\nWORKDIR /app\nCOPY data /app/data\n",
    "environment/data/orders.csv": "id,amount\n2,5\n1,3\n",
    "solution/solve.sh": "#!/bin/bash\ncd /app\nmkdir -p out\nsort data/orders.csv > out/report.csv\n",
    "tests/test.sh": "#!/bin/bash\npython3 -m pytest /tests/test_outputs.py && echo 1 > /logs/verifier/reward.txt"
                     " || echo 0 > /logs/verifier/reward.txt\n",
    "tests/test_outputs.py": "def test_report():\n    assert open('/app/out/report.csv').read().startswith('1,3')\n",
}


def _static(tmp_path, **changes) -> list[dict]:
    for rel, text in {**STATIC_TASK, **{k.replace("__", "/").replace("_DOT_", "."): v for k, v in changes.items()}}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return static_checks(tmp_path)


def _checks(findings) -> list[str]:
    return [f["check"] for f in findings]


def test_static_checks_of_a_clean_task_find_nothing(tmp_path):
    assert _static(tmp_path) == []


def test_a_path_named_relative_to_the_working_directory_is_named(tmp_path):
    # "out/report.csv" in /app names /app/out/report.csv; the sentence's period is not part of a path
    assert "path_not_in_instruction" not in _checks(_static(tmp_path))
    assert _checks(_static(tmp_path, instruction_DOT_md="Write /app/out/report.csv.\n")) == []
    unnamed = _static(tmp_path, instruction_DOT_md="Write the report somewhere sensible.\n")
    assert "path_not_in_instruction" in _checks(unnamed)


def test_tests_looking_under_solution_are_fine_when_the_instruction_asks_for_it(tmp_path):
    tests = "def test_it():\n    assert open('/solution/answer.txt').read()\n"
    assert "tests_use_solution" in _checks(_static(tmp_path, tests__test_outputs_DOT_py=tests))
    told = "Write your answer to /solution/answer.txt.\n"
    assert "tests_use_solution" not in _checks(_static(tmp_path, tests__test_outputs_DOT_py=tests,
                                                       instruction_DOT_md=told))
    # running solve.sh stays an error whatever the instruction says
    runs = "import subprocess\nsubprocess.run(['bash', '/solution/solve.sh'])\n"
    assert "tests_use_solution" in _checks(_static(tmp_path, tests__test_outputs_DOT_py=runs, instruction_DOT_md=told))


def test_test_dir_set_by_the_tb1_converter_is_no_warning(tmp_path):
    converted = "#!/bin/bash\nexport TEST_DIR=/tests\npytest $TEST_DIR/test_outputs.py\necho 1 > /logs/verifier/reward.txt\n"
    assert "test_dir_variable" not in _checks(_static(tmp_path, tests__test_DOT_sh=converted))
    relying = "#!/bin/bash\npytest $TEST_DIR/test_outputs.py\necho 1 > /logs/verifier/reward.txt\n"
    assert "test_dir_variable" in _checks(_static(tmp_path, tests__test_DOT_sh=relying))


def test_an_install_in_a_helper_script_that_test_sh_runs_is_an_error_with_its_line(tmp_path):
    test_sh = STATIC_TASK["tests/test.sh"].replace("#!/bin/bash\n", "#!/bin/bash\nbash /tests/setup.sh\n")
    found = _static(tmp_path, tests__test_DOT_sh=test_sh, tests__setup_DOT_sh="#!/bin/bash\npip install pandas==2.2.2\n")
    network = [f for f in found if f["check"] == td.GRADE_TIME_NETWORK]
    assert network and network[0]["severity"] == "error"
    assert (network[0]["file"], network[0]["line"], network[0]["evidence"]) == (
        "tests/setup.sh", 2, "pip install pandas==2.2.2")
    assert "grade_time_install" not in _checks(found)  # the old test.sh-only warning is gone


def test_static_checks_include_the_file_defect_detectors(tmp_path):
    revealing = STATIC_TASK["instruction.md"] + ("\n```\nsort data/orders.csv > out/report.csv\n"
                                                 "sort -r data/orders.csv > out/rev.csv\nwc -l data/orders.csv > out/count.txt\n```\n")
    found = _static(tmp_path, instruction_DOT_md=revealing, solution__solve_DOT_sh=(
        "#!/bin/bash\ncd /app\nmkdir -p out\nsort data/orders.csv > out/report.csv\nsort -r data/orders.csv > out/rev.csv\n"
        "wc -l data/orders.csv > out/count.txt\n"))
    assert td.INSTRUCTION_REVEALS_SOLUTION in _checks(found)


def test_instruction_paths_and_the_leak_search_roots():
    assert instruction_paths("Read data/orders.csv and /app/in/customers.csv. Write out/report.csv.") == [
        "/app/in/customers.csv", "data/orders.csv", "out/report.csv"]
    roots = leak_search_roots("FROM x\nWORKDIR /app\nCOPY seed /srv/seed\nCOPY a.txt b/\n", None)
    assert roots == ["/srv/seed", "/app/b"]
