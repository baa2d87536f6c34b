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
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import yaml
from markdown_it import MarkdownIt

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


@dataclass(frozen=True)
class SkillFileEntry:
    path: str  # relative to the skill directory, POSIX separators
    size: int
    sha256: str
    text: str | None  # decoded text when small and UTF-8, else None
    is_binary: bool


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

_SKILL_NAME_SET = frozenset(SKILL_MD_NAMES)
_CHUNK = 1 << 20
_MAX_LIST_ITEMS = 50
_MAX_ITEM_CHARS = 300
_MAX_CODE_BLOCKS = 30
_MAX_CODE_CHARS = 10_000
_MAX_TOOLS = 100
_MAX_FILES_PER_SKILL = 10_000
# Markdown structure is only extracted from the head of very long bodies; the whole body is kept.
_MAX_PARSE_CHARS = 300_000
_FRONTMATTER_NODE_BUDGET = 20_000
_FRONTMATTER_MAX_DEPTH = 40

_O_READ = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)

_YamlLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # same safe semantics, C speed


class _FrontmatterError(Exception):
    def __init__(self, message: str, line: int = 0):
        super().__init__(message)
        self.message = message
        self.line = line


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------


def find_skill_md(names) -> str | None:
    """The SKILL.md variant to use among directory entry `names` (prefers SKILL.md)."""
    present = set(names)
    for candidate in SKILL_MD_NAMES:
        if candidate in present:
            return candidate
    return None


def parse_skill_dir(
    skill_dir: Path,
    *,
    root: Path,
    source_kind: str,
    max_file_bytes: int = 1_000_000,
    max_text_bytes: int = 200_000,
    strict: bool = False,
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
    )[0]


