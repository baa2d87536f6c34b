"""pass@k and the Wilson interval against values worked out by hand."""
from __future__ import annotations

import math
from fractions import Fraction

import pytest

from facet_site.lib.stats import pass_at_k, wilson_interval


def _exact_pass_at_k(n: int, c: int, k: int) -> Fraction:
    # The definition itself, in exact arithmetic, as the reference.
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


@pytest.mark.parametrize("n, c, k, expected", [
    (3, 1, 1, 1 / 3),  # one of three attempts passes; draw one
    (3, 1, 3, 1.0),  # drawing all three always includes the passing one
    (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
    (10, 0, 1, 0.0),
    (10, 0, 10, 0.0),
    (10, 10, 1, 1.0),
    (4, 2, 1, 0.5),  # pass@1 is the plain success rate c/n
    (10, 3, 4, 5 / 6),  # 1 - C(7,4)/C(10,4) = 1 - 35/210
    (1, 1, 1, 1.0),
    (1, 0, 1, 0.0),
])
def test_pass_at_k_hand_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_matches_the_binomial_definition_everywhere():
    for n in range(1, 16):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(float(_exact_pass_at_k(n, c, k)),
                                                           abs=1e-12), (n, c, k)


def test_pass_at_k_is_stable_where_the_binomials_overflow_a_float():
    # C(2000, 1000) is about 1e600: a float ratio of the binomials would be inf/inf.
    value = pass_at_k(2000, 3, 1000)
    assert value == pytest.approx(float(_exact_pass_at_k(2000, 3, 1000)), abs=1e-12)
    assert 0.0 < value < 1.0
    assert pass_at_k(400, 1, 1) == pytest.approx(1 / 400)


@pytest.mark.parametrize("n, c, k, message", [
    (3, 1, 4, "exceeds the number of attempts"),
    (3, 4, 1, "more than n"),
    (-1, 0, 1, "n must not be negative"),
    (3, -1, 1, "c must not be negative"),
    (3, 1, -1, "k must not be negative"),
    (3, 1, 0, "k must be at least 1"),
    (0, 0, 1, "exceeds the number of attempts"),
    (3.0, 1, 1, "n must be an integer"),
    (3, True, 1, "c must be an integer"),
])
def test_pass_at_k_rejects_bad_input(n, c, k, message):
    with pytest.raises(ValueError, match=message):
        pass_at_k(n, c, k)


def _wilson_by_hand(s: int, n: int, z: float) -> tuple[float, float]:
    # Wilson (1927) written out the textbook way: (p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) /
    # (1 + z²/n), independent of how stats.py arranges the terms.
    p = s / n
    lo = (p + z * z / (2 * n) - z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))) / (1 + z * z / n)
    hi = (p + z * z / (2 * n) + z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))) / (1 + z * z / n)
    return lo, hi


@pytest.mark.parametrize("s, n, expected", [
    (0, 10, (0.0, 0.2775)),
    (5, 10, (0.2366, 0.7634)),
    # Worked by hand with z = 1.959964: centre 0.289207/1.038415 = 0.27851, half-width
    # 1.959964·sqrt(0.001971 + 0.0000960)/1.038415 = 0.08581. (0.1929, 0.3636), which was
    # quoted for this case, is not the Wilson interval at 95 %.
    (27, 100, (0.1927, 0.3643)),
    (10, 10, (0.7225, 1.0)),
    (1, 3, (0.0615, 0.7923)),
])
def test_wilson_interval_known_values(s, n, expected):
    low, high = wilson_interval(s, n)
    assert round(low, 4) == expected[0]
    assert round(high, 4) == expected[1]
    by_hand = _wilson_by_hand(s, n, 1.959963984540054)
    assert low == pytest.approx(max(0.0, by_hand[0]), abs=1e-12)
    assert high == pytest.approx(min(1.0, by_hand[1]), abs=1e-12)


def test_wilson_interval_other_confidence_levels():
    z99 = 2.5758293035489004
    low, high = wilson_interval(5, 10, confidence=0.99)
    assert (low, high) == pytest.approx(_wilson_by_hand(5, 10, z99), abs=1e-12)
    assert (round(low, 4), round(high, 4)) == (0.1842, 0.8158)
    narrow = wilson_interval(5, 10, confidence=0.5)
    assert narrow[0] > low and narrow[1] < high


def test_wilson_interval_without_trials_is_everything():
    assert wilson_interval(0, 0) == (0.0, 1.0)


@pytest.mark.parametrize("s, n, conf, message", [
    (11, 10, 0.95, "exceeds trials"),
    (-1, 10, 0.95, "must not be negative"),
    (1, -10, 0.95, "must not be negative"),
    (1, 10, 1.0, "confidence"),
    (1, 10, 0.0, "confidence"),
    (1.5, 10, 0.95, "must be an integer"),
])
def test_wilson_interval_rejects_bad_input(s, n, conf, message):
    with pytest.raises(ValueError, match=message):
        wilson_interval(s, n, conf)
