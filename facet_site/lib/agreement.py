"""Inter-rater agreement: raw agreement, Cohen's kappa (two raters) and Fleiss' kappa (any number
of raters per item), each with a 95% confidence interval and the counts it rests on. Django-free.

An item is the list of labels its raters gave (one label per rater). Definitions:

- raw agreement A = items on which every rater gave the same label / items, with a Wilson interval;
- Cohen's kappa for two raters: k = (p_o - p_e) / (1 - p_e), p_o the share of items they agree on,
  p_e = sum over labels of p_1(label) * p_2(label) (each rater's own label shares); its interval is
  k ± z * sqrt(p_o (1 - p_o) / (n (1 - p_e)^2)) (the large-sample approximation), clipped to [-1, 1];
- Fleiss' kappa: k = (P - P_e) / (1 - P_e), P the mean over items of
  sum_j n_ij (n_ij - 1) / (n_i (n_i - 1)) (n_ij raters of item i gave label j, n_i raters of item i,
  items with fewer than two raters left out), P_e = sum_j p_j^2 with p_j label j's share of all
  ratings; its interval is the 2.5 and 97.5 percentiles of k over 500 bootstrap resamples of the
  items (a fixed seed, so the same data always give the same interval).

Kappa is None when it is undefined: no item, or p_e = 1 (every rating the same label, where
chance explains all agreement).
"""
from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass

from .stats import wilson_interval

__all__ = ["Agreement", "agreement", "cohen_kappa", "fleiss_kappa", "raw_agreement"]

Z95 = 1.959963984540054
BOOTSTRAP = 500


@dataclass(frozen=True)
class Agreement:
    items: int  # items with at least two ratings
    ratings: int
    raw: float | None
    raw_ci: tuple[float, float] | None
    kappa: float | None
    kappa_ci: tuple[float, float] | None
    measure: str  # "cohen" (every item has exactly two raters and the raters are a fixed pair) or "fleiss"

    def as_dict(self) -> dict:
        return {"items": self.items, "ratings": self.ratings, "raw": self.raw,
                "raw_low": self.raw_ci[0] if self.raw_ci else None, "raw_high": self.raw_ci[1] if self.raw_ci else None,
                "kappa": self.kappa, "kappa_low": self.kappa_ci[0] if self.kappa_ci else None,
                "kappa_high": self.kappa_ci[1] if self.kappa_ci else None, "measure": self.measure}


def _rated(items) -> list[list]:
    return [list(item) for item in items if len(item) >= 2]


def raw_agreement(items) -> tuple[float | None, tuple[float, float] | None, int]:
    """(share of items every rater agrees on, its Wilson interval, number of items)."""
    rated = _rated(items)
    if not rated:
        return None, None, 0
    agreed = sum(1 for item in rated if len(set(item)) == 1)
    return agreed / len(rated), wilson_interval(agreed, len(rated)), len(rated)


def cohen_kappa(pairs) -> tuple[float | None, tuple[float, float] | None]:
    """Cohen's kappa of (label of rater 1, label of rater 2) pairs, with its interval."""
    pairs = list(pairs)
    n = len(pairs)
    if n == 0:
        return None, None
    p_o = sum(1 for a, b in pairs if a == b) / n
    first, second = Counter(a for a, _ in pairs), Counter(b for _, b in pairs)
    p_e = sum((first[label] / n) * (second[label] / n) for label in set(first) | set(second))
    if p_e >= 1.0:
        return None, None
    kappa = (p_o - p_e) / (1 - p_e)
    half = Z95 * math.sqrt(p_o * (1 - p_o) / (n * (1 - p_e) ** 2))
    return kappa, (max(-1.0, kappa - half), min(1.0, kappa + half))


def _fleiss(rated: list[list]) -> float | None:
    totals: Counter = Counter()
    p_items = []
    for item in rated:
        counts = Counter(item)
        totals.update(counts)
        n_i = len(item)
        p_items.append(sum(c * (c - 1) for c in counts.values()) / (n_i * (n_i - 1)))
    all_ratings = sum(totals.values())
    p_e = sum((c / all_ratings) ** 2 for c in totals.values())
    if p_e >= 1.0:
        return None
    return (sum(p_items) / len(p_items) - p_e) / (1 - p_e)


def fleiss_kappa(items) -> tuple[float | None, tuple[float, float] | None]:
    """Fleiss' kappa of items rated by two or more raters each, with a bootstrap interval."""
    rated = _rated(items)
    if not rated:
        return None, None
    kappa = _fleiss(rated)
    if kappa is None:
        return None, None
    rng = random.Random(0)
    draws = sorted(k for k in (_fleiss([rng.choice(rated) for _ in rated]) for _ in range(BOOTSTRAP)) if k is not None)
    if not draws:
        return kappa, None
    low = draws[int(0.025 * (len(draws) - 1))]
    high = draws[int(math.ceil(0.975 * (len(draws) - 1)))]
    return kappa, (low, high)


def agreement(items, *, pairwise: bool = False) -> Agreement:
    """Raw agreement and kappa of the items. `pairwise` says the items' two labels come from the
    same two raters in the same order (a reviewer pair): Cohen's kappa; otherwise Fleiss'."""
    rated = _rated(items)
    raw, raw_ci, n = raw_agreement(rated)
    if pairwise:
        kappa, kappa_ci = cohen_kappa([(item[0], item[1]) for item in rated])
    else:
        kappa, kappa_ci = fleiss_kappa(rated)
    return Agreement(items=n, ratings=sum(len(i) for i in rated), raw=raw, raw_ci=raw_ci, kappa=kappa,
                     kappa_ci=kappa_ci, measure="cohen" if pairwise else "fleiss")
