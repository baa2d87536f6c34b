"""Reading skills from disk: layouts, frontmatter shapes, bad inputs, structured records."""
from __future__ import annotations

import collections
import hashlib
import json
import os
import re
import time
from pathlib import Path

import pytest

from facet_site.lib import skillformat
from facet_site.lib.skillformat import ParsedSkill, SkillFileEntry, SourceProblem, discover, parse_skill_dir

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "openclaw-sample"

GOOD_MD = """---
name: pdf-tools
description: Split and merge PDF files from the command line.
---

# PDF tools

Split and merge PDFs.

## Steps

1. Install qpdf with `brew install qpdf`.
2. Run `qpdf --split-pages in.pdf out.pdf`.
"""


def write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def make_skill(root: Path, rel: str, md: str | bytes = GOOD_MD, *, files: dict | None = None, meta=None,
               md_name: str = "SKILL.md") -> Path:
    skill_dir = root / rel
    write(skill_dir / md_name, md)
    for name, content in (files or {}).items():
        write(skill_dir / name, content)
    if meta is not None:
        write(skill_dir / "_meta.json", meta if isinstance(meta, str) else json.dumps(meta))
    return skill_dir


def parse(skill_dir: Path, root: Path | None = None, kind: str = "directory", **kwargs):
    return parse_skill_dir(skill_dir, root=root or skill_dir.parent, source_kind=kind, **kwargs)


def by_key(results) -> dict[str, ParsedSkill]:
    return {r.key: r for r in results if isinstance(r, ParsedSkill)}


def problems(results) -> list[SourceProblem]:
    return [r for r in results if isinstance(r, SourceProblem)]


# --------------------------------------------------------------------------------------------
# Layouts and source kinds
# --------------------------------------------------------------------------------------------

META = {
    "owner": "alice",
    "slug": "pdf-tools",
    "displayName": "PDF Tools",
    "latest": {"version": "1.2.0", "publishedAt": 1769885654982, "commit": "https://github.com/clawdbot/skills/commit/abc"},
    "history": [{"version": "1.0.0"}, {"version": "1.1.0"}],
}


def test_clawhub_layout_takes_identity_and_provenance_from_meta(tmp_path):
    make_skill(tmp_path, "alice/pdf-tools", meta=META, files={"scripts/split.sh": "#!/bin/sh\nqpdf \"$@\"\n"})

    [skill] = list(discover(tmp_path))

    assert isinstance(skill, ParsedSkill)
    assert (skill.key, skill.owner, skill.slug) == ("alice/pdf-tools", "alice", "pdf-tools")
    assert skill.name == "pdf-tools"
    assert skill.description == "Split and merge PDF files from the command line."
    assert skill.version == "1.2.0"  # latest.version, since the frontmatter has none
    assert skill.license == "MIT-0" and skill.provenance["license_inferred"] is True
    assert skill.skill_md_path == "alice/pdf-tools/SKILL.md"
    prov = skill.provenance
    assert prov["source_kind"] == "clawhub"
    assert prov["path"] == "alice/pdf-tools"
    assert prov["meta"] == META
    assert prov["display_name"] == "PDF Tools"
    assert prov["published_at"] == "2026-01-31T18:54:14.982000Z"
    assert prov["commit"] == "https://github.com/clawdbot/skills/commit/abc"
    assert prov["history_count"] == 2
    assert prov["git_remote"] is None
    assert [f.path for f in skill.files] == ["_meta.json", "scripts/split.sh"]
    assert skill.warnings == []


def test_clawhub_falls_back_to_directory_names_when_meta_is_broken(tmp_path):
    make_skill(tmp_path, "bob/weather", meta="{not json")

    [skill] = list(discover(tmp_path))

    assert (skill.key, skill.owner, skill.slug) == ("bob/weather", "bob", "weather")
    assert skill.provenance["source_kind"] == "clawhub"
    assert any("_meta.json is not valid JSON" in w for w in skill.warnings)


