"""The task page (one tab per artifact, repair diffs, validation on demand, executable re-checks)
and the files and logs it links to. The task list is tasks.list_views."""
from __future__ import annotations

import json
from pathlib import Path, PurePosixPath

from django.contrib import messages
from django.http import FileResponse, Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.http import urlencode
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_POST

from facet_site.lib.harbor.binary import hex_peek, preview_kind, strings_peek
from facet_site.lib.render import highlight_code, render_markdown
from facet_site.roles import can_review, require
from scenarios.models import LLMCall

from . import diffs, rechecks, review_views, rollout_views, task_recovery
from .blobs import blob_bytes, blob_head
from .models import (
    CheckKind,
    EnvironmentBuild,
    Recheck,
    Step,
    Task,
    TaskBlob,
    TaskStatus,
    TaskVersion,
    Trial,
    Validation,
    ValidationStatus,
)
from .terminal import ansi_to_html
from .validating import request_validation, retry_validation

TRIAL_LOGS = {"solution.log", "verifier.log", "result.json", "junit.xml", "reward.txt"}


# --- the task page ---------------------------------------------------------------------------------

TABS = [
    ("instruction", "Instruction"), ("environment", "Environment"), ("solution", "Solution"),
    ("verifier", "Verifier"), ("validation", "Validation"), ("repairs", "Repairs"), ("provenance", "Provenance"),
    ("llm", "LLM calls"), ("checks", "Re-checks"), ("review", "Review"), ("rollouts", "Rollouts"),
]
COLLAPSE_LINES = 200  # longer files show their head and a "show all" link
COLLAPSE_CHARS = 16 * 1024  # so do larger ones, however few lines they have (a one-line 195 KB JSON)
MAX_INLINE_CHARS = 256 * 1024  # larger files show their head and a download link only
MAX_E0_FILES = 500


def _anchor(path: str) -> str:
    return "f-" + "".join(c if c.isalnum() else "-" for c in path).strip("-")


def _file_view(task: Task, version: TaskVersion | None, path: str, text: str, *, show_all: bool) -> dict:
    """One file for the page: highlighted with line anchors, collapsed past COLLAPSE_LINES,
    and past MAX_INLINE_CHARS only its head plus a download link."""
    lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    too_large = len(text) > MAX_INLINE_CHARS
    collapsed = too_large or (not show_all and (lines > COLLAPSE_LINES or len(text) > COLLAPSE_CHARS))
    shown = text
    by_size = False
    if collapsed:  # the head, by lines and by size, whichever is shorter
        shown = "".join(text.splitlines(keepends=True)[:COLLAPSE_LINES])
        by_size = len(shown) > COLLAPSE_CHARS
        shown = shown[:COLLAPSE_CHARS]
    anchor = _anchor(path)
    download = None
    if version is not None and path in version.files:
        download = reverse("tasks:version-file", args=[task.pk, version.number, path])
    return {"path": path, "anchor": anchor, "lines": lines, "size": len(text.encode()), "collapsed": collapsed,
            "shown_chars": len(shown), "chars": len(text), "by_size": by_size,
            "too_large": too_large, "download": download,
            # Pygments escapes the code; its markup is the only markup
            "html": mark_safe(highlight_code(shown, filename=path, anchor=anchor))}


def _binary_view(task: Task, version: TaskVersion, path: str, blob: TaskBlob | None) -> dict:
    """A binary file for the page: type, size, a download, a preview a browser shows safely
    (image, audio, PDF), else a hex and strings peek of its first bytes."""
    download = reverse("tasks:version-file", args=[task.pk, version.number, path])
    kind = blob.media_type if blob else "application/octet-stream"
    view = {"path": path, "anchor": _anchor(path), "binary": True, "size": blob.size if blob else 0,
            "media_type": kind, "download": download, "preview": preview_kind(kind),
            "preview_url": download + "?inline=1"}
    if view["preview"] is None and blob is not None:
        head = blob_head(blob)
        view.update(hex=hex_peek(head), strings=strings_peek(head, limit=20))
    return view


