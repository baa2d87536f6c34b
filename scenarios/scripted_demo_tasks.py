"""The scripted model's task construction answers for the demo's eight scenarios (skills/demo_corpus).

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
expected values in the verifiers are computed here from the same fixture data.
"""
from __future__ import annotations

import collections
import datetime
import hashlib
import json
import re
import statistics
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


# =================================================================================================
# 1. incident-report-writer + markdown-rag-chunker: valid at the first validation

CHECKOUT_SUMMARY = {
    "requests": 1840, "unparsed_lines": 3,
    "status": {"200": 1602, "304": 88, "404": 36, "500": 21, "502": 93},
    "error_rate_5xx": 0.062, "top_paths": [["/api/checkout", 512], ["/api/cart", 301], ["/", 240]],
    "top_ips": [["203.0.113.9", 211], ["198.51.100.23", 97]],
    "busiest_minute": ["12/Mar/2026:10:15", 97], "request_time_p50": 0.118, "request_time_p95": 1.87,
}
CHECKOUT_TIMELINE = """# Checkout incident, 2026-03-12. Times are UTC; one event per line: time | event
2026-03-12 10:02 UTC | Deploy 4.2.1 started
2026-03-12 10:09 UTC | 502 rate on /api/checkout above 5%
2026-03-12 10:11 UTC | On-call engineer paged

2026-03-12 10:24 UTC | Rollback to 4.2.0 started
2026-03-12 10:31 UTC | Error rate back under 0.5%
2026-03-12 10:40 UTC | Incident closed
"""
CHECKOUT_RUNBOOK = """# Checkout service runbook

The checkout service turns a cart into an order and charges the customer. It runs as four
replicas behind the edge proxy and talks to the payments gateway and the inventory service.

## Deploys

Deploys go out through the release pipeline between 09:00 and 16:00 UTC, never on Fridays.
Watch the 5xx dashboard for ten minutes after every deploy.

### Rollback

Roll back with `release rollback checkout` to the previous tag. A rollback takes about seven
minutes; announce it in the incident channel before you start.

## Known issues

The payments gateway closes idle connections after sixty seconds while our connection pool keeps
them for ninety, so the first request after a quiet period can fail with a reset connection and
surface as a 502 at the edge. The client retries once, which hides most of these failures from
customers but doubles the latency of the affected requests. When traffic is low at night the
effect is visible as isolated spikes in the p95 request time rather than as errors. A fix that
lowers the pool's idle timeout to forty-five seconds is planned for the next minor release.
Inventory reservations expire after fifteen minutes; a customer who leaves the payment page open
longer sees a stock error on submit even though the item is still in stock. Support should ask the
customer to reload the cart. Coupons with a percentage discount are applied before shipping costs,
fixed-amount coupons after them; finance confirmed this is intended and matches the terms. Order
confirmation emails are sent by a background job that can lag by up to five minutes during sales
events; customers sometimes place a second order because they think the first one failed, so the
fraud rules flag duplicate orders within ten minutes for manual review. Large carts with more than
fifty distinct items are slow to price because every line is priced separately against the
promotions service; the team is batching these calls, and until then the edge proxy timeout for
the pricing endpoint is raised to thirty seconds. Finally, the health check only covers the web
process, not the worker, so a stuck worker shows up first as growing queue depth on the dashboard.
"""
CHECKOUT_ESCALATION = """# Escalation

## Contacts

Page the checkout on-call first. After thirty minutes without a fix, page the payments on-call
and the incident commander of the week. Never share customer data in the incident channel.
"""
CHECKOUT_ARCHIVE = """# Incident: Cart totals off by one cent (2025-11-02)

Archived report, kept for reference. Not part of the current knowledge base.
"""


def _checkout() -> DemoTask:
    title = "Checkout errors after deploy 4.2.1"
    report = "/app/out/incident-2026-03-12.md"
    runbook = _chunks([("runbook.md", CHECKOUT_RUNBOOK)], 200, 40)
    known = [c for c in runbook if c["headings"] == ["Checkout service runbook", "Known issues"]]
    assert len(known) == 2
    instruction = f"""# Draft the checkout incident report and add it to the knowledge base

Our checkout API had an error spike on 2026-03-12. The request statistics of the access log are in
`/app/incident/summary.json`; the on-call timeline is `/app/incident/timeline.txt`, one event per
line as `time | event` (other lines are not events).

1. Draft the report `{report}`:
   - first line `# Incident: {title}`, and a line `Status: draft`;
   - exactly these sections, in this order: `## Summary`, `## Impact`, `## Timeline`,
     `## Root cause`, `## Action items`;
   - Impact is a Markdown table `| Metric | Value |` with the rows `Requests`, `5xx responses`
     (the sum of all 5xx status counts), `5xx rate` (a percentage), `p95 request time` and
     `Busiest path`;
   - Timeline is a table `| Time | Event |` with one row per event, in file order;
   - Action items are open checklist items (`- [ ] ...`);
   - client IP addresses stay out of the report.
2. Chunk the new report and the Markdown files directly in `/app/docs` (not its subdirectories)
   into `/app/out/chunks.jsonl` for retrieval: one JSON object per line with `id`
   (`<source>#<n>`, n counting from 1 within each source), `source` (the file name), `headings`
   (the heading path of the chunk's section, from the `#` title down), `text` and `n_words`
   (the number of words in `text`). Every heading starts a new section; a section longer than 200
   words is split into windows of at most 200 words that overlap by 40 words.

Leave the input files unchanged.
"""
    solve_sh = ("#!/bin/bash\nset -euo pipefail\ncd /app\n"
                + _function("write_incident", WRITE_INCIDENT) + _function("chunk_markdown", CHUNK_MD)
                + "mkdir -p /app/out\n"
                + f'write_incident /app/incident/summary.json /app/incident/timeline.txt "{title}" {report}\n'
                + f"chunk_markdown 200 40 /app/out/chunks.jsonl {report} /app/docs/*.md\n")
    test_py = ('"""The checkout incident report and its knowledge-base chunks."""\nimport json\nimport re\n'
               "from pathlib import Path\n"
               + _report_tests(report, title, requests=1840, errors=114, rate="6\\.2", p95="1.87",
                               path="/api/checkout", events=_events(CHECKOUT_TIMELINE))
               + f'''

def chunks():
    return [json.loads(line) for line in Path("/app/out/chunks.jsonl").read_text().splitlines() if line.strip()]


def test_chunks_cover_the_report_and_the_top_level_docs_only():
    assert {{c["source"] for c in chunks()}} == {{"incident-2026-03-12.md", "runbook.md", "escalation.md"}}


def test_chunk_ids_count_up_within_each_source_and_sizes_are_honest():
    by_source = {{}}
    for c in chunks():
        by_source.setdefault(c["source"], []).append(c["id"])
        assert c["n_words"] == len(c["text"].split()) and 0 < c["n_words"] <= 200
    for source, ids in by_source.items():
        assert ids == [f"{{source}}#{{n}}" for n in range(1, len(ids) + 1)]


def test_chunks_carry_their_heading_path():
    paths = {{(c["source"], tuple(c["headings"])) for c in chunks()}}
    assert ("runbook.md", ("Checkout service runbook", "Deploys", "Rollback")) in paths
    assert ("incident-2026-03-12.md", ("Incident: {title}", "Timeline")) in paths
    assert ("escalation.md", ("Escalation", "Contacts")) in paths


def test_a_long_section_is_split_into_overlapping_windows():
    known = [c for c in chunks() if c["headings"] == ["Checkout service runbook", "Known issues"]]
    assert [c["n_words"] for c in known] == {[c["n_words"] for c in known]}
    assert known[0]["text"].split()[-40:] == known[1]["text"].split()[:40]
''')
    return DemoTask(
        key="checkout-incident", skills=frozenset({"incident-report-writer", "markdown-rag-chunker"}),
        marker="/app/out/incident-2026-03-12.md",
        manifest={"workdir": "/app", "directories": ["/app/incident", "/app/docs", "/app/docs/archive", "/app/out"],
                  "files": [{"path": "/app/incident/summary.json", "purpose": "request statistics of the access log",
                             "format": "JSON"},
                            {"path": "/app/incident/timeline.txt", "purpose": "on-call timeline", "format": "text"},
                            {"path": "/app/docs/runbook.md", "purpose": "checkout runbook with a long section",
                             "format": "Markdown"},
                            {"path": "/app/docs/escalation.md", "purpose": "escalation contacts", "format": "Markdown"},
                            {"path": "/app/docs/archive/2025-11-02.md", "purpose": "archived report (out of scope)",
                             "format": "Markdown"}],
                  "services": [], "dependencies": ["python3", "jq"],
                  "distractors": ["client IPs in summary.json", "comment and blank lines in the timeline",
                                  "an archived report under docs/archive"],
                  "cross_file_relations": ["summary.json status counts -> the report's Impact table",
                                           "timeline events -> the Timeline table", "the report -> chunks.jsonl"]},
        files={"incident/summary.json": json.dumps(CHECKOUT_SUMMARY, indent=2) + "\n",
               "incident/timeline.txt": CHECKOUT_TIMELINE, "docs/runbook.md": CHECKOUT_RUNBOOK,
               "docs/escalation.md": CHECKOUT_ESCALATION, "docs/archive/2025-11-02.md": CHECKOUT_ARCHIVE},
        dockerfile=_dockerfile("incident", "docs"), init_script=INIT_OUT,
        init_checks=["jq -e 'has(\"requests\") and has(\"error_rate_5xx\")' /app/incident/summary.json",
                     "test \"$(grep -c '|' /app/incident/timeline.txt)\" -ge 6", "test -d /app/out"],
        instruction=instruction, solve_sh=solve_sh, test_py=test_py)


