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

from facet_site.lib.harbor.task_files import collect_files, read_small_file
from facet_site.lib.harbor.task_format import TaskBundle, TaskConfig, TaskFormatError, config_from_toml, decode_utf8

_TB1_DROPPED = ("parser_name", "run_tests_in_same_shell", "disable_asciinema")
_TB1_META = ("author_name", "author_email", "difficulty", "category", "tags", "estimated_duration_sec",
             "expert_time_estimate_min", "junior_time_estimate_min")
_TB1_COMPOSE_KEYS = {"build", "image", "container_name", "command", "environment", "volumes", "working_dir"}

_REWARD_TRAP = """\
# Converted by facet from a Terminal-Bench 1.x run-tests.sh. TB1 graded the run itself; Harbor only reads
# /logs/verifier/reward.txt, so the script's exit status becomes the reward on every exit path (EXIT trap).
# $TEST_DIR references were rewritten to /tests; TEST_DIR is still exported for helpers that read it.
export TEST_DIR=/tests
mkdir -p /logs/verifier
__facet_write_reward() {
  __facet_status=$?
  if [ "$__facet_status" -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
}
trap __facet_write_reward EXIT
"""

_REWARD_SUFFIX = """
# Added by facet (TB1 conversion): the script sets its own EXIT trap, so the reward is written here instead.
__facet_status=$?
if [ "$__facet_status" -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
exit $__facet_status
"""


def _convert_run_tests(text: str, notes: list[str]) -> str:
    shebang = "#!/bin/bash"
    body = text
    if body.startswith("#!"):
        first, _, body = body.partition("\n")
        shebang = first.rstrip()
    else:
        notes.append("run-tests.sh had no shebang; tests/test.sh starts with #!/bin/bash (Harbor runs it directly)")
    body, count = re.subn(r"\$\{TEST_DIR\}|\$TEST_DIR\b", "/tests", body)
    if count:
        notes.append(f"rewrote {count} $TEST_DIR reference(s) in run-tests.sh to /tests")
    if re.search(r"^\s*trap\b.*\b(EXIT|0)\s*$", body, re.M):
        notes.append("run-tests.sh sets its own EXIT trap; reward written by a suffix after the script instead")
        head = "export TEST_DIR=/tests\nmkdir -p /logs/verifier\n"
        return f"{shebang}\n{head}{body.rstrip()}\n{_REWARD_SUFFIX}"
    return f"{shebang}\n{_REWARD_TRAP}\n{body}" if body.endswith("\n") else f"{shebang}\n{_REWARD_TRAP}\n{body}\n"


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

    files = collect_files(path, max_file_bytes=max_file_bytes, max_total_bytes=max_total_bytes)
    if "solution.yaml" in files and "solution.sh" not in files:
        raise TaskFormatError("solution.yaml", "command-list solutions are not supported; provide solution.sh")
    if "run-tests.sh" not in files:
        raise TaskFormatError("run-tests.sh", "missing run-tests.sh (it becomes tests/test.sh)")

    table: dict[str, Any] = {"version": "1.0", "metadata": {}}
    for key in _TB1_META:
        if key in meta and meta[key] is not None:
            table["metadata"][key] = meta[key]
    dropped = [k for k in _TB1_DROPPED if k in meta]
    if dropped:
        notes.append("dropped task.yaml keys with no Harbor equivalent: " + ", ".join(dropped))
    if meta.get("parser_name", "pytest") != "pytest":
        notes.append(f"parser_name {meta['parser_name']!r}: reward now comes from run-tests.sh's exit status")
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

    compose_name = next((n for n in ("docker-compose.yaml", "docker-compose.yml") if n in files), None)
    if compose_name:
        _convert_tb1_compose(decode_utf8(files[compose_name], compose_name), env_files, cfg, notes)
    elif "Dockerfile" not in env_files:
        raise TaskFormatError("docker-compose.yaml", "missing docker-compose.yaml or Dockerfile")

    out.update({f"environment/{k}": v for k, v in env_files.items()})
    out["tests/test.sh"] = _convert_run_tests(decode_utf8(files["run-tests.sh"], "run-tests.sh"), notes).encode("utf-8")
    if "solution.sh" in files:
        solve = files["solution.sh"]
        if not solve.startswith(b"#!"):
            solve = b"#!/bin/bash\n" + solve
            notes.append("solution.sh had no shebang; solution/solve.sh starts with #!/bin/bash")
        out["solution/solve.sh"] = solve
    else:
        notes.append("no solution.sh: the oracle agent cannot run this task")
    return TaskBundle(name=path.name, instruction=instruction, config=cfg, files=out,
                      source_format="terminal-bench-1", notes=notes)
