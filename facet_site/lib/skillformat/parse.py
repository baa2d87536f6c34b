"""One skill directory into a `ParsedSkill` (or a `SourceProblem`): its SKILL.md, supporting
files, identity, licence and the fields drawn from frontmatter, runtime metadata and markdown."""
from __future__ import annotations

import os

from facet_site.lib.skillformat.files import (
    _NotRegular, _TooLarge, _content_hash, _decode_skill_md, _file_entry, _kind_of, _os_error, _read_regular,
)
from facet_site.lib.skillformat.frontmatter import (
    _FrontmatterError, _frontmatter, _raw_scalar, _spec_warnings,
)
from facet_site.lib.skillformat.markdown import _structure
from facet_site.lib.skillformat.middle import TextScanner
from facet_site.lib.skillformat.normalise import (
    _dedupe, _dict, _join_rel, _rel, _scalar_text, _str_or_empty,
)
from facet_site.lib.skillformat.provenance import _GitInfo, _load_meta, _meta_version, _provenance
from facet_site.lib.skillformat.records import (
    META_NAME, ParsedSkill, SKILL_MD_NAMES, SkillFileEntry, SourceProblem,
)
from facet_site.lib.skillformat.runtime import _allowed_tools, _runtime, _tool_of_allowed


_SKILL_NAME_SET = frozenset(SKILL_MD_NAMES)

_MAX_TOOLS = 100
_MAX_FILES_PER_SKILL = 10_000


def find_skill_md(names) -> str | None:
    """The SKILL.md variant to use among directory entry `names` (prefers SKILL.md)."""
    present = set(names)
    for candidate in SKILL_MD_NAMES:
        if candidate in present:
            return candidate
    return None