# =================================================================================================
# 2. incident-report-writer + markdown-rag-chunker + markdown-toc: valid at the first validation

PAYMENTS_SUMMARY = {
    "requests": 9620, "unparsed_lines": 0,
    "status": {"200": 9011, "202": 240, "400": 57, "503": 12, "504": 300},
    "error_rate_5xx": 0.0324, "top_paths": [["/webhooks/payments", 3904], ["/api/charges", 2210]],
    "top_ips": [["192.0.2.10", 3904]], "busiest_minute": ["27/Feb/2026:14:32", 412],
    "request_time_p50": 0.21, "request_time_p95": 29.8,
}
PAYMENTS_TIMELINE = """2026-02-27 14:20 UTC | Card network latency alerts from the payment provider
2026-02-27 14:26 UTC | Webhook handler timeouts start (30 s limit)
2026-02-27 14:35 UTC | Webhook retries queued at the provider
2026-02-27 15:05 UTC | Provider latency back to normal
2026-02-27 15:20 UTC | Retried webhooks processed, backlog empty
"""
PAYMENTS_README = """# Payments platform docs

Internal documentation for the payments platform.

<!-- toc -->
- [Getting started](#getting-started)
- [Legacy setup](#legacy-setup)
- [Operations](#operations)
<!-- tocstop -->

## Getting started

Clone the repository and read the operations guide before your first on-call shift.

### Install

Install the command-line client with `make install`; it needs Python 3.11.

### Configuration

Copy `payments.example.toml` to `payments.toml` and fill in the sandbox credentials from the vault.

## Operations

Webhooks from the provider are acknowledged within 30 seconds or retried for up to three days.

### Examples

```bash
## not a heading: replay one webhook by id
payments webhooks replay evt_123
```

## API

The charges API is documented in OpenAPI form under `api/`.

### Examples

Create a charge with `POST /api/charges`; amounts are integers in the smallest currency unit.

## Incident history

Postmortems live in `incidents/`, one file per incident.
"""
PAYMENTS_OPERATIONS = """# Operations guide

## Webhooks

The webhook handler verifies the signature, stores the event and acknowledges it; the slow work
happens in the ledger worker. A handler that takes longer than 30 seconds makes the provider retry.

## Dashboards

The payments dashboard shows webhook latency, the retry backlog and charge success rate.
"""
PAYMENTS_TOC = """<!-- toc -->
- [Getting started](#getting-started)
  - [Install](#install)
  - [Configuration](#configuration)
- [Operations](#operations)
  - [Examples](#examples)
- [API](#api)
  - [Examples](#examples-1)
- [Incident history](#incident-history)
<!-- tocstop -->"""


def _payments() -> DemoTask:
    title = "Payment webhook timeouts"
    report = "/app/docs/incidents/incident-2026-02-27.md"
    outside = re.sub(r"<!-- toc -->.*?<!-- tocstop -->", "", PAYMENTS_README, flags=re.S)
    instruction = f"""# Write the webhook postmortem into the payments docs and refresh the docs index

The payments docs live in `/app/docs`. A webhook incident needs its postmortem, the docs index needs
an up-to-date table of contents, and the whole docs folder must be chunked again for the support
assistant's retrieval index. The incident's request statistics are in `/app/incident/summary.json`
and its timeline in `/app/incident/timeline.txt` (`time | event` per line).

1. Write the postmortem `{report}`: first line `# Incident: {title}`, a `Status: draft` line, and
   the sections `## Summary`, `## Impact`, `## Timeline`, `## Root cause`, `## Action items` in
   this order. Impact is a `| Metric | Value |` table with `Requests`, `5xx responses` (all 5xx
   statuses), `5xx rate` (percent), `p95 request time` and `Busiest path`; Timeline is a
   `| Time | Event |` table with one row per event; action items are open checkboxes `- [ ] `. No
   client IP addresses in the report.
2. Refresh the table of contents of `/app/docs/README.md` between `<!-- toc -->` and
   `<!-- tocstop -->`: one entry per `##` to `####` heading as `- [Title](#anchor)`, indented two
   spaces per level below `##`, with GitHub-style anchors (a repeated heading gets `-1`, `-2`, ...).
   Lines inside fenced code blocks are not headings. Nothing outside the markers changes.
3. Chunk every Markdown file under `/app/docs` (subdirectories included) into
   `/app/out/docs-chunks.jsonl`: one JSON object per line with `id` (`<source>#<n>`), `source`
   (the path relative to `/app/docs`), `headings` (the heading path), `text` and `n_words`; every
   heading starts a new chunk and no chunk exceeds 200 words (40-word overlap when splitting).
"""
    solve_sh = ("#!/bin/bash\nset -euo pipefail\ncd /app\n"
                + _function("write_incident", WRITE_INCIDENT) + _function("update_toc", MD_TOC)
                + _function("chunk_markdown", CHUNK_MD)
                + "mkdir -p /app/docs/incidents /app/out\n"
                + f'write_incident /app/incident/summary.json /app/incident/timeline.txt "{title}" {report}\n'
                + "update_toc /app/docs/README.md\n"
                + "chunk_markdown 200 40 /app/out/docs-chunks.jsonl /app/docs\n")
    test_py = ('"""The payments postmortem, the docs index and the docs chunks."""\nimport hashlib\nimport json\n'
               "import re\nfrom pathlib import Path\n"
               + _report_tests(report, title, requests=9620, errors=312, rate="3\\.24", p95="29.8",
                               path="/webhooks/payments", events=_events(PAYMENTS_TIMELINE))
               + f'''

README = Path("/app/docs/README.md")
EXPECTED_TOC = {PAYMENTS_TOC!r}


def test_the_docs_index_has_a_current_table_of_contents():
    text = README.read_text(encoding="utf-8")
    toc = re.search(r"<!-- toc -->.*?<!-- tocstop -->", text, re.S).group(0)
    assert toc == EXPECTED_TOC


def test_nothing_outside_the_toc_markers_changed():
    text = README.read_text(encoding="utf-8")
    outside = re.sub(r"<!-- toc -->.*?<!-- tocstop -->", "", text, flags=re.S)
    assert hashlib.sha256(outside.encode()).hexdigest() == "{_sha(outside)}"


def chunks():
    return [json.loads(line) for line in Path("/app/out/docs-chunks.jsonl").read_text().splitlines()
            if line.strip()]


def test_every_markdown_file_under_docs_is_chunked_with_relative_sources():
    assert {{c["source"] for c in chunks()}} == {{"README.md", "operations.md", "incidents/incident-2026-02-27.md"}}


def test_chunks_follow_headings_and_ignore_fenced_code():
    readme = [c for c in chunks() if c["source"] == "README.md"]
    assert ["Payments platform docs", "Operations", "Examples"] in [c["headings"] for c in readme]
    assert all("not a heading" not in " ".join(c["headings"]) for c in chunks())
    assert any("not a heading" in c["text"] for c in readme)
    for c in chunks():
        assert c["n_words"] == len(c["text"].split()) and 0 < c["n_words"] <= 200


def test_the_postmortem_is_in_the_retrieval_index():
    post = [c for c in chunks() if c["source"] == "incidents/incident-2026-02-27.md"]
    assert ["Incident: {title}", "Timeline"] in [c["headings"] for c in post]
    assert [c["id"] for c in post] == [f"incidents/incident-2026-02-27.md#{{n}}" for n in range(1, len(post) + 1)]
''')
    return DemoTask(
        key="payments-docs", skills=frozenset({"incident-report-writer", "markdown-rag-chunker", "markdown-toc"}),
        marker="/app/out/docs-chunks.jsonl",
        manifest={"workdir": "/app", "directories": ["/app/docs", "/app/incident", "/app/out"],
                  "files": [{"path": "/app/docs/README.md", "purpose": "docs index with a stale TOC, duplicate "
                             "headings and a fenced pseudo-heading", "format": "Markdown"},
                            {"path": "/app/docs/operations.md", "purpose": "operations guide", "format": "Markdown"},
                            {"path": "/app/incident/summary.json", "purpose": "request statistics", "format": "JSON"},
                            {"path": "/app/incident/timeline.txt", "purpose": "incident timeline", "format": "text"}],
                  "services": [], "dependencies": ["python3"],
                  "distractors": ["a TOC entry for a removed section", "'## not a heading' inside a code block",
                                  "two sections both called Examples"],
                  "cross_file_relations": ["the postmortem goes into docs/incidents and is chunked with the docs"]},
        files={"docs/README.md": PAYMENTS_README, "docs/operations.md": PAYMENTS_OPERATIONS,
               "incident/summary.json": json.dumps(PAYMENTS_SUMMARY, indent=2) + "\n",
               "incident/timeline.txt": PAYMENTS_TIMELINE},
        dockerfile=_dockerfile("docs", "incident"), init_script=INIT_OUT,
        init_checks=["grep -q '<!-- tocstop -->' /app/docs/README.md", "test -s /app/incident/summary.json"],
        instruction=instruction, solve_sh=solve_sh, test_py=test_py)


# =================================================================================================
# 3. git-history-audit + changelog-from-git: the first build fails, environment repair fixes it