def test_explicit_frontmatter_license_and_version_win_over_clawhub_defaults(tmp_path):
    md = "---\nname: x\ndescription: d\nlicense: Apache-2.0\nversion: 1.10\n---\nbody\n"
    make_skill(tmp_path, "o/x", md, meta=META)

    [skill] = list(discover(tmp_path))

    assert skill.license == "Apache-2.0"
    assert "license_inferred" not in skill.provenance
    assert skill.version == "1.10"  # verbatim, not the float 1.1


def test_directory_source_uses_relative_path_as_key(tmp_path):
    make_skill(tmp_path, "skills/pdf")
    make_skill(tmp_path, "other")

    results = list(discover(tmp_path))

    skills = by_key(results)
    assert set(skills) == {"skills/pdf", "other"}
    assert skills["skills/pdf"].provenance["source_kind"] == "directory"
    assert skills["skills/pdf"].owner == ""
    assert skills["skills/pdf"].slug == "pdf"


def test_root_that_is_itself_a_skill_is_keyed_by_its_directory_name(tmp_path):
    skill_dir = make_skill(tmp_path, "my-skill")

    [skill] = list(discover(skill_dir))

    assert skill.key == "my-skill"
    assert skill.skill_md_path == "SKILL.md"
    assert skill.provenance["path"] == "."


def make_git_repo(repo: Path, *, head="ref: refs/heads/main\n", packed=False, url="https://user:tok@github.com/acme/skills.git"):
    git = repo / ".git"
    sha = "0123456789abcdef0123456789abcdef01234567"
    write(git / "HEAD", head)
    if packed:
        write(git / "packed-refs", f"# pack-refs with: peeled\n{sha} refs/heads/main\n")
    else:
        write(git / "refs" / "heads" / "main", sha + "\n")
    write(git / "config", f'[core]\n\tbare = false\n[remote "origin"]\n\turl = {url}\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n')
    write(git / "objects" / "ab" / "cdef", b"\x00blob")
    return sha


@pytest.mark.parametrize("packed", [False, True])
def test_git_checkout_records_commit_and_remote_without_credentials(tmp_path, packed):
    sha = make_git_repo(tmp_path, packed=packed)
    make_skill(tmp_path, "skills/pdf")

    results = list(discover(tmp_path))

    [skill] = results
    assert skill.key == "skills/pdf"
    assert skill.provenance["source_kind"] == "git"
    assert skill.provenance["commit"] == sha
    assert skill.provenance["git_remote"] == "https://github.com/acme/skills.git"
    assert skill.provenance["git_root"] == "."
    assert skill.owner == "acme"


def test_git_detached_head_and_parse_skill_dir_directly(tmp_path):
    sha = "fedcba9876543210fedcba9876543210fedcba98"
    make_git_repo(tmp_path, head=sha + "\n", url="git@github.com:acme/tools.git")
    skill_dir = make_skill(tmp_path, "a/b")

    skill = parse_skill_dir(skill_dir, root=tmp_path, source_kind="git")

    assert skill.provenance["commit"] == sha
    assert skill.provenance["git_remote"] == "git@github.com:acme/tools.git"
    assert skill.owner == "acme"


def test_git_head_pointing_outside_the_repository_is_ignored(tmp_path):
    make_git_repo(tmp_path, head="ref: ../../../../etc/passwd\n")
    make_skill(tmp_path, "s")

    [skill] = list(discover(tmp_path))

    assert skill.provenance["source_kind"] == "git"
    assert skill.provenance["commit"] is None


def test_git_directories_are_never_searched_for_skills(tmp_path):
    make_git_repo(tmp_path)
    write(tmp_path / ".git" / "hooks" / "SKILL.md", GOOD_MD)
    skill_dir = make_skill(tmp_path, "s")
    write(skill_dir / ".git" / "HEAD", "ref: refs/heads/main\n")
    write(skill_dir / "vendor" / ".git", "gitdir: ../../.git/modules/vendor\n")

    [skill] = list(discover(tmp_path))

    assert skill.key == "s"
    assert all(not f.path.startswith(".git") for f in skill.files)


def test_unknown_source_kind_is_a_programming_error(tmp_path):
    with pytest.raises(ValueError):
        parse_skill_dir(make_skill(tmp_path, "s"), root=tmp_path, source_kind="svn")


