"""Statistics for agent evaluation: pass@k and binomial confidence intervals. Django-free.

pass@k uses the unbiased estimator of Chen et al. (2021, "Evaluating Large Language Models
Trained on Code"): with n attempts of which c passed, the chance that at least one of k attempts
drawn without replacement passes is 1 - C(n-c, k) / C(n, k). Estimating it as 1 - (1 - c/n)^k
instead is biased low for small n, which is exactly our case (a handful of rollouts per task).
"""
from __future__ import annotations

import math

from scipy.stats import norm

__all__ = ["pass_at_k", "wilson_interval"]


def _check_int(name: str, value: object) -> int:
    # bool is an int subclass; True as a count is almost certainly a bug in the caller.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < 0:
        raise ValueError(f"{name} must not be negative, got {value}")
    return value


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one task: n attempts, c of them passed, k drawn.

    Computed as 1 - prod_{i=n-c+1}^{n} (1 - k/i), which equals 1 - C(n-c, k)/C(n, k) but never
    forms the binomials: C(200, 100) overflows a float, the product of ratios does not.
    Raises ValueError for negative values, k < 1, k > n or c > n.
    """
    n, c, k = _check_int("n", n), _check_int("c", c), _check_int("k", k)
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if k > n:
        raise ValueError(f"k={k} exceeds the number of attempts n={n}")
    if c > n:
        raise ValueError(f"c={c} passing attempts is more than n={n} attempts")
    if n - c < k:
        # Every draw of k attempts must include a passing one.
        return 1.0
    failing_draws = 1.0
    for i in range(n - c + 1, n + 1):
        failing_draws *= 1.0 - k / i
    return 1.0 - failing_draws


def wilson_interval(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval for a binomial proportion, as (low, high).

    Preferred over the normal (Wald) interval because it stays inside [0, 1] and does not
    collapse to a zero width at 0 or n successes, which is common with few rollouts.
    trials == 0 gives (0.0, 1.0): with no observations every proportion is possible.
    """
    successes, trials = _check_int("successes", successes), _check_int("trials", trials)
    if successes > trials:
        raise ValueError(f"successes={successes} exceeds trials={trials}")
    if isinstance(confidence, bool) or not (0.0 < float(confidence) < 1.0):
        raise ValueError(f"confidence must be strictly between 0 and 1, got {confidence!r}")
    if trials == 0:
        return 0.0, 1.0
    z = float(norm.ppf(1.0 - (1.0 - float(confidence)) / 2.0))
    p = successes / trials
    z2 = z * z
    denom = 1.0 + z2 / trials
    center = (p + z2 / (2 * trials)) / denom
    half = z * math.sqrt(p * (1.0 - p) / trials + z2 / (4 * trials * trials)) / denom
    # Rounding can push the ends a hair past [0, 1] at p = 0 or 1.
    return max(0.0, center - half), min(1.0, center + half)