MAKE_REPO_BODY = r'''
repo=/app/repo
mkdir -p "$repo" /app/out
cd "$repo"
git init -q -b main .
day=0
commit() {  # commit SUBJECT [EMAIL]: one commit a day from 2026-01-05, so the history is reproducible
  local subject="$1" email="${2:-maria@quarrylabs.dev}"
  day=$((day + 1))
  local when="2026-01-$(printf %02d $((4 + day)))T10:00:00+00:00"
  if [ "$day" -gt 27 ]; then when="2026-02-$(printf %02d $((day - 27)))T10:00:00+00:00"; fi
  GIT_AUTHOR_EMAIL="$email" GIT_AUTHOR_DATE="$when" GIT_COMMITTER_DATE="$when" \
    git commit -q --allow-empty -m "$subject"
}
printf '# Export service\n' > README.md; git add README.md; commit "feat: initial import"
printf '# Changelog\n\n## v1.3.0 - 2026-02-20\n\n### Features\n\n- **api:** first export endpoint\n' > CHANGELOG.md
git add CHANGELOG.md; commit "chore(release): v1.3.0"
git tag v1.3.0
mkdir -p src assets
printf 'def export_csv(rows):\n    return rows\n' > src/export.py; git add src; commit "feat(api): add CSV export endpoint"
printf 'def total(cart):\n    return sum(cart or [])\n' > src/cart.py; git add src; commit "fix: handle empty cart totals"
python3 -c "import sys; sys.stdout.buffer.write(bytes(i * 7 % 251 for i in range(1_500_000)))" > assets/demo.bin
git add assets; commit "Update stuff" root@localhost
printf 'Exports are limited to 10,000 rows.\n' >> README.md; git add README.md; commit "docs: document export limits"
git checkout -q -b fix/typo
printf 'LABEL = "Place order"\n' > src/ui.py; git add src; commit "fix(ui): correct checkout button label"
git checkout -q main
printf 'python_requires = ">=3.9"\n' > setup.cfg; git add setup.cfg; commit "feat!: drop Python 3.8 support"
day=$((day + 1))
GIT_AUTHOR_DATE="2026-01-$(printf %02d $((4 + day)))T10:00:00+00:00" \
  GIT_COMMITTER_DATE="2026-01-$(printf %02d $((4 + day)))T10:00:00+00:00" \
  git merge -q --no-ff -m "Merge branch 'fix/typo'" fix/typo
GIT_COMMITTER_DATE="2026-03-14T09:30:00+00:00" \
  git commit -q --allow-empty -m "WIP" --author "dev <dev@example.com>" --date "2026-03-14T09:30:00+00:00"
'''
# What the model wrote first: `git commit` in a fresh image has no identity and stops the build.
MAKE_REPO_FIRST = "#!/bin/bash\nset -euo pipefail\n" + MAKE_REPO_BODY
MAKE_REPO_FIXED = ("#!/bin/bash\nset -euo pipefail\n"
                   "# A fresh image has no git identity: name the author and committer of the fixture history.\n"
                   "export GIT_AUTHOR_NAME=\"Maria Quarry\" GIT_AUTHOR_EMAIL=maria@quarrylabs.dev\n"
                   "export GIT_COMMITTER_NAME=\"Maria Quarry\" GIT_COMMITTER_EMAIL=maria@quarrylabs.dev\n"
                   + MAKE_REPO_BODY)

GIT_AUDIT = r'''python3 - <<'PY'
# git-history-audit over commits.tsv and large-blobs.tsv in the current directory
import csv, json, re

CONVENTIONAL = re.compile(r"^(feat|fix|docs|style|refactor|perf|test|build|ci|chore|revert)(\([\w./-]+\))?!?: \S")
PLACEHOLDER_EMAIL = re.compile(r"(@localhost|@example\.(com|org)|^root@|\.local$)")
findings = {"nonconventional": [], "placeholder_email": [], "merge_commits": [], "large_blobs": []}
total = 0
with open("/tmp/audit/commits.tsv", encoding="utf-8") as fh:
    for sha, email, parents, subject in csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE):
        total += 1
        short = sha[:10]
        if len(parents.split()) > 1:
            findings["merge_commits"].append(short)
            continue
        if not CONVENTIONAL.match(subject):
            findings["nonconventional"].append({"commit": short, "subject": subject})
        if PLACEHOLDER_EMAIL.search(email):
            findings["placeholder_email"].append({"commit": short, "email": email})
with open("/tmp/audit/large-blobs.tsv", encoding="utf-8") as fh:
    for line in fh:
        size, _, path = line.rstrip("\n").partition("\t")
        findings["large_blobs"].append({"path": path, "bytes": int(size)})
summary = {k: len(v) for k, v in findings.items()}
json.dump({"commits": total, "summary": summary, "findings": findings}, open("/app/out/git-audit.json", "w"), indent=2)
print(json.dumps(summary))
PY'''

MAKE_CHANGELOG = r'''python3 - "$@" <<'PY'
# changelog-from-git: VERSION DATE, reading /tmp/audit/range.tsv
import re, sys

version, date = sys.argv[1:3]
SUBJECT = re.compile(r"^(?P<type>\w+)(\((?P<scope>[^)]+)\))?(?P<bang>!)?: (?P<text>.+)$")
SECTIONS = [("breaking", "Breaking changes"), ("feat", "Features"), ("fix", "Fixes"),
            ("docs", "Documentation"), ("other", "Other")]
groups = {key: [] for key, _ in SECTIONS}
for line in open("/tmp/audit/range.tsv", encoding="utf-8"):
    sha, _, subject = line.rstrip("\n").partition("\t")
    m = SUBJECT.match(subject)
    if not m:
        groups["other"].append(f"{subject} ({sha})")
        continue
    scope = f"**{m['scope']}:** " if m["scope"] else ""
    entry = f"{scope}{m['text']} ({sha})"
    if m["bang"]:
        groups["breaking"].append(entry)
    groups[m["type"] if m["type"] in groups else "other"].append(entry)
out = [f"## {version} - {date}", ""]
for key, title in SECTIONS:
    if groups[key]:
        out += [f"### {title}", ""] + [f"- {e}" for e in groups[key]] + [""]
print("\n".join(out))
PY'''


