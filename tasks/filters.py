"""The task selection shared by the task list, saved views, bulk actions, exports, rollout
batches and the analytics pages' links: one query string, one queryset.

Parameters (all optional, repeatable where it makes sense):
  status, run, strategy, review (review_state), reason (decision reason), category (fine-grained
  or top-level slug), tag, family, origin (generated | imported), tests_min/tests_max,
  repairs_min/repairs_max, pass_min/pass_max (0..1; tasks without rollouts never match),
  rolled (yes | no), q (full text over name and instruction), ids (comma-separated),
  finding ("any", "none" or a check id such as flaky or leaked_answer: error-level findings on
  the current version, over all its validations), failure (a validation failure type),
  stage (a stage of the construction funnel, tasks.funnel.FUNNEL_STAGES: constructed tasks
  that reached it, so the overview's funnel links open exactly the tasks it counts),
  sort (one of SORTS, "-" for descending), cols (comma-separated COLUMNS).
Unknown values are reported in `errors` (field and problem) and ignored, never a 500.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import urlencode

from django.db import connection
from django.db.models import Exists, Min, OuterRef, Q, QuerySet, Subquery
from django.db.models.expressions import RawSQL
from django.http import QueryDict

from facet_site.lib import validation as val
from scenarios.models import Strategy

from .models import (
    BuildOutcome,
    Decision,
    EnvironmentBuild,
    LabelKind,
    RejectReason,
    ReviewState,
    Task,
    TaskLabel,
    TaskStatus,
    Validation,
    ValidationStatus,
)

SORTS = {
    "id": "id", "name": "name", "status": "status", "review": "review_state", "tests": "n_tests",
    "repairs": "repair_rounds", "pass": "pass_rate", "updated": "updated_at", "run": "run_id",
}
COLUMNS = {
    "name": "Name", "status": "Status", "review": "Review", "run": "Run", "strategy": "Strategy",
    "category": "Category", "tests": "Tests", "repairs": "Repairs", "pass": "Pass rate", "version": "Version",
    "updated": "Updated", "note": "Note", "findings": "Findings",
}
DEFAULT_COLUMNS = ["name", "status", "review", "run", "findings", "tests", "repairs", "pass", "version", "note"]
DEFAULT_SORT = "-id"
MULTI = ("status", "run", "strategy", "review", "reason", "category", "tag", "family", "difficulty", "finding",
         "failure")
_CHECK_ID = re.compile(r"[a-z][a-z0-9_]{0,39}")
# the stages of tasks.funnel.FUNNEL_STAGES (a test checks the two agree, names and counts)
FUNNEL_STAGES = ("seeds", "first_build_logs", "initial_environment_success", "environment_repair_recovery",
                 "successful_environments", "entering_validation", "first_pass_valid", "task_repair_recovery",
                 "final_validated")


DIFFICULTY_VALUES = ("easy", "medium", "hard", "unknown")


@dataclass
class TaskFilter:
    status: list[str] = field(default_factory=list)
    run: list[int] = field(default_factory=list)
    strategy: list[str] = field(default_factory=list)
    review: list[str] = field(default_factory=list)
    reason: list[str] = field(default_factory=list)
    category: list[str] = field(default_factory=list)
    tag: list[str] = field(default_factory=list)
    family: list[str] = field(default_factory=list)
    difficulty: list[str] = field(default_factory=list)  # easy | medium | hard | unknown (TaskLabel)
    finding: list[str] = field(default_factory=list)
    failure: list[str] = field(default_factory=list)
    origin: str = ""
    tests_min: int | None = None
    tests_max: int | None = None
    repairs_min: int | None = None
    repairs_max: int | None = None
    pass_min: float | None = None
    pass_max: float | None = None
    rolled: str = ""
    stage: str = ""
    q: str = ""
    ids: list[int] = field(default_factory=list)
    sort: str = DEFAULT_SORT
    cols: list[str] = field(default_factory=lambda: list(DEFAULT_COLUMNS))
    errors: list[str] = field(default_factory=list)

    # --- parsing ---------------------------------------------------------------------------------

    @classmethod
    def from_query(cls, query: QueryDict | dict | str | None) -> "TaskFilter":
        if query is None:
            query = QueryDict("")
        elif isinstance(query, str):
            query = QueryDict(query.lstrip("?"))
        elif isinstance(query, dict) and not isinstance(query, QueryDict):  # a QueryDict is a dict: keep its lists
            qd = QueryDict("", mutable=True)
            for k, v in query.items():
                qd.setlist(k, v if isinstance(v, list) else [v])
            query = qd
        f = cls()

        def values(name):
            out = []
            for raw in query.getlist(name):
                out.extend(p.strip() for p in str(raw).split(",") if p.strip())
            return out

        def choice(name, allowed):
            got = []
            for v in values(name):
                if v in allowed:
                    got.append(v)
                else:
                    f.errors.append(f"{name}: unknown value {v!r}")
            return got

        f.status = choice("status", TaskStatus.values)
        f.strategy = choice("strategy", Strategy.values)
        f.review = choice("review", ReviewState.values)
        f.reason = choice("reason", RejectReason.values)
        f.category, f.tag, f.family = values("category"), values("tag"), values("family")
        f.difficulty = choice("difficulty", DIFFICULTY_VALUES)
        f.failure = choice("failure", val.FAILURE_TYPES)
        for v in values("finding"):
            if _CHECK_ID.fullmatch(v):
                f.finding.append(v)
            else:
                f.errors.append(f"finding: {v!r} is not any, none or a check id")
        for name in ("run", "ids"):
            nums = []
            for v in values(name):
                if v.isdigit():
                    nums.append(int(v))
                else:
                    f.errors.append(f"{name}: {v!r} is not a number")
            setattr(f, name, nums)
        origin = query.get("origin", "")
        if origin in ("generated", "imported"):
            f.origin = origin
        elif origin:
            f.errors.append(f"origin: must be generated or imported, not {origin!r}")
        stage = query.get("stage", "")
        if stage in FUNNEL_STAGES:
            f.stage = stage
        elif stage:
            f.errors.append(f"stage: unknown funnel stage {stage!r}")
        rolled = query.get("rolled", "")
        if rolled in ("yes", "no"):
            f.rolled = rolled
        elif rolled:
            f.errors.append(f"rolled: must be yes or no, not {rolled!r}")
        for name in ("tests_min", "tests_max", "repairs_min", "repairs_max"):
            raw = query.get(name, "").strip()
            if raw:
                if raw.isdigit():
                    setattr(f, name, int(raw))
                else:
                    f.errors.append(f"{name}: {raw!r} is not a whole number")
        for name in ("pass_min", "pass_max"):
            raw = query.get(name, "").strip()
            if raw:
                try:
                    value = float(raw)
                    if not 0 <= value <= 1:
                        raise ValueError
                    setattr(f, name, value)
                except ValueError:
                    f.errors.append(f"{name}: {raw!r} is not a rate between 0 and 1")
        f.q = query.get("q", "").strip()[:200]
        sort = query.get("sort", "").strip()
        if sort:
            if sort.lstrip("-") in SORTS:
                f.sort = sort
            else:
                f.errors.append(f"sort: unknown column {sort!r}")
        cols = values("cols")
        if cols:
            good = [c for c in cols if c in COLUMNS]
            f.errors.extend(f"cols: unknown column {c!r}" for c in cols if c not in COLUMNS)
            f.cols = good or list(DEFAULT_COLUMNS)
        return f

    # --- the queryset ----------------------------------------------------------------------------

    def queryset(self, base: QuerySet | None = None) -> QuerySet:
        qs = Task.objects.all() if base is None else base
        if self.ids:
            qs = qs.filter(pk__in=self.ids)
        if self.status:
            qs = qs.filter(status__in=self.status)
        if self.run:
            qs = qs.filter(run_id__in=self.run)
        if self.strategy:
            qs = qs.filter(strategy__in=self.strategy)
        if self.review:
            qs = qs.filter(review_state__in=self.review)
        if self.origin:
            qs = qs.filter(imported=self.origin == "imported")
        if self.category:
            qs = qs.filter(Exists(TaskLabel.objects.filter(
                task=OuterRef("pk"), kind__in=[LabelKind.CATEGORY, LabelKind.DOMAIN], value__in=self.category)))
        if self.tag:
            qs = qs.filter(Exists(TaskLabel.objects.filter(task=OuterRef("pk"), kind=LabelKind.TAG,
                                                           value__in=self.tag)))
        if self.family:
            qs = qs.filter(Exists(TaskLabel.objects.filter(task=OuterRef("pk"), kind=LabelKind.FAMILY,
                                                           value__in=self.family)))
        if self.difficulty:
            qs = qs.filter(Exists(TaskLabel.objects.filter(task=OuterRef("pk"), kind=LabelKind.DIFFICULTY,
                                                           value__in=self.difficulty)))
        if self.reason:
            # the reason of the decision in force: newest on the current hash, not withdrawn
            newer = Decision.objects.filter(task=OuterRef("task"), content_hash=OuterRef("content_hash"),
                                            id__gt=OuterRef("id"), withdraws__isnull=True, withdrawn_by__isnull=True)
            qs = qs.filter(Exists(Decision.objects.filter(
                task=OuterRef("pk"), content_hash=OuterRef("current_version__content_hash"), reason__in=self.reason,
                withdraws__isnull=True, withdrawn_by__isnull=True).exclude(Exists(newer))))
        if self.finding:
            wanted = Q()
            for kind in self.finding:
                wanted |= (~Q(finding_kinds="") if kind == "any" else Q(finding_kinds="") if kind == "none"
                           else Q(finding_kinds__contains=f",{kind},"))
            qs = qs.filter(wanted)
        if self.failure:
            qs = qs.filter(validation_failure__in=self.failure)
        if self.tests_min is not None:
            qs = qs.filter(n_tests__gte=self.tests_min)
        if self.tests_max is not None:
            qs = qs.filter(n_tests__lte=self.tests_max)
        if self.repairs_min is not None:
            qs = qs.filter(repair_rounds__gte=self.repairs_min)
        if self.repairs_max is not None:
            qs = qs.filter(repair_rounds__lte=self.repairs_max)
        if self.pass_min is not None:
            qs = qs.filter(pass_rate__gte=self.pass_min)
        if self.pass_max is not None:
            qs = qs.filter(pass_rate__lte=self.pass_max)
        if self.rolled:
            qs = qs.filter(n_rollouts__gt=0) if self.rolled == "yes" else qs.filter(n_rollouts=0)
        if self.stage:
            qs = funnel_stage(qs, self.stage)
        if self.q:
            qs = search_tasks(qs, self.q)
        column = SORTS[self.sort.lstrip("-")]
        desc = self.sort.startswith("-")
        order = [f"-{column}" if desc else column]
        if column != "id":
            order.append("-id")
        if column in ("n_tests", "pass_rate"):  # unknown values last either way
            from django.db.models import F
            order[0] = F(column).desc(nulls_last=True) if desc else F(column).asc(nulls_last=True)
        return qs.order_by(*order)

    # --- back to a query string ------------------------------------------------------------------

    def params(self, *, with_view: bool = True) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        for name in MULTI:
            for v in getattr(self, name):
                out.append((name, str(v)))
        if self.ids:
            out.append(("ids", ",".join(map(str, self.ids))))
        for name in ("origin", "rolled", "stage", "q"):
            if getattr(self, name):
                out.append((name, getattr(self, name)))
        for name in ("tests_min", "tests_max", "repairs_min", "repairs_max", "pass_min", "pass_max"):
            if getattr(self, name) is not None:
                out.append((name, str(getattr(self, name))))
        if with_view:
            if self.sort != DEFAULT_SORT:
                out.append(("sort", self.sort))
            if self.cols != DEFAULT_COLUMNS:
                out.append(("cols", ",".join(self.cols)))
        return out

    def query_string(self, *, with_view: bool = True, **override) -> str:
        """The filter as a query string; `override` replaces single parameters (e.g. sort)."""
        pairs = [(k, v) for k, v in self.params(with_view=with_view) if k not in override]
        pairs += [(k, str(v)) for k, v in override.items() if v not in (None, "")]
        return urlencode(pairs)

    @property
    def is_empty(self) -> bool:
        return not self.params(with_view=False)

    def describe(self) -> str:
        """In words, for confirmations, export manifests and dataset cards."""
        parts = [f"{k}={v}" for k, v in self.params(with_view=False)]
        return ", ".join(parts) if parts else "all tasks"


def funnel_predicates(run_id: int | None = None) -> dict[str, Q]:
    """Per funnel stage, the condition a constructed task meets to be counted there. Each is a
    membership test against one uncorrelated subquery (PostgreSQL hashes it once), so the whole
    funnel is one fast aggregate; `run_id` narrows the subqueries to one run's records. Re-check
    validations a reviewer asked for are not construction and never count."""
    builds = EnvironmentBuild.objects.all()
    done = Validation.objects.filter(status=ValidationStatus.DONE, recheck__isnull=True)
    if run_id is not None:
        builds = builds.filter(environment__task__run_id=run_id)
        done = done.filter(version__task__run_id=run_id)
    first_build = Q(environment_id__in=builds.filter(attempt=1).values("environment_id"))
    first_build_ok = Q(environment_id__in=builds.filter(attempt=1, outcome=BuildOutcome.SUCCEEDED).values("environment_id"))
    built = Q(environment_id__in=builds.filter(outcome=BuildOutcome.SUCCEEDED).values("environment_id"))
    # the tasks whose first finished validation accepted the version it validated
    firsts = done.order_by().values("version__task").annotate(first=Min("id")).values("first")
    first_pass = Q(pk__in=Validation.objects.filter(pk__in=Subquery(firsts), accepted=True).values("version__task"))
    validated = Q(status=TaskStatus.VALIDATED)
    return {
        "seeds": Q(),
        "first_build_logs": first_build,
        "initial_environment_success": first_build_ok,
        "environment_repair_recovery": first_build & ~first_build_ok & built,
        "successful_environments": built,
        "entering_validation": Q(pk__in=done.values("version__task")),
        "first_pass_valid": first_pass,
        "task_repair_recovery": validated & ~first_pass,
        "final_validated": validated,
    }


def funnel_stage(qs: QuerySet, stage: str) -> QuerySet:
    """The constructed tasks that reached one stage of tasks.funnel.funnel: the same
    predicates, so a stage's link lists exactly what it counts."""
    predicates = funnel_predicates()
    if stage not in predicates:
        raise ValueError(f"unknown funnel stage {stage!r}")
    return qs.filter(imported=False).filter(predicates[stage])


def search_tasks(qs: QuerySet, query: str) -> QuerySet:
    """Full-text search over name and current instruction: PostgreSQL text search, word
    matching elsewhere."""
    query = (query or "").strip()
    if not query:
        return qs
    if connection.vendor == "postgresql":
        # a self-contained subquery: the analytics use this queryset inside others, under an alias,
        # where a bare "tasks_task" reference is invalid
        return qs.filter(pk__in=RawSQL(
            "SELECT id FROM tasks_task WHERE search_vector @@ websearch_to_tsquery('english', %s)", [query]))
    for word in query.split()[:8]:
        qs = qs.filter(Q(search_document__icontains=word))
    return qs