def test_discover_rejects_a_missing_root(tmp_path):
    with pytest.raises(NotADirectoryError):
        list(discover(tmp_path / "nope"))


@pytest.mark.parametrize("md_name", ["skill.md", "Skill.md"])
def test_lowercase_and_titlecase_skill_md_are_accepted(tmp_path, md_name):
    make_skill(tmp_path, "s", md_name=md_name)

    [skill] = list(discover(tmp_path))

    assert skill.skill_md_path == f"s/{md_name}"
    assert skill.provenance["skill_md"] == md_name


def test_skill_md_is_preferred_over_other_spellings(tmp_path):
    make_skill(tmp_path, "s", files={"skill.md": "---\nname: other\ndescription: other\n---\n"})

    [skill] = list(discover(tmp_path))

    assert skill.name == "pdf-tools"
    assert [f.path for f in skill.files] == ["skill.md"]
    assert any("skill.md in the same directory" in w for w in skill.warnings)


def test_meta_without_skill_md_is_reported(tmp_path):
    write(tmp_path / "o" / "s" / "_meta.json", json.dumps(META))
    write(tmp_path / "o" / "s" / "skills.md", "# not the right name\n")
    make_skill(tmp_path, "o/good", meta={"owner": "o", "slug": "good"})

    results = list(discover(tmp_path))

    assert set(by_key(results)) == {"o/good"}
    [problem] = problems(results)
    assert problem.path == "o/s/_meta.json"
    assert "without a SKILL.md" in problem.message and "skills.md" in problem.message


def test_duplicate_keys_keep_the_first_skill(tmp_path):
    make_skill(tmp_path, "a/one", meta={"owner": "x", "slug": "same"})
    make_skill(tmp_path, "b/two", meta={"owner": "x", "slug": "same"})

    results = list(discover(tmp_path))

    assert by_key(results)["x/same"].skill_md_path == "a/one/SKILL.md"
    [problem] = problems(results)
    assert problem.path == "b/two/SKILL.md" and "duplicate skill key 'x/same'" in problem.message


def test_nested_skill_is_separate_and_not_part_of_parent_files(tmp_path):
    make_skill(tmp_path, "o/suite", meta={"owner": "o", "slug": "suite"},
               files={"references/guide.md": "# Guide\n", "tools/helper.py": "print(1)\n"})
    make_skill(tmp_path, "o/suite/tools/inner", files={"run.sh": "echo hi\n"})

    results = list(discover(tmp_path))

    skills = by_key(results)
    parent = skills["o/suite"]
    inner = skills["o/suite/tools/inner"]
    assert [f.path for f in parent.files] == ["_meta.json", "references/guide.md", "tools/helper.py"]
    assert [f.path for f in inner.files] == ["run.sh"]
    assert inner.provenance["parent_key"] == "o/suite"
    assert inner.provenance["source_kind"] == "directory"
    assert inner.license == "MIT-0"  # published inside a ClawHub package
    assert problems(results) == []


def test_parse_skill_dir_without_skill_md_is_a_problem(tmp_path):
    (tmp_path / "empty").mkdir()

    result = parse(tmp_path / "empty")

    assert isinstance(result, SourceProblem) and "no SKILL.md" in result.message


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


# --------------------------------------------------------------------------------------------
# Unreadable SKILL.md and filesystem hazards
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content, reason",
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "SKILL.md looks binary (NUL byte at offset 8)"),
        (b"---\nname: caf\xe9\n---\n", "SKILL.md is not valid UTF-8 (byte 0xe9 at offset 13)"),
        (b"\xef\xbb\xbf---\nname: \xff\n", "SKILL.md is not valid UTF-8 (byte 0xff at offset 13)"),
        (b"", "SKILL.md is empty"),
        (b" \n\n\t\n", "SKILL.md is empty"),
        ("---\nname: x\n---\n".encode("utf-16"), "SKILL.md is UTF-16 encoded; expected UTF-8"),
    ],
)
def test_unreadable_skill_md_becomes_a_skill_with_a_reason(tmp_path, content, reason):
    make_skill(tmp_path, "o/bin", content, files={"notes.txt": "hello\n"}, meta={"owner": "o", "slug": "bin"})

    [skill] = list(discover(tmp_path))

    assert isinstance(skill, ParsedSkill)
    assert skill.unreadable_reason == reason
    assert (skill.key, skill.name, skill.slug) == ("o/bin", "bin", "bin")
    assert skill.description == "" and skill.body == "" and skill.frontmatter == {}
    assert [f.path for f in skill.files] == ["_meta.json", "notes.txt"]
    assert len(skill.content_hash) == 64


