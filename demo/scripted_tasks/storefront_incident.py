"""Demo task 8. incident-report-writer + nginx-access-log-report + markdown-rag-chunker: valid first time."""
from __future__ import annotations

import collections
import re
import statistics

from .common import CHUNK_MD, INIT_OUT, WRITE_INCIDENT, DemoTask, _dockerfile, _events, _function, _report_tests


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
