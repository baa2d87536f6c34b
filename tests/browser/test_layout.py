"""The pages reviewers use most hold their layout at 1280 and 1920 px: no element sticks out of its
card or panel, the page never scrolls sideways, a file viewer's line numbers stay level with their
lines, and a diff gives its width to the code, not to the line numbers.

The data is made to stress them: a task with a long file, lines far wider than the screen, repairs
with diffs, trials with long test names and reasons. With FACET_SCREENSHOTS=DIR (`make screenshots`)
every page is also saved as a PNG for reviewers of the UI.
"""
import os
from pathlib import Path

import pytest

from tasks.models import Task, TaskVersion, TestResult, Trial
from tests.tasks.conftest import make_run, skills  # noqa: F401 (fixtures)
from tests.tasks.test_list_detail import build_task_with_repairs

from .conftest import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDTHS = (1280, 1920)
SHOTS = Path(os.environ["FACET_SCREENSHOTS"]) if os.environ.get("FACET_SCREENSHOTS") else None

LONG_LINE = "RUN " + " && ".join(f"echo configuring-component-number-{i}-with-a-long-name" for i in range(14))
LONG_TEST = "test_the_quarterly_report_lists_every_region_with_its_totals_and_the_grand_total_at_the_end"
LONG_TOKEN = "/app/out/" + "nested-directory-name/" * 8 + "report.csv"


def stress(task: Task) -> None:
    """Long lines, a long file and long names where reviewers read them."""
    version = task.current_version
    files = dict(version.files)
    files["environment/Dockerfile"] = ("FROM facet-base:bookworm\nWORKDIR /app\n" + LONG_LINE + "\n"
                                       + "".join(f"RUN echo line {i}\n" for i in range(3, 120)))
    files["environment/data/wide.csv"] = "".join(f"{i}," + ",".join(f"column{j}" for j in range(60)) + "\n"
                                                 for i in range(40))
    files["tests/test_outputs.py"] += f"\ndef {LONG_TEST}():\n    assert open('{LONG_TOKEN}').read()  # {LONG_LINE}\n"
    TaskVersion.objects.filter(pk=version.pk).update(files=files)
    for trial in Trial.objects.filter(validation__version=version):
        TestResult.objects.create(trial=trial, name=f"tests/test_outputs.py::{LONG_TEST}", outcome="failed",
                                 message=f"AssertionError: {LONG_TOKEN} " * 3)
        Trial.objects.filter(pk=trial.pk).update(reason=f"failed: {LONG_TEST} wrote {LONG_TOKEN}")


OVERFLOWS = """() => {
  const containers = "main, .card, .tab-panel, .file-diff, .file-view, section, td, th";
  const name = el => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "")
      + (el.className && typeof el.className === "string" ? "." + el.className.trim().split(/\\s+/).join(".") : "");
  const bad = [];
  for (const el of document.querySelectorAll("main *")) {
    if (el.closest(".js-plotly-plot, details:not([open]) > :not(summary)")) continue;
    const style = getComputedStyle(el);
    if (style.position === "absolute" || style.position === "fixed" || style.display === "none") continue;
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    let p = el.parentElement, scrolls = false;
    while (p && !p.matches(containers)) {
      if (getComputedStyle(p).overflowX !== "visible") { scrolls = true; break; }
      p = p.parentElement;
    }
    if (scrolls || !p || getComputedStyle(p).overflowX !== "visible") continue;
    const pr = p.getBoundingClientRect();
    const out = Math.max(r.right - pr.right, pr.left - r.left);
    if (out > 1) bad.push(name(el) + " sticks out of " + name(p) + " by " + Math.round(out) + " px");
  }
  if (document.documentElement.scrollWidth > window.innerWidth + 1)
    bad.push("the page scrolls sideways: " + document.documentElement.scrollWidth + " > " + window.innerWidth);
  return bad.slice(0, 12);
}"""

LINE_DRIFT = """() => {
  const bad = [];
  for (const table of document.querySelectorAll(".highlight table.highlighttable")) {
    for (const number of table.querySelectorAll("td.linenos a[href^='#']")) {
      const line = table.querySelector("td.code a[id='" + number.getAttribute("href").slice(1) + "']");
      if (!line) continue;
      const drift = Math.abs(number.getBoundingClientRect().top - line.getBoundingClientRect().top);
      if (drift > 2) { bad.push(number.getAttribute("href") + " is " + Math.round(drift) + " px from its line"); break; }
    }
    const first = table.querySelector("td.linenos a");
    if (first && first.getBoundingClientRect().height > 30) bad.push("a line number wraps: " + first.textContent);
  }
  return bad;
}"""