def _parse(
    skill_dir: str,
    *,
    root: str,
    source_kind: str,
    git: _GitInfo | None,
    parent_key: str | None,
    max_file_bytes: int,
    max_text_bytes: int,
    strict: bool,
    entries: list[os.DirEntry] | None = None,
    in_clawhub_package: bool = False,
    scan_text: TextScanner | None = None,
) -> tuple[ParsedSkill | SourceProblem, list[str]]:
    """Returns the result and the nested skill directories found below `skill_dir`."""
    rel_dir = _rel(skill_dir, root)
    if entries is None:
        try:
            with os.scandir(skill_dir) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            return SourceProblem(rel_dir, f"cannot list skill directory: {_os_error(exc)}"), []
    by_name = {e.name: e for e in entries}
    md_name = find_skill_md(by_name)
    if md_name is None:
        return SourceProblem(rel_dir, "no SKILL.md in directory (expected SKILL.md, skill.md or Skill.md)", "SKILL.md"), []
    md_entry = by_name[md_name]
    md_rel = _join_rel(rel_dir, md_name)

    files, problems, nested = _walk_files(skill_dir, entries, rel_dir, md_name)

    if md_entry.is_symlink():
        return SourceProblem(md_rel, f"{md_name} is a symlink; symlinks are never followed", md_name), nested
    if not md_entry.is_file(follow_symlinks=False):
        return SourceProblem(md_rel, f"{md_name} is not a regular file ({_kind_of(md_entry)})", md_name), nested
    try:
        raw = _read_regular(md_entry.path, max_file_bytes)
    except _TooLarge as exc:
        return SourceProblem(
            md_rel, f"{md_name} is {exc.size} bytes, over the limit of {max_file_bytes} bytes", md_name
        ), nested
    except _NotRegular as exc:
        return SourceProblem(md_rel, f"{md_name} is not a regular file ({exc.kind})", md_name), nested
    except OSError as exc:
        return SourceProblem(md_rel, f"{md_name}: cannot read: {_os_error(exc)}", md_name), nested

    warnings: list[str] = []
    others = [n for n in SKILL_MD_NAMES if n in by_name and n != md_name]
    if others:
        warnings.append(f"{md_name} used; {', '.join(others)} in the same directory kept as a supporting file")

    file_entries: list[SkillFileEntry] = []
    meta: dict | None = None
    for rel_path, full in files:
        try:
            entry, data = _file_entry(full, rel_path, max_file_bytes, max_text_bytes, scan_text)
        except _NotRegular as exc:
            problems.append(SourceProblem(_join_rel(rel_dir, rel_path), f"{rel_path}: not a regular file ({exc.kind}); skipped"))
            continue
        except OSError as exc:
            problems.append(SourceProblem(_join_rel(rel_dir, rel_path), f"{rel_path}: cannot read: {_os_error(exc)}; skipped"))
            continue
        file_entries.append(entry)
        if rel_path == META_NAME:
            meta = _load_meta(data, warnings)

    dir_name = os.path.basename(os.path.abspath(skill_dir))
    parent_name = os.path.basename(os.path.dirname(os.path.abspath(skill_dir)))
    owner, slug = "", dir_name
    if source_kind == "clawhub":
        owner = _str_or_empty((meta or {}).get("owner")) or parent_name
        slug = _str_or_empty((meta or {}).get("slug")) or dir_name
        key = f"{owner}/{slug}"
    else:
        key = rel_dir if rel_dir != "." else dir_name
        if git is not None:
            owner = git.owner

    provenance = _provenance(source_kind, rel_dir, meta, git, root, parent_key, md_name)
    content_hash = _content_hash(raw, file_entries)
    clawhub_licence = source_kind == "clawhub" or in_clawhub_package

    text, reason = _decode_skill_md(raw, md_name)
    if reason:
        # Stored with an "unreadable" verdict, so it keeps its identity and files.
        if clawhub_licence:
            provenance["license_inferred"] = True
        return ParsedSkill(
            key=key, owner=owner, slug=slug, name=slug, description="", frontmatter={}, body="",
            version=_meta_version(meta), license="MIT-0" if clawhub_licence else "",
            provenance=provenance, content_hash=content_hash, files=file_entries,
            skill_md_path=md_rel, unreadable_reason=reason, warnings=warnings, problems=problems,
        ), nested

    try:
        fm, fm_text, fm_line, body, body_line = _frontmatter(text, md_name, warnings, strict)
    except _FrontmatterError as exc:
        return SourceProblem(md_rel, exc.message, "frontmatter"), nested

    structure = _structure(body)

    # Name and description: frontmatter first, then the document itself.
    name = _scalar_text(fm.get("name"))
    if not name:
        if strict:
            return SourceProblem(md_rel, f"{md_name}: frontmatter field `name` is missing or empty", "name"), nested
        name = structure.h1 or dir_name
        if fm_text is not None:
            warnings.append(f"{md_name}: frontmatter `name` missing or empty; using {name!r}")
    description = _scalar_text(fm.get("description"))
    if not description:
        if not body.strip():
            return SourceProblem(
                md_rel, f"{md_name}: no description (frontmatter `description` missing or empty) and no body", "description"
            ), nested
        if strict:
            return SourceProblem(md_rel, f"{md_name}: frontmatter field `description` is missing or empty", "description"), nested
        description = structure.first_text
        if fm_text is not None:
            warnings.append(f"{md_name}: frontmatter `description` missing or empty; using the first paragraph")
    if fm_text is not None:
        _spec_warnings(fm, name, description, md_name, warnings)

    runtime = _runtime(fm, warnings, md_name)
    allowed_tools = _allowed_tools(fm.get("allowed-tools", fm.get("allowed_tools")))
    required_bins = runtime["bins"]
    any_bins = runtime["any_bins"]
    tools = _dedupe(
        required_bins + any_bins + [_tool_of_allowed(t) for t in allowed_tools] + structure.shell_words,
        limit=_MAX_TOOLS,
    )

    license_ = _scalar_text(fm.get("license"))
    if not license_ and clawhub_licence:
        # ClawHub publishes every skill (and everything in its package, nested skills included)
        # under MIT-0; an explicit frontmatter licence still wins.
        license_ = "MIT-0"
        provenance["license_inferred"] = True
    homepage = _scalar_text(fm.get("homepage")) or runtime["homepage"] or _scalar_text(_dict(fm.get("metadata")).get("homepage"))
    version = (
        _raw_scalar(fm_text, "version")
        or _scalar_text(fm.get("version"))
        or runtime["version"]
        or _scalar_text(_dict(fm.get("metadata")).get("version"))
        or _meta_version(meta)
    )

    skill = ParsedSkill(
        key=key,
        owner=owner,
        slug=slug,
        name=name,
        description=description,
        frontmatter=fm,
        body=body,
        license=license_,
        homepage=homepage,
        version=version,
        required_bins=required_bins,
        any_bins=any_bins,
        required_env=runtime["env"],
        required_config=runtime["config"],
        install=runtime["install"],
        os=runtime["os"],
        tools=tools,
        inputs=structure.inputs,
        outputs=structure.outputs,
        steps=structure.steps,
        code_blocks=structure.code_blocks,
        provenance=provenance,
        content_hash=content_hash,
        files=file_entries,
        skill_md_path=md_rel,
        allowed_tools=allowed_tools,
        compatibility=_scalar_text(fm.get("compatibility")),
        primary_env=runtime["primary_env"],
        env_vars=runtime["env_vars"],
        frontmatter_text=fm_text or "",
        frontmatter_start_line=fm_line,
        body_start_line=body_line,
        warnings=warnings,
        problems=problems,
    )
    # Line numbers from the markdown parser are relative to the body.
    for block in skill.code_blocks:
        block["line"] += body_line - 1
    return skill, nested