def _binary_views(task: Task, version: TaskVersion | None, prefix: str) -> list[dict]:
    refs = {p: d for p, d in ((version.binary_files or {}) if version else {}).items() if p.startswith(prefix)}
    blobs = {b.sha256: b for b in TaskBlob.objects.filter(sha256__in=set(refs.values()))}
    return [_binary_view(task, version, p, blobs.get(d)) for p, d in sorted(refs.items())]


def _tree(paths: list[str]) -> list[dict]:
    """A flat, ordered listing of a directory tree (directories first) with depths, for the
    environment's file browser."""
    root: dict = {}
    for path in paths:
        node = root
        parts = PurePosixPath(path).parts
        for part in parts[:-1]:
            node = node.setdefault(part + "/", {})
        node[parts[-1]] = path
    rows: list[dict] = []

    def walk(node: dict, depth: int, prefix: str):
        for name in sorted(node, key=lambda n: (not n.endswith("/"), n.lower())):
            value = node[name]
            if isinstance(value, dict):
                rows.append({"depth": depth, "name": name, "dir": True, "path": prefix + name})
                walk(value, depth + 1, prefix + name)
            else:
                rows.append({"depth": depth, "name": name, "dir": False, "path": value})

    walk(root, 0, "")
    return rows


def _tab_url(task: Task, tab: str, version: TaskVersion | None, **extra) -> str:
    params = {"tab": tab}
    if version is not None and version.pk != task.current_version_id:
        params["v"] = version.number
    params.update({k: v for k, v in extra.items() if v not in (None, "")})
    return reverse("tasks:detail", args=[task.pk]) + "?" + urlencode(params)


def _fs_rows(fs_diff: dict | None) -> list[dict]:
    """The filesystem diff a solution made (against e0), one row per path."""
    if not fs_diff:
        return []
    files = fs_diff.get("files") or {}
    rows = [{"path": p, "change": "added", **(files.get(p) or {})} for p in fs_diff.get("added") or []]
    rows += [{"path": p, "change": "modified", "what": ", ".join(what), **(files.get(p) or {})}
             for p, what in (fs_diff.get("modified") or {}).items()]
    rows += [{"path": p, "change": "removed"} for p in fs_diff.get("removed") or []]
    return sorted(rows, key=lambda r: r["path"])


def _trial_for_page(trial: Trial) -> Trial:
    trial.solution_html = ansi_to_html(trial.solution_output)
    trial.verifier_html = ansi_to_html(trial.verifier_output)
    trial.fs_rows = _fs_rows(trial.fs_diff)
    return trial


def _test_matrix(validation: Validation) -> dict:
    trials = list(validation.trials.all())
    names: dict[str, None] = {}  # in first-seen order
    cells: dict[tuple[int, str], object] = {}
    for t in trials:
        for r in t.tests.all():
            names.setdefault(r.name)
            cells[(t.pk, r.name)] = r
    rows = [{"name": n, "cells": [cells.get((t.pk, n)) for t in trials]} for n in names]
    return {"validation": validation, "trials": trials, "rows": rows}


def _initial_state(task: Task, version: TaskVersion | None) -> dict | None:
    state = None
    if version is not None:
        state = (version.validations.exclude(initial_state=None).order_by("-id")
                 .values_list("initial_state", flat=True).first())
    if state is None and task.environment_id:
        state = task.environment.initial_state
    if not state:
        return None
    snapshot = state.get("snapshot") or {}
    files = sorted((snapshot.get("files") or {}).values(), key=lambda e: e.get("path", ""))
    return {"image_tag": state.get("image_tag"), "workdir": state.get("workdir"), "roots": state.get("roots") or [],
            "services": state.get("services") or [], "missing": snapshot.get("missing") or [],
            "truncated": snapshot.get("truncated") or len(files) > MAX_E0_FILES, "count": len(files),
            "files": [dict(e, mode_octal=oct(e.get("mode") or 0)[2:]) for e in files[:MAX_E0_FILES]]}


