"""Reading skills from disk: the content hash, the structured record, and the published sample corpus."""
from __future__ import annotations

import collections
import json
import re
import time

import pytest

from facet_site.lib import skillformat
from facet_site.lib.skillformat import ParsedSkill, SourceProblem, discover

from tests.lib.skillformat_samples import CORPUS, GOOD_MD, by_key, make_skill, parse


# --------------------------------------------------------------------------------------------
# Content hash
# --------------------------------------------------------------------------------------------


def test_content_hash_is_deterministic_and_ignores_meta(tmp_path):
    a = make_skill(tmp_path, "a/s", meta={"owner": "a", "slug": "s", "latest": {"version": "1"}},
                   files={"scripts/x.sh": "echo 1\n", "references/r.md": "r\n"})
    b = make_skill(tmp_path, "b/s", meta={"owner": "b", "slug": "s", "latest": {"version": "2"}, "history": [1]},
                   files={"references/r.md": "r\n", "scripts/x.sh": "echo 1\n"})
    c = make_skill(tmp_path, "c/s", files={"scripts/x.sh": "echo 2\n", "references/r.md": "r\n"})
    d = make_skill(tmp_path, "d/s", files={"scripts/y.sh": "echo 1\n", "references/r.md": "r\n"})

    ha, hb, hc, hd = (parse(x, kind="clawhub").content_hash for x in (a, b, c, d))

    assert ha == hb  # re-published metadata alone is not a new version
    assert ha != hc  # file content matters
    assert ha != hd  # file names matter
    assert parse(a, kind="clawhub").content_hash == ha


def test_content_hash_changes_with_skill_md(tmp_path):
    a = parse(make_skill(tmp_path, "a"))
    b = parse(make_skill(tmp_path, "b", GOOD_MD + "\nMore.\n"))
    assert a.content_hash != b.content_hash


# --------------------------------------------------------------------------------------------
# Structured record
# --------------------------------------------------------------------------------------------

RICH_MD = """---
name: report-builder
description: Builds reports from CSV data.
metadata: {"openclaw": {"requires": {"bins": ["jq"]}}}
allowed-tools: Bash(uv:*)
---

# Report builder

Turns a CSV into a Markdown report.

## Inputs

- `data.csv`: the rows to summarise
- `--since DATE`: first day to include

## Parameters

| Name | Type | Description |
|------|------|-------------|
| `limit` | int | rows to keep |

## Workflow

- Check the input exists
- Summarise it

### Example

1. Convert: `uv run convert.py`
2. Publish the result

## Outputs

- `report.md`, a summary table

## Commands

```bash
# comments are skipped
export API_URL=https://example.com
sudo -E apt-get install -y jq && pip install pandas | tee log.txt
FOO=1 BAR="two words" python3 scripts/build.py --input data.csv > out/summary.json
cat <<EOF > config.toml
[section]
notcommand = 1
EOF
curl -s https://example.com/api \\
  -H "Accept: application/json" | jq '.items[] | .name'
./scripts/local.sh
if [ -f x ]; then echo ok; fi
```

```console
$ git status
On branch main
$ docker compose up -d
```

```text
$ make build
plain words here
```

```json
{"not": "commands"}
```

Save the chart to `charts/plot.png` and read settings from `conf/settings.yaml`.
"""


def test_structured_record_from_markdown(tmp_path):
    skill = parse(make_skill(tmp_path, "r", RICH_MD))

    assert skill.tools == ["jq", "uv", "apt-get", "pip", "tee", "python3", "cat", "curl", "git", "docker", "make"]
    assert skill.inputs == [
        "data.csv: the rows to summarise",
        "--since DATE: first day to include",
        "limit — int — rows to keep",
        "data.csv",
        "conf/settings.yaml",
    ]
    assert skill.outputs == ["report.md, a summary table", "out/summary.json", "config.toml", "charts/plot.png"]
    assert skill.steps == [
        "Check the input exists", "Summarise it", "Convert: uv run convert.py", "Publish the result"
    ]
    langs = [b["lang"] for b in skill.code_blocks]
    assert langs == ["bash", "console", "text", "json"]
    md_lines = RICH_MD.split("\n")
    for block in skill.code_blocks:
        assert md_lines[block["line"] - 1].startswith("```")  # lines are SKILL.md lines
        assert block["truncated"] is False
    assert skill.body_start_line == 7
    assert skill.frontmatter_start_line == 2


def test_ordered_list_items_anywhere_are_steps(tmp_path):
    md = "---\nname: s\ndescription: d\n---\n## Notes\n\n1. First do this\n2. Then that\n   - nested detail\n\n- bullet not a step\n"
    skill = parse(make_skill(tmp_path, "s", md))
    assert skill.steps == ["First do this", "Then that"]


