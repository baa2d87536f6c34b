"""Reading skills from disk: frontmatter shapes of both conventions, and broken YAML recovered or reported."""
from __future__ import annotations

import json

import pytest

from facet_site.lib.skillformat import ParsedSkill, SourceProblem

from tests.lib.skillformat_samples import GOOD_MD, make_skill, parse


# --------------------------------------------------------------------------------------------
# Frontmatter shapes
# --------------------------------------------------------------------------------------------


def test_strict_agent_skills_map(tmp_path):
    md = """---
name: git-helper
description: Inspect git history.
license: MIT
compatibility: Requires git 2.40+
metadata:
  author: someone
  version: "2.0"
allowed-tools: Bash(git log:*) Bash(git diff:*) Read
---
Use git.
"""
    skill = parse(make_skill(tmp_path, "git-helper", md))

    assert skill.license == "MIT"
    assert skill.compatibility == "Requires git 2.40+"
    assert skill.version == "2.0"  # from the strict metadata string map
    assert skill.allowed_tools == ["Bash(git log:*)", "Bash(git diff:*)", "Read"]
    assert skill.tools[:2] == ["git", "Read"]
    assert skill.frontmatter["metadata"] == {"author": "someone", "version": "2.0"}
    assert skill.warnings == []


def test_clawhub_nested_openclaw_metadata(tmp_path):
    md = """---
name: weather
description: Forecasts.
homepage: https://example.com/weather
metadata:
  openclaw:
    requires:
      bins: [curl, jq]
      anyBins: [python3, python]
      env: [WEATHER_API_KEY]
      config: [channels.weather.units]
    primaryEnv: WEATHER_API_KEY
    envVars:
      - name: WEATHER_REGION
        required: false
        description: default region
      - WEATHER_TOKEN
    os: [Darwin, linux]
    install:
      - kind: brew
        formula: jq
        bins: [jq]
      - kind: node
        package: weather-cli
        bins: weather
---
Body.
"""
    skill = parse(make_skill(tmp_path, "weather", md))

    assert skill.required_bins == ["curl", "jq"]
    assert skill.any_bins == ["python3", "python"]
    assert skill.required_env == ["WEATHER_API_KEY", "WEATHER_TOKEN"]
    assert skill.primary_env == "WEATHER_API_KEY"
    assert skill.env_vars == [
        {"name": "WEATHER_REGION", "required": False, "description": "default region"},
        {"name": "WEATHER_TOKEN", "required": True, "description": ""},
    ]
    assert skill.required_config == ["channels.weather.units"]
    assert skill.os == ["darwin", "linux"]
    assert [(i["kind"], i["package"], i["bins"]) for i in skill.install] == [
        ("brew", "jq", ["jq"]), ("node", "weather-cli", ["weather"])
    ]
    assert skill.install[0]["formula"] == "jq"  # original keys are kept
    assert skill.homepage == "https://example.com/weather"
    assert skill.tools[:4] == ["curl", "jq", "python3", "python"]


@pytest.mark.parametrize("alias", ["clawdbot", "clawdis", "moltbot"])
def test_metadata_aliases_and_json_string_metadata(tmp_path, alias):
    md = ("---\nname: a\ndescription: d\n"
          f"metadata: {{\"{alias}\":{{\"emoji\":\"x\",\"requires\":{{\"bins\":[\"ffmpeg\"]}}}}}}\n---\nbody\n")
    skill = parse(make_skill(tmp_path, "a", md))
    assert skill.required_bins == ["ffmpeg"]

    as_string = "---\nname: a\ndescription: d\nmetadata: '{\"openclaw\": {\"requires\": {\"env\": [\"K_TOKEN\"]}}}'\n---\nbody\n"
    skill = parse(make_skill(tmp_path, "b", as_string))
    assert skill.required_env == ["K_TOKEN"]

    nested_string = "---\nname: a\ndescription: d\nmetadata:\n  openclaw: '{\"os\": [\"linux\"]}'\n---\nbody\n"
    skill = parse(make_skill(tmp_path, "c", nested_string))
    assert skill.os == ["linux"]


