"""JSON API of the analytics: every analytics table as rows, selected by the same query parameters
as the analytics pages (tasks.analytics_selection.AnalyticsFilter). Everyone signed in reads."""
from ninja import Router
from ninja.errors import HttpError

from . import analytics as an
from .analytics_selection import AnalyticsFilter
from .models import LabelKind

# mounted at /analytics by facet_site/api.py
analytics_router = Router(tags=["analytics"])

ANALYTICS_TABLES = ("overview", "pass-at-k", "tags", "categories", "failed-checks", "initial-failures", "strategies",
                    "datasets", "commands", "turn-states", "transitions", "families")


@analytics_router.get("/{table}", summary="One analytics table as rows; the same query parameters as the pages "
                              "(task filter plus batch, model, agent, source, version)")
def analytics_table(request, table: str):
    if table not in ANALYTICS_TABLES:
        raise HttpError(404, f"no table {table!r}; one of: {', '.join(ANALYTICS_TABLES)}")
    af = AnalyticsFilter.from_query(request.GET)
    if af.errors:
        raise HttpError(422, "; ".join(af.errors))
    if table == "overview":
        rows = [an.overview(af)]
    elif table == "pass-at-k":
        rows = list(an.pass_at_k_rows(af, request.GET.get("sort", "-p1")))
    elif table in ("tags", "categories"):
        kind = LabelKind.TAG if table == "tags" else LabelKind.CATEGORY
        result = an.label_pass_rates(af, [kind], top=int(request.GET.get("top", 20) or 20))
        rows = result["rows"]
    elif table == "failed-checks":
        rows = an.failed_checks(af)["rows"]
    elif table == "initial-failures":
        rows = an.initial_failures(af)["rows"]
    elif table == "strategies":
        rows = an.strategy_comparison(af)
    elif table == "datasets":
        data = an.dataset_statistics(af)
        rows = data["totals"] + data["rows"]
    elif table in ("commands", "turn-states", "transitions"):
        data = an.command_patterns(af)
        rows = {"commands": data["all_commands"], "turn-states": data["states"],
                "transitions": data["transitions"]}[table]
    else:
        rows = an.family_distribution(af)["rows"]
    return {"table": table, "filter": af.describe(), "rows": rows}
