"""Pure functions from tasks.analytics rows to plotly figures, as JSON-ready dicts. Every bar
carries the URL of the list it stands for in its customdata (static/js/facet.js opens it on
click): the task list through the shared task filter, or the trajectory list where the bar counts
rollouts rather than tasks.

The figures are written as plain {"data": [...], "layout": {...}} dicts in plotly.js's own schema
rather than through plotly.graph_objects: building and validating a graph_objects.Figure costs
about 40 ms per chart, which was a third of an analytics page's time budget."""
from __future__ import annotations

from typing import Callable

BLUE, GREEN, RED, ORANGE, GREY = "#3b6ea8", "#1f7a4d", "#b42318", "#b54708", "#98a2b3"
STRATEGY_COLOURS = {"forward": BLUE, "reverse": ORANGE, "joint": GREEN}
KIND_COLOURS = {"observation": BLUE, "action": ORANGE}


def _bar(**trace) -> dict:
    return {"type": "bar", **trace}


def _out(data: list[dict], *, height: int = 380, shapes: list | None = None, annotations: list | None = None,
         **layout) -> dict:
    # top margin leaves room for the modebar
    out = {"margin": {"t": 36, "l": 10, "r": 10, "b": 10}, "height": height, "template": {"layout": {
        "font": {"family": "system-ui, sans-serif"}, "plot_bgcolor": "#fff", "paper_bgcolor": "#fff",
        "xaxis": {"gridcolor": "#eef1f6"}, "yaxis": {"gridcolor": "#eef1f6"}}}}
    for key, value in layout.items():
        if key.endswith("_title"):  # xaxis_title="..." as graph_objects accepts it
            axis = key[:-len("_title")]
            out.setdefault(axis, {})["title"] = {"text": value}
        elif isinstance(value, dict) and "title" in value and isinstance(value["title"], str):
            out[key] = {**value, "title": {"text": value["title"]}}
        else:
            out[key] = value
    for axis in ("xaxis", "yaxis"):  # room for tick labels and titles, however long the labels
        out.setdefault(axis, {}).setdefault("automargin", True)
    if shapes:
        out["shapes"] = shapes
    if annotations:
        out["annotations"] = annotations
    return {"data": data, "layout": out}


def _pct(value: float | None) -> float | None:
    return None if value is None else round(100 * value, 2)


def pass_rate_bars(rows: list[dict], overall: dict, url_of: Callable[[dict], str], *, noun: str = "tag") -> dict:
    """Figure 4: strict pass rate per label with Wilson 95% error bars, ordered by rate, and the
    overall rate as a dashed reference line."""
    rates = [_pct(r["rate"]) for r in rows]
    bar = _bar(
        x=[r.get("name", r["label"]) for r in rows], y=rates, customdata=[url_of(r) for r in rows],
        marker={"color": BLUE},
        error_y={"type": "data", "symmetric": False,
                 "array": [(_pct(r["high"]) - rate) if rate is not None else 0 for r, rate in zip(rows, rates)],
                 "arrayminus": [(rate - _pct(r["low"])) if rate is not None else 0 for r, rate in zip(rows, rates)],
                 "color": "#333"},
        text=[f"{r['passed']}/{r['rollouts']}" for r in rows], textposition="none",
        hovertemplate="%{x}<br>%{y:.1f}% of %{text} rollouts passed<extra></extra>")
    shapes, annotations = [], []
    if overall.get("rate") is not None:
        y = _pct(overall["rate"])
        shapes.append({"type": "line", "xref": "x domain", "x0": 0, "x1": 1, "yref": "y", "y0": y, "y1": y,
                       "line": {"dash": "dash", "color": RED}})
        annotations.append({"text": f"overall {y:.1f}%", "xref": "x domain", "x": 1, "xanchor": "right",
                            "yref": "y", "y": y, "yanchor": "bottom", "showarrow": False, "font": {"color": RED}})
    return _out([bar], height=420, shapes=shapes, annotations=annotations,
                yaxis={"title": "strict pass rate (%)", "range": [0, 100]},
                xaxis={"title": noun, "tickangle": -40, "automargin": True})


