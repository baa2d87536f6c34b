"""Demo task 6. incident-report-writer + markdown-rag-chunker + json-config-validate: discarded after
five repair rounds (the verifier keeps assuming the chunker's default window sizes)."""
from __future__ import annotations

import json

from .common import CHUNK_MD, INIT_OUT, WRITE_INCIDENT, DemoTask, _dockerfile, _events, _function, _report_tests


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
