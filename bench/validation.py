"""Validation benchmark: facet's validate_task against the same steps done with the plain docker CLI.

Generates three small but realistic Harbor tasks in a temp dir (bench/validation_tasks.py: FROM
facet-base:bookworm with a CSV or JSON fixture, a solve.sh that transforms it with python3 / jq /
awk+sqlite3, a pytest verifier that writes /logs/verifier/reward.txt and junit.xml), builds each
once, then runs, per
round and per task, interleaved in one process (the order rotates every round):

* ours:           facet_site.lib.validation.validate_task, partial_solutions=[]
                  (cached build lookup, static checks, nop trial, oracle trial);
* plain:          validation.time_plain_cli_validation (docker run -d ... sleep infinity,
                  docker exec, docker cp, docker rm -f for the nop and oracle trials);
* plain_build:    `docker build` (layer cache hit) followed by the same plain trials: the
                  plain-CLI version of "build (cached) + nop + oracle";
* ours_partials:  validate_task with its default partial solutions (up to 3), for scale.

Every Sandbox method and the helpers validate_task calls are wrapped with timers (a few
microseconds each), so the report shows where our time goes next to the plain CLI's.

Then the repair measurement: validate a task, change only tests/ (a verifier repair), validate
again, counting image builds by BuildResult.cached and by counting the task's images before and
after; the same for a solution-only repair (also expected 0) and an environment repair (expected
1, which shows the count can see a build).

Usage:
    .venv/bin/python bench/validation.py                 # 10 rounds
    .venv/bin/python bench/validation.py --rounds 3      # quick run
    .venv/bin/python bench/validation.py --trials        # the cost of the repeated nop/oracle trials
Results go to bench/results/validation.json (pass --out to change). Containers carry the owner
label bench-validation:<host>:<pid>:<nonce> (plain-CLI ones plain-cli:<host>:<pid>:...), images
the label facet.task=bench-<task>-<nonce>; both are removed at the end (--keep-images keeps the
images).
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.machine import cpu_model  # noqa: E402
from bench.validation_tasks import describe_task, write_tasks  # noqa: E402

from facet_site.lib import docker_engine as de  # noqa: E402
from facet_site.lib import validation as v  # noqa: E402

GOAL_RATIO = 1.15
VARIANTS = ("ours", "plain", "ours_partials", "plain_build")

# --------------------------------------------------------------------------------------------
# Timing instrumentation (wrappers around what validate_task calls)


class Profile:
    """Accumulates seconds and calls per label while `active`; everything else passes through."""

    def __init__(self):
        self.active = False
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()

    def add(self, label: str, seconds: float) -> None:
        if self.active:
            self.seconds[label] += seconds
            self.calls[label] += 1

    def wrap(self, owner, attr: str, label_fn=None) -> None:
        original = getattr(owner, attr)
        label = attr.lstrip("_")

        @functools.wraps(original)
        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.add(label_fn(args, kwargs) if label_fn else label, time.perf_counter() - t0)

        setattr(owner, attr, timed)


def _exec_label(args, kwargs) -> str:
    cmd = args[1] if len(args) > 1 else kwargs.get("cmd")
    text = cmd if isinstance(cmd, str) else " ".join(cmd or [])
    if "/solution/solve.sh" in text:
        return "exec solve.sh"
    if "/tests/test.sh" in text:
        return "exec test.sh"
    return "exec other"


def instrument(profile: Profile) -> None:
    sb = de.Sandbox
    profile.wrap(sb, "start", lambda a, k: "sandbox start (create+start)")
    profile.wrap(sb, "close", lambda a, k: "sandbox remove")
    profile.wrap(sb, "put_files", lambda a, k: "put_files (upload)")
    profile.wrap(sb, "exec", _exec_label)
    profile.wrap(sb, "snapshot", lambda a, k: "snapshot (archive read + docker top)")
    profile.wrap(sb, "processes", lambda a, k: "  docker top (inside snapshot, but e0's before it)")
    profile.wrap(sb, "peak_memory_bytes", lambda a, k: "peak_memory_bytes (stats)")
    profile.wrap(sb, "_layer_size", lambda a, k: "  disk watchdog polls (inside exec)")
    profile.wrap(sb, "_new_oom_kill", lambda a, k: "oom check")
    profile.wrap(v, "static_checks", lambda a, k: "static_checks")
    profile.wrap(v, "derive_partial_solutions", lambda a, k: "derive_partial_solutions (bash -n)")
    profile.wrap(v, "image_workdir_of", lambda a, k: "image inspect (workdir)")
    profile.wrap(de, "build_image", lambda a, k: "build_image (cached lookup)")
    profile.wrap(de, "cleanup_leftovers", lambda a, k: "cleanup_leftovers (list by owner)")
    profile.wrap(v.TaskFiles, "__init__", lambda a, k: "read task files")


# --------------------------------------------------------------------------------------------
# Helpers


def docker_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)


def stats(values: list[float]) -> dict:
    values = sorted(values)
    if not values:
        return {"n": 0}
    p90 = statistics.quantiles(values, n=10, method="inclusive")[8] if len(values) > 1 else values[0]
    return {"n": len(values), "median": round(statistics.median(values), 3), "p90": round(p90, 3),
            "mean": round(statistics.fmean(values), 3), "min": round(values[0], 3),
            "max": round(values[-1], 3)}


def task_images(client, label: str) -> list[str]:
    return sorted(img.id for img in client.images.list(filters={"label": f"facet.task={label}"}))


def all_env_images(client) -> int:
    return len(client.images.list(name=de.ENV_IMAGE_REPOSITORY))


def run_ours(client, task_dir: Path, owner: str, partials: bool,
             measure_memory: bool = True) -> tuple[float, v.ValidationReport]:
    t0 = time.perf_counter()
    # one nop and one oracle, as the plain CLI runs them: the repeated runs are
    # bench/validation_trials.py's subject (--trials)
    report = v.validate_task(client, task_dir, owner=owner,
                             partial_solutions=None if partials else [],
                             measure_memory=measure_memory, trial_runs=1, max_parallel=1)
    return time.perf_counter() - t0, report


def run_plain(task_dir: Path, image_tag: str) -> tuple[float, dict]:
    t0 = time.perf_counter()
    result = v.time_plain_cli_validation(task_dir, image_tag)
    return time.perf_counter() - t0, result


def plain_build(task_dir: Path, tag: str, owner: str) -> float:
    t0 = time.perf_counter()
    proc = docker_cli("build", "-q", "--network", "host", "--label", f"facet.bench.owner={owner}",
                      "-t", tag, str(task_dir / "environment"))
    if proc.returncode != 0:
        raise RuntimeError(f"docker build failed: {proc.stderr[-500:]}")
    return time.perf_counter() - t0


def run_plain_build(task_dir: Path, plain_tag: str, owner: str) -> tuple[float, dict]:
    t0 = time.perf_counter()
    build_s = plain_build(task_dir, plain_tag, owner)
    result = v.time_plain_cli_validation(task_dir, plain_tag)
    result["build_seconds"] = build_s
    return time.perf_counter() - t0, result


def plain_cli_micro(image_tag: str, task_dir: Path, owner: str, reps: int = 5) -> dict:
    """What single docker CLI commands cost here, to set next to the Sandbox method timings."""
    times: dict[str, list[float]] = defaultdict(list)
    for _ in range(reps):
        t0 = time.perf_counter()
        cid = docker_cli("run", "-d", "--network", "none", "--cpus", "1", "--memory", "2g",
                         "--pids-limit", "1024", "--label", f"{de.LABEL_SANDBOX}=1",
                         "--label", f"{de.LABEL_OWNER}={owner}", "--entrypoint", "sleep",
                         image_tag, "infinity").stdout.strip()
        times["docker run -d"].append(time.perf_counter() - t0)
        try:
            for label, args in (("docker exec true", ("exec", cid, "true")),
                                ("docker cp tests/", ("cp", str(task_dir / "tests"), f"{cid}:/tests")),
                                ("docker exec cat reward-like file", ("exec", cid, "cat", "/tests/test.sh"))):
                t0 = time.perf_counter()
                docker_cli(*args)
                times[label].append(time.perf_counter() - t0)
        finally:
            t0 = time.perf_counter()
            docker_cli("rm", "-f", cid)
            times["docker rm -f"].append(time.perf_counter() - t0)
    return {k: stats(vals)["median"] for k, vals in times.items()}


def remove_my_containers(client, owners_prefixes: list[str]) -> int:
    rows = client.api.containers(all=True, filters={"label": [f"{de.LABEL_SANDBOX}=1"]})
    removed = 0
    for row in rows:
        owner = (row.get("Labels") or {}).get(de.LABEL_OWNER, "")
        if any(owner.startswith(p) for p in owners_prefixes):
            client.api.remove_container(row["Id"], force=True, v=True)
            removed += 1
    return removed


# --------------------------------------------------------------------------------------------
# Repairs


def measure_repairs(client, tasks: list[tuple[Path, dict]], owner: str) -> dict:
    """For each task: validate, then a verifier-only, a solution-only and an environment repair,
    each validated. A build is counted when BuildResult.cached is False, and independently as
    the growth of the task's images (label facet.task=<task dir>)."""
    kinds = ("verifier_only", "solution_only", "environment")
    per_task = []
    totals = {k: {"builds_by_cached_flag": 0, "new_images": 0, "accepted": 0, "validations": 0}
              for k in kinds}
    for task_dir, spec in tasks:
        label = task_dir.name
        _, base_report = run_ours(client, task_dir, owner, partials=False)
        rows = {"task": spec["name"], "baseline_cached": base_report.build.cached,
                "baseline_accepted": base_report.accepted}
        for kind in kinds:
            if kind == "verifier_only":  # a verifier repair: one more test in tests/
                path = task_dir / "tests" / "test_outputs.py"
                path.write_text(path.read_text() + spec["verifier_repair"])
            elif kind == "solution_only":  # a solution repair: stricter shell, a comment
                path = task_dir / "solution" / "solve.sh"
                lines = path.read_text().splitlines(keepends=True)
                path.write_text(lines[0] + "# repaired: fixed locale for sort/jq output\n"
                                "export LC_ALL=C.UTF-8\n" + "".join(lines[1:]))
            else:  # an environment repair: a Dockerfile change
                path = task_dir / "environment" / "Dockerfile"
                path.write_text(path.read_text() + "ENV PYTHONDONTWRITEBYTECODE=1\n")
            images_before = task_images(client, label)
            env_images_before = all_env_images(client)
            seconds, report = run_ours(client, task_dir, owner, partials=False)
            images_after = task_images(client, label)
            built = report.build is not None and not report.build.cached
            new_images = len(set(images_after) - set(images_before))
            rows[kind] = {
                "build_cached": None if report.build is None else report.build.cached,
                "builds_by_cached_flag": int(built), "new_images": new_images,
                "facet_env_images_delta_all_owners": all_env_images(client) - env_images_before,
                "accepted": report.accepted, "failure": report.failure,
                "build_seconds": round(report.build_seconds, 3),
                "validation_seconds": round(seconds, 3)}
            t = totals[kind]
            t["builds_by_cached_flag"] += int(built)
            t["new_images"] += new_images
            t["accepted"] += int(report.accepted)
            t["validations"] += 1
        per_task.append(rows)
        print(f"  repairs {spec['name']}: " + ", ".join(
            f"{k} builds={rows[k]['builds_by_cached_flag']} images+{rows[k]['new_images']}"
            for k in kinds), flush=True)
    return {"per_task": per_task, "totals": totals,
            "expected_builds_per_repair": {"verifier_only": 0, "solution_only": 0,
                                           "environment": 1}}


