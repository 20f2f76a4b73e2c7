from __future__ import annotations

import math
from itertools import pairwise

import pytest

from scrapy_costsched.model import (
    freshness_gain,
    mean_age,
    mean_freshness,
    p_changed,
    seed_priority,
    utility,
    utility_fraction,
    visit_index,
)


def simpson(fn, a: float, b: float, n: int = 2000) -> float:
    """Composite Simpson rule (n even): the independent numerical cross-check."""
    h = (b - a) / n
    total = fn(a) + fn(b)
    total += 4.0 * math.fsum(fn(a + (2 * k - 1) * h) for k in range(1, n // 2 + 1))
    total += 2.0 * math.fsum(fn(a + 2 * k * h) for k in range(1, n // 2))
    return total * h / 3.0


# -- the seed article's table --------------------------------------------------

# One visit a day (interval = elapsed = 1 day).  A month is taken as 30 days and
# a year as 365; 30.44 and 365.25 give the same rounded table (checked below).
SEED_TABLE = [
    (96.0, 0.010),  # every 15 minutes
    (24.0, 0.042),  # hourly
    (4.0, 0.241),  # every 6 hours
    (1.0, 0.400),  # daily
    (1.0 / 7.0, 0.124),  # weekly
    (1.0 / 30.0, 0.032),  # monthly
    (1.0 / 365.0, 0.003),  # yearly
]


@pytest.mark.parametrize(("rate", "expected"), SEED_TABLE)
def test_seed_table(rate: float, expected: float) -> None:
    assert round(freshness_gain(rate, 1.0, 1.0), 3) == expected


@pytest.mark.parametrize(("rate", "expected"), [(1.0 / 30.44, 0.032), (1.0 / 365.25, 0.003)])
def test_seed_table_calendar_lengths_agree(rate: float, expected: float) -> None:
    assert round(freshness_gain(rate, 1.0, 1.0), 3) == expected


def test_freshness_gain_is_change_probability_times_fresh_time() -> None:
    # Fresh time after the visit, integrated numerically: int_0^I exp(-rate t) dt.
    rate, elapsed, interval = 0.7, 2.0, 3.0
    fresh = simpson(lambda t: math.exp(-rate * t), 0.0, interval)
    expected = (1.0 - math.exp(-rate * elapsed)) * fresh
    assert freshness_gain(rate, elapsed, interval) == pytest.approx(expected, rel=1e-12)


def test_freshness_gain_limits() -> None:
    assert freshness_gain(2.0, 1.0, 0.0) == 0.0
    assert freshness_gain(0.0, math.inf, 1.0) == 0.0
    assert freshness_gain(2.0, math.inf, math.inf) == 0.5
    # rate -> 0: p_changed ~ rate * elapsed, fresh time -> interval.
    assert freshness_gain(1e-12, 2.0, 3.0) == pytest.approx(6e-12, rel=1e-9)


def test_seed_priority_scales_with_value_and_cost() -> None:
    base = freshness_gain(0.5, 2.0, 1.0)
    assert seed_priority(1.0, 0.5, 2.0, 1.0) == base
    assert seed_priority(3.0, 0.5, 2.0, 2.0) == pytest.approx(1.5 * base, rel=1e-15)
    assert seed_priority(1.0, 0.5, 2.0, 1.0, interval=2.0) == freshness_gain(0.5, 2.0, 2.0)


# -- p_changed -----------------------------------------------------------------


def test_p_changed_exact_values() -> None:
    assert p_changed(0.0, 3.0) == 0.0
    assert p_changed(0.0, math.inf) == 0.0
    assert p_changed(3.0, 0.0) == 0.0
    assert p_changed(3.0, math.inf) == 1.0
    assert p_changed(math.log(2.0), 1.0) == 0.5


def test_p_changed_keeps_precision_for_near_static_pages() -> None:
    x = 1e-12
    assert p_changed(x, 1.0) == pytest.approx(x - x * x / 2.0, rel=1e-15)
    assert p_changed(1.0, x) == pytest.approx(x, rel=1e-11)


# -- mean freshness and age (Cho & Garcia-Molina, TODS 2003) -------------------


def test_mean_freshness_published_value() -> None:
    assert round(mean_freshness(1.0, 1.0), 6) == 0.632121
    assert mean_freshness(1.0, 1.0) == -math.expm1(-1.0)


def test_mean_freshness_edges() -> None:
    assert mean_freshness(0.0, 0.0) == 1.0
    assert mean_freshness(0.0, 5.0) == 1.0
    assert mean_freshness(2.0, 0.0) == 0.0
    assert mean_freshness(2.0, math.inf) == 1.0


def test_mean_freshness_depends_only_on_ratio() -> None:
    for k in (1e-3, 0.5, 7.0, 1e4):
        assert mean_freshness(2.0 * k, 3.0 * k) == pytest.approx(mean_freshness(2.0, 3.0), rel=1e-15)


def test_mean_freshness_is_time_average() -> None:
    rate, frequency = 1.3, 0.4
    period = 1.0 / frequency
    avg = simpson(lambda t: math.exp(-rate * t), 0.0, period) / period
    assert mean_freshness(rate, frequency) == pytest.approx(avg, rel=1e-12)


def test_mean_freshness_small_ratio() -> None:
    r = 1e-9
    assert mean_freshness(r, 1.0) == pytest.approx(1.0 - r / 2.0 + r * r / 6.0, rel=1e-16)


@pytest.mark.parametrize(("rate", "frequency"), [(0.3, 1.0), (2.0, 1.5), (5.0, 0.7), (1e-4, 2.0)])
def test_marginal_freshness_is_g_over_rate(rate: float, frequency: float) -> None:
    # dF/df = g(rate / f) / rate (Cho & Garcia-Molina, TODS 2003).
    h = 1e-5 * frequency
    numeric = (mean_freshness(rate, frequency + h) - mean_freshness(rate, frequency - h)) / (2.0 * h)
    assert numeric == pytest.approx(utility_fraction(rate / frequency) / rate, rel=1e-6)


def test_mean_age_values() -> None:
    assert round(mean_age(1.0, 1.0), 6) == 0.132121
    assert mean_age(0.0, 0.0) == 0.0
    assert mean_age(2.0, 0.0) == math.inf
    assert mean_age(2.0, math.inf) == 0.0
    # Pages that change much faster than visits: the average age tends to half the period.
    assert mean_age(1e6, 1.0) == pytest.approx(0.5 - 1e-6, rel=1e-12)


@pytest.mark.parametrize(("rate", "frequency"), [(0.2, 1.0), (1.0, 1.0), (3.0, 0.5), (0.9999, 1.0)])
def test_mean_age_is_time_average(rate: float, frequency: float) -> None:
    # Expected age t after a visit: t - (1 - exp(-rate t)) / rate.
    period = 1.0 / frequency
    avg = simpson(lambda t: t + math.expm1(-rate * t) / rate, 0.0, period) / period
    assert mean_age(rate, frequency) == pytest.approx(avg, rel=1e-10)


def test_mean_age_series_matches_closed_form_at_switch() -> None:
    below, above = mean_age(1.0 - 1e-12, 1.0), mean_age(1.0, 1.0)
    assert below == pytest.approx(above, rel=1e-11)
    r = 1e-7  # series: r/6 - r**2/24
    assert mean_age(r, 1.0) == pytest.approx(r / 6.0 - r * r / 24.0, rel=1e-15)


# -- utility (Olston & Pandey, WWW 2008) ---------------------------------------


def test_utility_fraction_values() -> None:
    assert utility_fraction(0.0) == 0.0
    assert utility_fraction(math.inf) == 1.0
    assert utility_fraction(1e-8) == pytest.approx(0.5e-16, rel=1e-8)
    assert utility_fraction(2.0) == pytest.approx(1.0 - 3.0 * math.exp(-2.0), rel=1e-15)


def test_utility_fraction_series_matches_closed_form_at_switch() -> None:
    x = 0.5
    below = utility_fraction(math.nextafter(x, 0.0))
    assert below == pytest.approx(1.0 - 1.5 * math.exp(-0.5), rel=1e-14)
    assert utility_fraction(x) == pytest.approx(below, rel=1e-14)


def test_utility_fraction_is_increasing() -> None:
    xs = [k / 100.0 for k in range(1, 2000)]
    values = [utility_fraction(x) for x in xs]
    assert all(a < b for a, b in pairwise(values))


def test_utility_closed_form_and_integral() -> None:
    rate, t = 0.8, 1.7
    closed = 1.0 / rate - (t + 1.0 / rate) * math.exp(-rate * t)
    assert utility(rate, t) == pytest.approx(closed, rel=1e-14)
    # U(t) = int_0^t rate * s * exp(-rate s) ds
    assert utility(rate, t) == pytest.approx(simpson(lambda s: rate * s * math.exp(-rate * s), 0.0, t), rel=1e-12)


def test_utility_limits() -> None:
    assert utility(4.0, math.inf) == 0.25
    assert utility(0.0, 10.0) == 0.0  # a static page never needs a visit
    assert utility(0.0, math.inf) == 0.0
    assert utility(2.0, 0.0) == 0.0
    # Small rate * elapsed: U ~ rate * t**2 / 2.
    assert utility(1e-9, 2.0) == pytest.approx(2e-9, rel=1e-8)


def test_visit_index_equals_marginal_freshness_per_cost() -> None:
    # At t = 1 / f the index is w * dF/df / c: the KKT quantity of the allocation.
    value, rate, frequency, cost = 2.0, 1.5, 0.8, 4.0
    index = visit_index(value, rate, 1.0 / frequency, cost)
    assert index == pytest.approx(value * utility_fraction(rate / frequency) / rate / cost, rel=1e-15)
    assert visit_index(value, rate, math.inf, cost) == value / rate / cost


# -- errors --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: p_changed(-1.0, 1.0), "rate must be finite and non-negative"),
        (lambda: p_changed(math.nan, 1.0), "rate must be finite and non-negative"),
        (lambda: p_changed(math.inf, 1.0), "rate must be finite and non-negative"),
        (lambda: p_changed(1.0, -1.0), "elapsed must be non-negative"),
        (lambda: freshness_gain(1.0, 1.0, -1.0), "interval must be non-negative"),
        (lambda: mean_freshness(1.0, -1.0), "frequency must be non-negative"),
        (lambda: mean_age(-1.0, 1.0), "rate must be finite and non-negative"),
        (lambda: utility(1.0, math.nan), "elapsed must be non-negative"),
        (lambda: utility_fraction(-0.5), "x must be non-negative"),
        (lambda: visit_index(1.0, 1.0, 1.0, 0.0), "cost must be positive"),
        (lambda: visit_index(-1.0, 1.0, 1.0, 1.0), "value must be finite and non-negative"),
        (lambda: seed_priority(1.0, 1.0, 1.0, -2.0), "cost must be positive"),
    ],
)
def test_bad_input_raises(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()
