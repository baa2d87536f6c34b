"""Demo task 7. task-due-digest + ops-checklist-audit: the first verifier passes without any work (nop)."""
from __future__ import annotations

import collections
import datetime

from .common import DemoTask, _dockerfile, _function


TASKS_CSV = """id,title,owner,due,status
T-201,Renew TLS certificate for the status page,dana,2026-03-06,open
T-202,Rotate the backup encryption key,li,2026-03-09,in progress
T-203,Write the Q1 capacity report,li,2026-03-16,open
T-204,Archive closed tickets,sam,,open
T-205,Update the on-call handbook,sam,2026-03-02,done
T-206,Migrate cron jobs to systemd timers,dana,2026-03-12,open
T-207,Review firewall rules,li,2026-03-01,cancelled
T-208,Patch the staging kernels,sam,2026-03-08,in progress
T-209,Plan the disaster-recovery drill,dana,2026-04-02,open
"""
CHECKLIST = """# Weekly operations checklist (week of 2026-03-10)

- [ ] backups-recent: Nightly backup archive of 2026-03-09 exists and is not empty
- [ ] ssh-root-login: SSH refuses root logins
- [ ] secrets-mode: secrets.env is readable by its owner only
- [ ] digest-published: This week's task digest is published in /app/out
- [ ] disk-alerts: The disk usage alert fires at 85% or lower

Sign-off: ______
"""
CHECKS_TSV = """backups-recent\ttest -s /app/ops/state/backups/nightly-2026-03-09.tar.gz
ssh-root-login\tgrep -qx 'PermitRootLogin no' /app/ops/state/sshd_config
secrets-mode\ttest "$(stat -c %a /app/ops/state/secrets.env)" = 600
digest-published\ttest -s /app/out/digest.md
disk-alerts\ttest "$(jq -r .disk_alert_percent /app/ops/state/monitoring.json)" -le 85
"""
OLD_TRAIL = ('{"id": "backups-recent", "at": "2026-03-03T07:00:02+00:00", "exit": 0, "passed": true, "stderr": ""}\n'
             '{"id": "secrets-mode", "at": "2026-03-03T07:00:03+00:00", "exit": 1, "passed": false, "stderr": ""}\n')
OPS_INIT = """#!/bin/bash
set -euo pipefail
mkdir -p /app/out /app/ops/state/backups
cd /app/ops/state
printf 'PermitRootLogin no\\nPasswordAuthentication no\\n' > sshd_config
printf 'DB_PASSWORD=change-me-in-vault\\n' > secrets.env
chmod 644 secrets.env
printf '{"disk_alert_percent": 80}\\n' > monitoring.json
for day in 2026-03-08 2026-03-09; do
  printf 'db dump of %s\\n' "$day" > "dump-$day.sql"
  tar -czf "backups/nightly-$day.tar.gz" "dump-$day.sql"
  rm "dump-$day.sql"
done
"""

DUE_DIGEST = r'''python3 - "$@" <<'PY'
# task-due-digest: TASKS.csv TODAY
import collections, csv, datetime, sys

today = datetime.date.fromisoformat(sys.argv[2])
soon = today + datetime.timedelta(days=7)
buckets = {"Overdue": collections.defaultdict(list), "Due in the next 7 days": collections.defaultdict(list),
           "No due date": collections.defaultdict(list)}
for t in csv.DictReader(open(sys.argv[1], newline="", encoding="utf-8")):
    if t["status"].strip().lower() in ("done", "cancelled"):
        continue
    due = datetime.date.fromisoformat(t["due"]) if t["due"].strip() else None
    if due is None:
        key, note = "No due date", ""
    elif due < today:
        key, note = "Overdue", f" - overdue by {(today - due).days}d"
    elif due <= soon:
        key, note = "Due in the next 7 days", f" - due {due:%a %d %b}"
    else:
        continue
    buckets[key][t["owner"] or "unassigned"].append(f"{t['id']} {t['title']}{note}")
out = [f"# Task digest for week of {today.isoformat()}", ""]
for section, by_owner in buckets.items():
    total = sum(map(len, by_owner.values()))
    out += [f"## {section} ({total})", ""]
    for owner in sorted(by_owner):
        out += [f"**{owner}**", ""] + [f"- {item}" for item in by_owner[owner]] + [""]
    if not total:
        out += ["Nothing here.", ""]
print("\n".join(out))
PY'''