def _git() -> DemoTask:
    instruction = """# Audit the export service's git history and write the v1.4.0 changelog

The repository `/app/repo` is about to be released as v1.4.0. Do two things, without committing,
tagging or rewriting anything in the repository:

1. Audit the whole history into `/app/out/git-audit.json`:
   `{"commits": N, "summary": {...}, "findings": {...}}` where `findings` has
   - `nonconventional`: `{"commit", "subject"}` for each non-merge commit whose subject is not a
     Conventional Commit (`type(scope)!: text` with type feat, fix, docs, style, refactor, perf,
     test, build, ci, chore or revert),
   - `placeholder_email`: `{"commit", "email"}` for each non-merge commit whose author email is a
     placeholder (`@localhost`, `@example.com`/`.org`, `root@...`, `*.local`),
   - `merge_commits`: the merge commits,
   - `large_blobs`: `{"path", "bytes"}` for every blob over 1 MiB anywhere in history;
   commits are named by the first 10 characters of their hash; `summary` counts each list and
   `commits` is the number of commits in the history.
2. Add the release notes for v1.4.0 to `/app/repo/CHANGELOG.md`: a section `## v1.4.0 - 2026-03-14`
   (the date of the last commit) right below the `# Changelog` title and above the older sections,
   covering the non-merge commits since the tag `v1.3.0`, oldest first, grouped under
   `### Breaking changes` (commits marked `!`, also listed under their type), `### Features`,
   `### Fixes`, `### Documentation` and `### Other` (empty groups left out). Each entry is
   `- <scope prefix><text> (<7-character hash>)` with the scope written as `**scope:** `; subjects
   that are not Conventional Commits go under Other as they are.
"""
    solve_sh = ("#!/bin/bash\nset -euo pipefail\n"
                + _function("audit_history", GIT_AUDIT) + _function("make_changelog", MAKE_CHANGELOG)
                + "mkdir -p /app/out /tmp/audit\ncd /app/repo\n"
                + "git log --format='%H%x09%ae%x09%p%x09%s' > /tmp/audit/commits.tsv\n"
                + "git rev-list --objects --all \\\n"
                  "  | git cat-file --batch-check='%(objecttype) %(objectname) %(objectsize) %(rest)' \\\n"
                  "  | awk '$1 == \"blob\" && $3 > 1048576 {print $3 \"\\t\" $4}' | sort -rn > /tmp/audit/large-blobs.tsv\n"
                + "audit_history\n"
                + "PREV=$(git describe --tags --abbrev=0)\n"
                + "git log \"$PREV..HEAD\" --no-merges --reverse --format='%h%x09%s' > /tmp/audit/range.tsv\n"
                + "make_changelog v1.4.0 \"$(git log -1 --format=%cs)\" > /tmp/audit/section.md\n"
                + "{ head -n 2 CHANGELOG.md; cat /tmp/audit/section.md; tail -n +3 CHANGELOG.md; } > /tmp/audit/CHANGELOG.new\n"
                + "cat /tmp/audit/CHANGELOG.new > CHANGELOG.md\n")
    test_py = '''"""The history audit and the v1.4.0 changelog, checked against git itself (read-only)."""
import json
import subprocess
from pathlib import Path

REPO = "/app/repo"


def git(*args):
    return subprocess.run(["git", "-C", REPO, *args], check=True, capture_output=True, text=True).stdout


def audit():
    return json.loads(Path("/app/out/git-audit.json").read_text())


def short(rev, n=10):
    return git("rev-parse", rev).strip()[:n]


def test_the_audit_counts_every_commit():
    data = audit()
    assert data["commits"] == int(git("rev-list", "--count", "HEAD")) == 10
    assert data["summary"] == {"nonconventional": 2, "placeholder_email": 2, "merge_commits": 1, "large_blobs": 1}


def test_nonconventional_subjects_and_placeholder_emails_are_found():
    findings = audit()["findings"]
    assert sorted(f["subject"] for f in findings["nonconventional"]) == ["Update stuff", "WIP"]
    assert sorted(f["email"] for f in findings["placeholder_email"]) == ["dev@example.com", "root@localhost"]
    wip = next(f for f in findings["nonconventional"] if f["subject"] == "WIP")
    assert wip["commit"] == short("HEAD")


def test_the_merge_commit_and_the_large_blob_are_found():
    findings = audit()["findings"]
    assert findings["merge_commits"] == [git("rev-list", "--merges", "HEAD").strip()[:10]]
    assert findings["large_blobs"] == [{"path": "assets/demo.bin", "bytes": 1500000}]


def changelog():
    return Path(REPO, "CHANGELOG.md").read_text(encoding="utf-8")


def section(title):
    body = changelog().split("## v1.4.0 - 2026-03-14\\n", 1)[1].split("\\n## ", 1)[0]
    part = body.split(f"### {title}\\n", 1)[1].split("\\n### ", 1)[0]
    return [line for line in part.splitlines() if line.startswith("- ")]


def sha_of(subject):
    return git("log", "--format=%h", "--fixed-strings", f"--grep={subject}", "-n", "1").strip()


def test_the_new_section_sits_between_the_title_and_the_older_ones():
    lines = changelog().splitlines()
    assert lines[:3] == ["# Changelog", "", "## v1.4.0 - 2026-03-14"]
    assert changelog().index("## v1.4.0") < changelog().index("## v1.3.0 - 2026-02-20")
    assert "- **api:** first export endpoint" in changelog()


def test_commits_since_the_tag_are_grouped():
    assert section("Breaking changes") == [f"- drop Python 3.8 support ({sha_of('drop Python 3.8')})"]
    assert section("Features") == [f"- **api:** add CSV export endpoint ({sha_of('add CSV export')})",
                                   f"- drop Python 3.8 support ({sha_of('drop Python 3.8')})"]
    assert section("Fixes") == [f"- handle empty cart totals ({sha_of('handle empty cart')})",
                                f"- **ui:** correct checkout button label ({sha_of('checkout button')})"]
    assert section("Documentation") == [f"- document export limits ({sha_of('document export')})"]
    assert section("Other") == [f"- Update stuff ({sha_of('Update stuff')})", f"- WIP ({sha_of('WIP')})"]
    assert "initial import" not in changelog() and "Merge branch" not in changelog()


def test_the_repository_is_otherwise_untouched():
    assert git("status", "--porcelain") == " M CHANGELOG.md\\n"
    assert git("log", "-1", "--format=%s").strip() == "WIP"
    assert git("tag").split() == ["v1.3.0"]
'''
    materialized_note = ("git commit needs an author identity, and a fresh image has none: init.sh stopped at "
                         "the first commit. init.sh now exports GIT_AUTHOR_NAME/EMAIL and GIT_COMMITTER_NAME/EMAIL "
                         "for the fixture history (per-commit dates and the placeholder emails are kept).")
    return DemoTask(
        key="git-release", skills=frozenset({"changelog-from-git", "git-history-audit"}),
        marker="/app/out/git-audit.json",
        manifest={"workdir": "/app", "directories": ["/app/repo", "/app/out"],
                  "files": [{"path": "/app/repo", "purpose": "a git repository with ten commits, a tag v1.3.0, a "
                             "merge, placeholder emails and a 1.5 MB blob, created at build time", "format": "git"},
                            {"path": "/app/repo/CHANGELOG.md", "purpose": "changelog with the v1.3.0 section",
                             "format": "Markdown"}],
                  "services": [], "dependencies": ["git", "python3", "jq"],
                  "distractors": ["commits before the tag", "a merge commit", "a commit on a merged branch"],
                  "cross_file_relations": ["commits since v1.3.0 -> the new CHANGELOG section"]},
        files={}, dockerfile="FROM {base}\nWORKDIR /app\nCOPY init.sh /usr/local/bin/facet-init.sh\n"
                             "RUN bash /usr/local/bin/facet-init.sh\n",
        init_script=MAKE_REPO_FIXED, first_init_script=MAKE_REPO_FIRST, repair_diagnosis=materialized_note,
        init_checks=["git -C /app/repo rev-parse --verify v1.3.0", "test \"$(git -C /app/repo rev-list --count HEAD)\" -eq 10"],
        instruction=instruction, solve_sh=solve_sh, test_py=test_py)


# =================================================================================================
# 4. incident-report-writer + markdown-toc: valid at the first validation

LOGIN_SUMMARY = {
    "requests": 5210, "unparsed_lines": 1,
    "status": {"200": 3987, "302": 612, "401": 203, "500": 38, "503": 370},
    "error_rate_5xx": 0.0783, "top_paths": [["/login", 2871], ["/oauth/callback", 1102]],
    "top_ips": [["198.51.100.7", 640]], "busiest_minute": ["19/Jan/2026:08:31", 288],
    "request_time_p50": 0.09, "request_time_p95": 4.2,
}
LOGIN_TIMELINE = """# times in UTC
2026-01-19 08:12 UTC | Session store failover started (planned maintenance)
2026-01-19 08:14 UTC | Login errors reported by support
2026-01-19 08:29 UTC | Session store replica promoted by hand
2026-01-19 08:47 UTC | Login error rate back to baseline
"""
OLD_REPORT = """# Incident: Password reset emails delayed

Status: final

<!-- toc -->
- [Summary](#summary)
<!-- tocstop -->

## Summary

The mail relay queued reset emails for two hours on 2025-11-02.
"""
LOGIN_TOC = """<!-- toc -->
- [Summary](#summary)
- [Impact](#impact)
- [Timeline](#timeline)
- [Root cause](#root-cause)
- [Action items](#action-items)
<!-- tocstop -->"""


def _login() -> DemoTask:
    title = "Login failures during session store failover"
    report = "/app/reports/incident-2026-01-19.md"
    instruction = f"""# Draft the login incident report with a table of contents

Write the draft report of the 2026-01-19 login incident to `{report}`, next to the earlier
reports in `/app/reports` (leave those as they are). The request statistics are in
`/app/incident/summary.json`, the timeline in `/app/incident/timeline.txt` (`time | event` lines).

- First line `# Incident: {title}`, then a `Status: draft` line.
- A table of contents between a `<!-- toc -->` line and a `<!-- tocstop -->` line, placed before the
  first section: one `- [Title](#anchor)` line per `##` section, with GitHub-style anchors.
- The sections `## Summary`, `## Impact`, `## Timeline`, `## Root cause`, `## Action items`, in
  this order. Impact is a `| Metric | Value |` table with `Requests`, `5xx responses` (all 5xx
  statuses together), `5xx rate` (percent), `p95 request time` and `Busiest path`; Timeline a
  `| Time | Event |` table with one row per event; action items open checkboxes (`- [ ] `).
- No client IP addresses in the report.
"""
    solve_sh = ("#!/bin/bash\nset -euo pipefail\ncd /app\n"
                + _function("write_incident", WRITE_INCIDENT) + _function("update_toc", MD_TOC)
                + f'write_incident /app/incident/summary.json /app/incident/timeline.txt "{title}" {report}\n'
                + f"sed -i '0,/^## /s//<!-- toc -->\\n<!-- tocstop -->\\n\\n## /' {report}\n"
                + f"update_toc {report}\n")
    test_py = ('"""The login incident report and its table of contents."""\nimport hashlib\nimport re\n'
               "from pathlib import Path\n"
               + _report_tests(report, title, requests=5210, errors=408, rate="7\\.83", p95="4.2",
                               path="/login", events=_events(LOGIN_TIMELINE))
               + f'''

EXPECTED_TOC = {LOGIN_TOC!r}


def test_the_table_of_contents_lists_every_section_with_its_anchor():
    text = report_text()
    toc = re.search(r"<!-- toc -->.*?<!-- tocstop -->", text, re.S)
    assert toc and toc.group(0) == EXPECTED_TOC
    assert text.index("<!-- tocstop -->") < text.index("## Summary")


def test_earlier_reports_are_left_alone():
    old = Path("/app/reports/incident-2025-11-02.md").read_bytes()
    assert hashlib.sha256(old).hexdigest() == "{_sha(OLD_REPORT)}"
''')
    return DemoTask(
        key="login-incident", skills=frozenset({"incident-report-writer", "markdown-toc"}),
        marker="/app/reports/incident-2026-01-19.md",
        manifest={"workdir": "/app", "directories": ["/app/incident", "/app/reports"],
                  "files": [{"path": "/app/incident/summary.json", "purpose": "request statistics", "format": "JSON"},
                            {"path": "/app/incident/timeline.txt", "purpose": "incident timeline", "format": "text"},
                            {"path": "/app/reports/incident-2025-11-02.md", "purpose": "an earlier report with its "
                             "own TOC (must not change)", "format": "Markdown"}],
                  "services": [], "dependencies": ["python3", "sed"],
                  "distractors": ["an earlier report with a TOC", "a comment line in the timeline"],
                  "cross_file_relations": ["summary.json -> Impact table", "sections -> TOC anchors"]},
        files={"incident/summary.json": json.dumps(LOGIN_SUMMARY, indent=2) + "\n", "incident/timeline.txt": LOGIN_TIMELINE,
               "reports/incident-2025-11-02.md": OLD_REPORT},
        dockerfile=_dockerfile("incident", "reports"), init_script="#!/bin/bash\nset -euo pipefail\ntest -d /app/reports\n",
        init_checks=["test -s /app/incident/summary.json", "test -f /app/reports/incident-2025-11-02.md"],
        instruction=instruction, solve_sh=solve_sh, test_py=test_py)