def test_credentials_declared_at_the_top_of_the_frontmatter_are_required_env(tmp_path):
    # a real later ClawHub upload declares `credentials: [HUMANOD_API_KEY]` and nothing under metadata
    md = "---\nname: a\ndescription: d\ncredentials:\n  - FORUM_API_KEY\n  - Forum account\nbins: [curl]\n---\nbody\n"
    skill = parse(make_skill(tmp_path, "a", md))
    assert (skill.required_env, skill.required_bins) == (["FORUM_API_KEY"], ["curl"])
    nested = "---\nname: a\ndescription: d\nmetadata: {\"openclaw\": {\"requires\": {\"secrets\": \"SVC_TOKEN, SVC_HOST\"}}}\n---\nbody\n"
    assert parse(make_skill(tmp_path, "b", nested)).required_env == ["SVC_TOKEN", "SVC_HOST"]


def test_shapes_that_break_both_conventions_do_not_crash(tmp_path):
    md = """---
name: messy
description: Messy frontmatter.
version: 3
license: [MIT, Apache]
metadata:
  openclaw:
    requires:
      bins: "git, gh  jq"
      env: 12
      anyBins: {name: rg}
    envVars: {API_SECRET: the secret, OTHER: 3}
    os: linux
    install:
      kind: brew
      formula: gh
    primaryEnv: [not, a, string]
  clawdbot: 7
requires:
  bins: [make]
tags: [a, b]
allowed-tools: [Bash, 5, null]
---
Body.
"""
    skill = parse(make_skill(tmp_path, "messy", md))

    assert isinstance(skill, ParsedSkill)
    assert skill.required_bins == ["git", "gh", "jq", "make"]
    assert skill.any_bins == ["rg"]
    assert skill.required_env == ["12", "API_SECRET", "OTHER"]
    assert skill.os == ["linux"]
    assert skill.install[0]["package"] == "gh"
    assert skill.primary_env == ""
    assert skill.license == ""  # a list is not a licence string
    assert skill.version == "3"
    assert skill.allowed_tools == ["Bash", "5"]


def test_metadata_string_that_is_not_json_is_noted(tmp_path):
    skill = parse(make_skill(tmp_path, "a", "---\nname: a\ndescription: d\nmetadata: just words\n---\nbody\n"))
    assert any("`metadata` is a string but not a JSON object" in w for w in skill.warnings)


def test_frontmatter_is_json_safe(tmp_path):
    md = "---\nname: a\ndescription: d\ncreated: 2024-05-01\n1: one\nnull: x\nratio: .nan\nblob: !!binary aGVsbG8=\n---\nbody\n"
    skill = parse(make_skill(tmp_path, "a", md))

    json.dumps(skill.frontmatter)
    assert skill.frontmatter["created"] == "2024-05-01"
    assert skill.frontmatter["1"] == "one"
    assert skill.frontmatter["null"] == "x"
    assert skill.frontmatter["blob"] == "hello"


def test_bom_and_crlf_are_fine_and_hash_like_lf(tmp_path):
    lf = make_skill(tmp_path, "lf")
    crlf = make_skill(tmp_path, "crlf", b"\xef\xbb\xbf" + GOOD_MD.replace("\n", "\r\n").encode())

    a, b = parse(lf), parse(crlf)

    assert (b.name, b.description) == (a.name, a.description)
    assert b.body == a.body
    assert b.content_hash == a.content_hash
    assert b.steps == a.steps


def test_version_and_name_given_as_numbers(tmp_path):
    skill = parse(make_skill(tmp_path, "n", "---\nname: 2048\ndescription: game\nversion: 1.0\n---\nPlay.\n"))
    assert skill.name == "2048"
    assert skill.version == "1.0"


# --------------------------------------------------------------------------------------------
# Frontmatter errors and recovery
# --------------------------------------------------------------------------------------------


