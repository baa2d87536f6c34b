"""Reading skills from disk: layouts (ClawHub, plain directories, git checkouts) and source kinds."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from facet_site.lib.skillformat import ParsedSkill, SourceProblem, discover, parse_skill_dir

from tests.lib.skillformat_samples import GOOD_MD, by_key, make_skill, parse, problems, write


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