def test_oversize_skill_md_is_a_problem(tmp_path):
    make_skill(tmp_path, "big", GOOD_MD + "x" * 2000)

    [result] = list(discover(tmp_path, max_file_bytes=1000))

    assert isinstance(result, SourceProblem)
    assert result.path == "big/SKILL.md"
    assert "over the limit of 1000 bytes" in result.message


def test_oversize_supporting_file_is_hashed_but_not_kept(tmp_path):
    payload = os.urandom(3000) + b"\x00"
    make_skill(tmp_path, "s", files={"assets/blob.bin": payload, "big.txt": "y" * 1500, "mid.txt": "z" * 700})

    [skill] = list(discover(tmp_path, max_file_bytes=1000, max_text_bytes=500))

    entries = {f.path: f for f in skill.files}
    blob = entries["assets/blob.bin"]
    assert (blob.path, blob.size, blob.sha256, blob.text, blob.is_binary) == (
        "assets/blob.bin", len(payload), hashlib.sha256(payload).hexdigest(), None, True)
    assert blob.content.note == "over 1000 bytes; not read"  # only its head was seen
    assert entries["big.txt"].text is None and entries["big.txt"].is_binary is False
    assert entries["big.txt"].sha256 == hashlib.sha256(b"y" * 1500).hexdigest()
    assert entries["mid.txt"].text is None and entries["mid.txt"].is_binary is False  # over max_text_bytes


def test_supporting_file_text_and_binary_detection(tmp_path):
    make_skill(tmp_path, "s", files={
        "references/b.md": "# Ref\n",
        "references/a.md": "\ufeffwith bom\n",
        "scripts/run.py": "print('hé')\n",
        "assets/logo.png": b"\x89PNG\x00\x00",
        "data/latin1.txt": b"caf\xe9\n",
    })

    [skill] = list(discover(tmp_path))

    entries = {f.path: f for f in skill.files}
    assert list(entries) == ["assets/logo.png", "data/latin1.txt", "references/a.md", "references/b.md", "scripts/run.py"]
    assert entries["scripts/run.py"].text == "print('hé')\n"
    assert entries["references/a.md"].text == "with bom\n"
    assert entries["assets/logo.png"].text is None and entries["assets/logo.png"].is_binary
    assert entries["data/latin1.txt"].text is None and entries["data/latin1.txt"].is_binary
    assert entries["references/b.md"].size == 6


def test_symlinked_skill_md_is_a_problem(tmp_path):
    target = write(tmp_path / "elsewhere.md", GOOD_MD)
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "SKILL.md").symlink_to(target)

    [result] = list(discover(tmp_path))

    assert isinstance(result, SourceProblem)
    assert result.path == "s/SKILL.md"
    assert "symlink" in result.message and "never followed" in result.message


def test_symlinked_supporting_file_is_reported_and_the_skill_still_parses(tmp_path):
    secret = write(tmp_path / "outside" / "id_rsa", "PRIVATE KEY")
    skill_dir = make_skill(tmp_path, "s", files={"ok.txt": "fine\n"})
    (skill_dir / "leak.txt").symlink_to(secret)
    (skill_dir / "linked-dir").symlink_to(tmp_path / "outside", target_is_directory=True)

    results = list(discover(tmp_path))

    skill = by_key(results)["s"]
    assert [f.path for f in skill.files] == ["ok.txt"]
    assert {p.path for p in skill.problems} == {"s/leak.txt", "s/linked-dir"}
    assert all("symlink" in p.message for p in skill.problems)
    assert {p.path for p in problems(results)} == {"s/leak.txt", "s/linked-dir"}


