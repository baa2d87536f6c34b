"""The task-defect detectors over what validation's trials produce or run: answers already in the
image (compared with the oracle's outputs), network attempts in a verifier's output, tests that
varied between repeated trials (flaky), and the partial solutions cut from solve.sh for the
partial trials. For each class a planted defect is caught with readable evidence, and its clean
twin is not (no false rejections)."""
from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field

from facet_site.lib import task_defects as td


# ---------------------------------------------------------------------------- leaked answers

SUMMARY = {"requests": 98, "unparsed_lines": 2, "status": {"200": 80, "404": 6, "502": 10},
           "top_paths": [["/search", 40], ["/cart", 12]]}
SUMMARY_JSON = json.dumps(SUMMARY, indent=2).encode()
REPORT_CSV = b"region,units,revenue\nnorth,12,340.50\nsouth,7,120.00\neast,3,45.25\n"
LOG = b"".join(b"10.0.0.%d - - [04/Mar/2026:09:10:%02d] \"GET /search HTTP/1.1\" 200 512\n"
               % (i, i) for i in range(20))


def test_it_flags_an_output_already_in_the_image_with_keys_reordered():
    oracle = {"/app/out/summary.json": SUMMARY_JSON}
    reordered = json.dumps(dict(reversed(list(SUMMARY.items())))).encode()
    initial = {"/app/logs/access.log": LOG, "/app/.cache/expected_summary.json": reordered}

    findings = td.find_leaked_answers(oracle, initial, {"/app/logs/access.log"})

    assert [f["check"] for f in findings] == [td.LEAKED_ANSWER]
    f = findings[0]
    assert f["severity"] == "error"
    assert f["file"] == "/app/.cache/expected_summary.json"
    assert "/app/out/summary.json" in f["message"] and "key order" in f["message"]
    assert '"requests": 98' in f["evidence"]


def test_it_flags_a_table_whose_rows_and_columns_were_shuffled():
    shuffled = b"units,region,revenue\n3,east,45.25\n12,north,340.50\n7 , south,120.00\n"
    findings = td.find_leaked_answers({"/app/report.csv": REPORT_CSV},
                                      {"/srv/fixtures/report.csv": shuffled}, set())
    assert [f["check"] for f in findings] == [td.LEAKED_ANSWER]
    assert "row and column order" in findings[0]["message"]


def test_it_flags_an_output_that_differs_only_in_whitespace():
    text = b"alpha beta gamma delta epsilon zeta eta theta\n"
    findings = td.find_leaked_answers({"/app/out.txt": text},
                                      {"/opt/answers/out.txt": b"alpha  beta gamma\ndelta epsilon "
                                                               b"zeta eta theta"}, [])
    assert findings and findings[0]["file"] == "/opt/answers/out.txt"


def test_binary_outputs_match_byte_for_byte_only():
    png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + bytes(range(64))
    leaked = td.find_leaked_answers({"/app/plot.png": png}, {"/srv/cache/plot.png": png}, [])
    assert "byte for byte" in leaked[0]["message"] and "binary" in leaked[0]["evidence"]
    assert td.find_leaked_answers({"/app/plot.png": png},
                                  {"/srv/cache/plot.png": png[:-1] + b"\1"}, []) == []


def test_a_clean_twin_with_the_answer_absent_is_not_flagged():
    oracle = {"/app/out/summary.json": SUMMARY_JSON, "/app/report.csv": REPORT_CSV}
    initial = {"/app/logs/access.log": LOG,
               "/app/old/summary.json": json.dumps({**SUMMARY, "requests": 97}).encode()}
    assert td.find_leaked_answers(oracle, initial, {"/app/logs/access.log"}) == []


def test_copies_of_named_inputs_and_trivial_outputs_are_not_leaks():
    oracle = {"/app/out/access.log": LOG, "/app/count.txt": b"42\n", "/app/ok.txt": b"OK\n",
              "/app/empty": b""}
    initial = {"/app/logs/access.log": LOG, "/usr/share/doc/x/answer.txt": b"42\n",
               "/etc/status": b"OK", "/app/.keep": b""}
    # The log is an input the instruction names (as a directory); "42" and "OK" exist by chance.
    assert td.find_leaked_answers(oracle, initial, {"/app/logs"}) == []