def _llm_calls(task: Task, versions: list[TaskVersion], repairs: list) -> dict:
    # a version carries its parent's calls too: name each call by the most specific record first
    where: dict[int, str] = {}
    sources = [(f"Repair {r.number}", r.llm_calls) for r in repairs]
    if task.environment_id:
        sources.append(("Environment", task.environment.llm_calls))
    sources += [(f"v{v.number}", v.llm_calls) for v in versions]
    for label, calls in sources:
        for key, call_id in (calls or {}).items():
            if isinstance(call_id, int) and call_id not in where:
                where[call_id] = f"{label}: {key}"
    calls = list(LLMCall.objects.filter(pk__in=where).defer("messages", "parsed").order_by("id"))
    for call in calls:
        call.where = where[call.pk]
    return {
        "calls": calls,
        "tokens_in": sum(c.tokens_in or 0 for c in calls), "tokens_out": sum(c.tokens_out or 0 for c in calls),
        "latency_ms": sum(c.latency_ms or 0 for c in calls),
        "cost_usd": sum(c.cost_usd or 0 for c in calls), "cost_known": any(c.cost_usd is not None for c in calls),
    }


def _json(value) -> str:
    return mark_safe(highlight_code(json.dumps(value, indent=2, ensure_ascii=False, default=str), language="json", anchor="j"))


def _repairs_tab(request, task: Task, context: dict) -> None:
    versions = list(task.versions.order_by("number"))
    by_id = {v.pk: v for v in versions}
    repairs = list(task.repairs.select_related("triggered_by").order_by("number"))
    first_outcome = {}
    for v in (Validation.objects.filter(version__task=task, recheck__isnull=True,
                                        status__in=[ValidationStatus.DONE, ValidationStatus.ERROR])
              .order_by("id").values("version_id", "accepted", "failure", "reason", "status", "id")):
        first_outcome.setdefault(v["version_id"], v)
    layout = "split" if request.GET.get("diff") == "split" else "unified"
    timeline = []
    if versions:
        first = versions[0]
        timeline.append({"version": first, "repair": None, "outcome": first_outcome.get(first.pk)})
    for r in repairs:
        old, new = by_id.get(r.from_version_id), by_id.get(r.to_version_id)
        timeline.append({
            "version": new, "repair": r, "from": old, "outcome": first_outcome.get(r.to_version_id), "prefix": f"r{r.number}-",
            "diffs": diffs.files_diff(old.files if old else {}, new.files if new else {}),
        })
    # environment repairs during construction: one build attempt's files against the previous one's
    builds = list(task.environment.builds.order_by("attempt")) if task.environment_id else []
    env_repairs = [{"build": b, "previous": p, "diffs": diffs.files_diff(p.files, b.files), "prefix": f"b{b.attempt}-"}
                   for p, b in zip(builds, builds[1:]) if p.files != b.files]
    compare = None
    numbers = {v.number: v for v in versions}
    a, b = request.GET.get("from", ""), request.GET.get("to", "")
    if a.isdigit() and b.isdigit() and int(a) in numbers and int(b) in numbers:
        compare = {"old": numbers[int(a)], "new": numbers[int(b)],
                   "diffs": diffs.files_diff(numbers[int(a)].files, numbers[int(b)].files)}
    context.update(timeline=timeline, env_repairs=env_repairs, layout=layout, compare=compare,
                   all_versions=versions,
                   layout_links={"unified": _tab_url(task, "repairs", context["version"], diff="", **{"from": a, "to": b}),
                                 "split": _tab_url(task, "repairs", context["version"], diff="split", **{"from": a, "to": b})})


def _panel(template: str, ctx: dict, request, task: Task) -> str:
    # the review and rollout panels are other areas' templates: rendered with their own context
    return mark_safe(render_to_string(template, {**ctx, "task": task}, request=request))


