"""Pure functions from taxonomy rows to plotly figures (as JSON-ready dicts)."""
import json
import plotly.graph_objects as go
from django.urls import reverse


def _list_url(slug: str) -> str:
    return f"{reverse('skills:list')}?category={slug}"


def taxonomy_sunburst(rows: list[dict]) -> dict:
    ids, labels, parents, values, urls = [], [], [], [], []
    for row in rows:
        parent = row["category"]
        ids.append(parent.slug)
        labels.append(parent.name)
        parents.append("")
        values.append(row["count"])
        urls.append(_list_url(parent.slug))
        for child in row["children"]:
            ids.append(child["category"].slug)
            labels.append(child["category"].name)
            parents.append(parent.slug)
            values.append(child["count"])
            urls.append(_list_url(child["category"].slug))
    fig = go.Figure(go.Sunburst(
        ids=ids, labels=labels, parents=parents, values=values, branchvalues="total", customdata=urls,
        hovertemplate="%{label}<br>%{value} skills<br>%{percentRoot:.1%} of all<extra></extra>",
        insidetextorientation="radial",
    ))
    fig.update_layout(margin=dict(t=10, l=10, r=10, b=10), height=520)
    return json.loads(fig.to_json())


def category_bars(rows: list[dict]) -> dict:
    children = [(c, row["category"]) for row in rows for c in row["children"]]
    children.sort(key=lambda pair: pair[0]["count"])
    fig = go.Figure(go.Bar(
        x=[c["count"] for c, _ in children],
        y=[c["category"].name for c, _ in children],
        orientation="h",
        customdata=[_list_url(c["category"].slug) for c, _ in children],
        text=[f"{c['global_share']:.1%}" for c, _ in children],
        hovertext=[p.name for _, p in children],
        hovertemplate="%{y}<br>%{x} skills (%{text} of all)<br>%{hovertext}<extra></extra>",
        marker_color="#3b6ea8",
    ))
    # top margin leaves room for the modebar, so it never covers the longest bar
    fig.update_layout(margin=dict(t=36, l=10, r=10, b=30), height=max(360, 22 * len(children)), xaxis_title="accepted skills")
    return json.loads(fig.to_json())
