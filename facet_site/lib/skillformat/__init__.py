"""Reading agent skills from disk, Django-free.

The records here are what ingestion stores; `discover()` walks a directory tree (Agent Skills
layout, ClawHub backup layout, or a git checkout) and yields one `ParsedSkill` per skill or one
`SourceProblem` per file that cannot become a skill. Archives are unpacked by
`facet_site.lib.archives` into an ingest area first.

What becomes what
-----------------
* `SourceProblem` (the skill is not stored): SKILL.md is a symlink, a fifo/device, unreadable
  (OS error) or larger than `max_file_bytes`; the frontmatter is malformed YAML that cannot be
  recovered, is not a mapping, or is absurdly nested; there is neither a description nor a body;
  a directory holds `_meta.json` but no SKILL.md; two skills claim the same key.
* `ParsedSkill` with `unreadable_reason` (stored with an "unreadable" verdict): SKILL.md is empty,
  binary (NUL byte), UTF-16, or not valid UTF-8.
* `ParsedSkill` with `warnings`: the published corpus routinely breaks the Agent Skills spec, so
  by default (`strict=False`) these are recovered instead of rejected, each recovery noted in
  `warnings`: no frontmatter (name from the first `# heading`, else the directory name;
  description from the first paragraph), frontmatter without a closing `---`, YAML that fails only
  because a plain one-line value contains `: ` (re-read key by key), missing `name` or
  `description`. With `strict=True` each of those is a `SourceProblem` instead.
* Problems with individual supporting files (symlinks, fifos, devices, unreadable files) do not
  sink the skill: they are attached to `ParsedSkill.problems` and `discover()` also yields them as
  separate `SourceProblem` items right after the skill, so a consumer of the stream sees each once.

Symlinks are never followed and special files are never opened.

Where it lives: `corpus` walks a tree (`discover`, `parse_skill_dir`), `parse` turns one skill
directory into a record, `records` holds the records; `files`, `frontmatter`, `runtime`,
`markdown`, `provenance` and `normalise` read the parts. The names below are the public ones.
"""
from facet_site.lib.skillformat.corpus import discover, parse_skill_dir
from facet_site.lib.skillformat.parse import find_skill_md
from facet_site.lib.skillformat.records import (
    SKILL_MD_NAMES, SOURCE_KINDS, ParsedSkill, SkillFileEntry, SourceProblem,
)

__all__ = [
    "ParsedSkill",
    "SkillFileEntry",
    "SourceProblem",
    "SKILL_MD_NAMES",
    "SOURCE_KINDS",
    "discover",
    "parse_skill_dir",
    "find_skill_md",
]