def task_detail(request, task_id: int):
    task = get_object_or_404(Task.objects.select_related("environment", "current_version", "run", "scenario"), pk=task_id)
    versions = list(task.versions.order_by("number").only("id", "number", "content_hash", "parent_id",
                                                          "created_by_repair_id", "created_at", "task_id"))
    open_validations = Validation.objects.filter(version__task=task, recheck__isnull=True,
                                                 status__in=[ValidationStatus.QUEUED, ValidationStatus.RUNNING])
    # an imported task stays "validating" until somebody validates it: nothing runs, nothing to watch
    never_validated = task.imported and not Validation.objects.filter(version__task=task, recheck__isnull=True).exists()
    running = (task.status not in (TaskStatus.VALIDATED, TaskStatus.DISCARDED, TaskStatus.FAILED)
               and not never_validated) or open_validations.exists()
    if request.htmx:
        response = render(request, "tasks/detail.html#status", {"task": task, "running": running,
                                                                 "never_validated": never_validated,
                                                                 "construction_offer": task_recovery.offer(task)})
        if not running:
            response.status_code = 286  # nothing left to watch: htmx stops polling
        return response

    version = task.current_version
    v = request.GET.get("v", "")
    if v.isdigit():
        version = task.versions.filter(number=int(v)).first()
        if version is None:
            raise Http404(f"Task #{task.pk} has no version {v}.")
    elif version is None and versions:
        version = task.versions.order_by("-number").first()
    tab = request.GET.get("tab", "instruction")
    if tab not in dict(TABS):
        tab = "instruction"
    files = version.files if version is not None else {}
    show_all = set(request.GET.getlist("all"))
    repairs = list(task.repairs.select_related("from_version", "to_version").order_by("number")
                   .only("id", "number", "artifact", "failure", "outcome", "from_version__number",
                         "to_version__number", "llm_calls", "prompt_version", "task_id"))
    latest = None
    if version is not None:
        latest = (version.validations.filter(recheck__isnull=True).order_by("-id")
                  .prefetch_related("trials").first())
    context = {
        "task": task, "version": version, "versions": versions, "repairs": repairs, "running": running,
        "never_validated": never_validated,
        "env_repair_count": task.environment.repair_count if task.environment_id else 0,
        "tab": tab, "tabs": [(key, label, _tab_url(task, key, version)) for key, label in TABS],
        "latest": latest, "files": sorted(set(files) | set((version.binary_files or {}) if version else {})),
        "binary_files": (version.binary_files or {}) if version else {},
        "can_recheck": version is not None and task.step == Step.DONE,
        "finding_kinds": [k for k in task.finding_kinds.split(",") if k],  # error-level, all validations
        "can_retry": can_review(request.user),
        "construction_offer": task_recovery.offer(task),
    }

    def file_views(prefix: str) -> list[dict]:
        views = [_file_view(task, version, p, files[p], show_all=p in show_all or "1" in show_all)
                 for p in sorted(files) if p.startswith(prefix)]
        return sorted(views + _binary_views(task, version, prefix), key=lambda f: f["path"])

    if tab == "instruction":
        # sanitised by nh3 (render_markdown): no script, handler or javascript: URL survives
        context["instruction_html"] = mark_safe(render_markdown(files.get("instruction.md", "")))
        if "task.toml" in files:
            context["task_toml"] = _file_view(task, version, "task.toml", files["task.toml"], show_all=True)
    elif tab == "environment":
        env_files = {p.removeprefix("environment/"): t for p, t in files.items() if p.startswith("environment/")}
        env_binary = {f["path"].removeprefix("environment/"): f for f in _binary_views(task, version, "environment/")}
        if not env_files and task.environment_id:
            env_files = dict(task.environment.files or {})  # no version yet: the environment's own files
        chosen = request.GET.get("file", "")
        if chosen in env_binary:
            context["chosen_binary"] = env_binary[chosen]
        elif chosen not in env_files:  # the Dockerfile is always shown: open the first other file
            chosen = next((p for p in sorted(env_files) if p != "Dockerfile"), "Dockerfile" if env_files else "")
        context.update(
            tree=[dict(row, url=None if row["dir"] else _tab_url(task, "environment", version, file=row["path"]))
                  for row in _tree(list(env_files) + list(env_binary))], chosen=chosen,
            dockerfile=(_file_view(task, version, "environment/Dockerfile", env_files["Dockerfile"], show_all=True)
                        if "Dockerfile" in env_files else None),
            chosen_file=(_file_view(task, version, f"environment/{chosen}", env_files[chosen],
                                    show_all=bool(show_all)) if chosen in env_files and chosen != "Dockerfile"
                         else None),
            builds=[dict(build=b, log_html=ansi_to_html(b.log)) for b in
                    (task.environment.builds.order_by("attempt") if task.environment_id else [])],
            e0=_initial_state(task, version),
            manifest_html=_json(task.environment.manifest) if task.environment_id and task.environment.manifest else "",
            init_checks=task.environment.init_checks if task.environment_id else [],
        )
    elif tab == "solution":
        context["file_views"] = file_views("solution/")
    elif tab == "verifier":
        context["file_views"] = file_views("tests/")
        validations = (version.validations.filter(status__in=[ValidationStatus.DONE, ValidationStatus.ERROR])
                       .order_by("-id").prefetch_related("trials__tests")[:10]) if version else []
        context["matrices"] = [_test_matrix(val) for val in validations]
    elif tab == "validation":
        validations = list(version.validations.order_by("-id").select_related("recheck", "requested_by")
                           .prefetch_related("trials__tests")[:30]) if version else []
        for val in validations:
            val.build_log_html = ansi_to_html(val.build_log)
            val.trial_list = [_trial_for_page(t) for t in val.trials.all()]
        context["validations"] = validations
    elif tab == "repairs":
        _repairs_tab(request, task, context)
    elif tab == "provenance":
        scenario = task.scenario
        context.update(
            scenario=scenario, skills=scenario.pair.ordered_skills() if scenario else [],
            labels=task.labels.order_by("kind", "value"),
            prompt_versions=[("Task version", version.prompt_versions if version else {}),
                             ("Environment", task.environment.prompt_versions if task.environment_id else {}),
                             ("Scenario", scenario.prompt_versions if scenario else {})],
            repair_prompts=[(r.number, r.artifact, r.prompt_version) for r in repairs if r.prompt_version],
            solution_reference_html=_json(scenario.solution_reference) if scenario and scenario.solution_reference else "",
            instruction_reference_html=(_json(scenario.instruction_reference)
                                        if scenario and scenario.instruction_reference else ""),
        )
    elif tab == "llm":
        full_versions = list(task.versions.order_by("number").only("id", "number", "llm_calls"))
        context.update(_llm_calls(task, full_versions, repairs))
    elif tab == "checks":
        checks = list(Recheck.objects.filter(version__task=task).select_related("version", "requested_by")[:50])
        chosen = request.GET.get("recheck", "")
        shown = next((r for r in checks if str(r.pk) == chosen), None) or next(iter(checks), None)
        context.update(checks=checks, max_runs=rechecks.MAX_RUNS, default_runs=rechecks.DEFAULT_FLAKINESS_RUNS)
        if shown is not None:
            context.update(_recheck_panel(shown))
    elif tab == "review":
        context["review_panel"] = _panel("tasks/_review_panel.html", review_views.panel_context(request, task),
                                         request, task)
    elif tab == "rollouts":
        context["rollouts_panel"] = _panel("tasks/_rollouts_panel.html",
                                           rollout_views.rollouts_context(request, task), request, task)
    return render(request, "tasks/detail.html", context)


