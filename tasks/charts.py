"""Pure functions from the overview's rows (tasks.review) to plotly figures, as JSON-ready dicts.
Every clickable point carries the task-list URL it opens in its customdata (static/js/facet.js
follows it on click)."""
import json

import plotly.graph_objects as go
from django.urls import reverse

from .models import ReviewState

STATE_COLOURS = {ReviewState.APPROVED: "#1f7a4d", ReviewState.REJECTED: "#b42318", ReviewState.NEEDS_FIX: "#b54708",
                 ReviewState.UNREVIEWED: "#98a2b3"}


def task_list_url(query: str) -> str:
    return f"{reverse('tasks:list')}?{query}" if query else reverse("tasks:list")


def funnel_chart(rows: list[dict]) -> dict:
    """The construction funnel plus the review stages. "Environment repair recovery" and "Task
    repair recovery" are sub-counts, not stages every task passes, so they are left out of
    the funnel shape (the table beside it has them)."""
    stages = [r for r in rows if r["stage"] not in ("environment_repair_recovery", "task_repair_recovery")]
    fig = go.Figure(go.Funnel(
        y=[r["label"] for r in stages], x=[r["count"] for r in stages],
        customdata=[task_list_url(r["query"]) for r in stages],
        textinfo="value+percent initial",
        marker={"color": ["#3b6ea8"] * (len(stages) - 2) + ["#5b8fc7", STATE_COLOURS[ReviewState.APPROVED]]},
        hovertemplate="%{y}<br>%{x} tasks<br>%{percentInitial:.1%} of seeds<extra></extra>",
    ))
    fig.update_layout(margin=dict(t=36, l=10, r=10, b=10), height=420)
    return json.loads(fig.to_json())


def reasons_chart(rows: list[dict]) -> dict:
    """Tasks per reason of the decision in force, stacked by verdict."""
    labels = [r["label"] for r in rows]
    traces = []
    for i, state in enumerate((ReviewState.REJECTED, ReviewState.NEEDS_FIX, ReviewState.APPROVED)):
        traces.append(go.Bar(
            name=state.label, y=labels, x=[r["cells"][i]["count"] for r in rows], orientation="h",
            customdata=[task_list_url(r["cells"][i]["query"]) for r in rows], marker_color=STATE_COLOURS[state],
            hovertemplate="%{y}<br>%{x} tasks " + state.label.lower() + "<extra></extra>",
        ))
    fig = go.Figure(traces)
    fig.update_layout(barmode="stack", margin=dict(t=36, l=10, r=10, b=30), height=360,
                      yaxis={"autorange": "reversed"}, xaxis_title="tasks", legend={"orientation": "h", "y": -0.15})
    return json.loads(fig.to_json())


def throughput_chart(data: dict) -> dict:
    """Decisions per day, stacked by reviewer."""
    days = [d.isoformat() for d in data["days"]]
    fig = go.Figure([go.Bar(name=name, x=days, y=counts, hovertemplate="%{x}<br>%{y} decisions by " + name + "<extra></extra>")
                     for name, counts in data["series"].items()])
    fig.update_layout(barmode="stack", margin=dict(t=36, l=10, r=10, b=30), height=320, yaxis_title="decisions",
                      legend={"orientation": "h", "y": -0.2})
    return json.loads(fig.to_json())
