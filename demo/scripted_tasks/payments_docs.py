"""Demo task 2. incident-report-writer + markdown-rag-chunker + markdown-toc: valid at the first
validation."""
from __future__ import annotations

import json
import re

from .common import (
    CHUNK_MD,
    INIT_OUT,
    MD_TOC,
    WRITE_INCIDENT,
    DemoTask,
    _dockerfile,
    _events,
    _function,
    _report_tests,
    _sha,
)


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
