"""The one cache of data stamps: results of heavier aggregates (the funnel, the taxonomy tables,
the analytics pages) kept in the cache under a *data stamp*, one cheap statement over
primary-key maxima, counts and update times that changes whenever the records under the
aggregate change. The same page asked again costs that one statement until the data moves; a
time limit (FACET_PAGE_CACHE_S by default, 60; 0 turns it off) bounds staleness from a change
the stamp cannot see.

The numbers are still computed from the stored records (never from counters kept beside them);
only a result already computed for the same records is reused.
"""
from __future__ import annotations

import hashlib
from typing import Callable, TypeVar

from django.conf import settings
from django.core.cache import cache
from django.db import connection

T = TypeVar("T")

TASKS_STAMP = (
    "SELECT (SELECT COUNT(*) FROM tasks_task), (SELECT MAX(updated_at) FROM tasks_task),"
    " (SELECT MAX(id) FROM tasks_environmentbuild), (SELECT MAX(id) FROM tasks_validation),"
    " (SELECT MAX(finished_at) FROM tasks_validation), (SELECT MAX(id) FROM tasks_decision)"
)
# Skills are never deleted and a changed skill is a new row; what else moves the taxonomy is a
# verdict (a new row) or a reviewer's override (indexed time). Every part is an index lookup.
SKILLS_STAMP = (
    "SELECT (SELECT MAX(id) FROM skills_skill), (SELECT MAX(category_overridden_at) FROM skills_skill),"
    " (SELECT MAX(id) FROM skills_verdict), (SELECT MAX(id) FROM skills_ingestbatch)"
)
# What the analytics depend on: a finished or imported rollout, a new validation, a task moved
# by a step, a changed label and a decision all change it.
ANALYTICS_STAMP = (
    "SELECT (SELECT COUNT(*) FROM tasks_trajectory WHERE status = 'done'), (SELECT MAX(id) FROM tasks_trajectory),"
    " (SELECT MAX(finished_at) FROM tasks_trajectory), (SELECT MAX(id) FROM tasks_validation),"
    " (SELECT MAX(updated_at) FROM tasks_task), (SELECT COUNT(*) FROM tasks_tasklabel),"
    " (SELECT MAX(id) FROM tasks_tasklabel), (SELECT MAX(id) FROM tasks_decision)"
)


def stamp(sql: str) -> str:
    with connection.cursor() as cur:
        cur.execute(sql)
        return repr(tuple(str(v) for v in cur.fetchone()))


def cached(name: str, stamp_sql: str, compute: Callable[[], T], *parts, ttl: int | None = None) -> T:
    """compute(), or the result it gave for the same name, parts and data stamp within `ttl`
    seconds (default settings.FACET_PAGE_CACHE_S; 0 computes every time)."""
    ttl = int(settings.FACET_PAGE_CACHE_S if ttl is None else ttl)
    if ttl <= 0:
        return compute()
    raw = f"{name}|{parts!r}|{connection.alias}|{connection.settings_dict.get('NAME')}|{stamp(stamp_sql)}"
    key = "facet-page:" + hashlib.sha256(raw.encode()).hexdigest()
    value = cache.get(key)
    if value is None:
        value = compute()
        cache.set(key, value, ttl)
    return value
