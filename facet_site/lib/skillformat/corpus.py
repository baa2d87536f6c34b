"""Walking a corpus: which directories are skills and of which layout (ClawHub backup, git
checkout, plain directory), nested skills, duplicate keys and what cannot become a skill."""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from facet_site.lib.skillformat.files import _is_dir_target, _os_error
from facet_site.lib.skillformat.middle import TextScanner
from facet_site.lib.skillformat.normalise import _rel
from facet_site.lib.skillformat.parse import _parse, find_skill_md
from facet_site.lib.skillformat.provenance import _GitInfo, _git_info_upwards, _read_git_info
from facet_site.lib.skillformat.records import META_NAME, ParsedSkill, SOURCE_KINDS, SourceProblem


def parse_skill_dir(
    skill_dir: Path,
    *,
    root: Path,
    source_kind: str,
    max_file_bytes: int = 1_000_000,
    max_text_bytes: int = 200_000,
    strict: bool = False,
    scan_text: TextScanner | None = None,
) -> ParsedSkill | SourceProblem:
    """Parse one skill directory.

    `root` is the ingest root (paths in the result are relative to it); `source_kind` is one of
    SOURCE_KINDS, normally chosen by `discover()`. For "git" the nearest `.git` between
    `skill_dir` and `root` supplies the commit and remote. Nested skill directories are not part
    of this skill's files. See the module docstring for what becomes a problem.
    """
    if source_kind not in SOURCE_KINDS:
        raise ValueError(f"source_kind must be one of {SOURCE_KINDS}, not {source_kind!r}")
    skill_dir = Path(skill_dir)
    root = Path(root)
    git = _git_info_upwards(str(skill_dir), str(root)) if source_kind == "git" else None
    return _parse(
        str(skill_dir),
        root=str(root),
        source_kind=source_kind,
        git=git,
        parent_key=None,
        max_file_bytes=max_file_bytes,
        max_text_bytes=max_text_bytes,
        strict=strict,
        scan_text=scan_text,
    )[0]


def discover(
    root: Path,
    *,
    max_file_bytes: int = 1_000_000,
    max_text_bytes: int = 200_000,
    strict: bool = False,
    scan_text: TextScanner | None = None,
) -> Iterator[ParsedSkill | SourceProblem]:
    """Walk `root` and yield every skill found, in sorted path order.

    A skill directory is any directory holding SKILL.md, skill.md or Skill.md. Its kind is
    "clawhub" when it holds `_meta.json`, else "git" when it or an ancestor up to `root` holds
    `.git`, else "directory". `.git` directories are never entered. Skill directories nested in
    another skill are separate skills and get `provenance["parent_key"]`.

    Besides skills, yields `SourceProblem` for: unparseable skills, skipped supporting files
    (also attached to the skill's `problems`), `_meta.json` directories without a SKILL.md,
    symlinked directories (not followed), and duplicate keys (the later skill is dropped).
    Raises NotADirectoryError when `root` is not a directory.

    `scan_text` (ingest passes `skill_safety.scan_text_part`) reads the middle of text files
    too large to keep, as they stream past; its findings are kept in the file's `content`.
    """
    root_s = os.fspath(root)
    if not os.path.isdir(root_s):
        raise NotADirectoryError(f"ingest root {root_s!r} is not a directory")
    seen_keys: dict[str, str] = {}
    # Each stack item: (directory, git info inherited from above, key of the enclosing skill,
    # whether that enclosing skill is a ClawHub package)
    stack: list[tuple[str, _GitInfo | None, str | None, bool]] = [(root_s, None, None, False)]
    while stack:
        dir_path, git, parent_key, in_clawhub = stack.pop()
        try:
            with os.scandir(dir_path) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            yield SourceProblem(_rel(dir_path, root_s), f"cannot list directory: {_os_error(exc)}")
            continue
        names = [e.name for e in entries]
        if ".git" in names:
            git = _read_git_info(dir_path) or git
        skill_name = find_skill_md(names)
        if skill_name is not None:
            result, nested = _parse(
                dir_path,
                root=root_s,
                source_kind="clawhub" if META_NAME in names else ("git" if git else "directory"),
                git=git,
                parent_key=parent_key,
                max_file_bytes=max_file_bytes,
                max_text_bytes=max_text_bytes,
                strict=strict,
                entries=entries,
                in_clawhub_package=in_clawhub,
                scan_text=scan_text,
            )
            if isinstance(result, ParsedSkill):
                first = seen_keys.get(result.key)
                if first is not None:
                    yield SourceProblem(
                        result.skill_md_path,
                        f"duplicate skill key {result.key!r}: already used by {first}; skipped",
                        "key",
                    )
                else:
                    seen_keys[result.key] = result.skill_md_path
                    yield result
                    yield from result.problems
                child_parent = result.key
            else:
                yield result
                child_parent = parent_key
            child_clawhub = in_clawhub or META_NAME in names
            # Only nested skill directories still need visiting: the file walk covered the rest.
            for nested_dir in sorted(nested, reverse=True):
                stack.append((nested_dir, git, child_parent, child_clawhub))
            continue
        if META_NAME in names:
            near = [n for n in names if n.lower() in ("skills.md", "skill.markdown", "readme.md", "skill.md")]
            hint = f"; found {', '.join(near)}" if near else ""
            yield SourceProblem(
                _rel(os.path.join(dir_path, META_NAME), root_s),
                f"{META_NAME} without a SKILL.md (expected SKILL.md, skill.md or Skill.md{hint})",
                "SKILL.md",
            )
        subdirs = []
        for entry in entries:
            if entry.name == ".git":
                continue
            if entry.is_symlink():
                if _is_dir_target(entry.path):
                    yield SourceProblem(
                        _rel(entry.path, root_s), "symlinked directory not followed (symlinks are never followed)"
                    )
                continue
            if entry.is_dir(follow_symlinks=False):
                subdirs.append(entry.path)
        for sub in reversed(subdirs):
            stack.append((sub, git, parent_key, in_clawhub))

