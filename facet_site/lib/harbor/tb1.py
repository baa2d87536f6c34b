"""Terminal-Bench 1.x tasks (task.yaml, run-tests.sh, docker-compose.yaml) converted to Harbor
bundles on read: run-tests.sh gets a reward-writing EXIT trap, the compose service becomes a
Dockerfile, and whatever cannot carry over is written into the bundle's notes. Django-free.
"""
from __future__ import annotations

import math
import posixpath
import re
from pathlib import Path
from typing import Any

import yaml

from facet_site.lib.harbor.task_files import collect_tree, read_small_file
from facet_site.lib.harbor.task_format import TaskBundle, TaskConfig, TaskFormatError, config_from_toml, decode_utf8

NO_SOLUTION = "no reference solution: oracle validation impossible"
_TB1_DROPPED = ("run_tests_in_same_shell", "disable_asciinema")
_TB1_META = ("author_name", "author_email", "difficulty", "category", "tags", "estimated_duration_sec",
             "expert_time_estimate_min", "junior_time_estimate_min")
_TB1_COMPOSE_KEYS = {"build", "image", "container_name", "command", "environment", "volumes", "working_dir"}

# How TB1 decided a run passed, per task.yaml `parser_name` (TB1's terminal_bench/parsers/): the
# harness parsed the test output; the exit status of run-tests.sh never counted. Each grader is a
# shell function reading the captured output ($__facet_log) and printing the reward.
_PYTEST_GRADER = """\
  # pytest parser: the statuses of the "short test summary info" section (pytest -rA); FAILED, ERROR and
  # XPASS fail, PASSED, SKIPPED and XFAIL pass; no summary (pytest never ran or crashed) fails.
  __facet_summary=$(sed -n '/short test summary info/,$p' "$__facet_log")
  if [ -z "$__facet_summary" ]; then echo 0
  elif printf '%s\\n' "$__facet_summary" | grep -Eq '^(FAILED|ERROR|XPASS)( |$)'; then echo 0
  elif printf '%s\\n' "$__facet_summary" | grep -Eq '^(PASSED|SKIPPED|XFAIL)( |$)'; then echo 1
  else echo 0; fi
"""

_MARKER_GRADER = """\
  # {parser} parser: the text between the last "{name} results starts here" and "{name} results ends here"
  # lines must be exactly "{passed}"; missing markers (the harness could not run) fail.
  __facet_block=$(sed -n '/{name} results starts here/,/{name} results ends here/p' "$__facet_log" \\
    | tac | sed -n '1,/{name} results starts here/p' | tac \\
    | grep -v -e '{name} results starts here' -e '{name} results ends here' | sed 's/^[[:space:]]*//;s/[[:space:]]*$//' \\
    | grep -v '^$')
  if grep -q '{name} results ends here' "$__facet_log" && [ "$__facet_block" = "{passed}" ]; then echo 1; else echo 0; fi
"""

_EXIT_GRADER = """\
  # no known parser: the exit status of run-tests.sh decides (0 passes)
  if [ "$__facet_status" -eq 0 ]; then echo 1; else echo 0; fi
"""

# parser_name -> (grader, what the conversion note says)
PARSERS: dict[str, tuple[str, str]] = {
    "pytest": (_PYTEST_GRADER, "graded like TB1's pytest parser (statuses in pytest's short test summary)"),
    "swebench": (_MARKER_GRADER.format(parser="swebench", name="SWEBench", passed="PASSED"),
                 "graded like TB1's swebench parser (PASSED between the SWEBench result markers), "
                 "not by run-tests.sh's exit status, which its parser step always makes 0"),
    "sweperf": (_MARKER_GRADER.format(parser="sweperf", name="SWE-Perf", passed="PASSED"),
                "graded like TB1's sweperf parser (PASSED between the SWE-Perf result markers)"),
    "mlebench": (_MARKER_GRADER.format(parser="mlebench", name="MLEBench", passed="ALL TESTS PASSED"),
                 "graded like TB1's mlebench parser (ALL TESTS PASSED between the MLEBench result markers)"),
}