def test_malformed_yaml_is_a_problem_with_the_skill_md_line(tmp_path):
    md = "---\nname: broken\ndescription: fine\nmetadata: {\"openclaw\": [unclosed\nother: x\n---\nbody\n"
    result = parse(make_skill(tmp_path, "broken", md), root=tmp_path)

    assert isinstance(result, SourceProblem)
    assert result.path == "broken/SKILL.md"
    assert result.field == "frontmatter"
    assert result.message.startswith("SKILL.md: frontmatter is not valid YAML (line ")
    line = int(result.message.split("(line ")[1].split(")")[0])
    assert 4 <= line <= 6  # the unclosed list starts on line 4 of SKILL.md


@pytest.mark.parametrize("bad", [
    'name: [broken\ndescription: d',
    'name: ok\ndescription: "unterminated',
    "name: a\n\tdescription: tab",
    "name: a\ndescription: d\nallowed-tools: [Bash",
])
def test_yaml_errors_in_name_or_description_are_not_recovered(tmp_path, bad):
    result = parse(make_skill(tmp_path, "b", f"---\n{bad}\n---\nbody\n"))
    assert isinstance(result, SourceProblem)
    assert "frontmatter is not valid YAML" in result.message


def test_plain_value_with_colon_is_recovered_key_by_key(tmp_path):
    md = ("---\nname: dokku\ndescription: Deploys apps. Use when: the user asks, or: always.\n"
          "metadata: {\"openclaw\":{\"requires\":{\"bins\":[\"dokku\"]}}}\nargument-hint: [title] [message]\n---\nbody\n")
    skill = parse(make_skill(tmp_path, "dokku", md))

    assert isinstance(skill, ParsedSkill)
    assert skill.description == "Deploys apps. Use when: the user asks, or: always."
    assert skill.required_bins == ["dokku"]
    assert "argument-hint" not in skill.frontmatter
    [warning] = [w for w in skill.warnings if "not valid YAML" in w]
    assert "(line 3)" in warning and "argument-hint" in warning

    strict = parse(make_skill(tmp_path, "dokku2", md), strict=True)
    assert isinstance(strict, SourceProblem) and "(line 3)" in strict.message


def test_a_quoted_description_run_on_past_its_closing_quote_is_recovered(tmp_path):
    # a published ClawHub skill: `description: "Extends X ... for review." Verification is performed via ...`
    md = ('---\nname: evolver\ndescription: "Gates promotion: PASS \\u2192 promote, FAIL \\u2192 roll back." '
          "Verification uses an outside service; no credentials are embedded.\nmetadata:\n---\nbody\n")
    skill = parse(make_skill(tmp_path, "evolver", md))

    assert isinstance(skill, ParsedSkill)
    assert skill.description == ("Gates promotion: PASS \u2192 promote, FAIL \u2192 roll back. "
                                 "Verification uses an outside service; no credentials are embedded.")
    assert any("not valid YAML (line 3)" in w and "recovered" in w for w in skill.warnings)
    # an unterminated quote is still not guessed at
    result = parse(make_skill(tmp_path, "e2", '---\nname: e2\ndescription: "Gates promotion. Verification uses\n---\nbody\n'))
    assert isinstance(result, SourceProblem)


def test_other_broken_keys_are_dropped_with_a_warning(tmp_path):
    skill = parse(make_skill(tmp_path, "t", "---\nname: t\ndescription: fine\ntags: [unclosed, list\n---\nbody\n"))
    assert skill.description == "fine" and "tags" not in skill.frontmatter
    assert any("dropped unreadable key(s): tags" in w for w in skill.warnings)


def test_control_characters_in_yaml_are_recovered(tmp_path):
    md = "---\nname: prompts\ndescription: formula:\u0080 A [type] of [subject]\n---\nbody\n"
    skill = parse(make_skill(tmp_path, "p", md))
    assert skill.description.startswith("formula:")


