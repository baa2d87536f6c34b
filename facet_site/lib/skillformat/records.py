"""The records reading a skill corpus produces (`ParsedSkill`, `SkillFileEntry`,
`SourceProblem`) and the names of the layouts it recognises."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from facet_site.lib.skillformat.content import FileContent


@dataclass(frozen=True)
class SkillFileEntry:
    path: str  # relative to the skill directory, POSIX separators
    size: int
    sha256: str
    text: str | None  # decoded text when small and UTF-8, else None
    is_binary: bool
    # What the bytes hold when `text` is None (skillformat.content): the kind of a compiled program or
    # archive, archive members, and texts the safety scan reads although they are not stored.
    content: "FileContent | None" = None


@dataclass
class ParsedSkill:
    key: str  # stable identity inside a source: "owner/slug" (ClawHub) or the skill dir's relative path
    owner: str
    slug: str
    name: str
    description: str
    frontmatter: dict
    body: str
    license: str = ""
    homepage: str = ""
    version: str = ""
    required_bins: list[str] = field(default_factory=list)
    any_bins: list[str] = field(default_factory=list)
    required_env: list[str] = field(default_factory=list)
    required_config: list[str] = field(default_factory=list)
    install: list[dict] = field(default_factory=list)
    os: list[str] = field(default_factory=list)
    tools: list[str] = field(default_factory=list)  # required + mentioned CLI tools, deduplicated
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)
    code_blocks: list[dict] = field(default_factory=list)  # {"lang": str, "code": str, "line": int, "truncated": bool}
    provenance: dict = field(default_factory=dict)  # source kind, _meta.json fields, commit, path
    content_hash: str = ""  # sha256 over SKILL.md bytes and supporting files (path + hash), sorted
    files: list[SkillFileEntry] = field(default_factory=list)
    skill_md_path: str = ""  # path of SKILL.md relative to the ingest root
    unreadable_reason: str = ""  # non-empty when SKILL.md is binary, non-UTF-8 or empty
    # Additions beyond the original interface (all defaulted).
    allowed_tools: list[str] = field(default_factory=list)  # Agent Skills `allowed-tools`, tokenised
    compatibility: str = ""
    primary_env: str = ""  # metadata.openclaw.primaryEnv
    env_vars: list[dict] = field(default_factory=list)  # {"name", "required", "description"}
    frontmatter_text: str = ""  # raw YAML between the fences, for display and line lookups
    frontmatter_start_line: int = 0  # 1-based SKILL.md line of the first frontmatter line; 0 if none
    body_start_line: int = 1  # 1-based SKILL.md line where `body` begins
    warnings: list[str] = field(default_factory=list)  # recovered deviations, see module docstring
    problems: list[SourceProblem] = field(default_factory=list)  # supporting files that were skipped


@dataclass(frozen=True)
class SourceProblem:
    path: str  # relative to the ingest root (or the archive entry name)
    message: str  # clear, names what is wrong, e.g. "frontmatter: YAML error at line 3: ..."
    field: str = ""


SKILL_MD_NAMES = ("SKILL.md", "skill.md", "Skill.md")  # in order of preference
SOURCE_KINDS = ("clawhub", "git", "directory")
META_NAME = "_meta.json"
# Runtime metadata lives under any of these keys; "moltbot" is not in the notes but is the
# project's former name and shows up in the published corpus.
OPENCLAW_ALIASES = ("openclaw", "clawdbot", "clawdis", "moltbot")
