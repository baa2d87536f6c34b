"""Skills written for the filter tests, and helpers to read their findings."""
from __future__ import annotations

from pathlib import Path

from facet_site.lib.skill_filters import Finding
from facet_site.lib.skillformat import ParsedSkill, parse_skill_dir

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "openclaw-sample"

FRONT = "---\nname: sample\ndescription: A sample skill.\n---\n"  # body starts on line 5


def skill_from(tmp_path: Path, body: str, *, front: str = FRONT, files: dict | None = None, name: str = "s") -> ParsedSkill:
    skill_dir = tmp_path / name
    skill_dir.mkdir(parents=True, exist_ok=True)
    (skill_dir / "SKILL.md").write_text(front + body, encoding="utf-8")
    for rel, content in (files or {}).items():
        path = skill_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    skill = parse_skill_dir(skill_dir, root=tmp_path, source_kind="directory")
    assert isinstance(skill, ParsedSkill), skill
    return skill


def of_kind(findings: list[Finding], kind: str) -> list[Finding]:
    return [f for f in findings if f.kind == kind]


def reasons(findings: list[Finding], kind: str) -> set[str]:
    return {f.reason for f in of_kind(findings, kind)}


def bash(code: str) -> str:
    return f"Run this:\n\n```bash\n{code}\n```\n"