# =================================================================================================
# 5. csv-clean-dedupe + csv-column-stats: the first solve.sh crashes; solution repair

CUSTOMERS = ("\ufeffCustomer ID, Email ,Full Name,Signup Date,Lifetime Value,Country\n"
             'C-1001, ada@example.org ,Ada Lovelace,2026-01-05,"1,250.00",GB\n'
             "C-1002,Bob.Stone@Example.com,Bob Stone,2026/01/06,310.50,US\n"
             "C-1003,cy@example.net,Cy Twombly,07.01.2026,88.00,US\n"
             'C-1004, BOB.STONE@example.com ,Robert Stone,"Jan 08, 2026",120.00,US\n'
             "C-1005,dee@example.org,Dee Rivers,09/01/2026,,CA\n"
             "C-1006,,Eve Nobody,2026-01-10,45.00,DE\n"
             "C-1007,fay@example.com,Fay Wray,10 Jan 2026,2300.75,US\n"
             "C-1008,gus@example.com,Gus Grissom,2026-01-12,15.25,US\n"
             "C-1009,  ada@example.org,Ada L.,2026-01-13,99.99,GB\n"
             "C-1010,hal@example.io,Hal Abelson,2026-01-14,640.00,US\n"
             "C-1011,ida@example.io,Ida Noddack,2026.01.15,72.10,DE\n"
             'C-1012,jo@example.com,Jo March,14 Jan 2026,"1,005.40",US\n')
CRM_NOTE = "Exported from the CRM on 2026-01-16. Lifetime values are in EUR. Do not edit this file.\n"

CLEAN_CSV = r'''python3 - <<'PY'
# csv-clean-dedupe: snake_case headers, trimmed cells, lowercased emails, ISO dates, one row per email
import csv, datetime, re

DATE_FORMATS = ["%Y-%m-%d", "%Y/%m/%d", "%d.%m.%Y", "%d/%m/%Y", "%d %b %Y", "%b %d, %Y"]

def snake(name):
    return re.sub(r"[^0-9a-z]+", "_", name.strip().lower()).strip("_")

def iso_date(text):
    for fmt in DATE_FORMATS:
        try:
            return datetime.datetime.strptime(text, fmt).date().isoformat()
        except ValueError:
            pass
    return None

with open("/app/data/customers_export.csv", newline="", encoding="utf-8-sig") as fh:
    reader = csv.DictReader(fh)
    fields = [snake(f) for f in reader.fieldnames]
    rows = [dict(zip(fields, ((v or "").strip() for v in r.values()))) for r in reader]
kept, rejects, seen = [], [], set()
for i, row in enumerate(rows, start=2):
    row["email"] = row["email"].lower()
    for col in [c for c in fields if c.endswith(("date", "_at"))]:
        if row[col]:
            row[col] = iso_date(row[col]) or row[col]
    if not row.get("email"):
        rejects.append({**row, "reason": f"line {i}: empty email"})
    elif row["email"] in seen:
        rejects.append({**row, "reason": f"line {i}: duplicate email"})
    else:
        seen.add(row["email"])
        kept.append(row)
for path, data, cols in [("/app/out/customers.clean.csv", kept, fields),
                         ("/app/out/customers.rejects.csv", rejects, fields + ["reason"])]:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        w.writerows(data)
print(f"read={len(rows)} kept={len(kept)} rejected={len(rejects)}")
PY'''

COLUMN_STATS = r'''python3 - <<'PY'
# csv-column-stats over the clean file
import collections, csv, json, statistics

def as_number(text):
    try:
        return float(text.replace(",", "")) if text.strip() else None
    except ValueError:
        return None

rows = list(csv.DictReader(open("/app/out/customers.clean.csv", newline="", encoding="utf-8")))
report = {}
for col in rows[0].keys():
    values = [(r.get(col) or "").strip() for r in rows]
    present = [v for v in values if v]
    numbers = [n for n in map(as_number, present) if n is not None]
    info = {"count": len(values), "missing": len(values) - len(present)}
    if present and len(numbers) == len(present):
        info.update(kind="numeric", min=min(numbers), max=max(numbers),
                    mean=round(statistics.fmean(numbers), 2), median=statistics.median(numbers))
    else:
        info.update(kind="text", distinct=len(collections.Counter(present)))
    report[col] = info
json.dump(report, open("/app/out/stats.json", "w"), indent=2)
PY'''

# The model's first stats step: decides a column is numeric from its first value, then converts every
# cell, so the empty lifetime value of C-1005 raises ValueError and solve.sh stops.
COLUMN_STATS_FIRST = r'''python3 - <<'PY'
# column statistics of the clean file
import csv, json, statistics

rows = list(csv.DictReader(open("/app/out/customers.clean.csv", newline="", encoding="utf-8")))
report = {}
for col in rows[0].keys():
    values = [r[col].strip() for r in rows]
    info = {"count": len(values), "missing": sum(1 for v in values if not v)}
    try:
        float(values[0].replace(",", ""))
        numeric = True
    except ValueError:
        numeric = False
    if numeric:
        numbers = [float(v.replace(",", "")) for v in values]
        info.update(kind="numeric", min=min(numbers), max=max(numbers),
                    mean=round(statistics.fmean(numbers), 2), median=statistics.median(numbers))
    else:
        info.update(kind="text", distinct=len(set(v for v in values if v)))
    report[col] = info
json.dump(report, open("/app/out/stats.json", "w"), indent=2)
PY'''


def _expected_customers() -> tuple[list[dict], list[dict], dict]:
    import csv
    import io

    snake = lambda name: re.sub(r"[^0-9a-z]+", "_", name.strip().lower()).strip("_")  # noqa: E731
    formats = ["%Y-%m-%d", "%Y/%m/%d", "%d.%m.%Y", "%d/%m/%Y", "%d %b %Y", "%b %d, %Y"]

    def iso(text):
        for fmt in formats:
            try:
                return datetime.datetime.strptime(text, fmt).date().isoformat()
            except ValueError:
                pass
        return text

    reader = csv.DictReader(io.StringIO(CUSTOMERS.lstrip("\ufeff")))
    fields = [snake(f) for f in reader.fieldnames]
    kept, rejects, seen = [], [], set()
    for i, raw in enumerate(reader, start=2):
        row = dict(zip(fields, (v.strip() for v in raw.values())))
        row["email"] = row["email"].lower()
        row["signup_date"] = iso(row["signup_date"]) if row["signup_date"] else ""
        if not row["email"]:
            rejects.append({**row, "reason": f"line {i}: empty email"})
        elif row["email"] in seen:
            rejects.append({**row, "reason": f"line {i}: duplicate email"})
        else:
            seen.add(row["email"])
            kept.append(row)
    values = [float(r["lifetime_value"].replace(",", "")) for r in kept if r["lifetime_value"]]
    lifetime = {"count": len(kept), "missing": len(kept) - len(values), "kind": "numeric", "min": min(values),
                "max": max(values), "mean": round(statistics.fmean(values), 2), "median": statistics.median(values)}
    return kept, rejects, lifetime