_TEST_SH = """\
#!/bin/bash
# Converted by facet from a Terminal-Bench 1.x run-tests.sh (parser_name: {parser}). TB1 graded the
# test output with that parser; Harbor only reads /logs/verifier/reward.txt, so the original script runs
# below in a subshell with its output kept in /logs/verifier/run-tests.log, and the same decision is
# written as the reward on every exit path (EXIT trap).
# $TEST_DIR references were rewritten to /tests; TEST_DIR is still exported for helpers that read it.
export TEST_DIR=/tests
mkdir -p /logs/verifier
__facet_log=/logs/verifier/run-tests.log
__facet_status=1
: > "$__facet_log"
__facet_grade() {{
{grader}}}
__facet_write_reward() {{
  __facet_grade > /logs/verifier/reward.txt
}}
trap __facet_write_reward EXIT
(
{body}
) 2>&1 | tee "$__facet_log"
__facet_status=${{PIPESTATUS[0]}}
exit $__facet_status
"""


def _convert_run_tests(text: str, parser: str, notes: list[str]) -> str:
    body = text
    if body.startswith("#!"):
        first, _, body = body.partition("\n")
        if "bash" not in first:
            notes.append(f"run-tests.sh started {first.strip()!r}; tests/test.sh runs its body with bash")
    else:
        notes.append("run-tests.sh had no shebang; tests/test.sh starts with #!/bin/bash (Harbor runs it directly)")
    body, count = re.subn(r"\$\{TEST_DIR\}|\$TEST_DIR\b", "/tests", body)
    if count:
        notes.append(f"rewrote {count} $TEST_DIR reference(s) in run-tests.sh to /tests")
    grader, note = PARSERS.get(parser, (_EXIT_GRADER, ""))
    if parser in PARSERS:
        notes.append(f"parser_name {parser!r}: {note}")
    else:
        notes.append(f"WARNING: parser_name {parser!r} is not one facet converts (known: "
                     f"{', '.join(sorted(PARSERS))}); the reward comes from run-tests.sh's exit status, "
                     "which may not be how TB1 graded this task: check tests/test.sh")
    return _TEST_SH.format(parser=parser, grader=grader, body=body.rstrip("\n"))


# Files a TB1 Dockerfile may COPY from the task root that the conversion moves out of the build
# context (environment/): Harbor mounts tests/ at /tests and solution/ at /solution itself.
_MOVED = {"run-tests.sh", "solution.sh", "solution.yaml", "task.yaml", "tests", "docker-compose.yaml",
          "docker-compose.yml"}


def _rewrite_copies(dockerfile: str, notes: list[str]) -> str:
    """Drop COPY/ADD sources the conversion moved out of environment/ (a build would fail on them);
    an instruction left with no source is commented out, with the reason beside it."""
    out = []
    dropped: list[str] = []
    for line in dockerfile.split("\n"):
        m = re.match(r"^(\s*)(COPY|ADD)(\s+)(.*)$", line, re.I)
        if not m or line.rstrip().endswith("\\") or m.group(4).lstrip().startswith("["):
            out.append(line)
            continue
        words = m.group(4).split()
        flags = [w for w in words if w.startswith("--")]
        args = [w for w in words if not w.startswith("--")]
        if len(args) < 2 or any(f.startswith("--from") for f in flags):
            out.append(line)
            continue
        sources, dest = args[:-1], args[-1]
        keep = [src for src in sources if posixpath.normpath(src.lstrip("./") or ".").split("/")[0] not in _MOVED]
        gone = [src for src in sources if src not in keep]
        if not gone:
            out.append(line)
            continue
        dropped.extend(gone)
        if keep:
            out.append(f"{m.group(1)}{m.group(2)}{m.group(3)}{' '.join(flags + keep + [dest])}")
        else:
            out.append(f"# facet (TB1 conversion): {', '.join(gone)} moved out of the build context "
                       f"(Harbor provides /tests and /solution itself): {line.strip()}")
    if dropped:
        notes.append("removed from Dockerfile COPY/ADD (moved by the conversion, Harbor mounts tests/ and "
                     "solution/ at /tests and /solution): " + ", ".join(dropped))
    return "\n".join(out)


