"""Demo task 1. incident-report-writer + markdown-rag-chunker: valid at the first validation."""
from __future__ import annotations

import json

from .common import (
    CHUNK_MD,
    INIT_OUT,
    WRITE_INCIDENT,
    DemoTask,
    _chunks,
    _dockerfile,
    _events,
    _function,
    _report_tests,
)


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