def _customers() -> DemoTask:
    kept, rejects, lifetime = _expected_customers()
    assert len(kept) == 9 and len(rejects) == 3 and lifetime["missing"] == 1
    instruction = """# Clean the CRM customer export and profile it

`/app/data/customers_export.csv` is a hand-edited CRM export (UTF-8 with a byte-order mark): stray
spaces, mixed-case emails, dates in several formats and the same customer entered twice. Leave it
as it is and write:

1. `/app/out/customers.clean.csv`: the same columns with snake_case headers (`customer_id`, `email`,
   `full_name`, `signup_date`, `lifetime_value`, `country`), every cell trimmed, emails lowercased,
   signup dates in ISO 8601 (`YYYY-MM-DD`) where the format is recognisable (`2026/01/06`,
   `07.01.2026`, `09/01/2026`, `10 Jan 2026`, `Jan 08, 2026`; anything else stays as it is), and one
   row per email: the first occurrence wins (emails compare case-insensitively after trimming).
2. `/app/out/customers.rejects.csv`: the dropped rows, cleaned the same way, with an extra `reason`
   column: `line <N>: empty email` or `line <N>: duplicate email` (N is the line in the export,
   the header being line 1).
3. `/app/out/stats.json`: for each column of the clean file, `count` (rows) and `missing` (empty
   cells); a column whose non-empty cells are all numbers (thousands separators allowed) is
   `"kind": "numeric"` with `min`, `max`, `mean` (rounded to 2 decimals) and `median` of those
   numbers, any other column `"kind": "text"` with `distinct` (distinct non-empty values).
"""
    header = ("#!/bin/bash\nset -euo pipefail\ncd /app\n" + _function("clean_csv", CLEAN_CSV))
    solve_sh = (header + _function("column_stats", COLUMN_STATS)
                + "mkdir -p /app/out\nclean_csv\ncolumn_stats\n")
    first_solve_sh = (header + _function("column_stats", COLUMN_STATS_FIRST)
                      + "mkdir -p /app/out\nclean_csv\ncolumn_stats\n")
    test_py = f'''"""The cleaned export, its rejects and the column profile."""
import csv
import hashlib
import json
from pathlib import Path

EXPECTED_CLEAN = {kept!r}
EXPECTED_REJECTS = {[(r["customer_id"], r["reason"]) for r in rejects]!r}


def read(path):
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_the_clean_file_has_snake_case_headers_and_one_row_per_email():
    rows = read("/app/out/customers.clean.csv")
    assert list(rows[0]) == ["customer_id", "email", "full_name", "signup_date", "lifetime_value", "country"]
    assert [r["email"] for r in rows] == [r["email"] for r in EXPECTED_CLEAN]


def test_cells_are_trimmed_emails_lowercased_and_dates_iso():
    assert read("/app/out/customers.clean.csv") == EXPECTED_CLEAN


def test_every_dropped_row_is_in_the_rejects_with_its_reason():
    rows = read("/app/out/customers.rejects.csv")
    assert [(r["customer_id"], r["reason"]) for r in rows] == EXPECTED_REJECTS
    assert rows[0]["email"] == "bob.stone@example.com"


def test_the_lifetime_value_profile():
    stats = json.loads(Path("/app/out/stats.json").read_text())
    lifetime = stats["lifetime_value"]
    assert {{k: lifetime[k] for k in ("count", "missing", "kind")}} == {{"count": 9, "missing": 1, "kind": "numeric"}}
    assert lifetime["min"] == {lifetime["min"]} and lifetime["max"] == {lifetime["max"]}
    assert abs(lifetime["mean"] - {lifetime["mean"]}) < 0.006 and abs(lifetime["median"] - {lifetime["median"]}) < 1e-9


def test_text_columns_count_distinct_values():
    stats = json.loads(Path("/app/out/stats.json").read_text())
    assert stats["country"] == {{"count": 9, "missing": 0, "kind": "text", "distinct": 4}}
    assert stats["email"]["kind"] == "text" and stats["email"]["distinct"] == 9
    assert stats["signup_date"]["kind"] == "text"


def test_the_export_is_unchanged():
    data = Path("/app/data/customers_export.csv").read_bytes()
    assert hashlib.sha256(data).hexdigest() == "{hashlib.sha256(CUSTOMERS.encode()).hexdigest()}"
'''
    return DemoTask(
        key="crm-export", skills=frozenset({"csv-clean-dedupe", "csv-column-stats"}),
        marker="/app/out/customers.clean.csv",
        manifest={"workdir": "/app", "directories": ["/app/data", "/app/out"],
                  "files": [{"path": "/app/data/customers_export.csv", "purpose": "messy CRM export with a BOM, "
                             "duplicates, an empty email and mixed date formats", "format": "CSV"},
                            {"path": "/app/data/README.txt", "purpose": "where the export came from", "format": "text"}],
                  "services": [], "dependencies": ["python3"],
                  "distractors": ["duplicate emails differing only in case and spaces", "an unrecognised date format",
                                  "quoted thousands separators"],
                  "cross_file_relations": ["customers.clean.csv -> stats.json"]},
        files={"data/customers_export.csv": CUSTOMERS, "data/README.txt": CRM_NOTE},
        dockerfile=_dockerfile("data"), init_script=INIT_OUT,
        init_checks=["test \"$(wc -l < /app/data/customers_export.csv)\" -eq 13", "test -d /app/out"],
        instruction=instruction, solve_sh=solve_sh, first_solve_sh=first_solve_sh, test_py=test_py)


# =================================================================================================
# 6. incident-report-writer + markdown-rag-chunker + json-config-validate: discarded after five
#    repair rounds (the verifier keeps assuming the chunker's default window sizes)

SEARCH_SUMMARY = {
    "requests": 12044, "unparsed_lines": 12,
    "status": {"200": 11210, "404": 142, "500": 31, "504": 661},
    "error_rate_5xx": 0.0575, "top_paths": [["/api/search", 8120], ["/api/suggest", 2904]],
    "top_ips": [["192.0.2.201", 1500]], "busiest_minute": ["03/Mar/2026:16:05", 388],
    "request_time_p50": 0.35, "request_time_p95": 9.6,
}
SEARCH_TIMELINE = """2026-03-03 15:48 UTC | Index rebuild started on the primary search node
2026-03-03 15:55 UTC | p95 latency of /api/search above 5 s
2026-03-03 16:10 UTC | Traffic shifted to the replica
2026-03-03 16:22 UTC | Index rebuild finished, traffic back on the primary
"""
SEARCH_CONFIG = {"max_words": 120, "overlap": 30, "sources": ["docs", "incident"], "output": "/app/out/kb.jsonl"}
SEARCH_STAGING = {"max_words": "120", "overlap": 150, "sources": ["docs", "wiki"], "output": "/app/out/kb.jsonl"}
SEARCH_SCHEMA = {
    "type": "object", "required": ["max_words", "overlap", "sources", "output"],
    "properties": {"max_words": {"type": "integer", "minimum": 50, "maximum": 250},
                   "overlap": {"type": "integer", "minimum": 0, "maximum": 100},
                   "sources": {"type": "array", "items": {"type": "string", "enum": ["docs", "incident"]}},
                   "output": {"type": "string"}},
}
SEARCH_RUNBOOK = """# Search service runbook

Search answers product queries from an index rebuilt every night on the primary node.

## Capacity planning

The primary node holds the full index in memory and answers most queries in under a hundred
milliseconds. During the nightly rebuild it builds a second copy of the index next to the first, so
memory use doubles for about forty minutes and the garbage collector runs far more often than usual.
Queries that arrive while the collector runs can take several seconds, which is why the rebuild is
scheduled at the quietest hour and why the replica should take the traffic while it runs. The
replica lags the primary by up to one rebuild, so results may miss products added during the day;
merchandising accepts this for the duration of a rebuild. Before a sales event, check that both
nodes have at least forty percent of their memory free with the index loaded, that the rebuild is
paused for the duration of the event, and that the suggest endpoint has its own cache warmed,
because suggestions are computed from the same index and slow down with it. The edge proxy gives
search requests five seconds before it answers with a gateway timeout; do not raise this limit to
hide slow queries, since clients retry and the retries make an overloaded node slower still. When
the p95 latency of search rises above two seconds for five minutes, page the search on-call and
move traffic to the replica first, investigate second. Record every manual traffic shift in the
incident channel with the time and the reason, so the postmortem timeline can be reconstructed
from the channel afterwards.

## Index rebuilds

Start a rebuild by hand with `search-admin rebuild --node primary` only after moving the traffic.
"""


def _search_tests(revision: int, chunk_tests: str) -> str:
    title = "Search latency during index rebuild"
    return (f'"""Config check, incident report and knowledge-base chunks (verifier revision {revision})."""\n'
            "import json\nimport re\nfrom pathlib import Path\n"
            + _report_tests("/app/out/incident-2026-03-03.md", title, requests=12044, errors=692, rate="5\\.75",
                            p95="9.6", path="/api/search", events=_events(SEARCH_TIMELINE))
            + '''

def test_the_config_check_names_each_problem_with_its_path():
    lines = Path("/app/out/config-check.txt").read_text().splitlines()
    assert lines == [
        "/app/config/chunker.staging.json: $.max_words: expected integer, got str",
        "/app/config/chunker.staging.json: $.overlap: 150 > maximum 100",
        "/app/config/chunker.staging.json: $.sources[1]: 'wiki' not one of ['docs', 'incident']",
        "1 valid, 1 invalid",
    ]
''' + chunk_tests)


KB = 'Path("/app/out/kb.jsonl")'
SEARCH_VERIFIERS = [
    # 1: the model's first verifier: chunk counts from the skill's defaults (200 words, 40 overlap)
    f'''

def chunks(path={KB}):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_the_knowledge_base_covers_the_docs_and_the_report():
    assert {{c["source"] for c in chunks()}} == {{"search-runbook.md", "incident-2026-03-03.md"}}


def test_the_capacity_section_is_split_into_two_windows():
    capacity = [c for c in chunks() if c["headings"][-1:] == ["Capacity planning"]]
    assert len(capacity) == 2 and capacity[0]["n_words"] == 200
''',
    # 2: after "the tests expect other values": drops the count, checks the overlap instead
    f'''

def chunks(path={KB}):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_no_chunk_is_longer_than_the_window():
    assert chunks() and all(0 < c["n_words"] <= 200 for c in chunks())


def test_consecutive_windows_overlap_by_forty_words():
    capacity = [c for c in chunks() if c["headings"][-1:] == ["Capacity planning"]]
    assert len(capacity) >= 2
    for a, b in zip(capacity, capacity[1:]):
        assert a["text"].split()[-40:] == b["text"].split()[:40]
''',
    # 3: full windows must be full
    f'''

def chunks(path={KB}):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_every_window_but_the_last_of_a_section_is_full():
    capacity = [c for c in chunks() if c["headings"][-1:] == ["Capacity planning"]]
    assert len(capacity) >= 2
    assert all(c["n_words"] == 200 for c in capacity[:-1])
''',
    # 4: reads the chunker's default output file instead of the config's
    '''

def chunks(path=Path("/app/out/chunks.jsonl")):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_chunk_ids_count_up_per_source():
    by_source = {}
    for c in chunks():
        by_source.setdefault(c["source"], []).append(c["id"])
    assert by_source and all(ids == [f"{s}#{n}" for n in range(1, len(ids) + 1)] for s, ids in by_source.items())
''',
    # 5: derives the expected count from the section length, still with 200/40
    f'''

def chunks(path={KB}):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_the_capacity_section_has_as_many_windows_as_its_length_needs():
    text = Path("/app/docs/search-runbook.md").read_text()
    body = text.split("## Capacity planning\\n", 1)[1].split("\\n## ", 1)[0]
    words = len(body.split())
    expected = len(range(0, max(words - 40, 1), 160))
    capacity = [c for c in chunks() if c["headings"][-1:] == ["Capacity planning"]]
    assert len(capacity) == expected
''',
    # 6: back to the overlap of the documented defaults
    f'''

def chunks(path={KB}):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_windows_overlap_as_the_chunker_documents():
    capacity = [c for c in chunks() if c["headings"][-1:] == ["Capacity planning"]]
    assert len(capacity) == 2
    assert capacity[0]["text"].split()[-40:] == capacity[1]["text"].split()[:40]
''',
]