def p1_histogram(buckets: list[dict], url_of: Callable[[dict], str]) -> dict:
    return _out([_bar(x=[b["label"] for b in buckets], y=[b["tasks"] for b in buckets],
                      customdata=[url_of(b) for b in buckets], marker={"color": BLUE},
                      hovertemplate="P@1 %{x}<br>%{y} tasks<extra></extra>")],
                height=320, xaxis={"title": "P@1 of the task", "type": "category"}, yaxis_title="tasks")


def _passk_pair(names: list[str], rows: list[dict], urls: list[str]) -> list[dict]:
    return [_bar(name=f"P@{k}", x=names, y=[_pct(r[f"p{k}"]) for r in rows], customdata=urls,
                 marker={"color": colour}, hovertemplate="%{x}<br>" + f"P@{k}" + " %{y:.1f}%<extra></extra>")
            for k, colour in ((1, BLUE), (3, GREEN))]


def model_passk_bars(rows: list[dict], url_of: Callable[[dict], str]) -> dict:
    return _out(_passk_pair([r["model"] for r in rows], rows, [url_of(r) for r in rows]), height=320,
                barmode="group", yaxis={"title": "%", "range": [0, 100]}, legend={"orientation": "h", "y": -0.2})


def failed_checks_bars(rows: list[dict], url_of: Callable[[dict], str]) -> dict:
    """Figure 2a: unsuccessful rollouts by the number of failed or errored checks."""
    return _out([_bar(x=[str(r["failed_checks"]) for r in rows], y=[r["rollouts"] for r in rows],
                      customdata=[url_of(r) for r in rows], marker={"color": RED},
                      text=[f"{100 * r['share']:.1f}%" if r["share"] is not None else "" for r in rows],
                      textposition="none",
                      hovertemplate="%{x} failed or errored checks<br>%{y} rollouts (%{text})<extra></extra>")],
                height=340, xaxis={"title": "failed or errored checks per unsuccessful rollout", "type": "category"},
                yaxis_title="rollouts")


def failure_types_bars(rows: list[dict], url_of: Callable[[dict], str]) -> dict:
    """Figure 2b: initial validation failure types, share within each strategy."""
    strategies = sorted({r["strategy"] for r in rows})
    failures = sorted({r["failure"] for r in rows})
    traces = []
    for s in strategies:
        by_failure = {r["failure"]: r for r in rows if r["strategy"] == s}
        traces.append(_bar(
            name=s, x=failures, y=[_pct(by_failure[f]["share"]) if f in by_failure else 0 for f in failures],
            customdata=[url_of(by_failure[f]) if f in by_failure else "" for f in failures],
            text=[str(by_failure[f]["tasks"]) if f in by_failure else "0" for f in failures], textposition="none",
            marker={"color": STRATEGY_COLOURS.get(s, GREY)},
            hovertemplate=s + "<br>%{x}<br>%{y:.1f}% of its failed first validations (%{text} tasks)<extra></extra>"))
    return _out(traces, height=380, barmode="group", yaxis_title="% of the strategy's failed first validations",
                xaxis={"tickangle": -30, "automargin": True}, legend={"orientation": "h", "y": -0.35})


def strategy_bars(rows: list[dict], url_of: Callable[[dict, str], str]) -> dict:
    """Table 7: reached validation, initially valid and final yield per strategy (%)."""
    names = [r["strategy"] for r in rows]
    series = [("Reached validation", "reached", lambda r: _pct(r["reached"] / r["selected"]) if r["selected"] else None, GREY),
              ("Initially valid (of reached)", "initially_valid", lambda r: _pct(r["initial_rate"]), BLUE),
              ("Final yield", "final", lambda r: _pct(r["yield"]), GREEN)]
    return _out([_bar(name=label, x=names, y=[value(r) for r in rows], marker={"color": colour},
                      customdata=[url_of(r, key) for r in rows],
                      hovertemplate=label + "<br>%{x}: %{y:.1f}%<extra></extra>")
                 for label, key, value, colour in series],
                height=340, barmode="group", yaxis={"title": "%", "range": [0, 100]},
                legend={"orientation": "h", "y": -0.2})