def is_tb1_dir(path: Path) -> bool:
    """A Terminal-Bench 1.x task: task.yaml beside the files TB1 runs (run-tests.sh, a Dockerfile or
    docker-compose file), not merely a task.yaml in some folder."""
    return (path / "task.yaml").is_file() and any(
        (path / n).exists() for n in ("run-tests.sh", "Dockerfile", "docker-compose.yaml", "docker-compose.yml"))


def yaml_error_line(exc: yaml.YAMLError) -> int | None:
    mark = getattr(exc, "problem_mark", None)
    return mark.line + 1 if mark is not None else None


def _env_pairs(value: Any) -> list[tuple[str, str]]:
    if isinstance(value, dict):
        return [(str(k), "" if v is None else str(v)) for k, v in value.items()]
    pairs = []
    for item in value or []:
        if isinstance(item, str) and "=" in item:
            k, v = item.split("=", 1)
            pairs.append((k, v))
    return pairs


def _dockerfile_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _convert_tb1_compose(text: str, env_files: dict[str, bytes], cfg: TaskConfig, notes: list[str]) -> None:
    """Fold a TB1 docker-compose.yaml into environment/ (mutates env_files, keys relative to environment/).

    A compose file with the single TB client service and only TB-managed settings is dropped; its
    `environment:` and `working_dir` become ENV/WORKDIR lines in the Dockerfile. Anything more
    (sidecars, ports, extra keys) is kept as a Harbor compose file whose client service is renamed
    `main`, with TB-managed keys removed: Harbor builds `main` itself from environment/.
    """
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise TaskFormatError("docker-compose.yaml", f"invalid YAML: {exc}", line=yaml_error_line(exc)) from None
    services = data.get("services") if isinstance(data, dict) else None
    if not isinstance(services, dict) or not services:
        raise TaskFormatError("docker-compose.yaml", "services must be a non-empty mapping", field="services")
    client_name = "client" if "client" in services else (next(iter(services)) if len(services) == 1 else None)
    if client_name is None:
        raise TaskFormatError("docker-compose.yaml", "no 'client' service", field="services.client")
    client = services[client_name]
    if not isinstance(client, dict):
        raise TaskFormatError("docker-compose.yaml", f"services.{client_name} must be a mapping",
                              field=f"services.{client_name}")

    build = client.get("build")
    if isinstance(build, str):
        build = {"context": build}
    if build is not None and not isinstance(build, dict):
        raise TaskFormatError("docker-compose.yaml", "build must be a string or mapping",
                              field=f"services.{client_name}.build")
    if build is None:
        image = client.get("image")
        if isinstance(image, str) and "${" not in image and "Dockerfile" not in env_files:
            cfg.docker_image = image
            notes.append(f"client service has no build; using its image {image} as [environment] docker_image")
        elif "Dockerfile" not in env_files:
            raise TaskFormatError("docker-compose.yaml", "client service has neither a build nor a fixed image",
                                  field=f"services.{client_name}.build")
    else:
        context = str(build.get("context", ".")).rstrip("/") or "."
        if context not in (".", "./"):
            raise TaskFormatError("docker-compose.yaml", f"build context {context!r} is not supported (expected '.')",
                                  field=f"services.{client_name}.build.context")
        dockerfile = str(build.get("dockerfile", "Dockerfile"))
        dockerfile = posixpath.normpath(dockerfile)
        if dockerfile != "Dockerfile":
            if dockerfile not in env_files:
                raise TaskFormatError("docker-compose.yaml", f"dockerfile {dockerfile!r} not found",
                                      field=f"services.{client_name}.build.dockerfile")
            if "Dockerfile" in env_files:
                raise TaskFormatError("docker-compose.yaml", f"dockerfile {dockerfile!r} given but a Dockerfile "
                                      "also exists", field=f"services.{client_name}.build.dockerfile")
            env_files["Dockerfile"] = env_files.pop(dockerfile)
            notes.append(f"renamed {dockerfile} to environment/Dockerfile")
        if "Dockerfile" not in env_files:
            raise TaskFormatError("Dockerfile", "missing Dockerfile (docker-compose.yaml builds the client from it)")

    extra_env = [(k, v) for k, v in _env_pairs(client.get("environment"))
                 if k != "TEST_DIR" and "T_BENCH" not in v]
    volumes = client.get("volumes") or []
    own_volumes = [v for v in volumes if not (isinstance(v, str) and "T_BENCH" in v)]
    simple = (len(services) == 1 and set(client) <= _TB1_COMPOSE_KEYS and not own_volumes
              and "Dockerfile" in env_files)
    if simple:
        lines = [f"ENV {k}={_dockerfile_quote(v)}" for k, v in extra_env]
        workdir = client.get("working_dir")
        if isinstance(workdir, str) and workdir:
            lines.append(f"WORKDIR {workdir}")
        if lines:
            df = env_files["Dockerfile"].decode("utf-8", "replace").rstrip("\n")
            env_files["Dockerfile"] = (df + "\n\n# Added by facet from the TB1 docker-compose.yaml\n"
                                       + "\n".join(lines) + "\n").encode("utf-8")
            notes.append("folded docker-compose.yaml environment/working_dir into the Dockerfile")
        notes.append("dropped the TB1 docker-compose.yaml (single client service; Harbor builds environment/)")
        return

    main = {k: v for k, v in client.items() if k not in ("build", "image", "container_name", "command")}
    if extra_env:
        main["environment"] = {k: v for k, v in extra_env}
    else:
        main.pop("environment", None)
    if own_volumes:
        main["volumes"] = own_volumes
    else:
        main.pop("volumes", None)
    new_services = {"main": main, **{k: v for k, v in services.items() if k != client_name}}
    out = {k: v for k, v in data.items() if k not in ("services", "version")}
    out["services"] = new_services
    env_files["docker-compose.yaml"] = yaml.safe_dump(out, sort_keys=True).encode("utf-8")
    notes.append("kept docker-compose.yaml as a Harbor compose file (client renamed to main, TB-managed keys "
                 "removed); review relative build contexts of other services by hand")