VALIDATE_CONFIG = r'''python3 - "$@" <<'PY'
# json-config-validate: SCHEMA.json CONFIG.json...; one line per problem, then "N valid, M invalid"
import json, sys

TYPES = {"object": dict, "array": list, "string": str, "boolean": bool,
         "integer": int, "number": (int, float), "null": type(None)}

def check(value, schema, path, errors):
    expected = schema.get("type")
    if expected:
        ok = isinstance(value, TYPES[expected]) and not (expected in ("integer", "number") and isinstance(value, bool))
        if not ok:
            errors.append(f"{path}: expected {expected}, got {type(value).__name__}")
            return
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} not one of {schema['enum']}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{path}: {value} < minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{path}: {value} > maximum {schema['maximum']}")
    if isinstance(value, dict):
        for key in schema.get("required", []):
            if key not in value:
                errors.append(f"{path}: missing required key '{key}'")
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                check(value[key], sub, f"{path}.{key}", errors)
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            check(item, schema["items"], f"{path}[{i}]", errors)

schema = json.load(open(sys.argv[1]))
failed = 0
for name in sys.argv[2:]:
    errors = []
    check(json.load(open(name)), schema, "$", errors)
    for e in errors:
        print(f"{name}: {e}")
    failed += bool(errors)
print(f"{len(sys.argv) - 2 - failed} valid, {failed} invalid")
PY'''


def _search() -> DemoTask:
    title = "Search latency during index rebuild"
    report = "/app/out/incident-2026-03-03.md"
    instruction = f"""# Check the chunker config, draft the search incident report and rebuild the knowledge base

The support assistant's knowledge base is built by a chunker configured in `/app/config/chunker.json`
(production) and `/app/config/chunker.staging.json` (staging); both must follow
`/app/config/chunker.schema.json` (a JSON Schema subset: type, required, properties, items, enum,
minimum, maximum).

1. Validate both config files against the schema and write `/app/out/config-check.txt`: one line
   per problem as `<config path>: <JSON path>: <problem>` (JSON paths like `$.overlap` or
   `$.sources[1]`; problems as `expected integer, got str`, `150 > maximum 100`,
   `'wiki' not one of ['docs', 'incident']`), production first, then a last line
   `<n> valid, <m> invalid`.
2. Draft the report of the 2026-03-03 search incident as `{report}` from
   `/app/incident/summary.json` and `/app/incident/timeline.txt` (`time | event` lines): first line
   `# Incident: {title}`, a `Status: draft` line, then `## Summary`, `## Impact` (a
   `| Metric | Value |` table with `Requests`, `5xx responses`, `5xx rate` in percent,
   `p95 request time`, `Busiest path`), `## Timeline` (a `| Time | Event |` table, one row per
   event), `## Root cause` and `## Action items` (open `- [ ] ` items). No client IPs.
3. Rebuild the knowledge base with the production config: chunk the Markdown files of `/app/docs`
   and the new report into the config's `output` file (`/app/out/kb.jsonl` in production), one
   JSON object per line with `id` (`<source>#<n>`), `source` (file name), `headings` (heading
   path), `text` and `n_words`. A new chunk starts at every heading; longer sections are split
   into windows of at most the config's `max_words` words overlapping by its `overlap` words.
"""
    solve_sh = ("#!/bin/bash\nset -euo pipefail\ncd /app\n"
                + _function("validate_config", VALIDATE_CONFIG) + _function("write_incident", WRITE_INCIDENT)
                + _function("chunk_markdown", CHUNK_MD)
                + "mkdir -p /app/out\n"
                + "validate_config /app/config/chunker.schema.json /app/config/chunker.json "
                  "/app/config/chunker.staging.json > /app/out/config-check.txt\n"
                + f'write_incident /app/incident/summary.json /app/incident/timeline.txt "{title}" {report}\n'
                + "chunk_markdown \"$(jq -r .max_words /app/config/chunker.json)\" "
                  "\"$(jq -r .overlap /app/config/chunker.json)\" \"$(jq -r .output /app/config/chunker.json)\" "
                  f"/app/docs/*.md {report}\n")
    verifiers = [_search_tests(i + 1, body) for i, body in enumerate(SEARCH_VERIFIERS)]
    return DemoTask(
        key="search-kb", skills=frozenset({"incident-report-writer", "markdown-rag-chunker", "json-config-validate"}),
        marker="/app/config/chunker.json",
        manifest={"workdir": "/app", "directories": ["/app/config", "/app/docs", "/app/incident", "/app/out"],
                  "files": [{"path": "/app/config/chunker.json", "purpose": "production chunker config "
                             "(120-word windows, 30 overlap)", "format": "JSON"},
                            {"path": "/app/config/chunker.staging.json", "purpose": "staging config with three "
                             "schema violations", "format": "JSON"},
                            {"path": "/app/config/chunker.schema.json", "purpose": "schema of both configs",
                             "format": "JSON Schema"},
                            {"path": "/app/docs/search-runbook.md", "purpose": "runbook with a long section",
                             "format": "Markdown"},
                            {"path": "/app/incident/summary.json", "purpose": "request statistics", "format": "JSON"},
                            {"path": "/app/incident/timeline.txt", "purpose": "incident timeline", "format": "text"}],
                  "services": [], "dependencies": ["python3", "jq"],
                  "distractors": ["the staging config's output path equals production's"],
                  "cross_file_relations": ["chunker.json max_words/overlap/output -> the knowledge base"]},
        files={"config/chunker.json": json.dumps(SEARCH_CONFIG, indent=2) + "\n",
               "config/chunker.staging.json": json.dumps(SEARCH_STAGING, indent=2) + "\n",
               "config/chunker.schema.json": json.dumps(SEARCH_SCHEMA, indent=2) + "\n",
               "docs/search-runbook.md": SEARCH_RUNBOOK,
               "incident/summary.json": json.dumps(SEARCH_SUMMARY, indent=2) + "\n",
               "incident/timeline.txt": SEARCH_TIMELINE},
        dockerfile=_dockerfile("config", "docs", "incident"), init_script=INIT_OUT,
        init_checks=["jq empty /app/config/chunker.json", "jq empty /app/config/chunker.schema.json"],
        instruction=instruction, solve_sh=solve_sh, test_py=verifiers[0], hopeless_verifiers=verifiers,
        router_reason=("solve.sh exits 0 and follows /app/config/chunker.json (120-word windows, 30-word "
                       "overlap, output /app/out/kb.jsonl); the failing tests expect other chunk counts and "
                       "sizes, so test_outputs.py is what disagrees with the instruction."))


# =================================================================================================
# 7. task-due-digest + ops-checklist-audit: the first verifier passes without any work (nop)

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


# =================================================================================================
# 8. incident-report-writer + nginx-access-log-report + markdown-rag-chunker: valid first time

def _access_log() -> tuple[str, str]:
    """Today's access log (combined format with $request_time) and yesterday's rotated one."""
    ips = ["203.0.113.9", "198.51.100.23", "192.0.2.44", "203.0.113.77", "198.51.100.81"]
    paths = ["/api/search?q=lamp", "/api/search?q=desk+chair", "/api/orders?id=7", "/", "/static/app.js",
             "/api/orders?id=12", "/api/search?q=rug"]
    lines = []
    for i in range(96):
        ip, path = ips[(i * 7) % 5], paths[(i * 5) % 7]
        status, size = 200, 512 + (i * 37) % 2048
        if path.startswith("/api/search") and i % 4 == 1:
            status, size = 504, 167
        elif i % 13 == 0:
            status, size = 500, 0
        elif path == "/static/app.js" and i % 2:
            status, size = 304, 0
        elif path.startswith("/api/orders") and i % 9 == 4:
            status, size = 404, 153
        slow = status >= 500
        rt = round(0.04 + ((i * 29) % 100) / 100 * (6.0 if slow else 0.35), 3)
        ts = f"04/Mar/2026:09:{10 + i // 24:02d}:{(i * 17) % 60:02d} +0000"
        lines.append(f'{ip} - - [{ts}] "GET {path} HTTP/1.1" {status} {size} "-" "Mozilla/5.0 (X11; Linux)" {rt}')
    lines.insert(40, "203.0.113.9 - - [04/Mar/2026:09:11:59 +0000] \"\\x16\\x03\\x01\" 400 0 \"-\" \"-\"")
    lines.insert(70, "- - [04/Mar/2026:09:12:30 +0000] truncated line")
    today = "\n".join(lines) + "\n"
    rotated = "".join(f'192.0.2.{i % 250} - - [03/Mar/2026:23:{i % 60:02d}:00 +0000] "GET / HTTP/1.1" 200 512 '
                      f'"-" "curl/8.5.0" 0.012\n' for i in range(300))
    return today, rotated