def dataset_bars(rows: list[dict], url_of: Callable[[dict], str]) -> dict:
    return _out(_passk_pair([r["dataset"] for r in rows], rows, [url_of(r) for r in rows]), height=340,
                barmode="group", yaxis={"title": "%", "range": [0, 100]},
                xaxis={"tickangle": -20, "automargin": True}, legend={"orientation": "h", "y": -0.3})


def command_bars(rows: list[dict], url_of: Callable[[dict], str]) -> dict:
    """The most frequent commands in successful trajectories, coloured by their dominant class."""
    rows = rows[::-1]  # plotly draws horizontal bars bottom up
    return _out([_bar(
        x=[r["occurrences"] for r in rows], y=[r["command"] for r in rows], orientation="h",
        customdata=[url_of(r) for r in rows], marker={"color": [KIND_COLOURS[r["dominant"]] for r in rows]},
        text=[f"{100 * r['share']:.1f}%" if r["share"] is not None else "" for r in rows], textposition="none",
        hovertext=[r["dominant"] for r in rows],
        hovertemplate="%{y}<br>%{x} occurrences (%{text})<br>mostly %{hovertext}<extra></extra>")],
        height=max(300, 24 * len(rows) + 80), xaxis_title="command occurrences",
        yaxis={"automargin": True, "type": "category"})


def transitions_heatmap(transitions: list[dict], states: tuple[str, ...]) -> dict:
    """Row-normalised transitions between adjacent turns' states (Figure 5, right)."""
    cell = {(t["from"], t["to"]): t for t in transitions}
    z = [[_pct(cell[(a, b)]["probability"]) for b in states] for a in states]
    text = [[f"{cell[(a, b)]['count']}" for b in states] for a in states]
    return _out([{"type": "heatmap", "z": z, "x": list(states), "y": list(states), "colorscale": [[0, "#f4f8fd"], [1, BLUE]],
                  "zmin": 0, "zmax": 100, "text": text, "texttemplate": "%{z:.0f}%",
                  "hovertemplate": "%{y} → %{x}<br>%{z:.1f}% (%{text} transitions)<extra></extra>"}],
                height=340, xaxis_title="next turn", yaxis={"title": "turn", "autorange": "reversed"})


def family_bars(rows: list[dict], url_of: Callable[[dict], str]) -> dict:
    """Figure 3b: tasks per family."""
    rows = rows[::-1]
    return _out([_bar(
        x=[r["tasks"] for r in rows], y=[r["family"] for r in rows], orientation="h",
        customdata=[url_of(r) for r in rows], marker={"color": BLUE},
        text=[f"{100 * r['share']:.2f}%" if r["share"] is not None else "" for r in rows], textposition="none",
        hovertemplate="%{y}<br>%{x} tasks (%{text})<extra></extra>")],
        # counts of tasks: whole-number ticks only (plotly picks 0.5 steps for small counts)
        height=max(300, 30 * len(rows) + 80), xaxis={"title": "tasks", "tickformat": "d", "dtick": _count_dtick(rows)},
        yaxis={"automargin": True, "type": "category"})


def _count_dtick(rows: list[dict]) -> int:
    """A tick step of a whole number of tasks giving at most about ten ticks."""
    most = max((r["tasks"] for r in rows), default=1)
    step = 1
    while most / step > 10:
        step = step * 5 // 2 if str(step)[0] == "2" else step * 2  # 1, 2, 5, 10, 20, 50, ...
    return step