def _walk_files(
    skill_dir: str, top_entries: list[os.DirEntry], rel_dir: str, md_name: str
) -> tuple[list[tuple[str, str]], list[SourceProblem], list[str]]:
    """Supporting files (relative path, full path) in sorted order, problems, nested skill dirs."""
    files: list[tuple[str, str]] = []
    problems: list[SourceProblem] = []
    nested: list[str] = []
    overflow = False
    stack: list[tuple[list[os.DirEntry], str]] = [(top_entries, "")]
    while stack:
        entries, prefix = stack.pop()
        subdirs = []
        for e in entries:
            rel = prefix + e.name
            if (not prefix and e.name == md_name) or e.name == ".git":
                continue  # a .git file (worktree or submodule pointer) is repository plumbing too
            if e.is_symlink():
                problems.append(
                    SourceProblem(_join_rel(rel_dir, rel), f"{rel} is a symlink; symlinks are never followed; skipped")
                )
            elif e.is_dir(follow_symlinks=False):
                subdirs.append((e.path, rel))
            elif e.is_file(follow_symlinks=False):
                if len(files) < _MAX_FILES_PER_SKILL:
                    files.append((rel, e.path))
                elif not overflow:
                    overflow = True
                    problems.append(SourceProblem(
                        _join_rel(rel_dir, rel), f"more than {_MAX_FILES_PER_SKILL} files in skill; the rest are skipped"
                    ))
            else:
                problems.append(SourceProblem(_join_rel(rel_dir, rel), f"{rel} is a {_kind_of(e)}, not a regular file; skipped"))
        # Depth-first in sorted order: push in reverse so the smallest name is visited first.
        for path, rel in reversed(subdirs):
            try:
                with os.scandir(path) as it:
                    sub = sorted(it, key=lambda x: x.name)
            except OSError as exc:
                problems.append(SourceProblem(_join_rel(rel_dir, rel), f"{rel}: cannot list directory: {_os_error(exc)}"))
                continue
            if any(x.name in _SKILL_NAME_SET for x in sub):
                nested.append(path)
                continue
            stack.append((sub, rel + "/"))
    files.sort()
    return files, problems, nested

