"""Demo task 4. incident-report-writer + markdown-toc: valid at the first validation."""
from __future__ import annotations

import json

from .common import MD_TOC, WRITE_INCIDENT, DemoTask, _dockerfile, _events, _function, _report_tests, _sha


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
