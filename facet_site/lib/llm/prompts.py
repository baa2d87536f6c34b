"""Versioned prompt templates: `<stage>.v<N>.md`, the highest N unless a version is pinned.

File layout (front matter optional, `key: value` lines kept in `Prompt.meta`)::

    ---
    description: what this version changed
    ---
    === system ===
    You write terminal tasks ...
    === user ===
    Skill:
    {{skill_json}}

Placeholders are `{{name}}`. Neither str.format nor string.Template would do: prompts quote JSON
(braces) and shell (`$HOME`, `$(...)`), and both would trip over one or the other. Substitution is a
single pass, so braces or `{{...}}` inside an inserted value are left as they are.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

_FILE_RE = re.compile(r"^(?P<stage>.+)\.v(?P<version>\d+)\.md$")
_SECTION_RE = re.compile(r"^=+[ \t]*(system|user)[ \t]*=+[ \t]*$", re.MULTILINE | re.IGNORECASE)
_PLACEHOLDER_RE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


class PromptError(ValueError):
    pass


@dataclass(frozen=True)
class Prompt:
    stage: str
    version: str  # "v2": what CallRecord.prompt_version stores
    system: str
    user_template: str
    path: str = ""
    meta: dict[str, str] = field(default_factory=dict)

    @property
    def placeholders(self) -> set[str]:
        return set(_PLACEHOLDER_RE.findall(self.system)) | set(_PLACEHOLDER_RE.findall(self.user_template))

    def render_user(self, **values: Any) -> str:
        return render(self.user_template, values, where=f"{self.path or self.stage} (user)")

    def render_system(self, **values: Any) -> str:
        return render(self.system, values, where=f"{self.path or self.stage} (system)")

    def messages(self, **values: Any) -> list[dict[str, str]]:
        # Name every missing value at once rather than one section at a time.
        missing = sorted(self.placeholders - values.keys())
        if missing:
            raise PromptError(f"{self.path or self.stage}: no value for placeholder(s) {', '.join(missing)}")
        out = []
        if self.system.strip():
            out.append({"role": "system", "content": self.render_system(**values)})
        out.append({"role": "user", "content": self.render_user(**values)})
        return out


def render(template: str, values: dict[str, Any], *, where: str = "template") -> str:
    missing = sorted({name for name in _PLACEHOLDER_RE.findall(template) if name not in values})
    if missing:
        raise PromptError(f"{where}: no value for placeholder(s) {', '.join(missing)}")
    return _PLACEHOLDER_RE.sub(lambda m: _as_text(values[m.group(1)]), template)


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump_json(indent=2)
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def available_versions(directory: str | os.PathLike[str], stage: str) -> dict[int, Path]:
    found: dict[int, Path] = {}
    for path in Path(directory).iterdir():
        match = _FILE_RE.match(path.name)
        if match and match.group("stage") == stage and path.is_file():
            found[int(match.group("version"))] = path
    return found


def load_prompt(directory: str | os.PathLike[str], stage: str, version: int | str | None = None) -> Prompt:
    versions = available_versions(directory, stage)
    if not versions:
        raise PromptError(f"no prompt files {stage}.v<N>.md in {str(directory)!r}")
    if version is None:
        number = max(versions)
    else:
        text = str(version).lower().removeprefix("v")
        if not text.isdigit():
            raise PromptError(f"bad prompt version {version!r} for stage {stage!r}")
        number = int(text)
        if number not in versions:
            have = ", ".join(f"v{n}" for n in sorted(versions))
            raise PromptError(f"stage {stage!r} has no prompt v{number} in {str(directory)!r} (have {have})")
    path = versions[number]
    meta, system, user = parse_prompt_file(path.read_text(encoding="utf-8"), where=str(path))
    return Prompt(stage=stage, version=f"v{number}", system=system, user_template=user, path=str(path), meta=meta)


def parse_prompt_file(text: str, *, where: str = "prompt") -> tuple[dict[str, str], str, str]:
    meta: dict[str, str] = {}
    text = text.lstrip("\ufeff")
    if text.startswith("---\n") or text.startswith("---\r\n"):
        end = re.search(r"^---[ \t]*$", text[3:], re.MULTILINE)
        if end is None:
            raise PromptError(f"{where}: front matter is not closed with '---'")
        header, text = text[3 : 3 + end.start()], text[3 + end.end() :]
        for line in header.splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                key, sep, value = line.partition(":")
                if not sep:
                    raise PromptError(f"{where}: front matter line {line!r} is not 'key: value'")
                meta[key.strip()] = value.strip()
    sections: dict[str, str] = {}
    marks = list(_SECTION_RE.finditer(text))
    if not marks:
        # No markers: the whole file is the user message.
        return meta, "", text.strip()
    if text[: marks[0].start()].strip():
        raise PromptError(f"{where}: text before the first '=== system ===' / '=== user ===' marker")
    for i, mark in enumerate(marks):
        name = mark.group(1).lower()
        if name in sections:
            raise PromptError(f"{where}: section {name!r} appears twice")
        stop = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        sections[name] = text[mark.end() : stop].strip("\n").rstrip()
    if "user" not in sections:
        raise PromptError(f"{where}: no '=== user ===' section")
    return meta, sections.get("system", ""), sections["user"]
