"""Detectors for answers the agent can read instead of work out: outputs already in the image,
solution or test files shipped in environment/, and an instruction that spells out solve.sh.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import posixpath
import re
from fnmatch import fnmatchcase
from typing import Iterable, Mapping, Sequence

# Dockerfile parsing is dockerfile_lint's; its two helpers are reused rather than copied.
from facet_site.lib.docker_engine.dockerfile_lint import dockerfile_instructions, split_copy_args
from facet_site.lib.task_defects_findings import (
    ANSWER_FILE_IN_ENVIRONMENT, INSTRUCTION_REVEALS_SOLUTION, LEAKED_ANSWER,
    LEAKED_ANSWER_EMBEDDED, finding)

# --------------------------------------------------------------------------------------------
# Content normalisation

# Below these an output is too likely to exist in the image by chance: "42\n", "OK", "true",
# "hello world", a two-line count file. 24 characters with 8 distinct ones is past any single
# number, word or flag and still short of a real answer file (a 40-hex digest, a JSON object
# with two keys, a CSV header plus a row all pass).
MIN_LEAK_CHARS = 24
MIN_LEAK_DISTINCT = 8
# An output found *inside* a larger image file must be longer: short multi-line outputs (a few
# log lines an answer filters out of an input the instruction forgot to name) occur inside
# inputs legitimately, so an embedded match is only a warning and starts at 200 characters.
MIN_EMBEDDED_CHARS = 200
# Image files larger than this are not searched for embedded answers (binaries, datasets).
MAX_EMBED_HAYSTACK = 2 * 1024 * 1024


def _decode(data: bytes | str) -> str | None:
    if isinstance(data, str):
        return data
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _collapse(text: str) -> str:
    return " ".join(text.split())


def _canonical_json(text: str) -> str | None:
    try:
        value = json.loads(text)
    except ValueError:
        lines = [line for line in text.splitlines() if line.strip()]
        if len(lines) < 2:
            return None
        try:  # JSON Lines: each line canonical, line order kept (it is usually meaningful)
            return "\n".join(json.dumps(json.loads(line), sort_keys=True, separators=(",", ":"))
                             for line in lines)
        except ValueError:
            return None
    if not isinstance(value, (dict, list)):
        return None  # a bare number or string is whitespace-normalised like any text
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _canonical_csv(text: str) -> str | None:
    """Header first, columns in header order, data rows sorted: the same table however the
    solution happened to order it. Only tables (two or more columns, a header and a row)."""
    if "," not in text and "\t" not in text:
        return None
    delimiter = "\t" if text.count("\t") > text.count(",") else ","
    try:
        rows = [[cell.strip() for cell in row]
                for row in csv.reader(io.StringIO(text), delimiter=delimiter) if row]
    except csv.Error:
        return None
    if len(rows) < 2 or len(rows[0]) < 2 or any(len(r) != len(rows[0]) for r in rows):
        return None
    order = sorted(range(len(rows[0])), key=lambda i: rows[0][i])
    table = [[row[i] for i in order] for row in rows]
    return "\n".join(",".join(r) for r in [table[0], *sorted(table[1:])])


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def content_forms(data: bytes | str) -> dict[str, str]:
    """{form: canonical text} for each normal form the content has: "text" (whitespace
    collapsed), "json" (keys sorted, compact) and "csv" (columns and rows sorted)."""
    text = _decode(data)
    if text is None:
        raw = data if isinstance(data, bytes) else data.encode()
        return {"bytes": hashlib.sha256(raw).hexdigest()}
    forms = {"text": _collapse(text)}
    if (canonical := _canonical_json(text)) is not None:
        forms["json"] = canonical
    if (canonical := _canonical_csv(text)) is not None:
        forms["csv"] = canonical
    return forms


def is_trivial_content(data: bytes | str) -> bool:
    text = _decode(data)
    if text is None:
        return len(data) < MIN_LEAK_CHARS
    collapsed = _collapse(text)
    return len(collapsed) < MIN_LEAK_CHARS or len(set(collapsed)) < MIN_LEAK_DISTINCT


_FORM_WORDS = {"exact": "byte for byte", "bytes": "byte for byte", "text": "whitespace aside",
               "json": "as JSON, key order and formatting aside",
               "csv": "as a table, row and column order aside"}


def _under(path: str, roots: Iterable[str]) -> bool:
    """Whether path is one of roots or below one; a relative root ("data.csv", "logs/") matches
    wherever it ends a path or names a directory on it, as an instruction says "sort data.csv"."""
    path = posixpath.normpath(path)
    for root in roots:
        root = posixpath.normpath(root)
        if root.startswith("/"):
            if path == root or path.startswith(root.rstrip("/") + "/"):
                return True
        elif ("/" + path + "/").find("/" + root + "/") >= 0:
            return True
    return False


def find_leaked_answers(oracle_changes: Mapping[str, bytes | str],
                        initial_files: Mapping[str, bytes | str],
                        input_paths: Iterable[str] = ()) -> list[dict]:
    """Findings for oracle outputs whose content is already in the built image.

    oracle_changes: path -> content of each file the oracle created or modified (from the
    oracle trial's diff); initial_files: path -> content of the image's files before any solution
    ran (e0's files read whole, plus image_files_matching's hits in the rest of the image);
    input_paths: files or directories the instruction names as inputs, absolute or relative (a
    copy or a re-sorted input is not a leak; top-level directories such as /app are ignored). The same content elsewhere is an error (`leaked_answer`): the agent could copy it.
    The output found inside a larger file is a warning (`leaked_answer_embedded`). Trivial
    outputs (see MIN_LEAK_CHARS) are never matched.
    """
    # A top-level directory ("work in /app") names the workspace, not an input: excluding it would
    # blind the check, so only deeper paths count as inputs.
    inputs = [p for p in input_paths
              if not p.startswith("/") or len(posixpath.normpath(p).strip("/").split("/")) >= 2]
    index: dict[tuple[str, str], list[str]] = {}
    haystacks: list[tuple[str, str]] = []
    for path, data in sorted(initial_files.items()):
        if _under(path, inputs) or is_trivial_content(data):
            continue
        for key in _match_keys(data):
            index.setdefault(key, []).append(path)
        text = _decode(data)
        if text is not None and len(text) <= MAX_EMBED_HAYSTACK:
            haystacks.append((path, _collapse(text)))

    findings = []
    for out_path, data in sorted(oracle_changes.items()):
        if is_trivial_content(data):
            continue
        forms = content_forms(data)
        match = next(((form, path) for form, digest in _match_keys(data)
                      for path in index.get((form, digest), [])
                      if posixpath.normpath(path) != posixpath.normpath(out_path)), None)
        excerpt = _decode(data) or f"(binary, {len(data)} bytes)"
        if match:
            form, path = match
            findings.append(finding(
                LEAKED_ANSWER, "error",
                f"the oracle writes {out_path}, and the same content ({_FORM_WORDS[form]}) is "
                f"already in the image at {path} before any solution runs; an agent can copy it "
                "instead of solving the task. Remove it from the environment, or name it in the "
                "instruction as an input if it is one",
                file=path, evidence=excerpt))
            continue
        needle = forms.get("text", "")
        if len(needle) < MIN_EMBEDDED_CHARS:
            continue
        for path, hay in haystacks:
            if posixpath.normpath(path) != posixpath.normpath(out_path) and needle in hay:
                line = _line_of(_decode(initial_files[path]) or "", needle)
                findings.append(finding(
                    LEAKED_ANSWER_EMBEDDED, "warning",
                    f"the content the oracle writes to {out_path} appears inside {path}, which "
                    "is in the image before any solution runs",
                    file=path, line=line, evidence=excerpt))
                break
    return findings


def _raw(data: bytes | str) -> bytes:
    return data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")


def _match_keys(data: bytes | str) -> list[tuple[str, str]]:
    """(form, digest) keys of a content, the exact bytes first, so an exact copy is reported as
    one ("byte for byte") rather than by its first normal form."""
    return [("exact", hashlib.sha256(_raw(data)).hexdigest()),
            *((form, _digest(canonical)) for form, canonical in content_forms(data).items())]


# --------------------------------------------------------------------------------------------
# The rest of the image, by digest
#
# The workdir and the COPY/ADD destinations are read whole (every normal form above applies).
# The rest of the image is searched by sha256 only: the first trial hashes every regular file
# the task's own build steps wrote (validation.trials.image_scan_command), and an oracle output
# is found there when the digest of its exact bytes, or of one of the ways the same answer is
# commonly stored (answer_serializations), is among them. Equal digests mean equal bytes, so the
# matching file's content is known without reading it again.


def answer_serializations(data: bytes | str) -> dict[str, bytes]:
    """sha256 -> bytes of each likely stored form of an answer with this content: its exact
    bytes; with the final newline added or dropped and LF/CRLF line ends swapped; each normal form
    of content_forms (whitespace collapsed, canonical JSON, canonical CSV) with and without a
    final newline; and JSON written back by json.dumps (keys sorted or as they come; compact,
    default or indented by 2 or 4). A bounded set: a few dozen digests per output."""
    raw = _raw(data)
    variants = [raw]
    text = _decode(data)
    if text is not None:
        bodies = {text, text.replace("\r\n", "\n"), text.replace("\r\n", "\n").replace("\n", "\r\n")}
        bodies |= set(content_forms(text).values())
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if isinstance(value, (dict, list)):
            for sort_keys in (True, False):
                for kwargs in ({"separators": (",", ":")}, {}, {"indent": 2}, {"indent": 4}):
                    bodies.add(json.dumps(value, sort_keys=sort_keys, **kwargs))
        for body in bodies:
            core = body.rstrip("\r\n")
            newline = "\r\n" if "\r\n" in body else "\n"
            variants += [core.encode(), (core + newline).encode(), body.encode()]
    return {hashlib.sha256(v).hexdigest(): v for v in variants}


def image_files_matching(oracle_changes: Mapping[str, bytes | str],
                         image_digests: Mapping[str, Sequence[str]]) -> dict[str, bytes]:
    """path -> content of each image file whose sha256 (image_digests: digest -> paths, from the
    image scan) is that of an oracle output or of one of its answer_serializations. The content
    is the serialization with that digest; passed to find_leaked_answers with e0's files, it
    yields the usual findings (file: the image path; evidence: the output)."""
    found: dict[str, bytes] = {}
    if not image_digests:
        return found
    for _out_path, data in sorted(oracle_changes.items()):
        if is_trivial_content(data):
            continue
        for digest, content in answer_serializations(data).items():
            for path in image_digests.get(digest, ()):
                found.setdefault(path, content)
    return found


def _line_of(text: str, collapsed_needle: str) -> int | None:
    first_word = collapsed_needle.split(" ", 1)[0]
    for number, line in enumerate(text.splitlines(), 1):
        if first_word in line and collapsed_needle.startswith(_collapse(line)[:40]):
            return number
    return None


# --------------------------------------------------------------------------------------------
# Solution or test files shipped in environment/


def _dockerfile_sources(dockerfile: str) -> list[tuple[int, str]]:
    """(line, source) for every COPY/ADD source taken from the build context."""
    sources = []
    for line, word, args in dockerfile_instructions(dockerfile):
        if word in ("COPY", "ADD"):
            flags, paths = split_copy_args(args)
            if not any(flag.startswith("--from") for flag in flags):  # another stage's files
                sources += [(line, source) for source in paths[:-1]]
    return sources


def _copied_by(rel: str, source: str) -> bool:
    source = posixpath.normpath(source.lstrip("/")) if source.strip("/.") else "."
    if source == ".":
        return True
    return rel == source or rel.startswith(source + "/") or fnmatchcase(rel, source)


def _strip_top(path: str, top: str) -> str:
    return path[len(top) + 1:] if path.startswith(top + "/") else path


# Names that say "this is what the output must be" (not "reference data", a common input).
_EXPECTED_NAME = re.compile(r"\b(?:expected|answers?|golden)[\w.-]*", re.I)


def find_answer_files_in_environment(environment_files: Mapping[str, bytes | str],
                                     solution_files: Mapping[str, bytes | str],
                                     tests_files: Mapping[str, bytes | str]) -> list[dict]:
    """Findings for files of the build context that COPY/ADD put into the image and that are
    (in content) a solution or test file, or an expected-output file the tests name.

    Keys are task-relative paths ("environment/data/x.json", "solution/solve.sh",
    "tests/expected.json"); a key without the top folder is taken as relative to it.
    """
    env = {_strip_top(path, "environment"): data for path, data in environment_files.items()}
    dockerfile = _decode(env.get("Dockerfile", "")) or ""
    sources = _dockerfile_sources(dockerfile)
    answers: dict[tuple[str, str], str] = {}
    for top, files in (("solution", solution_files), ("tests", tests_files)):
        for path, data in files.items():
            rel = f"{top}/{_strip_top(path, top)}"
            if not is_trivial_content(data):
                for form, canonical in content_forms(data).items():
                    answers.setdefault((form, _digest(canonical)), rel)
    named_by_tests = {m.group(0) for data in tests_files.values()
                      for m in _EXPECTED_NAME.finditer(_decode(data) or "")}

    findings = []
    for rel, data in sorted(env.items()):
        if rel == "Dockerfile":
            continue
        copy = next(((line, source) for line, source in sources if _copied_by(rel, source)),
                    None)
        if copy is None:
            continue  # in the context but never copied: not in the image
        line, source = copy
        where = f"environment/{rel}"
        same = None if is_trivial_content(data) else next(
            (answers[(form, _digest(canonical))] for form, canonical in content_forms(data).items()
             if (form, _digest(canonical)) in answers), None)
        if same:
            findings.append(finding(
                ANSWER_FILE_IN_ENVIRONMENT, "error",
                f"{where} has the content of {same} and `COPY/ADD {source}` (Dockerfile line "
                f"{line}) puts it into the image, where the agent can read it",
                file="environment/Dockerfile", line=line, evidence=_decode(data) or where))
        elif posixpath.basename(rel) in named_by_tests:
            findings.append(finding(
                ANSWER_FILE_IN_ENVIRONMENT, "error",
                f"{where} is named like the expected output the tests compare against "
                f"({posixpath.basename(rel)}) and `COPY/ADD {source}` (Dockerfile line {line}) "
                "puts it into the image",
                file="environment/Dockerfile", line=line, evidence=_decode(data) or where))
    return findings


# --------------------------------------------------------------------------------------------
# Instruction reveals the solution
#
# Containment of solve.sh in instruction.md, two ways: the share of solve.sh's non-trivial lines
# (comments, shebang, set/cd/export/echo and lines under 3 tokens dropped) whose whitespace-
# collapsed text occurs in the instruction, and the share of solve.sh's token 5-grams that occur
# in the instruction's (tokens are shell words: a path is one token, so a path the instruction
# names as an output counts once, not as a run of "/" and names).
#
# Measured on real tasks (Terminal-Bench 2.1 tasks in the Harbor layout, from a public copy of
# the dataset; three solve.sh files cut to their shell part and one embedded script) and on the 8
# tasks the demo cassette generates (scenarios/fixtures/demo.cassette.jsonl):
#   build-pov-ray               lines 1/44 = 0.02  5-grams 2/313 = 0.006  (the instruction quotes
#                                                  solve.sh's last line as a "sanity check")
#   mcmc-sampling-stan          lines 0/33 = 0.00  5-grams 3/197 = 0.015
#   configure-git-webserver     lines 0/18 = 0.00  5-grams 0/146 = 0.000  (solve.sh echoes the
#                                                  instruction's git commands, quoted otherwise)
#   build-pmars, overfull-hbox, financial-document-processor: 0.00 and 0.000
#   demo cassette, 8 tasks      lines 0.00         5-grams <= 0.016
# A solution pasted into the instruction scores 1.0 on both. The thresholds below (a third of
# the lines or of the 5-grams, with at least 3 matched lines or 12 matched 5-grams so that a
# one-command task quoting its one command is not flagged) sit fifteen times above the highest
# real figure and still catch an instruction that lists a third of the steps verbatim.
REVEAL_LINE_SHARE = 0.33
REVEAL_GRAM_SHARE = 0.33
REVEAL_MIN_LINES = 3
REVEAL_MIN_GRAMS = 12
_GRAM = 5

_TRIVIAL_LINE = re.compile(
    r"^(#|set\b|cd\b|export\b|echo\b|printf\b|shopt\b|trap\b|umask\b|exit\b|true\b|:|"
    r"(fi|done|esac|then|else|do|EOF|PY|[A-Z]*EOF)$|[{}()\[\];]+$)")
_TOKEN = re.compile(r"[^\s'\"`;,(){}\[\]]+")


def _solution_lines(solve_sh: str) -> list[tuple[int, str]]:
    lines = []
    for number, raw in enumerate(solve_sh.splitlines(), 1):
        collapsed = _collapse(raw)
        if (not collapsed or _TRIVIAL_LINE.match(collapsed)
                or len(_TOKEN.findall(collapsed)) < 3):
            continue
        lines.append((number, collapsed))
    return lines


def _grams(text: str) -> list[tuple[str, ...]]:
    tokens = [t.lower() for t in _TOKEN.findall(text)]
    return [tuple(tokens[i:i + _GRAM]) for i in range(len(tokens) - _GRAM + 1)]


def solution_containment(instruction: str, solve_sh: str) -> dict:
    """{line_share, gram_share, matched_lines: [(line, text)], matched_grams, lines, grams}."""
    haystack = _collapse(instruction)
    lines = _solution_lines(solve_sh)
    matched = [(n, text) for n, text in lines if text in haystack]
    code = "\n".join(raw for raw in solve_sh.splitlines()
                     if not raw.lstrip().startswith("#"))
    grams = _grams(code)
    known = set(_grams(instruction))
    hits = sum(1 for g in grams if g in known)
    return {"line_share": len(matched) / len(lines) if lines else 0.0,
            "gram_share": hits / len(grams) if grams else 0.0,
            "matched_lines": matched, "matched_grams": hits,
            "lines": len(lines), "grams": len(grams)}


def instruction_reveals_solution(instruction: str, solve_sh: str) -> dict | None:
    """An error finding when instruction.md reproduces solve.sh's commands or code."""
    c = solution_containment(instruction, solve_sh)
    by_lines = c["line_share"] >= REVEAL_LINE_SHARE and len(c["matched_lines"]) >= REVEAL_MIN_LINES
    by_grams = c["gram_share"] >= REVEAL_GRAM_SHARE and c["matched_grams"] >= REVEAL_MIN_GRAMS
    if not (by_lines or by_grams):
        return None
    shown = c["matched_lines"][:6]
    return finding(
        INSTRUCTION_REVEALS_SOLUTION, "error",
        f"instruction.md reproduces the solution: {len(c['matched_lines'])} of solve.sh's "
        f"{c['lines']} non-trivial lines ({c['line_share']:.0%}) and {c['gram_share']:.0%} of its "
        f"token 5-grams appear in it (flagged from {REVEAL_LINE_SHARE:.0%}); describe the goal, "
        "not the steps",
        file="solution/solve.sh", line=shown[0][0] if shown else None,
        evidence="\n".join(f"{n}: {text}" for n, text in shown))
