"""Which copy of a duplicated skill to keep, Django-free.

Among exact and near duplicates the kept copy is decided in this order, first difference wins:
1. safety: a clean copy beats a suspicious one (unsafe copies are rejected before this point);
2. the earliest publication, from `_meta.json` (`latest.publishedAt` and every `history[].publishedAt`),
   so an original published first beats a clone published later, whatever the ingest order;
3. the most used: downloads, then stars, where `_meta.json` gives them;
4. the copy ingested first (the stored one), so nothing changes without a reason.
The loser's verdict and the winner's page both show `reason`.
"""
from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any, Mapping

__all__ = ["Copy", "Decision", "copy_from_provenance", "decide", "earliest_published_ms"]

_SAFETY_RANK = {"clean": 0, "suspicious": 1, "unsafe": 2}


@dataclass(frozen=True)
class Copy:
    id: int
    safety: str = "clean"
    published_ms: int | None = None  # earliest publication, milliseconds since the epoch
    downloads: int | None = None
    stars: int | None = None
    order: int = 0  # ingest order: lower was stored first


@dataclass(frozen=True)
class Decision:
    kept: Copy
    dropped: Copy
    rule: str  # safety | published | downloads | stars | ingested
    reason: str


def _ms(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str) and value:
        try:
            return int(_dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
        except ValueError:
            return None
    return None


def earliest_published_ms(provenance: Mapping) -> int | None:
    """The earliest publication date `_meta.json` records for the skill (any version)."""
    meta = provenance.get("meta") if isinstance(provenance.get("meta"), Mapping) else {}
    stamps = []
    latest = meta.get("latest") if isinstance(meta.get("latest"), Mapping) else {}
    stamps.append(_ms(latest.get("publishedAt")))
    for entry in meta.get("history") or []:
        if isinstance(entry, Mapping):
            stamps.append(_ms(entry.get("publishedAt")))
    stamps.append(_ms(provenance.get("published_at")))
    found = [s for s in stamps if s is not None]
    return min(found) if found else None


def _count(meta: Mapping, name: str) -> int | None:
    stats = meta.get("stats") if isinstance(meta.get("stats"), Mapping) else {}
    for value in (stats.get(name), meta.get(name)):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
            return int(value)
    return None


def copy_from_provenance(id: int, provenance: Mapping, *, safety: str = "clean", order: int | None = None) -> Copy:
    meta = provenance.get("meta") if isinstance(provenance.get("meta"), Mapping) else {}
    return Copy(id=id, safety=safety, published_ms=earliest_published_ms(provenance),
                downloads=_count(meta, "downloads"), stars=_count(meta, "stars"),
                order=id if order is None else order)


def _day(ms: int | None) -> str:
    if ms is None:
        return "no date"
    return _dt.datetime.fromtimestamp(ms / 1000, tz=_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def decide(a: Copy, b: Copy) -> Decision:
    """Keep one of two duplicate copies; see the module docstring for the order."""
    ra, rb = _SAFETY_RANK.get(a.safety, 1), _SAFETY_RANK.get(b.safety, 1)
    if ra != rb:
        kept, dropped = (a, b) if ra < rb else (b, a)
        return Decision(kept, dropped, "safety",
                        f"#{kept.id} is {kept.safety} and #{dropped.id} is {dropped.safety}: a clean copy is kept first")
    if a.published_ms != b.published_ms and (a.published_ms is not None or b.published_ms is not None):
        if b.published_ms is None or (a.published_ms is not None and a.published_ms < b.published_ms):
            kept, dropped = a, b
        else:
            kept, dropped = b, a
        return Decision(kept, dropped, "published",
                        f"#{kept.id} was published first ({_day(kept.published_ms)}; #{dropped.id}: {_day(dropped.published_ms)})")
    for rule, attr in (("downloads", "downloads"), ("stars", "stars")):
        va, vb = getattr(a, attr), getattr(b, attr)
        if (va or 0) != (vb or 0):
            kept, dropped = (a, b) if (va or 0) > (vb or 0) else (b, a)
            return Decision(kept, dropped, rule,
                            f"#{kept.id} has more {attr} ({getattr(kept, attr) or 0:,} vs {getattr(dropped, attr) or 0:,})")
    kept, dropped = (a, b) if a.order <= b.order else (b, a)
    return Decision(kept, dropped, "ingested",
                    f"#{kept.id} was ingested first (same safety, publication date and usage)")