DIFF_COLUMNS = """() => {
  const bad = [];
  for (const table of document.querySelectorAll("table.diff")) {
    const row = table.querySelector("tr:not(.d-hunk)");
    if (!row) continue;
    const width = table.getBoundingClientRect().width;
    let numbers = 0;
    for (const td of row.querySelectorAll("td.ln")) numbers += td.getBoundingClientRect().width;
    if (numbers > 0.15 * width) bad.push("line numbers take " + Math.round(100 * numbers / width) + "% of a diff");
  }
  return bad;
}"""


def check(page, label: str, width: int) -> list[str]:
    problems = [f"{label} @ {width}px: {p}" for p in page.evaluate(OVERFLOWS) + page.evaluate(LINE_DRIFT)
                + page.evaluate(DIFF_COLUMNS)]
    if SHOTS is not None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        # the top 3000 px: a long page (a 20,000-line diff) would take minutes as one picture
        height = min(page.evaluate("document.documentElement.scrollHeight"), 3000)
        page.screenshot(path=str(SHOTS / f"{label}-{width}.png"), full_page=True, timeout=60_000,
                        clip={"x": 0, "y": 0, "width": width, "height": height})
    return problems


def pages(task: Task) -> list[tuple[str, str]]:
    t = f"/tasks/{task.pk}/"
    return [
        ("overview", "/"), ("tasks", "/tasks/"), ("skills", "/skills/"), ("taxonomy", "/skills/taxonomy/"),
        ("runs", "/runs/"), ("queue", "/tasks/queue/"), ("funnel", "/tasks/overview/"),
        ("task-instruction", t), ("task-environment", f"{t}?tab=environment"),
        ("task-environment-wide", f"{t}?tab=environment&file=data%2Fwide.csv"),
        ("task-solution", f"{t}?tab=solution"), ("task-verifier", f"{t}?tab=verifier"),
        ("task-validation", f"{t}?tab=validation"), ("task-repairs", f"{t}?tab=repairs"),
        ("task-repairs-split", f"{t}?tab=repairs&diff=split"), ("task-provenance", f"{t}?tab=provenance"),
        ("task-llm", f"{t}?tab=llm"), ("task-checks", f"{t}?tab=checks"), ("task-review-tab", f"{t}?tab=review"),
        ("review", f"{t}review/"), ("audit", "/tasks/audit/"),
        ("analytics", "/tasks/analytics/"), ("analytics-tags", "/tasks/analytics/tags/"),
        ("analytics-families", "/tasks/analytics/families/"), ("rollouts", "/tasks/rollouts/"),
        ("exports", "/tasks/exports/"), ("imports", "/tasks/imports/"),
    ]


def test_main_pages_hold_their_layout_at_1280_and_1920_px(page, make_run):  # noqa: F811
    task = build_task_with_repairs(make_run(""))
    stress(task)
    login(page, "reviewer")
    problems = []
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        for label, url in pages(task):
            response = page.goto(url)
            assert response.status == 200, (url, response.status)
            page.wait_for_load_state("networkidle")
            problems += check(page, label, width)
    assert problems == [], "\n".join(problems)


def test_the_checks_catch_what_they_are_for(page, make_run):  # noqa: F811
    """The same checks on a page broken on purpose: code that wraps beside its numbers, a table
    wider than its card, a diff whose number columns take most of the width."""
    task = build_task_with_repairs(make_run(""))
    stress(task)
    login(page, "reviewer")
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"/tasks/{task.pk}/?tab=environment")
    page.add_style_tag(content=".highlight td.code pre { white-space: pre-wrap !important; }"
                               " .highlight td.code { max-width: none !important; }")
    assert any("from its line" in p for p in page.evaluate(LINE_DRIFT))
    page.goto(f"/tasks/{task.pk}/?tab=validation")
    page.add_style_tag(content="table.trials td { overflow-wrap: normal !important; white-space: nowrap !important; }")
    assert any("sticks out of" in p or "scrolls sideways" in p for p in page.evaluate(OVERFLOWS))
    page.goto(f"/tasks/{task.pk}/?tab=repairs")
    page.add_style_tag(content="table.diff col.ln { width: 40% !important; }")
    assert any("line numbers take" in p for p in page.evaluate(DIFF_COLUMNS))
