"""Skills written to disk for the skillformat tests: a good SKILL.md, a skill directory, parsing helpers."""
from __future__ import annotations

import json
from pathlib import Path

from facet_site.lib.skillformat import ParsedSkill, SourceProblem, parse_skill_dir


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