def read_tb1_dir(path: Path, max_file_bytes: int, max_total_bytes: int) -> TaskBundle:
    """Convert a Terminal-Bench 1.x task (spec §5) to our Harbor bundle layout.

    * instruction.md    <- task.yaml `instruction`
    * [metadata]        <- task.yaml author_name, author_email, difficulty, category, tags and the
                           time estimates (same key names); parser_name, run_tests_in_same_shell and
                           disable_asciinema are dropped
    * [agent] timeout   <- max_agent_timeout_sec (TB1 default 360); [verifier] timeout <- max_test_timeout_sec
                           (TB1 default 60); resources are set to the 2025 Harbor defaults explicitly
    * solution/solve.sh <- solution.sh (shebang added if missing); solution.yaml is rejected
    * tests/test.sh     <- run-tests.sh, $TEST_DIR -> /tests, reward.txt written from the exit status by an
                           EXIT trap (so an early `exit` or `set -e` abort still writes a reward)
    * tests/...         <- tests/...
    * environment/...   <- Dockerfile and every other top-level file (TB1's build context was the task root);
                           docker-compose.yaml folded in or converted (see _convert_tb1_compose)
    """
    notes: list[str] = []
    raw = decode_utf8(read_small_file(path / "task.yaml", "task.yaml", max_file_bytes), "task.yaml")
    try:
        meta = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise TaskFormatError("task.yaml", f"invalid YAML: {exc}", line=yaml_error_line(exc)) from None
    if not isinstance(meta, dict):
        raise TaskFormatError("task.yaml", "must be a YAML mapping")
    instruction = meta.get("instruction")
    if not isinstance(instruction, str) or not instruction.strip():
        raise TaskFormatError("task.yaml", "instruction must be a non-empty string", field="instruction")

    tree = collect_tree(path, max_file_bytes=max_file_bytes, max_total_bytes=max_total_bytes)
    files = tree.files
    if "solution.yaml" in files and "solution.sh" not in files:
        raise TaskFormatError("solution.yaml", "command-list solutions are not supported; provide solution.sh")
    compose_name = next((n for n in ("docker-compose.yaml", "docker-compose.yml") if n in files), None)
    missing = []
    if "run-tests.sh" not in files:
        missing.append(("run-tests.sh", "missing run-tests.sh (it becomes tests/test.sh)"))
    if compose_name is None and "Dockerfile" not in files:
        missing.append(("docker-compose.yaml", "missing docker-compose.yaml or Dockerfile"))
    if len(missing) == 1:
        raise TaskFormatError(*missing[0])
    if missing:
        raise TaskFormatError(missing[0][0], "missing files: " + "; ".join(m for _, m in missing))

    table: dict[str, Any] = {"version": "1.0", "metadata": {}}
    for key in _TB1_META:
        if key in meta and meta[key] is not None:
            table["metadata"][key] = meta[key]
    dropped = [k for k in _TB1_DROPPED if k in meta]
    if dropped:
        notes.append("dropped task.yaml keys with no Harbor equivalent: " + ", ".join(dropped))
    parser = meta.get("parser_name") or "pytest"
    parser = parser if isinstance(parser, str) else str(parser)
    timeouts = (("max_agent_timeout_sec", "agent", 360.0), ("max_test_timeout_sec", "verifier", 60.0))
    for key, section, default in timeouts:
        value = meta.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            line = next((n for n, l in enumerate(raw.splitlines(), 1) if l.startswith(f"{key}:")), None)
            raise TaskFormatError("task.yaml", f"{key} must be a positive number (got {value!r})", field=key,
                                  line=line)
        table[section] = {"timeout_sec": float(value)}
    table["environment"] = {"build_timeout_sec": 600.0, "cpus": 1, "memory": "2G", "storage": "10G"}
    cfg = config_from_toml(table)

    out: dict[str, bytes] = {}
    env_files: dict[str, bytes] = {}
    for rel, data in files.items():
        if rel in ("task.yaml", "solution.sh", "solution.yaml", "run-tests.sh", "docker-compose.yaml",
                   "docker-compose.yml"):
            continue
        if rel.startswith("tests/"):
            out[rel] = data
        elif rel in ("README.md", ".gitignore"):
            out[rel] = data
        else:
            env_files[rel] = data
    if "tests/test.sh" in out:
        raise TaskFormatError("tests/test.sh", "already exists; cannot place the converted run-tests.sh there")

    if compose_name:
        _convert_tb1_compose(decode_utf8(files[compose_name], compose_name), env_files, cfg, notes)
    if "Dockerfile" in env_files:
        text = decode_utf8(env_files["Dockerfile"], "Dockerfile")
        rewritten = _rewrite_copies(text, notes)
        if rewritten != text:
            env_files["Dockerfile"] = rewritten.encode("utf-8")

    out.update({f"environment/{k}": v for k, v in env_files.items()})
    out["tests/test.sh"] = _convert_run_tests(decode_utf8(files["run-tests.sh"], "run-tests.sh"), parser,
                                              notes).encode("utf-8")
    if "solution.sh" in files:
        solve = files["solution.sh"]
        if not solve.startswith(b"#!"):
            solve = b"#!/bin/bash\n" + solve
            notes.append("solution.sh had no shebang; solution/solve.sh starts with #!/bin/bash")
        out["solution/solve.sh"] = solve
    else:
        notes.append(f"WARNING: {NO_SOLUTION}")
    # Modes carry over for files that keep their place; moved/generated ones get facet's defaults.
    modes = {}
    for rel, mode in tree.modes.items():
        target = rel if rel.startswith("tests/") or rel in ("README.md", ".gitignore") else f"environment/{rel}"
        if target in out:
            modes[target] = mode
    return TaskBundle(name=path.name, instruction=instruction, config=cfg, files=out, modes=modes,
                      source_format="terminal-bench-1", notes=notes)