def version_file(request, task_id: int, number: int, path: str):
    """One file of one version, as a download. Only paths the version has; never the disk."""
    version = get_object_or_404(TaskVersion, task_id=task_id, number=number)
    name = PurePosixPath(path).name.replace('"', "").replace("\\", "") or "file"
    disposition = "attachment"
    if path in version.files:
        response = HttpResponse(version.files[path], content_type="text/plain; charset=utf-8")
    elif path in (version.binary_files or {}):
        blob = get_object_or_404(TaskBlob, sha256=version.binary_files[path])
        # Only types facet sniffed as image/audio/PDF are ever shown inline, and never as HTML or
        # SVG (script); everything else is an opaque download.
        inline = request.GET.get("inline") == "1" and preview_kind(blob.media_type) is not None
        response = HttpResponse(blob_bytes(blob.sha256),
                                content_type=blob.media_type if inline else "application/octet-stream")
        if inline:
            disposition = "inline"
            if preview_kind(blob.media_type) != "pdf":  # the browser's PDF viewer needs scripts of its own
                response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    else:
        raise Http404("This version has no such file.")
    response["Content-Disposition"] = f'{disposition}; filename="{name}"'
    response["X-Content-Type-Options"] = "nosniff"
    return response


@require_POST
@require(can_review)
def validate(request, task_id: int):
    task = get_object_or_404(Task, pk=task_id)
    if task.current_version_id is None:
        messages.error(request, f"Task #{task.pk} has no version to validate yet.")
    else:
        validation = request_validation(task.current_version, user=request.user)
        messages.success(request, f"Validation #{validation.pk} of v{task.current_version.number} is queued.")
    return redirect("tasks:detail", task_id=task.pk)