def test_a_sorted_copy_of_an_input_named_relatively_is_not_a_leak():
    shuffled = b"region,units,revenue\neast,3,45.25\nnorth,12,340.50\nsouth,7,120.00\n"
    assert td.find_leaked_answers({"/app/sorted.csv": REPORT_CSV},
                                  {"/app/data/sales.csv": shuffled}, {"sales.csv"}) == []
    assert td.find_leaked_answers({"/app/sorted.csv": REPORT_CSV},
                                  {"/app/data/sales.csv": shuffled}, {"data/"}) == []
    assert td.find_leaked_answers({"/app/sorted.csv": REPORT_CSV},
                                  {"/app/data/sales.csv": shuffled}, {"les.csv"}) != []


def test_naming_the_workspace_does_not_hide_a_leak_in_it():
    findings = td.find_leaked_answers({"/app/out/summary.json": SUMMARY_JSON},
                                      {"/app/.hidden/summary.json": SUMMARY_JSON}, {"/app"})
    assert [f["file"] for f in findings] == ["/app/.hidden/summary.json"]


def test_a_file_the_oracle_rewrites_in_place_is_not_its_own_leak():
    assert td.find_leaked_answers({"/app/config.json": SUMMARY_JSON},
                                  {"/app/config.json": SUMMARY_JSON}, []) == []


def test_an_output_embedded_in_a_larger_file_is_a_warning():
    answer = b"\n".join(b"line %d of the expected digest, with enough text to matter" % i
                        for i in range(8)) + b"\n"
    fixture = b"EXPECTED = '''\n" + answer + b"'''\n\ndef check(): pass\n"
    findings = td.find_leaked_answers({"/app/digest.txt": answer},
                                      {"/app/tools/selftest.py": fixture}, [])
    assert [(f["check"], f["severity"]) for f in findings] == [
        (td.LEAKED_ANSWER_EMBEDDED, "warning")]
    assert findings[0]["line"] == 2
    # Its twin, a short excerpt of a larger file, is below the embedded threshold.
    short = b"line 3 of the expected digest\n"
    assert td.find_leaked_answers({"/app/digest.txt": short},
                                  {"/app/tools/selftest.py": fixture + short}, []) == []


# ---------------------------------------------------------------------------- network attempts in verifier output


def test_it_reads_network_attempts_in_verifier_output():
    output = """+ uv run --with pytest pytest
error: Failed to fetch: `https://pypi.org/simple/pytest/`
  Caused by: dns error: failed to lookup address information: Temporary failure in name resolution
WARNING: Retrying (Retry(total=4)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object>: Failed to establish a new connection: [Errno -3] Temporary failure in name resolution')': /simple/pytest/
curl: (6) Could not resolve host: github.com
Err:1 http://deb.debian.org/debian bookworm InRelease
  Temporary failure resolving 'deb.debian.org'
"""
    lines = td.network_attempts_in_output(output)
    assert len(lines) == 4
    assert lines[0].startswith("Caused by: dns error")
    assert any("github.com" in line for line in lines)
    assert any("deb.debian.org" in line for line in lines)
    f = td.verifier_network_finding(output, "nop")
    assert f["check"] == td.VERIFIER_NETWORK_ATTEMPT and "nop trial" in f["message"]


def test_a_local_server_refusing_connections_is_not_a_network_attempt():
    # The nop trial's tests find nothing listening: the task's fault, not the network's.
    output = """curl: (7) Failed to connect to localhost port 8080 after 0 ms: Connection refused
requests.exceptions.ConnectionError: HTTPConnectionPool(host='127.0.0.1', port=8000): Max retries exceeded with url: / (Caused by NewConnectionError('Failed to establish a new connection: [Errno 111] Connection refused'))
urllib3.exceptions.NewConnectionError: <urllib3.connection.HTTPConnection object at 0x7f3a>: Failed to establish a new connection: [Errno 111] Connection refused
psycopg2.OperationalError: could not translate host name "db" to address: Name or service not known
FAILED test_outputs.py::test_server - assert 0 == 1
"""
    assert td.network_attempts_in_output(output) == []
    assert td.verifier_network_finding(output, "nop") is None