def test_record_caps(tmp_path):
    steps = "\n".join(f"{i}. Step number {i} " + "word " * 100 for i in range(1, 80))
    blocks = "\n".join(f"```python\nprint({i})\n```\n" for i in range(40))
    big_block = "```bash\n" + "echo x\n" * 3000 + "```\n"
    md = f"---\nname: c\ndescription: d\n---\n{steps}\n\n{big_block}\n{blocks}"

    skill = parse(make_skill(tmp_path, "c", md))

    assert len(skill.steps) == 50
    assert all(len(s) <= 300 for s in skill.steps)
    assert len(skill.code_blocks) == 30
    assert skill.code_blocks[0]["truncated"] is True and len(skill.code_blocks[0]["code"]) == 10_000


def test_shell_words_filter_out_non_commands():
    words = skillformat.markdown._shell_words(
        "$ npm install\nResult: ok\n{\n  \"json\": 1\n}\n1234\nYOUR_COMMAND\ncd /tmp && ls -la\n"
        "(cd sub; make)\ntime nohup node server.js &\n! grep -q x file\nenv A=1 uvx ruff check\n",
        prompt_only=False,
    )
    assert words == ["npm", "ls", "make", "node", "grep", "uvx"]


def test_pathological_input_stays_fast(tmp_path):
    body = ("- a: b `c` [d](e) **f**\n" * 20_000) + ("|" * 50_000) + "\n" + ("```bash\n" + "x \\\n" * 5000)
    make_skill(tmp_path, "p", "---\nname: p\ndescription: d\n---\n" + body)

    start = time.perf_counter()
    [skill] = list(discover(tmp_path))
    assert isinstance(skill, ParsedSkill)
    assert time.perf_counter() - start < 20


def test_many_small_skills_parse_quickly(tmp_path):
    for i in range(200):
        make_skill(tmp_path, f"o{i % 10}/s{i}", RICH_MD, meta={"owner": f"o{i % 10}", "slug": f"s{i}"},
                   files={"scripts/run.py": "print(1)\n"})

    start = time.perf_counter()
    results = list(discover(tmp_path))
    elapsed = time.perf_counter() - start

    assert len(by_key(results)) == 200
    # ~0.5 ms each on an idle core; the bound only catches pathological slowdowns.
    assert elapsed < 10


# --------------------------------------------------------------------------------------------
# The published sample corpus
# --------------------------------------------------------------------------------------------


@pytest.mark.corpus
@pytest.mark.skipif(not CORPUS.is_dir(), reason="sample corpus not present")
def test_sample_corpus(capsys):
    skill_dirs = {
        p.parent for p in CORPUS.rglob("*") if p.name in skillformat.SKILL_MD_NAMES and ".git" not in p.parts
    }

    results = list(discover(CORPUS))

    skills = [r for r in results if isinstance(r, ParsedSkill)]
    probs = [r for r in results if isinstance(r, SourceProblem)]
    parsed_dirs = {(CORPUS / s.skill_md_path).parent for s in skills}
    assert len(parsed_dirs & skill_dirs) >= 0.98 * len(skill_dirs)
    kinds = collections.Counter(p.message.split(":")[0] if ":" in p.message else p.message for p in probs)
    warnings = collections.Counter(
        re.sub(r"'[^']*'|^\S+: ", "", w).split("(")[0].split(";")[0].strip() for s in skills for w in s.warnings
    )
    with capsys.disabled():
        print(f"\ncorpus: {len(skill_dirs)} skill dirs, {len(skills)} parsed, {len(probs)} problems")
        for kind, n in kinds.most_common():
            print(f"  problem {n:4d}  {kind}")
        for kind, n in warnings.most_common(8):
            print(f"  warning {n:4d}  {kind}")
        print(f"  unreadable: {sum(1 for s in skills if s.unreadable_reason)}")

    by = {s.key: s for s in skills}
    assert len(by) == len(skills)  # keys are unique
    for skill in skills:
        assert skill.name and skill.content_hash and skill.provenance["source_kind"] in skillformat.SOURCE_KINDS
        json.dumps(skill.frontmatter)
        json.dumps(skill.provenance)

    fight = by["0xmevdad/openswarm-fight-club"]
    assert fight.name == "fight-club" and fight.skill_md_path.endswith("/skill.md")
    assert fight.provenance["display_name"] == "OpenSwarm Fight Club"
    assert fight.version == "1.0.0" and fight.license == "MIT-0"
    assert "python3" in fight.tools

    ocean = by["0xterrybit/openocean"]
    assert ocean.required_bins == ["curl", "jq"]  # metadata.clawdbot given as a JSON flow map

    dokku = by["akhil-naidu/dokku"]  # description with ": " breaks YAML; recovered
    assert dokku.required_bins == ["dokku"] and dokku.description.startswith("Installs, upgrades")

    spotify = by["shawnpana/spotify-cli"]  # no frontmatter at all
    assert spotify.name == "Spotify CLI" and spotify.description

    nested = by["okaris/inference-sh/web-search"]
    assert nested.provenance["parent_key"] == "okaris/inference-sh"
    assert all(not f.path.startswith("web-search/") for f in by["okaris/inference-sh"].files)