@require_POST
@require(can_review)
def validation_retry(request, validation_id: int):
    """Retry a validation that hit an infrastructure error, or resume one whose worker died."""
    validation = get_object_or_404(Validation.objects.select_related("version"), pk=validation_id)
    again = retry_validation(validation)
    if again is None and validation.status == ValidationStatus.ERROR:
        messages.info(request, f"Validation #{validation.pk} was retried already: a newer validation of "
                               f"v{validation.version.number} exists.")
    elif again is None:
        messages.error(request, f"Validation #{validation.pk} is {validation.get_status_display().lower()}: only one "
                                "that hit an infrastructure error, or whose worker stopped answering, can be retried.")
    else:
        messages.success(request, f"Validation #{again.pk} of v{validation.version.number} is queued.")
    return redirect("tasks:detail", task_id=validation.version.task_id)


@require_POST
@require(can_review)
def construction_retry(request, task_id: int):
    """Retry a task whose construction failed, resume one whose worker died, or try the Docker
    Engine again for a waiting one (tasks/task_recovery.py)."""
    task = get_object_or_404(Task, pk=task_id)
    done = task_recovery.retry_construction(task=task, user=request.user)
    if done == task_recovery.RETRY:
        messages.success(request, f"Task #{task.pk} goes back to {task.get_step_display().lower()}; its step is queued.")
    elif done == task_recovery.RESUME:
        messages.success(request, f"Task #{task.pk} is resumed: its step ({task.get_step_display().lower()}) is queued again.")
    elif done == task_recovery.WAKE:
        messages.success(request, f"A Docker Engine answers: task #{task.pk} is back at {task.get_step_display().lower()}.")
    else:
        messages.info(request, f"Task #{task.pk} has nothing to retry or resume ({task.get_status_display().lower()}"
                               f"{', no Docker Engine answers yet' if task.status == 'waiting_for_docker' else ''}).")
    return redirect("tasks:detail", task_id=task.pk)


# --- executable re-checks ------------------------------------------------------------------------------