def discover(
    root: Path,
    *,
    max_file_bytes: int = 1_000_000,
    max_text_bytes: int = 200_000,
    strict: bool = False,
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


# --------------------------------------------------------------------------------------------
# Parsing one skill
# --------------------------------------------------------------------------------------------


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
            entry, data = _file_entry(full, rel_path, max_file_bytes, max_text_bytes)
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


# --------------------------------------------------------------------------------------------
# File reading and hashing
# --------------------------------------------------------------------------------------------


class _TooLarge(Exception):
    def __init__(self, size: int):
        self.size = size


class _NotRegular(OSError):
    def __init__(self, kind: str):
        super().__init__(kind)
        self.kind = kind


def _open_regular(path: str) -> tuple[int, os.stat_result]:
    # O_NOFOLLOW + fstat closes the race between the directory listing and the open.
    fd = os.open(path, _O_READ)
    try:
        st = os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise _NotRegular(_mode_kind(st.st_mode))
    return fd, st


def _read_regular(path: str, limit: int) -> bytes:
    fd, st = _open_regular(path)
    try:
        if st.st_size > limit:
            raise _TooLarge(st.st_size)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(limit + 1)
        if len(data) > limit:  # grew after the fstat
            raise _TooLarge(len(data))
        return data
    finally:
        os.close(fd)


def _file_entry(path: str, rel: str, max_file_bytes: int, max_text_bytes: int) -> tuple[SkillFileEntry, bytes | None]:
    fd, st = _open_regular(path)
    try:
        with os.fdopen(fd, "rb", closefd=False) as fh:
            if st.st_size > max_file_bytes:
                # Hash in chunks without keeping anything: the file is recorded, not stored.
                h = hashlib.sha256()
                size = 0
                first = b""
                while chunk := fh.read(_CHUNK):
                    if not size:
                        first = chunk[:8192]
                    h.update(chunk)
                    size += len(chunk)
                is_binary = b"\0" in first or not _utf8_prefix_ok(first)
                return SkillFileEntry(rel, size, h.hexdigest(), None, is_binary), None
            data = fh.read()
    finally:
        os.close(fd)
    digest = hashlib.sha256(data).hexdigest()
    text = None
    if b"\0" in data:
        is_binary = True
    else:
        try:
            decoded = data.decode("utf-8-sig")
            is_binary = False
            if len(data) <= max_text_bytes:
                text = decoded
        except UnicodeDecodeError:
            is_binary = True
    return SkillFileEntry(rel, len(data), digest, text, is_binary), data


def _utf8_prefix_ok(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError as exc:
        # A multi-byte character cut by the chunk boundary is not evidence of binary content.
        return exc.start >= len(data) - 3 and exc.reason == "unexpected end of data"


def _content_hash(skill_md: bytes, entries: list[SkillFileEntry]) -> str:
    """sha256 over the normalised SKILL.md and the sorted (path, sha256) of supporting files.

    SKILL.md is normalised (BOM dropped, CRLF/CR to LF) so a re-save on another OS is not a new
    version. `_meta.json` is excluded: ClawHub rewrites it on every publish (publishedAt, history)
    and metadata alone must not create a new skill version.
    """
    h = hashlib.sha256()
    h.update(b"SKILL.md\0")
    h.update(_normalise_newlines(skill_md))
    h.update(b"\0")
    for path, digest in sorted((e.path, e.sha256) for e in entries if e.path != META_NAME):
        h.update(path.encode("utf-8", "surrogateescape"))
        h.update(b"\0")
        h.update(digest.encode("ascii"))
        h.update(b"\n")
    return h.hexdigest()


def _normalise_newlines(data: bytes) -> bytes:
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return data


def _decode_skill_md(raw: bytes, md_name: str) -> tuple[str, str]:
    """(text, "") or ("", reason the file cannot be read as a skill)."""
    if raw[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return "", f"{md_name} is UTF-16 encoded; expected UTF-8"
    nul = raw.find(b"\0")
    if nul >= 0:
        return "", f"{md_name} looks binary (NUL byte at offset {nul})"
    bom = 3 if raw.startswith(b"\xef\xbb\xbf") else 0
    try:
        text = raw[bom:].decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = raw[bom + exc.start]
        return "", f"{md_name} is not valid UTF-8 (byte 0x{bad:02x} at offset {bom + exc.start})"
    if not text.strip():
        return "", f"{md_name} is empty"
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text, ""


# --------------------------------------------------------------------------------------------
# Frontmatter
# --------------------------------------------------------------------------------------------

_FM_CLOSE = re.compile(r"^(?:---|\.\.\.)[ \t]*$", re.M)
# Dropping one of these would silently change what the skill requires or is called.
_ESSENTIAL_KEYS = frozenset({"name", "description", "metadata", "requires", "install", "license", "allowed-tools"})
_TOP_KEY = re.compile(r"^([A-Za-z_][\w.\-]*)[ \t]*:(?:[ \t]+(.*)|[ \t]*)$")


def _frontmatter(text: str, md_name: str, warnings: list[str], strict: bool):
    """(frontmatter dict, raw frontmatter text or None, its first line, body, body's first line)."""
    pos, line = 0, 1
    # Leading blank lines are tolerated; the first non-blank line decides.
    while True:
        nl = text.find("\n", pos)
        end = nl if nl >= 0 else len(text)
        if nl >= 0 and not text[pos:end].strip():
            pos, line = nl + 1, line + 1
            continue
        break
    if text[pos:end].rstrip() != "---":
        if strict:
            raise _FrontmatterError(f"{md_name}: missing YAML frontmatter (the file must start with a '---' line)", 1)
        warnings.append(f"{md_name}: no YAML frontmatter; name and description taken from the body")
        return {}, None, 0, text, 1
    fm_start = end + 1
    fm_line = line + 1
    close = _FM_CLOSE.search(text, fm_start) if fm_start <= len(text) else None
    if close is not None:
        fm_text = text[fm_start:close.start()]
        body_off = close.end() + 1
        body = text[body_off:] if body_off <= len(text) else ""
        body_line = fm_line + fm_text.count("\n") + 1
    else:
        if strict:
            raise _FrontmatterError(f"{md_name}: frontmatter has no closing '---' line", line)
        # Without a closing fence, assume the block ends at the first blank line or heading.
        rest = text[fm_start:] if fm_start <= len(text) else ""
        m = re.search(r"^(?:[ \t]*$|#)", rest, re.M)
        cut = m.start() if m else len(rest)
        fm_text = rest[:cut]
        body = rest[cut:]
        body_line = fm_line + fm_text.count("\n")
        warnings.append(f"{md_name}: frontmatter has no closing '---'; assumed it ends at line {body_line - 1}")
    fm = _load_yaml(fm_text, fm_line, md_name, warnings, strict)
    return fm, fm_text, fm_line, body, body_line


def _load_yaml(fm_text: str, fm_line: int, md_name: str, warnings: list[str], strict: bool) -> dict:
    try:
        data = yaml.load(fm_text, Loader=_YamlLoader)
    except yaml.YAMLError as exc:
        line = fm_line + _yaml_error_line(exc, fm_text)
        detail = _yaml_error_detail(exc)
        message = f"{md_name}: frontmatter is not valid YAML (line {line}): {detail}"
        recovered = None if strict else _recover_frontmatter(fm_text)
        if recovered is None:
            raise _FrontmatterError(message, line) from None
        data, dropped = recovered
        note = f"; dropped unreadable key(s): {', '.join(dropped)}" if dropped else ""
        warnings.append(f"{message}; recovered key by key{note}")
    except RecursionError:
        raise _FrontmatterError(f"{md_name}: frontmatter is nested too deeply") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise _FrontmatterError(
            f"{md_name}: frontmatter is not a mapping (got {_yaml_type(data)}); expected `key: value` lines", fm_line
        )
    try:
        return _jsonable(data, [_FRONTMATTER_NODE_BUDGET], 0)
    except _TooComplex:
        raise _FrontmatterError(
            f"{md_name}: frontmatter is too large or self-referencing (over {_FRONTMATTER_NODE_BUDGET} values "
            f"or {_FRONTMATTER_MAX_DEPTH} levels after alias expansion)",
            fm_line,
        ) from None


def _recover_frontmatter(fm_text: str) -> tuple[dict, list[str]] | None:
    """Re-read frontmatter key by key after a YAML error.

    The common breakage in published skills is a plain one-line value containing `: ` (e.g.
    `description: Use when you need to: ...`), which is fine for a human and fatal for YAML. Each
    top-level key with its indented continuation is parsed on its own; a key that still fails is
    taken verbatim when it is a single plain line, else dropped. Recovery is refused (None) when
    a key that shapes the record (_ESSENTIAL_KEYS) would be dropped or no description results,
    so genuinely broken frontmatter still becomes a problem.
    """
    chunks: list[tuple[str, list[str]]] = []
    for raw_line in fm_text.split("\n"):
        m = _TOP_KEY.match(raw_line)
        if m:
            chunks.append((m.group(1), [raw_line]))
        elif chunks:
            chunks[-1][1].append(raw_line)
        elif raw_line.strip() and not raw_line.lstrip().startswith("#"):
            return None
    result: dict = {}
    dropped: list[str] = []
    for key, lines in chunks:
        while len(lines) > 1 and not lines[-1].strip():
            lines.pop()
        chunk = "\n".join(lines)
        try:
            parsed = yaml.load(chunk, Loader=_YamlLoader)
            if isinstance(parsed, dict) and key in parsed:
                result[key] = parsed[key]
                continue
        except (yaml.YAMLError, RecursionError):
            pass
        value = _TOP_KEY.match(lines[0]).group(2) or ""
        value = value.strip()
        if len(lines) == 1 and value and value[0] not in "[{&*!|>\"'%@`":
            result[key] = value
        else:
            dropped.append(key)
    if _ESSENTIAL_KEYS.intersection(dropped):
        return None
    if not _scalar_text(result.get("description")):
        return None
    return result, dropped


def _yaml_error_line(exc: yaml.YAMLError, fm_text: str) -> int:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if mark is not None:
        return mark.line
    position = getattr(exc, "position", None)  # ReaderError (bad characters) has no mark
    if isinstance(position, int):
        return fm_text.count("\n", 0, position)
    return 0


def _yaml_error_detail(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "problem", None)
    if problem:
        return str(problem)
    if isinstance(exc, yaml.reader.ReaderError):
        return f"unacceptable character #x{exc.character:04x}" if isinstance(exc.character, int) else str(exc.reason)
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _yaml_type(value) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    return f"a {type(value).__name__}"


class _TooComplex(Exception):
    pass


def _jsonable(value, budget: list[int], depth: int):
    """A JSON-safe copy: dates to ISO text, bytes/sets/odd keys made plain, NaN to text.

    The budget guards against alias bombs: PyYAML shares aliased nodes, so a small document
    can stand for millions of values (or a cycle) once copied.
    """
    budget[0] -= 1
    if budget[0] < 0 or depth > _FRONTMATTER_MAX_DEPTH:
        raise _TooComplex
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {_key_text(k): _jsonable(v, budget, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, budget, depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_jsonable(v, budget, depth + 1) for v in value), key=str)
    if isinstance(value, (_dt.date, _dt.datetime)):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _key_text(key) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    if key is None:
        return "null"
    if isinstance(key, (_dt.date, _dt.datetime)):
        return key.isoformat()
    return str(key)


def _raw_scalar(fm_text: str | None, key: str) -> str:
    """The verbatim text of a top-level scalar, so `version: 1.10` stays "1.10", not 1.1."""
    if not fm_text or key not in fm_text:
        return ""
    m = re.search(rf"^{re.escape(key)}[ \t]*:[ \t]*(['\"]?)([^\n#'\"]+?)\1[ \t]*(?:#.*)?$", fm_text, re.M)
    return m.group(2).strip() if m else ""


_NAME_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")


def _spec_warnings(fm: dict, name: str, description: str, md_name: str, warnings: list[str]) -> None:
    # Deviations from the strict Agent Skills map are noted, never rejected: ClawHub accepts them.
    if "name" in fm and (len(name) > 64 or not _NAME_RE.match(name)):
        warnings.append(f"{md_name}: `name` {name[:80]!r} is not 1-64 chars of [a-z0-9-] (Agent Skills spec)")
    if len(description) > 1024:
        warnings.append(f"{md_name}: `description` is {len(description)} chars, over the spec's 1024")


# --------------------------------------------------------------------------------------------
# Runtime metadata (metadata.openclaw and friends)
# --------------------------------------------------------------------------------------------

_LIST_SPLIT = re.compile(r"[,\s]+")


def _runtime(fm: dict, warnings: list[str], md_name: str) -> dict:
    blocks = _openclaw_blocks(fm, warnings, md_name)
    bins: list[str] = []
    any_bins: list[str] = []
    env: list[str] = []
    config: list[str] = []
    os_list: list[str] = []
    install: list[dict] = []
    env_vars: list[dict] = []
    primary_env = homepage = version = ""
    for block in blocks:
        req = block.get("requires")
        if isinstance(req, str):
            req = _maybe_json(req)
        if isinstance(req, list):  # `requires: [jq, curl]` reads as bins
            req = {"bins": req}
        req = req if isinstance(req, dict) else {}
        bins += _str_list(req.get("bins")) + _str_list(req.get("bin"))
        any_bins += _str_list(req.get("anyBins")) + _str_list(req.get("any_bins"))
        env += _str_list(req.get("env"))
        config += _str_list(req.get("config"))
        os_list += [o.lower() for o in _str_list(block.get("os"))]
        install += _install_list(block.get("install"))
        primary_env = primary_env or _scalar_text(block.get("primaryEnv"))
        env_vars += _env_var_list(block.get("envVars"))
        homepage = homepage or _scalar_text(block.get("homepage"))
        version = version or _scalar_text(block.get("version"))
    required_env = env + ([primary_env] if primary_env else []) + [v["name"] for v in env_vars if v["required"]]
    return {
        "bins": _dedupe(bins),
        "any_bins": _dedupe(any_bins),
        "env": _dedupe(required_env),
        "config": _dedupe(config),
        "os": _dedupe(os_list),
        "install": install,
        "env_vars": _dedupe_dicts(env_vars),
        "primary_env": primary_env,
        "homepage": homepage,
        "version": version,
    }


def _openclaw_blocks(fm: dict, warnings: list[str], md_name: str) -> list[dict]:
    blocks: list[dict] = []
    metadata = fm.get("metadata")
    if isinstance(metadata, str) and metadata.strip():
        parsed = _maybe_json(metadata)
        if isinstance(parsed, dict):
            metadata = parsed
        else:
            warnings.append(f"{md_name}: `metadata` is a string but not a JSON object; ignored")
    if isinstance(metadata, dict):
        for alias in OPENCLAW_ALIASES:
            block = metadata.get(alias)
            if isinstance(block, str):  # strict spec wants string values, so some encode JSON
                block = _maybe_json(block)
            if isinstance(block, dict):
                blocks.append(block)
    for alias in OPENCLAW_ALIASES:  # `metadata.openclaw:` written as one dotted key
        block = fm.get(f"metadata.{alias}")
        if isinstance(block, dict):
            blocks.append(block)
    top = {k: fm[k] for k in ("requires", "install", "os", "primaryEnv", "envVars") if k in fm}
    if "bins" in fm and "requires" not in fm:
        top["requires"] = {"bins": fm["bins"]}
    if top:
        blocks.append(top)
    return blocks


def _maybe_json(text: str):
    text = text.strip()
    if not text or text[0] not in "{[":
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _str_list(value) -> list[str]:
    """Names from a list, a single string ("jq, curl" or "jq curl"), or objects with a name."""
    if value is None or value is False:
        return []
    if isinstance(value, str):
        return [s for s in _LIST_SPLIT.split(value.strip()) if s]
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        return [str(value)]
    out = []
    for item in value:
        if isinstance(item, dict):
            item = item.get("name") or item.get("id") or item.get("bin")
        if isinstance(item, (str, int, float)) and not isinstance(item, bool):
            text = str(item).strip()
            if text:
                out.append(text)
    return out


def _install_list(value) -> list[dict]:
    if value is None:
        return []
    if not isinstance(value, list):
        value = [value]
    out = []
    for item in value:
        if isinstance(item, str):
            if item.strip():
                out.append({"kind": "", "package": "", "bins": [], "command": item.strip()})
        elif isinstance(item, dict):
            entry = dict(item)
            entry["kind"] = _scalar_text(item.get("kind") or item.get("type") or item.get("id"))
            package = ""
            for k in ("package", "formula", "module", "pkg", "cask", "name", "url"):
                package = _scalar_text(item.get(k))
                if package:
                    break
            entry["package"] = package
            entry["bins"] = _str_list(item.get("bins"))
            out.append(entry)
    return out


def _env_var_list(value) -> list[dict]:
    if value is None:
        return []
    if isinstance(value, dict):
        # {"FOO_KEY": "description"} or a single {"name": ...} object
        if "name" in value:
            value = [value]
        else:
            value = [{"name": k, "description": v if isinstance(v, str) else ""} for k, v in value.items()]
    if isinstance(value, str):
        value = _str_list(value)
    if not isinstance(value, list):
        return []
    out = []
    for item in value:
        if isinstance(item, str) and item.strip():
            out.append({"name": item.strip(), "required": True, "description": ""})
        elif isinstance(item, dict):
            name = _scalar_text(item.get("name") or item.get("key") or item.get("env"))
            if not name:
                continue
            required = not (item.get("required") is False or item.get("optional") is True)
            out.append({"name": name, "required": required, "description": _scalar_text(item.get("description"))})
    return out


_ALLOWED_TOKEN = re.compile(r"[^\s,(]+(?:\([^)]*\))?")
_BASH_PATTERN = re.compile(r"^(?:Bash|Shell|Terminal)\(\s*([^\s:*()]+)", re.I)


def _allowed_tools(value) -> list[str]:
    if isinstance(value, str):
        return _dedupe(_ALLOWED_TOKEN.findall(value))
    if isinstance(value, list):
        return _dedupe([str(v).strip() for v in value if isinstance(v, (str, int)) and str(v).strip()])
    return []


def _tool_of_allowed(token: str) -> str:
    # `Bash(git status:*)` grants one CLI; the CLI is the useful tool name.
    m = _BASH_PATTERN.match(token)
    return m.group(1) if m else token


# --------------------------------------------------------------------------------------------
# Markdown structure
# --------------------------------------------------------------------------------------------

# Only block structure is needed; skipping inline parsing and unused rules (setext headings,
# tables, blockquotes, HTML blocks) halves parse time, which dominates the cost of a skill.
_MD = MarkdownIt("zero").enable(["heading", "list", "fence", "code"])
_MD.core.ruler.disable(["inline", "text_join"], ignoreInvalid=True)

_HEADING_CATS = (
    ("inputs", frozenset({"input", "inputs", "parameter", "parameters", "params", "argument", "arguments",
                          "args", "usage", "requirement", "requirements", "prerequisite", "prerequisites"})),
    ("outputs", frozenset({"output", "outputs", "return", "returns", "result", "results"})),
    ("steps", frozenset({"step", "steps", "workflow", "workflows", "procedure", "instructions", "instruction",
                         "usage", "quickstart"})),
)
_STEP_PHRASES = ("how to", "how it works", "quick start", "getting started")
_WORD = re.compile(r"[a-z]+")


@lru_cache(maxsize=4096)
def _heading_cats(heading: str) -> frozenset[str]:
    low = heading.lower()
    words = set(_WORD.findall(low))
    cats = {cat for cat, keys in _HEADING_CATS if words & keys}
    if any(p in low for p in _STEP_PHRASES):
        cats.add("steps")
    return frozenset(cats)


_MD_IMAGE_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_MD_MARKS = re.compile(r"\*\*|__|`+|~~")
_HTML_TAG = re.compile(r"</?[A-Za-z][^>\n]{0,200}>")
_SPACES = re.compile(r"\s+")


def _plain(md: str, limit: int = _MAX_ITEM_CHARS) -> str:
    text = _MD_IMAGE_LINK.sub(r"\1", md)
    text = _MD_MARKS.sub("", text)
    text = _HTML_TAG.sub("", text)
    text = _SPACES.sub(" ", text).strip()
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return text


_SHELL_LANGS = frozenset({"bash", "sh", "shell", "zsh", "console", "shell-session", "shellsession",
                          "terminal", "fish", "ksh"})
_PROMPT_LANGS = frozenset({"console", "shell-session", "shellsession", "terminal"})
_PROMPT = re.compile(r"^\s*\$\s+(.+)$", re.M)
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
_CMD_SPLIT = re.compile(r"&&|\|\||;|\||\$\(|`")
_ENV_ASSIGN = re.compile(r"""^[A-Za-z_][A-Za-z0-9_]*=(?:"[^"]*"|'[^']*'|[^\s'"]*)\s*""")
_CLI_NAME = re.compile(r"^[a-z0-9][a-z0-9_.+-]{0,48}$")
_NOT_CLI_SUFFIX = re.compile(r"\.(?:json|md|txt|ya?ml|csv|log|html?|png|jpe?g|gif|toml|xml|env)$")
_PREFIX_WORDS = frozenset({"sudo", "env", "time", "nohup", "exec", "command", "builtin", "then", "do", "else",
                           "!", "{", "(", "doas"})
_SHELL_WORDS = frozenset({
    "if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case", "esac", "in",
    "function", "select", "return", "exit", "break", "continue", "export", "unset", "set", "source",
    "alias", "unalias", "cd", "pushd", "popd", "echo", "printf", "read", "local", "declare", "typeset",
    "eval", "trap", "shift", "wait", "true", "false", "test", "let", "readonly", "ulimit", "umask",
    "type", "hash", "history", "jobs", "fg", "bg", "pwd", "shopt", "setopt", "end", "fn",
})


def _shell_words(code: str, prompt_only: bool) -> list[str]:
    """First words of the commands in a shell snippet: the CLIs it runs."""
    if prompt_only:
        lines = _PROMPT.findall(code)
    else:
        lines = code.split("\n")
    words: list[str] = []
    heredoc_end = None
    pending = ""
    for line in lines:
        if heredoc_end is not None:
            if line.strip() == heredoc_end:
                heredoc_end = None
            continue
        stripped = line.strip()
        if pending:
            stripped = pending + " " + stripped
            pending = ""
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending = stripped[:-1]
            continue
        if stripped.startswith("$ "):
            stripped = stripped[2:]
        m = _HEREDOC.search(stripped)
        if m:
            heredoc_end = m.group(2)
        for segment in _CMD_SPLIT.split(stripped):
            word = _first_word(segment)
            if word:
                words.append(word)
    return words


def _first_word(segment: str) -> str:
    seg = segment.strip()
    for _ in range(8):
        seg = seg.lstrip("({!").lstrip()
        m = _ENV_ASSIGN.match(seg)
        if m:
            seg = seg[m.end():]
            continue
        word, _, rest = seg.partition(" ")
        if word in _PREFIX_WORDS:
            seg = rest.lstrip()
            while seg.startswith("-"):
                flag, _, seg = seg.partition(" ")
                seg = seg.lstrip()
                if word in ("sudo", "doas") and flag in ("-u", "-g"):
                    seg = seg.partition(" ")[2].lstrip()
            continue
        break
    else:
        return ""
    word = word.strip().rstrip(");}")
    if not word or word in _SHELL_WORDS or not _CLI_NAME.match(word):
        return ""
    if _NOT_CLI_SUFFIX.search(word) or word.replace(".", "").isdigit():
        return ""
    return word


_DATA_EXT = (
    "csv|tsv|json|jsonl|ndjson|xml|ya?ml|toml|ini|txt|md|markdown|html?|pdf|docx?|xlsx?|pptx?|odt|ods|"
    "png|jpe?g|gif|webp|svg|bmp|tiff?|mp3|wav|flac|ogg|m4a|mp4|mov|mkv|webm|avi|zip|tar|gz|tgz|"
    "sqlite3?|db|parquet|log|ics|vcf|srt|vtt|epub"
)
# Scanning for the extension and widening backwards is several times faster than one regex that
# tries a path at every position of the body.
_EXT_MENTION = re.compile(rf"\.(?:{_DATA_EXT})(?![\w/-])", re.I)
_PATH_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-/~")
_OUT_CUE = re.compile(
    r"(?:>>?|\s-o|--output(?:-file|-dir|-path)?|--out|\s-O|\bsav(?:e|es|ed|ing)(?:\s+[\w-]+){0,3}?\s+(?:to|as|in|into)"
    r"|\bwrit(?:e|es|ing|ten)(?:\s+[\w-]+){0,3}?\s+(?:to|into)|\boutputs?\s+(?:to|as|in)|\bexport(?:s|ed)?(?:\s+[\w-]+){0,2}?\s+(?:to|as)"
    r"|\bcreat(?:e|es|ed|ing)|\bgenerat(?:e|es|ed|ing)|\bproduc(?:e|es|ed|ing)|\boutput(?:\s+file)?:)"
    r"(?:\s+(?:a|an|the|new))?[\s=:\"'`(\[]*$",
    re.I,
)
_IN_CUE = re.compile(
    r"(?:<|\s-i|--input(?:-file)?|--file|\s-f|--in|\bread(?:s|ing)?(?:\s+from)?|\bload(?:s|ing)?(?:\s+from)?|\bfrom"
    r"|\bupload(?:s|ing)?|\bparse[sd]?|\bopen(?:s)?|\binput(?:\s+file)?:?|\bcat|\btakes?|\baccepts?|\bgiven)"
    r"(?:\s+(?:a|an|the|your))?[\s=:\"'`(\[]*$",
    re.I,
)


class _Structure:
    __slots__ = ("h1", "first_text", "inputs", "outputs", "steps", "code_blocks", "shell_words")

    def __init__(self):
        self.h1 = ""
        self.first_text = ""
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        self.steps: list[str] = []
        self.code_blocks: list[dict] = []
        self.shell_words: list[str] = []


def _structure(body: str) -> _Structure:
    s = _Structure()
    if not body.strip():
        return s
    src = body[:_MAX_PARSE_CHARS]
    tokens = _MD.parse(src)
    headings: list[tuple[int, frozenset[str]]] = []
    cats: frozenset[str] = frozenset()
    lists: list[bool] = []  # True for ordered lists
    item_pending = False
    first_item = first_heading = ""
    inputs: list[str] = []
    outputs: list[str] = []
    steps: list[str] = []
    for i, tok in enumerate(tokens):
        t = tok.type
        if t == "paragraph_open":
            content = tokens[i + 1].content
            if item_pending:
                item_pending = False
                to_steps = (lists[-1] or "steps" in cats) and len(steps) < _MAX_LIST_ITEMS
                if not (to_steps or cats or not first_item):
                    continue  # _plain is the costliest step of the walk; skip unused items
                text = _plain(content)
                if not text:
                    continue
                first_item = first_item or text
                if to_steps:
                    steps.append(text)
                if "inputs" in cats:
                    inputs.append(text)
                if "outputs" in cats:
                    outputs.append(text)
            elif not lists:
                if content.lstrip().startswith("|"):
                    if cats & {"inputs", "outputs"}:
                        rows = _table_rows(content)
                        if "inputs" in cats:
                            inputs += rows
                        if "outputs" in cats:
                            outputs += rows
                elif not s.first_text:
                    s.first_text = _plain(content, 1024)
        elif t == "heading_open":
            item_pending = False
            level = int(tok.tag[1:])
            raw_heading = tokens[i + 1].content
            if level == 1 and not s.h1:
                s.h1 = _plain(raw_heading)
            first_heading = first_heading or raw_heading
            own = _heading_cats(raw_heading)
            while headings and headings[-1][0] >= level:
                headings.pop()
            # A subsection without its own category inherits its parent's ("## Usage" > "### Example").
            cats = own or (headings[-1][1] if headings else frozenset())
            headings.append((level, cats))
        elif t == "bullet_list_open" or t == "ordered_list_open":
            lists.append(t == "ordered_list_open")
        elif t == "bullet_list_close" or t == "ordered_list_close":
            if lists:
                lists.pop()
        elif t == "list_item_open":
            item_pending = True
        elif t == "list_item_close":
            item_pending = False
        elif t == "fence":
            item_pending = False
            lang = tok.info.strip().split(maxsplit=1)[0].lower() if tok.info.strip() else ""
            lang = lang.strip("{}.")
            code = tok.content
            if lang in _SHELL_LANGS:
                s.shell_words += _shell_words(code, lang in _PROMPT_LANGS)
            elif "$ " in code:
                s.shell_words += _shell_words(code, True)
            if len(s.code_blocks) < _MAX_CODE_BLOCKS:
                s.code_blocks.append({
                    "lang": lang,
                    "code": code[:_MAX_CODE_CHARS],
                    "line": (tok.map[0] + 1) if tok.map else 1,
                    "truncated": len(code) > _MAX_CODE_CHARS,
                })
        elif t == "code_block":
            if "$ " in tok.content:
                s.shell_words += _shell_words(tok.content, True)
    if not s.first_text:
        s.first_text = _plain(first_item or first_heading, 1024)
    _path_mentions(src, inputs, outputs)
    s.inputs = _dedupe(inputs, limit=_MAX_LIST_ITEMS)
    s.outputs = _dedupe(outputs, limit=_MAX_LIST_ITEMS)
    s.steps = _dedupe(steps, limit=_MAX_LIST_ITEMS)
    s.shell_words = _dedupe(s.shell_words)
    return s


def _table_rows(content: str) -> list[str]:
    rows = []
    lines = [ln.strip() for ln in content.split("\n") if ln.strip().startswith("|")]
    has_header = len(lines) > 1 and set(lines[1]) <= set("|-: ")
    for n, line in enumerate(lines):
        if has_header and n <= 1:
            continue
        cells = [_plain(c) for c in line.strip("|").split("|")]
        cells = [c for c in cells if c]
        if cells:
            rows.append(_plain(" — ".join(cells)))
    return rows


def _path_mentions(body: str, inputs: list[str], outputs: list[str]) -> None:
    """File paths whose wording marks them as read (inputs) or written (outputs)."""
    for m in _EXT_MENTION.finditer(body):
        start = m.start()
        while start > 0 and body[start - 1] in _PATH_CHARS:
            start -= 1
        path = body[start:m.end()]
        stem = path.rsplit("/", 1)[-1][: -len(m.group(0))]
        # URLs ("//host/x.json", "host.com/x.json") and bare extensions (".json") are not files.
        if "//" in path or not stem.strip(".") or (start and body[start - 1] in ":@$"):
            continue
        line_start = body.rfind("\n", 0, start) + 1
        before = body[max(line_start, start - 60):start]
        if _OUT_CUE.search(before):
            outputs.append(path)
        elif _IN_CUE.search(before):
            inputs.append(path)


# --------------------------------------------------------------------------------------------
# Provenance: _meta.json and git
# --------------------------------------------------------------------------------------------


def _load_meta(data: bytes | None, warnings: list[str]) -> dict | None:
    if data is None:
        warnings.append(f"{META_NAME} is too large to read; ignored")
        return None
    try:
        meta = json.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError) as exc:
        warnings.append(f"{META_NAME} is not valid JSON ({exc}); owner/slug taken from directory names")
        return None
    if not isinstance(meta, dict):
        warnings.append(f"{META_NAME} is not a JSON object; owner/slug taken from directory names")
        return None
    return meta


def _meta_version(meta: dict | None) -> str:
    latest = _dict((meta or {}).get("latest"))
    return _scalar_text(latest.get("version"))


def _provenance(source_kind, rel_dir, meta, git, root, parent_key, md_name) -> dict:
    latest = _dict((meta or {}).get("latest"))
    published = latest.get("publishedAt")
    if isinstance(published, (int, float)) and not isinstance(published, bool):
        try:
            # ClawHub stores milliseconds since the epoch.
            published = _dt.datetime.fromtimestamp(published / 1000, tz=_dt.timezone.utc).isoformat().replace("+00:00", "Z")
        except (OverflowError, OSError, ValueError):
            published = str(published)
    history = (meta or {}).get("history")
    commit = _scalar_text(latest.get("commit")) if source_kind == "clawhub" else ""
    prov = {
        "source_kind": source_kind,
        "path": rel_dir,
        "skill_md": md_name,
        "meta": meta,
        "display_name": _scalar_text((meta or {}).get("displayName")) or None,
        "published_at": published if published not in (None, "") else None,
        "commit": commit or (git.commit if git else None) or None,
        "history_count": len(history) if isinstance(history, list) else None,
        "git_remote": git.remote if git else None,
        "git_commit": git.commit if git else None,
        "git_root": _rel(git.root, root) if git else None,
    }
    if parent_key:
        prov["parent_key"] = parent_key
    return prov


@dataclass(frozen=True)
class _GitInfo:
    root: str
    commit: str | None
    remote: str | None
    owner: str


_HEX_SHA = re.compile(r"^[0-9a-f]{40}(?:[0-9a-f]{24})?$")
_REF_NAME = re.compile(r"^refs/[A-Za-z0-9._/\-]+$")
_REMOTE_OWNER = re.compile(r"[:/]([^/:]+)/[^/]+?/?$")
_URL_USERINFO = re.compile(r"^([a-z][a-z0-9+.\-]*://)[^/@]*@", re.I)


def _git_info_upwards(start: str, root: str) -> _GitInfo | None:
    root_abs = os.path.abspath(root)
    current = os.path.abspath(start)
    while True:
        if os.path.lexists(os.path.join(current, ".git")):
            return _read_git_info(current)
        if current == root_abs or os.path.dirname(current) == current:
            return None
        current = os.path.dirname(current)


@lru_cache(maxsize=256)
def _read_git_info(repo_dir: str) -> _GitInfo | None:
    """Commit and origin URL read straight from .git files.

    Never runs `git`: checkouts come from untrusted uploads and a crafted .git/config can make
    git execute commands.
    """
    dotgit = os.path.join(repo_dir, ".git")
    gitdir = dotgit
    if os.path.isfile(dotgit) and not os.path.islink(dotgit):  # worktree or submodule pointer
        text = _read_small(dotgit)
        if not text or not text.startswith("gitdir:"):
            return None
        gitdir = os.path.normpath(os.path.join(repo_dir, text[7:].strip()))
    elif not os.path.isdir(dotgit) or os.path.islink(dotgit):
        return None
    common = gitdir
    common_rel = _read_small(os.path.join(gitdir, "commondir"))
    if common_rel:
        common = os.path.normpath(os.path.join(gitdir, common_rel.strip()))
    commit = None
    head = (_read_small(os.path.join(gitdir, "HEAD")) or "").strip()
    if head.startswith("ref:"):
        ref = head[4:].strip()
        if _REF_NAME.match(ref) and ".." not in ref:
            for base in (gitdir, common):
                value = (_read_small(os.path.join(base, *ref.split("/"))) or "").strip()
                if _HEX_SHA.match(value):
                    commit = value
                    break
            if commit is None:
                commit = _packed_ref(common, ref)
    elif _HEX_SHA.match(head):
        commit = head
    remote = _origin_url(_read_small(os.path.join(common, "config"), 1 << 20) or "")
    owner = ""
    if remote:
        m = _REMOTE_OWNER.search(remote.removesuffix(".git"))
        owner = m.group(1) if m else ""
    return _GitInfo(root=repo_dir, commit=commit, remote=remote, owner=owner)


def _packed_ref(common: str, ref: str) -> str | None:
    text = _read_small(os.path.join(common, "packed-refs"), 16 << 20) or ""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1] == ref and _HEX_SHA.match(parts[0]):
            return parts[0]
    return None


def _origin_url(config: str) -> str | None:
    section = None
    urls: dict[str, str] = {}
    for line in config.splitlines():
        line = line.strip()
        m = re.match(r'^\[\s*remote\s+"([^"]+)"\s*\]', line)
        if m:
            section = m.group(1)
            continue
        if line.startswith("["):
            section = None
            continue
        if section and section not in urls:
            m = re.match(r"^url\s*=\s*(.+)$", line)
            if m:
                # Tokens sometimes sit in the URL's userinfo; they must not reach the database.
                urls[section] = _URL_USERINFO.sub(r"\1", m.group(1).strip())
    return urls.get("origin") or next(iter(urls.values()), None)


def _read_small(path: str, limit: int = 4096) -> str | None:
    try:
        return _read_regular(path, limit).decode("utf-8", "replace")
    except (OSError, _TooLarge):
        return None


# --------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------


def _rel(path: str, root: str) -> str:
    rel = os.path.relpath(path, root)
    return rel.replace(os.sep, "/") if os.sep != "/" else rel


def _join_rel(rel_dir: str, name: str) -> str:
    return name if rel_dir == "." else f"{rel_dir}/{name}"


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def _str_or_empty(value) -> str:
    return value.strip() if isinstance(value, str) else ""


def _scalar_text(value) -> str:
    """Text of a scalar frontmatter value; lists and mappings are not scalars and give ""."""
    if value is None or isinstance(value, (dict, list)):
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value).strip()


def _dedupe(items, limit: int | None = None) -> list[str]:
    seen = set()
    out = []
    for item in items:
        if item and item not in seen:
            seen.add(item)
            out.append(item)
            if limit is not None and len(out) >= limit:
                break
    return out


def _dedupe_dicts(items: list[dict]) -> list[dict]:
    seen = set()
    out = []
    for item in items:
        if item["name"] not in seen:
            seen.add(item["name"])
            out.append(item)
    return out


def _mode_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISBLK(mode):
        return "block device"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "special file"


def _kind_of(entry: os.DirEntry) -> str:
    try:
        return _mode_kind(entry.stat(follow_symlinks=False).st_mode)
    except OSError:
        return "special file"


def _is_dir_target(path: str) -> bool:
    try:
        return os.path.isdir(path)
    except OSError:
        return False


def _os_error(exc: OSError) -> str:
    return f"{type(exc).__name__}: {exc.strerror or exc}"