# --------------------------------------------------------------------------------------------
# Main


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "validation")
    parser.add_argument("--keep-images", action="store_true")
    parser.add_argument("--keep-tasks", action="store_true", help="leave the generated tasks")
    parser.add_argument("--what-if", action="store_true",
                        help="add a fifth variant, ours with measure_memory=False (no stats call)")
    parser.add_argument("--trials", action="store_true",
                        help="measure the repeated trials instead (bench/validation_trials.py: before/after, "
                             "concurrency speed-up, each trial against the plain CLI)")
    args, rest = parser.parse_known_args(argv)
    if args.trials:
        from bench import validation_trials
        return validation_trials.main([*rest, "--rounds", str(min(args.rounds, 5)), "--seed", str(args.seed)])
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")

    client = de.connect(os.environ.get("DOCKER_HOST", ""))
    info = de.engine_info(client)
    if de.find_image(client, de.BASE_IMAGE_TAG) is None:
        print(f"{de.BASE_IMAGE_TAG} is missing: python -m facet_site.lib.docker_engine base-image",
              file=sys.stderr)
        return 1
    nonce = uuid.uuid4().hex[:8]
    host, pid = socket.gethostname(), os.getpid()
    owner = f"bench-validation:{host}:{pid}:{nonce}"
    work = Path(tempfile.mkdtemp(prefix="facet-bench-validation-"))
    tasks = write_tasks(work, nonce, seed=args.seed)
    plain_tags = {d: f"facet-bench-plain:{spec['name']}-{nonce}" for d, spec in tasks}
    load_start = [round(x, 2) for x in os.getloadavg()]
    started = time.monotonic()
    profile = Profile()
    instrument(profile)
    variants = VARIANTS + (("ours_no_stats",) if args.what_if else ())
    ours_variants = [k for k in variants if k.startswith("ours")]
    samples: dict[str, dict[str, list[float]]] = {k: defaultdict(list) for k in variants}
    ours_profile = {k: defaultdict(list) for k in ours_variants}
    ours_profile_calls = {k: defaultdict(int) for k in ours_variants}
    phases: dict[str, dict[str, list[float]]] = {k: defaultdict(list) for k in variants}
    problems: list[str] = []
    first_builds = {}
    plain_first_builds = {}
    loads: list[float] = []
    try:
        # Build every image once (not timed as part of the rounds) and warm both paths up.
        image_tags = {}
        for d, spec in tasks:
            _, report = run_ours(client, d, owner, partials=True)
            if not report.accepted:
                raise SystemExit(f"{spec['name']} was not accepted: {report.failure}: "
                                 f"{report.reason}")
            image_tags[d] = report.image_tag
            first_builds[spec["name"]] = round(report.build_seconds, 2)
            plain_first_builds[spec["name"]] = round(plain_build(d, plain_tags[d], owner), 2)
            run_plain(d, report.image_tag)
            print(f"built {spec['name']}: {report.image_tag[:22]}… in {report.build_seconds:.1f}s "
                  f"({len(report.trials)} trials, accepted)", flush=True)

        for r in range(args.rounds):
            loads.append(os.getloadavg()[0])
            for ti, (d, spec) in enumerate(tasks):
                shift = (r + ti) % len(variants)
                order = variants[shift:] + variants[:shift]
                for variant in order:
                    if variant in ours_variants:
                        profile.reset()
                        profile.active = True
                        seconds, report = run_ours(client, d, owner, variant == "ours_partials",
                                                   measure_memory=variant != "ours_no_stats")
                        profile.active = False
                        if not report.accepted or not report.build.cached:
                            problems.append(f"round {r} {spec['name']} {variant}: accepted="
                                            f"{report.accepted} cached={report.build.cached} "
                                            f"{report.failure} {report.reason}")
                        ph = phases[variant]
                        ph["build (cached lookup)"].append(report.build_seconds)
                        for t in report.trials:
                            ph[f"{t.kind} trial"].append(t.total_seconds)
                            if t.solution_seconds is not None:
                                ph[f"{t.kind} solve.sh exec"].append(t.solution_seconds)
                            ph[f"{t.kind} test.sh exec"].append(t.verifier_seconds)
                        ph["outside build and trials"].append(
                            seconds - report.build_seconds - sum(t.total_seconds
                                                                 for t in report.trials))
                        for label, secs in profile.seconds.items():
                            ours_profile[variant][label].append(secs)
                            ours_profile_calls[variant][label] += profile.calls[label]
                    elif variant == "plain":
                        seconds, res = run_plain(d, image_tags[d])
                        phases[variant]["nop trial"].append(res["nop_seconds"])
                        phases[variant]["oracle trial"].append(res["oracle_seconds"])
                    else:
                        seconds, res = run_plain_build(d, plain_tags[d], owner)
                        phases[variant]["docker build (layer cache)"].append(res["build_seconds"])
                        phases[variant]["nop trial"].append(res["nop_seconds"])
                        phases[variant]["oracle trial"].append(res["oracle_seconds"])
                    if variant.startswith("plain") and (res["nop_reward"] != 0
                                                        or res["oracle_reward"] != 1):
                        problems.append(f"round {r} {spec['name']} {variant}: rewards "
                                        f"{res['nop_reward']}/{res['oracle_reward']}")
                    samples[variant][spec["name"]].append(seconds)
            line = "  ".join(f"{k} {statistics.median(sum(samples[k].values(), [])):.2f}s"
                             for k in variants)
            print(f"round {r + 1}/{args.rounds}: medians so far: {line} "
                  f"(load {os.getloadavg()[0]:.2f})", flush=True)

        micro = plain_cli_micro(next(iter(image_tags.values())), tasks[0][0], owner)
        print("repairs…", flush=True)
        repairs = measure_repairs(client, tasks, owner)
    finally:
        profile.active = False
        leftover = remove_my_containers(client, [owner, f"plain-cli:{host}:{pid}:"])
        if not args.keep_images:
            for d, _ in tasks:
                for image_id in task_images(client, d.name):
                    try:
                        client.images.remove(image_id, force=True)
                    except Exception as exc:  # noqa: BLE001 - cleanup is best effort
                        print(f"could not remove {image_id[:19]}: {exc}", file=sys.stderr)
                docker_cli("rmi", "-f", plain_tags[d])
        if not args.keep_tasks:
            shutil.rmtree(work, ignore_errors=True)

    overall = {k: stats(sum(samples[k].values(), [])) for k in variants}
    per_task = {spec["name"]: {k: stats(samples[k][spec["name"]]) for k in variants}
                for _, spec in tasks}
    paired = {}
    for base in ("plain", "plain_build"):
        ratios = [o / p for name in samples["ours"]
                  for o, p in zip(samples["ours"][name], samples[base][name])]
        paired[base] = stats(ratios)
    ratios = {
        f"ours/{base}": {"median": round(overall["ours"]["median"] / overall[base]["median"], 3),
                         "p90": round(overall["ours"]["p90"] / overall[base]["p90"], 3),
                         "paired_per_run_median": paired[base]["median"]}
        for base in ("plain", "plain_build")}
    if args.what_if:
        ratios["ours_no_stats/plain"] = {
            "median": round(overall["ours_no_stats"]["median"] / overall["plain"]["median"], 3),
            "p90": round(overall["ours_no_stats"]["p90"] / overall["plain"]["p90"], 3)}
    n_runs = overall["ours"]["n"]
    profile_out = {
        variant: {label: {"seconds_per_validation": round(sum(vals) / n_runs, 4),
                          "calls_per_validation": round(ours_profile_calls[variant][label] / n_runs,
                                                        2)}
                  for label, vals in sorted(prof.items(), key=lambda kv: -sum(kv[1]))}
        for variant, prof in ours_profile.items()}
    phases_out = {k: {label: stats(vals)["median"] for label, vals in ph.items()}
                  for k, ph in phases.items()}
    t = repairs["totals"]
    result = {
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(),
                    "docker_version": info["server_version"], "api_version": info["api_version"],
                    "storage_driver": info["storage_driver"],
                    "backing_filesystem": info["backing_filesystem"],
                    "cgroup_version": info["cgroup_version"],
                    "disk_quota": de.engine_info(client)["disk_quota"],
                    "shared": "yes: another engineer's Docker tests ran on the same engine and "
                              "cores during the run",
                    "load_average_at_start": load_start,
                    "load_average_1min_per_round": [round(x, 2) for x in loads],
                    "load_average_after": [round(x, 2) for x in os.getloadavg()]},
        "data": {"tasks": [describe_task(d, spec) for d, spec in tasks], "synthetic": True,
                 "generator": f"bench/validation.py write_tasks (seed {args.seed})",
                 "base_image": de.BASE_IMAGE_TAG,
                 "first_build_seconds": {"ours (build_image)": first_builds,
                                         "plain (docker build, layers already cached)":
                                             plain_first_builds}},
        "method": {
            "rounds": args.rounds, "runs_per_variant": n_runs,
            "interleaving": "per round, per task, the four variants in an order rotated by "
                            "round+task; images built once before the rounds",
            "variants": {
                "ours": "validate_task(partial_solutions=[]): static checks, build_image "
                        "(cached: context hash + image lookup), nop and oracle trials in "
                        "Sandboxes (limits, e0 snapshot, fs diff, verifier-log read, peak memory)",
                "plain": "validation.time_plain_cli_validation: docker run -d --network none "
                         "... sleep infinity, docker exec mkdir, docker cp solution/tests, "
                         "docker exec solve.sh/test.sh, docker exec cat reward.txt, docker rm -f",
                "plain_build": "docker build -q (legacy builder, every layer cached) + plain",
                "ours_partials": "validate_task with derived partial solutions (up to 3 more "
                                 "trials)"},
            "seconds": "wall clock around each call (time.perf_counter), whole validation"},
        "seconds": overall,
        "seconds_per_task": per_task,
        "ratios": ratios,
        "phases_median_seconds": phases_out,
        "ours_profile": profile_out,
        "plain_cli_single_commands_median_seconds": micro,
        "repairs": repairs,
        "problems": problems,
        "goals": {
            f"ours at most {GOAL_RATIO}x plain CLI (median)":
                ratios["ours/plain"]["median"] <= GOAL_RATIO,
            f"ours at most {GOAL_RATIO}x plain CLI (p90)":
                ratios["ours/plain"]["p90"] <= GOAL_RATIO,
            f"ours at most {GOAL_RATIO}x plain CLI with docker build (median)":
                ratios["ours/plain_build"]["median"] <= GOAL_RATIO,
            "0 builds from verifier-only repairs":
                t["verifier_only"]["builds_by_cached_flag"] == 0
                and t["verifier_only"]["new_images"] == 0,
            "0 builds from solution-only repairs":
                t["solution_only"]["builds_by_cached_flag"] == 0
                and t["solution_only"]["new_images"] == 0,
            "1 build per environment repair":
                t["environment"]["builds_by_cached_flag"] == t["environment"]["validations"]
                and t["environment"]["new_images"] == t["environment"]["validations"],
        },
        "cleanup": {"leftover_containers_removed": leftover},
        "total_seconds": round(time.monotonic() - started, 1),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                                 capture_output=True, text=True).stdout.strip(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("seconds", "ratios", "phases_median_seconds",
                                             "ours_profile", "goals")}, indent=2))
    if problems:
        print(f"{len(problems)} problems:\n  " + "\n  ".join(problems[:20]), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