RUN_AUDIT = r'''python3 - <<'PY'
# ops-checklist-audit: run checks.tsv read-only, append to the trail, tick or flag checklist.md
import datetime, json, re, subprocess

checks = dict(line.rstrip("\n").split("\t", 1) for line in open("checks.tsv") if "\t" in line)
results = {}
with open("audit-trail.jsonl", "a", encoding="utf-8") as trail:
    for cid, cmd in checks.items():
        started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        proc = subprocess.run(["timeout", "30", "bash", "-c", cmd], capture_output=True, text=True)
        results[cid] = proc.returncode == 0
        trail.write(json.dumps({"id": cid, "at": started, "exit": proc.returncode,
                                "passed": results[cid], "stderr": proc.stderr[-300:]}) + "\n")

def tick(m):
    cid = m.group(1)
    if cid not in results:
        return m.group(0)
    return f"- [{'x' if results[cid] else ' '}] {cid}:{'' if results[cid] else ' **FAILED**'}"

text = open("checklist.md", encoding="utf-8").read()
text = re.sub(r"^- \[.\] ([a-z0-9-]+):(?: \*\*FAILED\*\*)?", tick, text, flags=re.M)
open("checklist.md", "w", encoding="utf-8").write(text)
failed = [c for c, ok in results.items() if not ok]
print(f"{len(results) - len(failed)}/{len(results)} passed; failed: {', '.join(failed) or 'none'}")
PY'''


def _expected_digest() -> str:
    today = datetime.date(2026, 3, 10)
    soon = today + datetime.timedelta(days=7)
    import csv
    import io

    buckets = {"Overdue": collections.defaultdict(list), "Due in the next 7 days": collections.defaultdict(list),
               "No due date": collections.defaultdict(list)}
    for t in csv.DictReader(io.StringIO(TASKS_CSV)):
        if t["status"] in ("done", "cancelled"):
            continue
        due = datetime.date.fromisoformat(t["due"]) if t["due"] else None
        if due is None:
            buckets["No due date"][t["owner"]].append(f"{t['id']} {t['title']}")
        elif due < today:
            buckets["Overdue"][t["owner"]].append(f"{t['id']} {t['title']} - overdue by {(today - due).days}d")
        elif due <= soon:
            buckets["Due in the next 7 days"][t["owner"]].append(f"{t['id']} {t['title']} - due {due:%a %d %b}")
    out = ["# Task digest for week of 2026-03-10", ""]
    for section, by_owner in buckets.items():
        out += [f"## {section} ({sum(map(len, by_owner.values()))})", ""]
        for owner in sorted(by_owner):
            out += [f"**{owner}**", ""] + [f"- {item}" for item in by_owner[owner]] + [""]
    return "\n".join(out)