def test_symlinked_directory_outside_skills_is_reported_not_followed(tmp_path):
    real = make_skill(tmp_path / "real", "s")
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "link").symlink_to(real, target_is_directory=True)

    results = list(discover(tmp_path / "tree"))

    assert by_key(results) == {}
    [problem] = problems(results)
    assert problem.path == "link" and "not followed" in problem.message


def test_fifo_supporting_file_is_skipped_without_blocking(tmp_path):
    skill_dir = make_skill(tmp_path, "s", files={"ok.txt": "fine\n"})
    os.mkfifo(skill_dir / "pipe")

    results = list(discover(tmp_path))

    skill = by_key(results)["s"]
    assert [f.path for f in skill.files] == ["ok.txt"]
    [problem] = skill.problems
    assert problem.path == "s/pipe" and "fifo" in problem.message


def test_fifo_skill_md_is_a_problem_and_neighbours_still_parse(tmp_path):
    (tmp_path / "a").mkdir()
    os.mkfifo(tmp_path / "a" / "SKILL.md")
    make_skill(tmp_path, "b")

    results = list(discover(tmp_path))

    assert set(by_key(results)) == {"b"}
    [problem] = problems(results)
    assert problem.path == "a/SKILL.md" and "not a regular file (fifo)" in problem.message


def test_socket_in_a_skill_is_skipped(tmp_path):
    import socket

    skill_dir = make_skill(tmp_path, "s")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(skill_dir / "agent.sock"))
        [skill, problem] = list(discover(tmp_path))
    finally:
        sock.close()

    assert skill.files == []
    assert problem.path == "s/agent.sock" and "socket" in problem.message


def test_file_count_per_skill_is_capped(tmp_path, monkeypatch):
    monkeypatch.setattr(skillformat.parse, "_MAX_FILES_PER_SKILL", 3)
    make_skill(tmp_path, "s", files={f"f{i}.txt": "x" for i in range(6)})

    [skill, problem] = list(discover(tmp_path))

    assert [f.path for f in skill.files] == ["f0.txt", "f1.txt", "f2.txt"]
    assert "more than 3 files" in problem.message


def test_unreadable_skill_md_is_a_problem(tmp_path, monkeypatch):
    make_skill(tmp_path, "locked")
    make_skill(tmp_path, "open")
    real = skillformat.parse._read_regular

    def deny(path, limit):
        if path.endswith(os.path.join("locked", "SKILL.md")):
            raise PermissionError(13, "Permission denied")
        return real(path, limit)

    monkeypatch.setattr(skillformat.parse, "_read_regular", deny)

    results = list(discover(tmp_path))

    assert set(by_key(results)) == {"open"}
    [problem] = problems(results)
    assert problem.path == "locked/SKILL.md"
    assert problem.message == "SKILL.md: cannot read: PermissionError: Permission denied"


def test_good_skills_next_to_bad_ones_come_through(tmp_path):
    make_skill(tmp_path, "o/good1", meta={"owner": "o", "slug": "good1"})
    make_skill(tmp_path, "o/yaml", "---\nname: [\n---\nx\n")
    make_skill(tmp_path, "o/binary", b"\x00\x01")
    make_skill(tmp_path, "o/big", "x" * 5000)
    make_skill(tmp_path, "o/nodesc", "---\nname: n\n---\n")
    (tmp_path / "o" / "fifo").mkdir()
    os.mkfifo(tmp_path / "o" / "fifo" / "SKILL.md")
    make_skill(tmp_path, "p/good2")

    results = list(discover(tmp_path, max_file_bytes=4000))

    skills = by_key(results)
    assert set(skills) == {"o/good1", "o/binary", "p/good2"}
    assert skills["o/binary"].unreadable_reason
    assert sorted(p.path for p in problems(results)) == [
        "o/big/SKILL.md", "o/fifo/SKILL.md", "o/nodesc/SKILL.md", "o/yaml/SKILL.md"
    ]


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