def test_missing_frontmatter_falls_back_to_heading_and_first_paragraph(tmp_path):
    md = "# Spotify CLI\n\nControl **Spotify** from a [terminal](https://x).\n\n## Requirements\n\n- Python 3\n"
    skill = parse(make_skill(tmp_path, "spotify-cli", md))

    assert skill.name == "Spotify CLI"
    assert skill.description == "Control Spotify from a terminal."
    assert skill.frontmatter == {} and skill.frontmatter_text == "" and skill.frontmatter_start_line == 0
    assert skill.body_start_line == 1
    assert any("no YAML frontmatter" in w for w in skill.warnings)

    strict = parse(make_skill(tmp_path, "s2", md), strict=True)
    assert isinstance(strict, SourceProblem)
    assert strict.message == "SKILL.md: missing YAML frontmatter (the file must start with a '---' line)"


def test_missing_name_uses_dir_name_without_heading(tmp_path):
    skill = parse(make_skill(tmp_path, "my-dir", "---\ndescription: does x\n---\nJust text.\n"))
    assert skill.name == "my-dir"
    assert any("`name` missing" in w for w in skill.warnings)


def test_missing_description_uses_first_paragraph(tmp_path):
    skill = parse(make_skill(tmp_path, "d", "---\nname: d\n---\n# Title\n\nFirst paragraph here.\n\nSecond.\n"))
    assert skill.description == "First paragraph here."
    assert any("`description` missing" in w for w in skill.warnings)


def test_missing_description_and_empty_body_is_a_problem(tmp_path):
    result = parse(make_skill(tmp_path, "d", "---\nname: d\ndescription: ''\n---\n\n"))
    assert isinstance(result, SourceProblem)
    assert result.field == "description"
    assert "no description" in result.message and "no body" in result.message


def test_missing_name_in_strict_mode_is_a_problem(tmp_path):
    result = parse(make_skill(tmp_path, "d", "---\ndescription: x\n---\nbody\n"), strict=True)
    assert isinstance(result, SourceProblem) and result.field == "name"


@pytest.mark.parametrize("fm", ["- a\n- b", "just a string", "42"])
def test_frontmatter_that_is_not_a_mapping_is_a_problem(tmp_path, fm):
    result = parse(make_skill(tmp_path, "x", f"---\n{fm}\n---\nbody\n"))
    assert isinstance(result, SourceProblem)
    assert "frontmatter is not a mapping" in result.message


def test_a_closing_fence_with_the_body_glued_to_it_is_recovered(tmp_path):
    # a translated mirror's copies read "---**Base URL:** `https://...`": before, the skill was a problem
    md = "---\nname: agent-kit\ndescription: 代理的基础设施\n---**基础URL:** `https://api.example.com`\n\n## 快速参考\n\n---\n\nEnd.\n"
    skill = parse(make_skill(tmp_path, "g", md))
    assert (skill.name, skill.description) == ("agent-kit", "代理的基础设施")
    assert skill.body.startswith("**基础URL:**") and skill.body_start_line == 4
    assert any("text after it" in w for w in skill.warnings)
    strict = parse(make_skill(tmp_path, "s", md), strict=True)
    assert isinstance(strict, SourceProblem)


def test_unterminated_frontmatter_is_recovered(tmp_path):
    md = "---\nname: gogcli\ndescription: Google CLI.\n\n# gogcli\n\nText.\n"
    skill = parse(make_skill(tmp_path, "g", md))

    assert (skill.name, skill.description) == ("gogcli", "Google CLI.")
    assert skill.body.lstrip().startswith("# gogcli")
    assert skill.body_start_line == 4
    assert any("no closing '---'" in w for w in skill.warnings)

    only_frontmatter = parse(make_skill(tmp_path, "h", "---\nname: brief\ndescription: Morning report."))
    assert only_frontmatter.description == "Morning report."


def test_yaml_alias_bomb_is_a_problem(tmp_path):
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for i in range(1, 9):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i-1}"] * 9) + "]")
    md = "---\nname: bomb\ndescription: d\n" + "\n".join(lines) + "\n---\nbody\n"

    result = parse(make_skill(tmp_path, "bomb", md))

    assert isinstance(result, SourceProblem)
    assert "too large or self-referencing" in result.message


def test_self_referencing_yaml_is_a_problem(tmp_path):
    result = parse(make_skill(tmp_path, "loop", "---\nname: x\ndescription: d\nself: &s [*s]\n---\nbody\n"))
    assert isinstance(result, SourceProblem)