# ---------------------------------------------------------------------------- flaky


@dataclass
class Run:
    reward: float | None
    test_results: list[dict] = field(default_factory=list)
    kind: str = "oracle"


def _results(**outcomes):
    return [{"name": name, "outcome": outcome} for name, outcome in outcomes.items()]


def test_it_names_the_tests_that_varied_between_repeated_trials():
    runs = [Run(1.0, _results(test_sorted="passed", test_timing="passed", test_count="passed")),
            Run(0.0, _results(test_sorted="passed", test_timing="failed", test_count="passed"))]
    verdict = td.compare_repeated_trials(runs)
    assert verdict is not None and verdict.kind == "oracle"
    assert verdict.varied_tests == {"test_timing": ["passed", "failed"]}
    assert "rewards 1, 0" in verdict.reason and "test_timing (passed/failed)" in verdict.reason
    f = verdict.to_finding()
    assert f["check"] == td.FLAKY and f["severity"] == "error"
    assert td.REPAIR_TARGET[td.FLAKY] == "verifier"


def test_a_test_missing_from_one_run_varied_even_with_equal_rewards():
    runs = [{"reward": 0.0, "test_results": _results(test_a="failed", test_b="failed")},
            {"reward": 0.0, "test_results": _results(test_a="failed")}]
    verdict = td.compare_repeated_trials(runs, kind="nop")
    assert verdict.varied_tests == {"test_b": ["failed", "absent"]}
    assert "2 nop trials" in verdict.reason


def test_agreeing_runs_and_a_single_run_are_not_flaky():
    same = _results(test_sorted="passed", test_count="passed")
    assert td.compare_repeated_trials([Run(1.0, same), Run(1.0, list(reversed(same))),
                                       Run(1.0000000001, same)]) is None
    assert td.compare_repeated_trials([Run(None), Run(None)]) is None
    assert td.compare_repeated_trials([Run(0.0, same)]) is None


# ---------------------------------------------------------------------------- fine partials

ONE_HEREDOC = """#!/bin/bash
set -euo pipefail
cd /app
python3 - <<'EOF'
\"\"\"Totals per region.\"\"\"
import csv, json
rows = list(csv.DictReader(open('sales.csv')))
totals = {}
for row in rows:
    totals[row['region']] = totals.get(row['region'], 0) + float(row['amount'])
json.dump(totals, open('out/totals.json', 'w'), indent=2)
print('done')
EOF
"""
WRITTEN_SCRIPT = """#!/bin/bash
cat > /app/report.py <<EOF
import json

def main():
    data = json.load(open('/app/in.json'))
    data.sort()
    json.dump(data, open('/app/out.json', 'w'))

if __name__ == '__main__':
    main()
EOF
python3 /app/report.py
"""


def test_a_single_python_heredoc_is_cut_at_statement_boundaries():
    plan = td.plan_partials(ONE_HEREDOC)
    assert plan.grain == "statements" and plan.reason is None and len(plan.partials) == 3
    for partial in plan.partials:
        body = partial.split("<<'EOF'\n", 1)[1].split("\nEOF\n", 1)[0]
        ast.parse(body)  # each cut is valid Python
        assert partial.startswith("#!/bin/bash\nset -euo pipefail\ncd /app\npython3 - <<'EOF'")
        assert "json.dump" not in body
    # print('done') only reports, so the most complete cut stops before json.dump.
    assert "3 of 4 statements" in plan.partials[0] and "for row in rows" in plan.partials[0]
    assert td.derive_fine_partials(ONE_HEREDOC, max_count=2) == plan.partials[:2]


