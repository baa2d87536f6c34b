"""The analytics selection: `AnalyticsFilter` = the shared task filter (tasks.filters.TaskFilter:
run, strategy, category, tag, family, status, ...) for the task side, plus the rollout side:
batch, model, agent, source (builtin | harbor) and version (all | current), read from the GET
parameters every analytics page and the analytics API share, and written back to URLs; and the
values the filter form offers (`rollout_choices`).

Only finished trajectories (status done) are selected; errors (infrastructure, cancellation)
never enter a rate.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from urllib.parse import urlencode

from django.db.models import F, Q, QuerySet, Subquery
from django.http import QueryDict
from django.urls import reverse

from scenarios.models import Strategy

from .filters import TaskFilter
from .models import RolloutBatch, TaskStatus, Trajectory, TrajectoryStatus


@dataclass
class AnalyticsFilter:
    tasks: TaskFilter = field(default_factory=TaskFilter)
    batch: list[int] = field(default_factory=list)
    model: list[str] = field(default_factory=list)
    agent: list[str] = field(default_factory=list)
    source: str = ""
    version: str = "all"
    errors: list[str] = field(default_factory=list)

    @classmethod
    def from_query(cls, query: QueryDict | dict | str | None) -> "AnalyticsFilter":
        tf = TaskFilter.from_query(query)
        if isinstance(query, str):
            query = QueryDict(query.lstrip("?"))
        elif query is None:
            query = QueryDict("")
        elif isinstance(query, dict):
            qd = QueryDict("", mutable=True)
            for k, v in query.items():
                qd.setlist(k, v if isinstance(v, list) else [v])
            query = qd
        f = cls(tasks=tf, errors=list(tf.errors))

        def values(name):
            out = []
            for raw in query.getlist(name):
                out.extend(p.strip() for p in str(raw).split(",") if p.strip())
            return out

        for v in values("batch"):
            if v.isdigit():
                f.batch.append(int(v))
            else:
                f.errors.append(f"batch: {v!r} is not a number")
        f.model = [v[:200] for v in values("model")]
        f.agent = [v[:100] for v in values("agent")]
        source = query.get("source", "")
        if source in ("builtin", "harbor"):
            f.source = source
        elif source:
            f.errors.append(f"source: must be builtin or harbor, not {source!r}")
        version = query.get("version", "") or "all"
        if version in ("all", "current"):
            f.version = version
        else:
            f.errors.append(f"version: must be all or current, not {version!r}")
        return f

    # --- querysets

    def task_queryset(self) -> QuerySet:
        return self.tasks.queryset().order_by()

    def conditions(self, prefix: str = "", *, task: str = "task") -> Q:
        """The rollout side as a Q over Trajectory fields reached through `prefix` (e.g.
        "task__trajectories__" from TaskLabel), so a query joins trajectories once instead of
        testing them against a subquery of themselves. `task` is the path to their task."""
        q = Q(**{f"{prefix}status": TrajectoryStatus.DONE})
        if not self.tasks.is_empty:
            q &= Q(**{f"{task}__in": Subquery(self.task_queryset().values("pk"))})
        if self.batch:
            q &= Q(**{f"{prefix}batch_id__in": self.batch})
        if self.model:
            q &= Q(**{f"{prefix}model__in": self.model})
        if self.agent:
            q &= Q(**{f"{prefix}agent__in": self.agent})
        if self.source:
            q &= Q(**{f"{prefix}batch__source": self.source})
        if self.version == "current":
            q &= Q(**{f"{prefix}version_id": F(f"{task}__current_version_id")})
        return q

    def trajectories(self) -> QuerySet:
        """Finished trajectories in the selection."""
        return Trajectory.objects.filter(self.conditions()).order_by()

    # --- back to URLs

    def params(self) -> list[tuple[str, str]]:
        out = self.tasks.params(with_view=False)
        if self.batch:
            out.append(("batch", ",".join(map(str, self.batch))))
        out += [("model", m) for m in self.model] + [("agent", a) for a in self.agent]
        if self.source:
            out.append(("source", self.source))
        if self.version != "all":
            out.append(("version", self.version))
        return out

    def query_string(self, **extra) -> str:
        pairs = [(k, v) for k, v in self.params() if k not in extra]
        pairs += [(k, str(v)) for k, v in extra.items() if v not in (None, "")]
        return urlencode(pairs)

    def task_list_url(self, **override) -> str:
        """The task list for a chart element: this selection's task filter with `override`
        (e.g. tag=["csv"]) replacing those fields."""
        tf = dataclasses.replace(self.tasks, errors=[], **override)
        query = tf.query_string(with_view=False)
        return reverse("tasks:list") + (f"?{query}" if query else "")

    def trajectory_list_url(self, **extra) -> str:
        query = self.query_string(**extra)
        return reverse("tasks:trajectories") + (f"?{query}" if query else "")

    def describe(self) -> str:
        parts = [f"{k}={v}" for k, v in self.params()]
        return ", ".join(parts) if parts else "everything"


def rollout_choices() -> dict:
    """The values the filters offer, from small tables only: batches (few), the models and agents
    they name (an imported batch lists its trials' in config), the taxonomy and the families."""
    from skills.models import Category

    from .summary import families

    batches = list(RolloutBatch.objects.order_by("-id").values("id", "name", "source", "model", "agent", "config")[:500])
    models, agents = set(), set()
    for b in batches:
        config = b.pop("config") or {}
        models.update(m for m in [b["model"], *(config.get("models") or [])] if m and m != "mixed")
        agents.update(a for a in [b["agent"], *(config.get("agents") or [])] if a and a not in ("mixed", "unknown"))
    return {
        "batches": batches, "models": sorted(models), "agents": sorted(agents),
        "strategies": Strategy.choices, "statuses": TaskStatus.choices,
        "categories": list(Category.objects.order_by("parent_id", "slug").values_list("slug", flat=True)),
        "families": sorted(set(families().values())),
    }
