"""What the demo tasks share: the DemoTask record, the verifier's test.sh, and the skills' own
scripts (and the expected values computed from them) that several tasks use."""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field


TEST_SH = """#!/bin/bash
# Grade the final state; the reward is what counts, not this script's exit code.
mkdir -p /logs/verifier
cd /app
python3 -m pytest -q -p no:cacheprovider --junitxml=/logs/verifier/junit.xml /tests/test_outputs.py
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""

INIT_OUT = "#!/bin/bash\nset -euo pipefail\nmkdir -p /app/out\n"


@dataclass
class DemoTask:
    key: str
    skills: frozenset
    marker: str  # a path only this task's instruction names (the router prompt has no scenario)
    manifest: dict
    files: dict  # build context files (paths relative to environment/), Dockerfile excluded
    dockerfile: str  # "{base}" is the base image
    init_script: str
    init_checks: list
    instruction: str
    solve_sh: str
    test_py: str
    # what the model gets wrong first (None: right the first time)
    first_init_script: str | None = None
    repair_diagnosis: str = ""
    first_solve_sh: str | None = None
    first_test_py: str | None = None
    hopeless_verifiers: list = field(default_factory=list)  # one per attempt, all wrong
    router_reason: str = ""


def _dockerfile(*copies: str) -> str:
    lines = ["FROM {base}", "WORKDIR /app"]
    lines += [f"COPY {c}/ /app/{c}/" for c in copies]
    lines += ["COPY init.sh /usr/local/bin/facet-init.sh", "RUN bash /usr/local/bin/facet-init.sh"]
    return "\n".join(lines) + "\n"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# --- shared scripts (adapted from the skills' own SKILL.md code) ----------------------------------

WRITE_INCIDENT = r'''python3 - "$@" <<'PY'
# incident-report-writer: SUMMARY.json TIMELINE.txt TITLE OUT.md
import json, sys
summary_path, timeline_path, title, out = sys.argv[1:5]
s = json.load(open(summary_path, encoding="utf-8"))
events = [tuple(p.strip() for p in line.split("|", 1))
          for line in open(timeline_path, encoding="utf-8") if "|" in line and not line.startswith("#")]
date = events[0][0][:10]
errors = sum(n for code, n in s["status"].items() if code.startswith("5"))
worst = s["top_paths"][0][0]
doc = [f"# Incident: {title}", "", f"Date: {date}", "Status: draft", "",
       "## Summary", "",
       f"Between {events[0][0]} and {events[-1][0]}, {s['error_rate_5xx']:.1%} of {s['requests']} "
       "requests failed with a 5xx status.", "",
       "## Impact", "", "| Metric | Value |", "|---|---|",
       f"| Requests | {s['requests']} |", f"| 5xx responses | {errors} |",
       f"| 5xx rate | {s['error_rate_5xx']:.2%} |", f"| p95 request time | {s['request_time_p95']} s |",
       f"| Busiest path | `{worst}` |", "",
       "## Timeline", "", "| Time | Event |", "|---|---|"]
doc += [f"| {t} | {e} |" for t, e in events]
doc += ["", "## Root cause", "", "_To be confirmed by the on-call engineer._", "",
        "## Action items", "", "- [ ] Confirm root cause", "- [ ] Add an alert on the 5xx rate",
        "- [ ] Link this report from the runbook", ""]
open(out, "w", encoding="utf-8").write("\n".join(doc))
print(out)
PY'''

CHUNK_MD = r'''python3 - "$@" <<'PY'
# markdown-rag-chunker: MAX_WORDS OVERLAP OUT.jsonl (FILE.md | DIR)...
# A file's source is its name, a directory's files are named relative to it.
import json, pathlib, re, sys

MAX_WORDS, OVERLAP = int(sys.argv[1]), int(sys.argv[2])
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")

def sections(text):
    path, buf, fenced = [], [], False
    for line in text.splitlines():
        if line.lstrip().startswith(("`" * 3, "~" * 3)):
            fenced = not fenced
        m = None if fenced else HEADING.match(line)
        if m:
            if buf:
                yield list(path), "\n".join(buf)
            level = len(m.group(1))
            path = path[: level - 1] + [m.group(2)]
            buf = []
        else:
            buf.append(line)
    if buf:
        yield list(path), "\n".join(buf)

def windows(words):
    step = MAX_WORDS - OVERLAP
    for start in range(0, max(len(words) - OVERLAP, 1), step):
        yield words[start:start + MAX_WORDS]

inputs = []
for arg in sys.argv[4:]:
    p = pathlib.Path(arg)
    inputs += [(f, f.relative_to(p).as_posix()) for f in sorted(p.rglob("*.md"))] if p.is_dir() else [(p, p.name)]
with open(sys.argv[3], "w", encoding="utf-8") as fh:
    for md, rel in inputs:
        n = 0
        for headings, body in sections(md.read_text(encoding="utf-8")):
            words = body.split()
            for win in windows(words) if words else []:
                n += 1
                rec = {"id": f"{rel}#{n}", "source": rel, "headings": headings,
                       "text": " ".join(win), "n_words": len(win)}
                fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
PY'''

MD_TOC = r'''python3 - "$@" <<'PY'
# markdown-toc: FILE.md (## to #### headings between <!-- toc --> and <!-- tocstop -->)
import re, sys

START, END = "<!-- toc -->", "<!-- tocstop -->"

def anchor(title, used):
    slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
    n = used.get(slug, 0)
    used[slug] = n + 1
    return slug if n == 0 else f"{slug}-{n}"

path = sys.argv[1]
text = open(path, encoding="utf-8").read()
lines, used, fenced = [], {}, False
for line in text.splitlines():
    if line.lstrip().startswith("`" * 3):
        fenced = not fenced
    m = None if fenced else re.match(r"^(#{2,4})\s+(.+?)\s*#*$", line)
    if m:
        title = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", r"\1", m.group(2))
        indent = "  " * (len(m.group(1)) - 2)
        lines.append(f"{indent}- [{title}](#{anchor(title, used)})")
head, rest = text.split(START, 1)
_, tail = rest.split(END, 1)
open(path, "w", encoding="utf-8").write(f"{head}{START}\n" + "\n".join(lines) + f"\n{END}{tail}")
print(f"{path}: {len(lines)} entries")
PY'''


def _function(name: str, body: str) -> str:
    """A shell function wrapping one of the scripts above, so solve.sh reads as a workflow."""
    return f"{name}() {{\n{body}\n}}\n"


def _report_tests(report: str, title: str, *, requests: int, errors: int, rate: str, p95: str, path: str,
                  events: list[tuple[str, str]]) -> str:
    """The pytest checks every incident report shares: title, status, the five sections in order,
    the impact numbers, one timeline row per event, open action items, no client IPs."""
    first, last = events[0], events[-1]
    return f'''
REPORT = Path("{report}")
SECTIONS = ["Summary", "Impact", "Timeline", "Root cause", "Action items"]


def report_text():
    return REPORT.read_text(encoding="utf-8")


def section(name):
    text = report_text()
    body = text.split(f"## {{name}}\\n", 1)[1]
    return body.split("\\n## ", 1)[0]


def table_rows(text):
    rows = [line for line in text.splitlines() if line.startswith("|")]
    return [[c.strip() for c in row.strip("|").split("|")] for row in rows[2:]]


def test_the_report_has_the_title_and_is_a_draft():
    lines = report_text().splitlines()
    assert lines[0] == "# Incident: {title}"
    assert "Status: draft" in lines


def test_the_five_sections_come_in_order():
    assert re.findall(r"^## (.+)$", report_text(), re.M) == SECTIONS


def test_the_impact_numbers_come_from_the_log_summary():
    rows = {{cells[0]: cells[1] for cells in table_rows(section("Impact"))}}
    assert rows["Requests"] == "{requests}"
    assert rows["5xx responses"] == "{errors}"
    assert re.fullmatch(r"{rate}\\d*\\s*%", rows["5xx rate"])
    assert "{p95}" in rows["p95 request time"]
    assert "{path}" in rows["Busiest path"]


def test_the_timeline_has_one_row_per_event():
    rows = table_rows(section("Timeline"))
    assert len(rows) == {len(events)}
    assert rows[0] == ["{first[0]}", "{first[1]}"]
    assert rows[-1] == ["{last[0]}", "{last[1]}"]


def test_action_items_are_open_checkboxes():
    items = [line for line in section("Action items").splitlines() if line.startswith("- [")]
    assert items and all(line.startswith("- [ ] ") for line in items)


def test_no_client_ip_address_is_copied_into_the_report():
    assert not re.search(r"\\b\\d{{1,3}}(\\.\\d{{1,3}}){{3}}\\b", report_text())
'''


def _events(timeline: str) -> list[tuple[str, str]]:
    return [tuple(p.strip() for p in line.split("|", 1)) for line in timeline.splitlines()
            if "|" in line and not line.startswith("#")]


# The expected chunks are computed here with the same rules the instruction states.
def _chunks(files: list[tuple[str, str]], max_words: int, overlap: int) -> list[dict]:
    heading = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
    out = []
    for rel, text in files:
        path, buf, fenced, n = [], [], False, 0
        parts = []
        for line in text.splitlines():
            if line.lstrip().startswith(("```", "~~~")):
                fenced = not fenced
            m = None if fenced else heading.match(line)
            if m:
                if buf:
                    parts.append((list(path), "\n".join(buf)))
                path = path[: len(m.group(1)) - 1] + [m.group(2)]
                buf = []
            else:
                buf.append(line)
        if buf:
            parts.append((list(path), "\n".join(buf)))
        for headings, body in parts:
            words = body.split()
            step = max_words - overlap
            for start in range(0, max(len(words) - overlap, 1), step) if words else []:
                n += 1
                win = words[start:start + max_words]
                out.append({"id": f"{rel}#{n}", "source": rel, "headings": headings, "n_words": len(win)})
    return out