def _access_summary(log: str) -> dict:
    line_re = re.compile(r'(?P<ip>\S+) \S+ \S+ \[(?P<ts>[^\]]+)\] "(?P<method>\S+) (?P<path>\S+)[^"]*" '
                         r'(?P<status>\d{3}) (?P<bytes>\d+|-) "[^"]*" "[^"]*"(?: (?P<rt>[\d.]+))?')
    status, paths, ips, minutes = (collections.Counter() for _ in range(4))
    times, bad = [], 0
    for raw in log.splitlines():
        m = line_re.match(raw)
        if not m:
            bad += 1
            continue
        status[m["status"]] += 1
        paths[m["path"].split("?")[0]] += 1
        ips[m["ip"]] += 1
        minutes[m["ts"][:17]] += 1
        if m["rt"]:
            times.append(float(m["rt"]))
    total = sum(status.values())
    errors = sum(n for s, n in status.items() if s.startswith("5"))
    q = statistics.quantiles(times, n=100, method="inclusive")
    return {"requests": total, "unparsed_lines": bad, "status": dict(sorted(status.items())),
            "error_rate_5xx": round(errors / total, 4), "top_paths": [list(p) for p in paths.most_common(10)],
            "request_time_p95": round(q[94], 3)}


ACCESS_REPORT = r'''python3 - "$@" <<'PY'
# nginx-access-log-report: ACCESS.log -> summary JSON on stdout
import collections, json, re, statistics, sys

LINE = re.compile(r'(?P<ip>\S+) \S+ \S+ \[(?P<ts>[^\]]+)\] "(?P<method>\S+) (?P<path>\S+)[^"]*" '
                  r'(?P<status>\d{3}) (?P<bytes>\d+|-) "[^"]*" "[^"]*"(?: (?P<rt>[\d.]+))?')
status, paths, ips, minutes = (collections.Counter() for _ in range(4))
times, bad = [], 0
for raw in open(sys.argv[1], encoding="utf-8", errors="replace"):
    m = LINE.match(raw)
    if not m:
        bad += 1
        continue
    status[m["status"]] += 1
    paths[m["path"].split("?")[0]] += 1
    ips[m["ip"]] += 1
    minutes[m["ts"][:17]] += 1
    if m["rt"]:
        times.append(float(m["rt"]))
total = sum(status.values())
errors = sum(n for s, n in status.items() if s.startswith("5"))
q = statistics.quantiles(times, n=100, method="inclusive") if len(times) > 1 else [0.0] * 99
summary = {
    "requests": total, "unparsed_lines": bad,
    "status": dict(sorted(status.items())),
    "error_rate_5xx": round(errors / total, 4) if total else 0.0,
    "top_paths": paths.most_common(10), "top_ips": ips.most_common(5),
    "busiest_minute": minutes.most_common(1)[0] if minutes else None,
    "request_time_p50": round(q[49], 3), "request_time_p95": round(q[94], 3),
}
json.dump(summary, sys.stdout, indent=2)
print()
PY'''

STOREFRONT_TIMELINE = """2026-03-04 09:11 UTC | Search timeouts (504) reported by the storefront team
2026-03-04 09:12 UTC | Search node CPU at 100% after the synonyms update
2026-03-04 09:13 UTC | Synonyms update reverted
2026-03-04 09:14 UTC | Search latency back to normal
"""


def _storefront() -> DemoTask:
    today, rotated = _access_log()
    summary = _access_summary(today)
    errors = sum(n for s, n in summary["status"].items() if s.startswith("5"))
    title = "Storefront search timeouts"
    report = "/app/out/incident-2026-03-04.md"
    rate = re.escape(f"{summary['error_rate_5xx'] * 100:.2f}")
    instruction = f"""# From this morning's access log to an incident report in the knowledge base

The storefront's nginx access log of 2026-03-04 is `/app/logs/access.log` (combined format with the
request time appended); `/app/logs/access.log.1.gz` is yesterday's rotated log and not part of this
incident. The on-call timeline is `/app/incident/timeline.txt` (`time | event` lines).

1. Summarise today's log into `/app/out/summary.json`: `requests` (parsed lines), `unparsed_lines`,
   `status` (count per status code, as strings), `error_rate_5xx` (5xx share of requests, rounded
   to 4 decimals), `top_paths` (`[path, count]` pairs, query strings removed, most frequent first),
   `top_ips`, `busiest_minute`, `request_time_p50` and `request_time_p95` (inclusive percentiles
   over the parsed request times, rounded to 3 decimals).
2. Draft `{report}` from that summary and the timeline: first line `# Incident: {title}`, a
   `Status: draft` line, then `## Summary`, `## Impact` (a `| Metric | Value |` table with
   `Requests`, `5xx responses`, `5xx rate` in percent, `p95 request time`, `Busiest path`),
   `## Timeline` (`| Time | Event |`, one row per event), `## Root cause` and `## Action items`
   (open `- [ ] ` items). Keep client IP addresses out of the report.
3. Chunk the report into `/app/out/incident-chunks.jsonl` for the retrieval index: one JSON object
   per line with `id` (`incident-2026-03-04.md#<n>`), `source`, `headings` (heading path), `text`
   and `n_words`; one chunk per section (at most 200 words, 40-word overlap when splitting).
"""
    solve_sh = ("#!/bin/bash\nset -euo pipefail\ncd /app\n"
                + _function("access_report", ACCESS_REPORT) + _function("write_incident", WRITE_INCIDENT)
                + _function("chunk_markdown", CHUNK_MD)
                + "mkdir -p /app/out\n"
                + "access_report /app/logs/access.log > /app/out/summary.json\n"
                + f'write_incident /app/out/summary.json /app/incident/timeline.txt "{title}" {report}\n'
                + f"chunk_markdown 200 40 /app/out/incident-chunks.jsonl {report}\n")
    test_py = ('"""The access-log summary, the incident report drafted from it, and its chunks."""\n'
               "import json\nimport re\nfrom pathlib import Path\n"
               + _report_tests(report, title, requests=summary["requests"], errors=errors, rate=rate,
                               p95=str(summary["request_time_p95"]), path=summary["top_paths"][0][0],
                               events=_events(STOREFRONT_TIMELINE))
               + f'''

def summary():
    return json.loads(Path("/app/out/summary.json").read_text())


def test_only_todays_log_is_summarised():
    s = summary()
    assert s["requests"] == {summary["requests"]} and s["unparsed_lines"] == {summary["unparsed_lines"]}
    assert s["status"] == {summary["status"]!r}


def test_error_rate_paths_and_latency():
    s = summary()
    assert s["error_rate_5xx"] == {summary["error_rate_5xx"]}
    assert [list(p) for p in s["top_paths"][:3]] == {summary["top_paths"][:3]!r}
    assert s["request_time_p95"] == {summary["request_time_p95"]}


def test_the_report_is_chunked_one_section_per_chunk():
    chunks = [json.loads(line) for line in Path("/app/out/incident-chunks.jsonl").read_text().splitlines()]
    assert [c["id"] for c in chunks] == [f"incident-2026-03-04.md#{{n}}" for n in range(1, len(chunks) + 1)]
    assert [c["headings"][-1] for c in chunks[1:]] == ["Summary", "Impact", "Timeline", "Root cause", "Action items"]
    assert all(c["source"] == "incident-2026-03-04.md" and c["n_words"] == len(c["text"].split()) for c in chunks)
''')
    init = INIT_OUT + "gzip -9n /app/logs/access.log.1\n"
    return DemoTask(
        key="storefront-incident",
        skills=frozenset({"incident-report-writer", "nginx-access-log-report", "markdown-rag-chunker"}),
        marker="/app/out/incident-chunks.jsonl",
        manifest={"workdir": "/app", "directories": ["/app/logs", "/app/incident", "/app/out"],
                  "files": [{"path": "/app/logs/access.log", "purpose": "today's nginx log with two malformed lines",
                             "format": "nginx combined + request time"},
                            {"path": "/app/logs/access.log.1.gz", "purpose": "yesterday's rotated log (not part of "
                             "the incident)", "format": "gzip"},
                            {"path": "/app/incident/timeline.txt", "purpose": "incident timeline", "format": "text"}],
                  "services": [], "dependencies": ["python3", "awk", "jq", "gzip"],
                  "distractors": ["yesterday's rotated log", "malformed lines", "query strings on paths"],
                  "cross_file_relations": ["access.log -> summary.json -> the report -> incident-chunks.jsonl"]},
        files={"logs/access.log": today, "logs/access.log.1": rotated, "incident/timeline.txt": STOREFRONT_TIMELINE},
        dockerfile=_dockerfile("logs", "incident"), init_script=init,
        init_checks=["test \"$(wc -l < /app/logs/access.log)\" -eq 98", "gzip -t /app/logs/access.log.1.gz"],
        instruction=instruction, solve_sh=solve_sh, test_py=test_py)


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
    if task.first_solve_sh and "Repair the solution" not in user:
        return {"solve_sh": task.first_solve_sh}
    return {"solve_sh": task.solve_sh}


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
