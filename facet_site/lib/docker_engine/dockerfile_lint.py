"""The rules a generated Dockerfile and its build context must pass before anything is built."""
from __future__ import annotations

import fnmatch
import json
import posixpath
import re
import shlex
from typing import Iterable

from facet_site.lib.docker_engine.constants import BASE_IMAGE_TAG

_SECRET_NAME_PARTS = {"KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL",
                      "CREDENTIALS"}
_SECRET_NAME_WORDS = ("SECRET", "PASSWORD", "PASSWD", "TOKEN", "APIKEY", "API_KEY")
_SECRET_VALUE_PATTERNS = (
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"), "a private key"),
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), "an AWS access key id"),
    (re.compile(r"\b(?:ghp|gho|ghs|ghu)_[A-Za-z0-9]{30,}\b|\bgithub_pat_[A-Za-z0-9_]{30,}"),
     "a GitHub token"),
    (re.compile(r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}"), "an API secret key (sk-...)"),
    (re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"), "a Slack token"),
)
_VARIABLE_ONLY = re.compile(
    r"^\$(\{[A-Za-z_][A-Za-z0-9_]*(:?[-+][^}]*)?\}|[A-Za-z_][A-Za-z0-9_]*)$")
_REMOTE_SOURCE = re.compile(r"^(https?|ftp|git|ssh)://|^git@", re.IGNORECASE)
_FORBIDDEN_DIRS = ("solution", "tests")
_FORBIDDEN_NAMES = ("solve.sh", "test.sh", "test_*.py")


def _is_secret_name(name: str) -> bool:
    upper = name.upper()
    if upper == "PWD":
        return False
    parts = [p for p in upper.split("_") if p]
    if parts and parts[-1] in _SECRET_NAME_PARTS:
        return True
    return any(word in upper for word in _SECRET_NAME_WORDS)


def dockerfile_instructions(text: str) -> list[tuple[int, str, str]]:
    """(first line number, INSTRUCTION, arguments) with continuations joined and comments gone."""
    escape = "\\"
    lines = text.splitlines()
    for raw in lines:  # parser directives must come first
        m = re.match(r"^\s*#\s*([a-zA-Z]+)\s*=\s*(\S+)\s*$", raw)
        if not m:
            break
        if m.group(1).lower() == "escape" and m.group(2) in ("\\", "`"):
            escape = m.group(2)
    result: list[tuple[int, str, str]] = []
    current: list[str] = []
    start = 0
    for number, raw in enumerate(lines, 1):
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if current and stripped.startswith("#"):
            continue  # comment lines inside a continued instruction are dropped by Docker too
        if not current:
            start = number
        if stripped.endswith(escape):
            current.append(stripped[: -len(escape)])
            continue
        current.append(stripped)
        joined = " ".join(part for part in current if part)
        current = []
        instruction, _, args = joined.partition(" ")
        result.append((start, instruction.upper(), args.strip()))
    if current:
        joined = " ".join(part for part in current if part)
        instruction, _, args = joined.partition(" ")
        result.append((start, instruction.upper(), args.strip()))
    return result


def split_copy_args(args: str) -> tuple[list[str], list[str]]:
    """(flags, paths) of a COPY/ADD, in either the JSON or the whitespace form."""
    flags: list[str] = []
    rest = args
    while rest.startswith("--"):
        flag, _, rest = rest.partition(" ")
        flags.append(flag)
        rest = rest.lstrip()
    if rest.startswith("["):
        try:
            paths = json.loads(rest)
            if isinstance(paths, list) and all(isinstance(p, str) for p in paths):
                return flags, paths
        except ValueError:
            pass
    return flags, rest.split()


def _env_pairs(instruction: str, args: str) -> list[tuple[str, str | None]]:
    try:
        tokens = shlex.split(args, posix=True)
    except ValueError:
        tokens = args.split()
    if not tokens:
        return []
    if instruction == "ARG":
        name, eq, value = tokens[0].partition("=")
        return [(name, value if eq else None)]
    if "=" not in tokens[0]:  # legacy `ENV NAME value with spaces`
        return [(tokens[0], " ".join(tokens[1:]))]
    return [(t.partition("=")[0], t.partition("=")[2]) for t in tokens]


def _is_forbidden_source(source: str) -> bool:
    normalized = posixpath.normpath(source.lstrip("/")) if source.strip("/") else "."
    if normalized.startswith("./"):
        normalized = normalized[2:]
    first = normalized.split("/", 1)[0]
    if first in _FORBIDDEN_DIRS:
        return True
    base = posixpath.basename(normalized.rstrip("/"))
    return any(fnmatch.fnmatchcase(base, pattern) for pattern in _FORBIDDEN_NAMES)


def lint_dockerfile(text: str, base_image: str = BASE_IMAGE_TAG) -> list[str]:
    """Problems that make a generated Dockerfile unacceptable, each naming its line.

    The rules keep tasks honest and buildable here: every stage starts from our base image
    (nothing can be pulled), answers (solution/, tests/) never enter the image, no credentials
    are baked in, and nothing is fetched by ADD from a URL (not reproducible, not linted).
    """
    problems: list[str] = []
    instructions = dockerfile_instructions(text)
    stages: list[str] = []
    seen_from = False
    for line, instruction, args in instructions:
        where = f"line {line}"
        if instruction == "FROM":
            tokens = [t for t in args.split() if not t.startswith("--")]
            image = tokens[0] if tokens else ""
            if "$" in image:
                problems.append(f"{where}: FROM {image}: the image must be named literally "
                                f"({base_image}), not through a variable")
            elif image.lower() not in [s.lower() for s in stages] and image != base_image:
                what = "the first FROM" if not seen_from else "every stage"
                fix = (f"no registry is reachable, so {image} is built here only from a local copy: "
                       f"load it with `facet images load FILE.tar` (from `docker save {image}`) or map it "
                       "to a local image with FACET_IMAGE_MAP / `import-tasks --image-map`; "
                       f"a generated environment builds on {base_image}") if image else "name an image"
                problems.append(f"{where}: FROM {image or '(nothing)'}: {what} must start from "
                                f"{base_image} ({fix})")
            if len(tokens) >= 3 and tokens[1].upper() == "AS":
                stages.append(tokens[2])
            seen_from = True
            continue
        if not seen_from and instruction not in ("ARG",):
            problems.append(f"{where}: {instruction} before the first FROM")
        if instruction in ("COPY", "ADD"):
            flags, paths = split_copy_args(args)
            sources = paths[:-1]
            for source in sources:
                if instruction == "ADD" and _REMOTE_SOURCE.search(source):
                    problems.append(f"{where}: ADD {source}: remote URLs are not allowed; "
                                    "download in a RUN step or ship the file in the context")
                elif _is_forbidden_source(source):
                    problems.append(f"{where}: {instruction} {source}: solution and test files "
                                    "must not be copied into the image (they are uploaded at "
                                    "trial time)")
        if instruction in ("ENV", "ARG"):
            for name, value in _env_pairs(instruction, args):
                if value and _is_secret_name(name) and not _VARIABLE_ONLY.match(value.strip()):
                    problems.append(f"{where}: {instruction} {name}: looks like a secret with a "
                                    "literal value; images must not carry credentials")
    if not seen_from:
        problems.append(f"no FROM instruction (the first stage must be FROM {base_image})")
    for number, raw in enumerate(text.splitlines(), 1):
        for pattern, what in _SECRET_VALUE_PATTERNS:
            if pattern.search(raw):
                problems.append(f"line {number}: contains what looks like {what}")
    return problems


def lint_build_context(relpaths: Iterable[str]) -> list[str]:
    # A context holding the task's own solution/ or tests/ means it is the task directory rather
    # than its environment/: any `COPY . ...` would put the answers into the image.
    problems = []
    for rel in relpaths:
        if rel in ("solution/solve.sh", "tests/test.sh"):
            problems.append(f"build context contains {rel}: the context must be the task's "
                            "environment/ directory, not the task directory")
    return problems