def _ops() -> DemoTask:
    digest = _expected_digest()
    assert "## Overdue (3)" in digest and "## Due in the next 7 days (2)" in digest
    instruction = """# Publish the weekly task digest and run the operations checklist audit

It is Tuesday 2026-03-10, the day of the weekly operations review.

1. Build the due-date digest of `/app/project/tasks.csv` for the week of 2026-03-10 and publish it
   as `/app/out/digest.md`: first line `# Task digest for week of 2026-03-10`, then the sections
   `## Overdue (<n>)`, `## Due in the next 7 days (<n>)` (due 2026-03-10 to 2026-03-17) and
   `## No due date (<n>)`, each listing its tasks grouped under the owner's name in bold
   (`**dana**`, owners sorted), one `- <id> <title>` line per task followed by
   ` - overdue by <days>d` or ` - due <Www DD Mon>` (e.g. `Thu 12 Mar`). Tasks that are `done` or
   `cancelled` and tasks due later are left out.
2. Then run the audit described by `/app/ops/checklist.md` and `/app/ops/checks.tsv` (`id<TAB>command`,
   exit code 0 = pass; the commands are read-only and each gets 30 seconds), from `/app/ops`:
   - append one JSON line per check to `/app/ops/audit-trail.jsonl`
     (`{"id", "at", "exit", "passed", "stderr"}`); earlier records stay as they are;
   - in `/app/ops/checklist.md` tick passing items (`- [x] <id>:`) and flag failing ones as
     `- [ ] <id>: **FAILED**`, keeping the rest of each line and of the file.
   Do not fix what the audit finds; that is for the person signing off.
"""
    solve_sh = ("#!/bin/bash\nset -euo pipefail\n"
                + _function("due_digest", DUE_DIGEST) + _function("run_audit", RUN_AUDIT)
                + "mkdir -p /app/out\n"
                + "due_digest /app/project/tasks.csv 2026-03-10 > /app/out/digest.md\n"
                + "cd /app/ops\n"
                + "run_audit\n")
    first_test_py = '''"""The ops checklist and the audit trail."""
import json
import re
from pathlib import Path

CHECKLIST = Path("/app/ops/checklist.md")
TRAIL = Path("/app/ops/audit-trail.jsonl")


def test_every_checklist_item_has_an_id():
    items = [line for line in CHECKLIST.read_text().splitlines() if line.startswith("- [")]
    assert items and all(re.match(r"^- \\[[ x]\\] [a-z0-9-]+:", line) for line in items)


def test_audit_records_are_json_with_the_required_fields():
    for line in TRAIL.read_text().splitlines():
        assert {"id", "at", "exit", "passed"} <= set(json.loads(line))


def test_failed_items_are_never_ticked():
    for line in CHECKLIST.read_text().splitlines():
        if "**FAILED**" in line:
            assert line.startswith("- [ ]")
'''
    test_py = f'''"""The weekly digest, and the checklist audit that verifies it was published."""
import json
from pathlib import Path

EXPECTED_DIGEST = {digest!r}
OLD_TRAIL = {OLD_TRAIL!r}
CHECK_IDS = ["backups-recent", "ssh-root-login", "secrets-mode", "digest-published", "disk-alerts"]


def test_the_digest_lists_open_tasks_by_due_date_and_owner():
    assert Path("/app/out/digest.md").read_text().strip() == EXPECTED_DIGEST.strip()


def test_done_cancelled_and_later_tasks_stay_out_of_the_digest():
    text = Path("/app/out/digest.md").read_text()
    assert "T-205" not in text and "T-207" not in text and "T-209" not in text


def test_passing_items_are_ticked_and_the_failing_one_flagged():
    lines = Path("/app/ops/checklist.md").read_text().splitlines()
    assert "- [x] backups-recent: Nightly backup archive of 2026-03-09 exists and is not empty" in lines
    assert "- [x] ssh-root-login: SSH refuses root logins" in lines
    assert "- [ ] secrets-mode: **FAILED** secrets.env is readable by its owner only" in lines
    assert "- [x] digest-published: This week's task digest is published in /app/out" in lines
    assert "- [x] disk-alerts: The disk usage alert fires at 85% or lower" in lines
    assert lines[-1] == "Sign-off: ______"


def test_the_audit_trail_keeps_old_records_and_adds_one_per_check():
    text = Path("/app/ops/audit-trail.jsonl").read_text()
    assert text.startswith(OLD_TRAIL)
    new = [json.loads(line) for line in text[len(OLD_TRAIL):].splitlines() if line.strip()]
    assert [r["id"] for r in new] == CHECK_IDS
    results = {{r["id"]: (r["exit"], r["passed"]) for r in new}}
    assert results["secrets-mode"] == (1, False) and results["digest-published"] == (0, True)
    assert all(r["at"].startswith("20") for r in new)


def test_the_audit_did_not_fix_anything():
    assert oct(Path("/app/ops/state/secrets.env").stat().st_mode & 0o777) == "0o644"
'''
    return DemoTask(
        key="ops-review", skills=frozenset({"task-due-digest", "ops-checklist-audit"}),
        marker="/app/ops/checks.tsv",
        manifest={"workdir": "/app", "directories": ["/app/project", "/app/ops", "/app/ops/state", "/app/out"],
                  "files": [{"path": "/app/project/tasks.csv", "purpose": "task list with done, cancelled and "
                             "undated tasks", "format": "CSV"},
                            {"path": "/app/ops/checklist.md", "purpose": "weekly checklist", "format": "Markdown"},
                            {"path": "/app/ops/checks.tsv", "purpose": "one read-only check per item", "format": "TSV"},
                            {"path": "/app/ops/audit-trail.jsonl", "purpose": "last week's records", "format": "JSONL"},
                            {"path": "/app/ops/state", "purpose": "backups, sshd_config, secrets.env (mode 644), "
                             "monitoring.json, made by init.sh", "format": "files"}],
                  "services": [], "dependencies": ["python3", "jq", "coreutils"],
                  "distractors": ["done and cancelled tasks", "a task due after the week", "an older backup"],
                  "cross_file_relations": ["the digest must exist before the digest-published check runs"]},
        files={"project/tasks.csv": TASKS_CSV, "ops/checklist.md": CHECKLIST, "ops/checks.tsv": CHECKS_TSV,
               "ops/audit-trail.jsonl": OLD_TRAIL},
        dockerfile=_dockerfile("project", "ops"), init_script=OPS_INIT,
        init_checks=["test -s /app/ops/state/backups/nightly-2026-03-09.tar.gz",
                     "test \"$(stat -c %a /app/ops/state/secrets.env)\" = 644"],
        instruction=instruction, solve_sh=solve_sh, test_py=test_py, first_test_py=first_test_py)