@require_POST
@require(can_review)
def recheck_create(request, task_id: int):
    task = get_object_or_404(Task.objects.select_related("current_version"), pk=task_id)
    number = request.POST.get("v", "")
    version = task.versions.filter(number=int(number)).first() if number.isdigit() else task.current_version
    if version is None:
        raise Http404("No such version.")
    kind = request.POST.get("kind", "")
    runs = request.POST.get("runs", "").strip()
    try:
        if runs and not runs.isdigit():
            raise rechecks.RecheckRefused(f"runs: {runs!r} is not a whole number")
        recheck = rechecks.request_recheck(version, kind=kind, runs=int(runs) if runs else None, user=request.user)
    except rechecks.RecheckRefused as exc:
        messages.error(request, str(exc))
        return redirect(_tab_url(task, "checks", version))
    rechecks.queue(recheck)
    what = "Re-validation" if kind == CheckKind.REVALIDATE else f"Flakiness check ({recheck.runs} runs)"
    messages.success(request, f"{what} #{recheck.pk} of v{version.number} is queued on the Docker queue.")
    return redirect(_tab_url(task, "checks", version, recheck=recheck.pk))


def _recheck_panel(recheck: Recheck) -> dict:
    """rechecks.panel with the logs as HTML (escaped, ANSI colours as classes)."""
    context = rechecks.panel(recheck)
    for run in context["runs"]:
        run.build_log_html = ansi_to_html(run.build_log) if run.build_log else ""
        for t in run.trials:
            t.solution_html = ansi_to_html(t.solution_log) if t.solution_log else ""
            t.verifier_html = ansi_to_html(t.verifier_log) if t.verifier_log else ""
    return context


def recheck_progress(request, recheck_id: int):
    """The re-check panel: polled by htmx every 2 s until the re-check is over (286)."""
    recheck = get_object_or_404(Recheck.objects.select_related("version__task", "requested_by"), pk=recheck_id)
    task = recheck.version.task
    if not request.htmx:
        return redirect(_tab_url(task, "checks", recheck.version, recheck=recheck.pk))
    context = _recheck_panel(recheck)
    context["task"] = task
    response = render(request, "tasks/detail/recheck.html", context)
    if not context["polling"]:
        response.status_code = 286
    return response


@require_POST
@require(can_review)
def recheck_resume(request, recheck_id: int):
    """Put a re-check that waited for Docker back on the queue."""
    recheck = get_object_or_404(Recheck.objects.select_related("version__task"), pk=recheck_id)
    if task_recovery.resume_recheck(recheck):
        messages.success(request, f"Re-check #{recheck.pk} is back on the Docker queue.")
    elif recheck.status in rechecks.OPEN:
        messages.info(request, f"Re-check #{recheck.pk} is queued already; nothing waits for a Docker Engine.")
    else:
        messages.error(request, f"Re-check #{recheck.pk} is over already.")
    return redirect(_tab_url(recheck.version.task, "checks", recheck.version, recheck=recheck.pk))


# --- logs ----------------------------------------------------------------------------------------------


def _serve(path: str, root: str, name: str, *, download: bool = False):
    """Only files inside the record's own log directory, never a path taken from the request. Shown
    in the browser as plain text (nosniff is on, so a log never renders as HTML); ?download=1 saves it."""
    if not path:
        raise Http404("no log kept")
    file = Path(path).resolve()
    if not file.is_file() or not file.is_relative_to(Path(root).resolve()):
        raise Http404("log not found")
    return FileResponse(open(file, "rb"), as_attachment=download, filename=name,
                        content_type="text/plain; charset=utf-8")


def trial_log(request, trial_id: int, name: str):
    trial = get_object_or_404(Trial, pk=trial_id)
    if name not in TRIAL_LOGS:
        raise Http404("unknown log")
    return _serve(str(Path(trial.logs_path) / name), trial.logs_path, f"trial-{trial.pk}-{name}",
                  download=request.GET.get("download") == "1")


def build_log(request, build_id: int):
    build = get_object_or_404(EnvironmentBuild, pk=build_id)
    return _serve(build.log_path, str(Path(build.log_path).parent), f"build-{build.pk}.log",
                  download=request.GET.get("download") == "1")