def test_a_written_script_is_cut_inside_the_function_it_calls():
    plan = td.plan_partials(WRITTEN_SCRIPT)
    assert plan.grain == "commands+statements"
    cut = [p for p in plan.partials if "statements" in p]
    assert cut and all("python3 /app/report.py" in p and "main()" in p for p in cut)
    assert "json.dump(data" not in cut[0] and "data.sort()" in cut[0]


def test_here_strings_and_data_heredocs_are_not_scripts_and_redirect_first_forms_are():
    solve = ("#!/bin/bash\ngrep -c x <<<\"$DATA\"\ncat > /app/conf.ini <<EOF\n[a]\nb = 1\nEOF\n"
             "cat <<'EOF' > /app/run.py\nimport sys\nsys.stdout.write('a')\nEOF\n"
             "python3 /app/run.py > /app/out.txt\n")
    scripts = td.embedded_scripts(solve)
    assert [(s.language, s.opener_line, s.stdout_is_output) for s in scripts] == [
        ("python", 7, True)]


def test_a_shell_heredoc_is_cut_at_its_commands():
    solve = ("#!/bin/bash\nbash <<'SH'\nmkdir -p /app/out\nsort /app/in.txt > /app/out/s.txt\n"
             "uniq -c /app/out/s.txt > /app/out/counts.txt\nSH\n")
    plan = td.plan_partials(solve)
    assert plan.partials and all(p.count("SH\n") >= 1 for p in plan.partials)
    assert "uniq -c" not in plan.partials[0] and "sort /app/in.txt" in plan.partials[0]


def test_solutions_with_commands_keep_their_command_partials_first():
    solve = ("#!/bin/bash\ncd /app\nsort in.txt > s.txt\nuniq -c s.txt > c.txt\n"
             "head -n 3 c.txt > top.txt\ngzip -k top.txt\n")
    plan = td.plan_partials(solve)
    assert plan.grain == "commands" and len(plan.partials) == 3


def test_prints_are_work_when_the_script_output_is_redirected():
    solve = ("#!/bin/bash\npython3 - <<'EOF' > /app/out.txt\nimport sys\nprint('header')\n"
             "print('row 1')\nprint('row 2')\nEOF\n")
    plan = td.plan_partials(solve)
    assert "2 of 3 statements" in plan.partials[0] and "print('row 1')" in plan.partials[0]
    quiet = solve.replace(" > /app/out.txt", "")
    assert td.plan_partials(quiet).partials == []


def test_closing_reports_and_self_checks_are_not_cut_points():
    solve = ("#!/bin/bash\npython3 - <<'EOF'\nimport json, logging, os, sys\n"
             "data = json.load(open('/app/in.json'))\n"
             "open('/app/out.json', 'w').write(json.dumps(sorted(data)))\n"
             "assert os.path.exists('/app/out.json')\nlogging.info('wrote it')\n"
             "sys.stdout.write('done')\nprint('ok')\nEOF\n")
    plan = td.plan_partials(solve)
    # Two statements do work; the one partial stops before the write, not before the print.
    assert len(plan.partials) == 1 and "1 of 2 statements" in plan.partials[0]
    assert ".write(json.dumps" not in plan.partials[0]


def test_partials_the_model_wrote_come_after_command_cuts():
    written = ["#!/bin/bash\ncd /app\nsort in.txt > s.txt\n"]
    plan = td.plan_partials(ONE_HEREDOC, written=written)
    assert plan.grain == "written+statements" and plan.partials[0] == written[0]
    assert len(plan.partials) == 3


def test_it_says_why_when_no_partial_can_be_made():
    plan = td.plan_partials("#!/bin/bash\nsort /app/in.txt > /app/out.txt\n")
    assert plan.partials == [] and "embeds no Python or shell script" in plan.reason
    f = td.no_partial_finding(plan)
    assert f["check"] == td.NO_PARTIAL_SOLUTION and f["severity"] == "warning"
    broken = "#!/bin/bash\npython3 - <<EOF\nprint($HOME\nEOF\n"
    assert "does not parse as Python" in td.plan_partials(broken).reason
    assert td.no_partial_finding(td.plan_partials(ONE_HEREDOC)) is None
