"""Freshness, age and visit utility of a page whose changes follow a Poisson process.

The change model is the one of Cho & Garcia-Molina: a page changes at the times
of a Poisson process with rate *rate* (lambda), and a visit copies the live page.
All functions are agnostic of the time unit, as long as rates, frequencies and
durations use the same one (the rest of the package uses days).

==========================  ===================================================
Function                    Meaning
==========================  ===================================================
:func:`p_changed`           probability of at least one change in *elapsed*
:func:`freshness_gain`      expected fresh time bought by one visit (seed rule)
:func:`seed_priority`       value * freshness gain / cost (seed rule)
:func:`mean_freshness`      time-averaged freshness under evenly spaced visits
:func:`mean_age`            time-averaged age under evenly spaced visits
:func:`utility_fraction`    g(x) = 1 - (1 + x) exp(-x)
:func:`utility`             Olston & Pandey's utility of visiting now
:func:`cycle_utility`       the same for a planner that acts once per cycle
:func:`visit_index`         value * utility / marginal cost, the ranking key
==========================  ===================================================

References:

- J. Cho, H. Garcia-Molina, "Synchronizing a database to improve freshness",
  SIGMOD 2000, https://doi.org/10.1145/342009.335391
- J. Cho, H. Garcia-Molina, "Effective page refresh policies for web crawlers",
  ACM TODS 28(4), 2003, https://doi.org/10.1145/958942.958945
- C. Olston, S. Pandey, "Recrawl scheduling based on information longevity",
  WWW 2008, https://doi.org/10.1145/1367497.1367556
"""

from __future__ import annotations

import math

__all__ = [
    "cycle_utility",
    "freshness_gain",
    "mean_age",
    "mean_freshness",
    "p_changed",
    "seed_priority",
    "utility",
    "utility_fraction",
    "visit_index",
]

# Below these arguments the closed forms lose relative precision to
# cancellation, so a power series is summed instead.
_SERIES_BELOW = 0.5
_AGE_SERIES_BELOW = 1.0


def _check_rate(rate: float) -> None:
    if not 0.0 <= rate < math.inf:  # also rejects NaN
        raise ValueError("rate must be finite and non-negative")


def _check_duration(value: float, name: str) -> None:
    if not value >= 0.0:  # rejects negatives and NaN, allows inf
        raise ValueError(f"{name} must be non-negative")


def _check_value_cost(value: float, cost: float) -> None:
    if not 0.0 <= value < math.inf:
        raise ValueError("value must be finite and non-negative")
    if not cost > 0.0:
        raise ValueError("cost must be positive")


def p_changed(rate: float, elapsed: float) -> float:
    """Probability that a page changed at least once in *elapsed* time.

    1 - exp(-rate * elapsed), via expm1 so that rarely changing pages keep
    their precision.  *elapsed* may be ``math.inf`` (never visited).

    >>> p_changed(0.0, 10.0)
    0.0
    >>> p_changed(2.0, math.inf)
    1.0
    >>> p_changed(math.log(2.0), 1.0)
    0.5
    >>> p_changed(1e-12, 1.0)  # doctest: +ELLIPSIS
    9.99999999999...e-13

    A negative rate or elapsed time raises ValueError.
    """
    _check_rate(rate)
    _check_duration(elapsed, "elapsed")
    if rate == 0.0 or elapsed == 0.0:
        return 0.0
    return -math.expm1(-rate * elapsed)


def freshness_gain(rate: float, elapsed: float, interval: float) -> float:
    """Expected fresh time that a visit now buys until the next one.

    The seed article's rule: the visit matters only if the page changed since
    the last visit (probability ``p_changed(rate, elapsed)``), and then keeps
    the copy fresh for an expected (1 - exp(-rate * interval)) / rate of the
    next *interval* (Cho & Garcia-Molina 2003, the integral of freshness).

    One visit a day to a page that changes daily:

    >>> round(freshness_gain(1.0, 1.0, 1.0), 6)
    0.399576
    >>> freshness_gain(0.0, 1.0, 1.0)
    0.0
    """
    _check_rate(rate)
    _check_duration(interval, "interval")
    changed = p_changed(rate, elapsed)
    if changed == 0.0 or interval == 0.0:
        return 0.0
    # rate > 0 here (otherwise changed == 0); the limit for rate -> 0 is interval.
    fresh_after = -math.expm1(-rate * interval) / rate
    return changed * fresh_after


def seed_priority(value: float, rate: float, elapsed: float, cost: float, interval: float = 1.0) -> float:
    """Seed ranking key: *value* times :func:`freshness_gain` per unit *cost*.

    >>> round(seed_priority(2.0, 1.0, 1.0, 4.0), 6)
    0.199788

    A negative value or a cost <= 0 raises ValueError.
    """
    _check_value_cost(value, cost)
    return value * freshness_gain(rate, elapsed, interval) / cost


def mean_freshness(rate: float, frequency: float) -> float:
    """Time-averaged freshness of a page visited evenly at *frequency*.

    F = (f / rate) * (1 - exp(-rate / f)) (Cho & Garcia-Molina, TODS 2003,
    section 4); it depends on rate and frequency only through r = rate / f.
    A static page (rate 0) is always fresh; a changing page never visited
    (frequency 0) is never fresh.

    >>> round(mean_freshness(1.0, 1.0), 6)
    0.632121
    >>> mean_freshness(0.0, 0.0), mean_freshness(3.0, 0.0), mean_freshness(3.0, math.inf)
    (1.0, 0.0, 1.0)
    """
    _check_rate(rate)
    _check_duration(frequency, "frequency")
    if rate == 0.0:
        return 1.0
    if frequency == 0.0:
        return 0.0
    r = rate / frequency
    if r == 0.0:
        return 1.0
    return -math.expm1(-r) / r


def _age_factor(r: float) -> float:
    # h(r) = 1/2 - 1/r + (1 - exp(-r)) / r**2 = sum_{k>=1} (-1)**(k+1) r**k / (k+2)!
    if r >= _AGE_SERIES_BELOW:
        return 0.5 - 1.0 / r - math.expm1(-r) / (r * r)
    total = 0.0
    term = r / 6.0
    k = 1
    while True:
        total += term
        k += 1
        term *= -r / (k + 2)
        if abs(term) <= 1e-17 * total:
            return total


def mean_age(rate: float, frequency: float) -> float:
    """Time-averaged age of a page visited evenly at *frequency*.

    A = (1 / f) * (1/2 - 1/r + (1 - exp(-r)) / r**2) with r = rate / f (Cho &
    Garcia-Molina, TODS 2003); summed as a series for small r, where the
    closed form cancels.  A static page has age 0; a changing page that is
    never visited has infinite age.

    >>> round(mean_age(1.0, 1.0), 6)
    0.132121
    >>> mean_age(0.0, 0.0), mean_age(2.0, 0.0), mean_age(2.0, math.inf)
    (0.0, inf, 0.0)
    """
    _check_rate(rate)
    _check_duration(frequency, "frequency")
    if rate == 0.0:
        return 0.0
    if frequency == 0.0:
        return math.inf
    if frequency == math.inf:
        return 0.0
    return _age_factor(rate / frequency) / frequency


def utility_fraction(x: float) -> float:
    """Return g(x) = 1 - (1 + x) * exp(-x), for x >= 0.

    g(rate * t) is the share of its largest value 1 / rate that the utility
    of a visit has reached t after the previous one (Olston & Pandey 2008),
    and g(rate / f) / rate is the marginal freshness dF/df of Cho &
    Garcia-Molina (TODS 2003).  It is also the probability of two or more
    Poisson events when x are expected.  Small x use the series
    x**2/2 - x**3/3 + x**4/8 - ..., where the closed form cancels.

    >>> utility_fraction(0.0), utility_fraction(math.inf)
    (0.0, 1.0)
    >>> round(utility_fraction(1.0), 12) == round(1.0 - 2.0 / math.e, 12)
    True
    >>> utility_fraction(1e-6)  # doctest: +ELLIPSIS
    4.99999666666...e-13
    """
    if not x >= 0.0:
        raise ValueError("x must be non-negative")
    if x >= _SERIES_BELOW:
        if x == math.inf:
            return 1.0
        return -math.expm1(-x) - x * math.exp(-x)
    # sum_{k>=2} (-1)**k (k - 1) x**k / k! = x**2 * p(x), p in Horner form: 16
    # terms are exact to rounding below x = 0.5 (and 3x faster than a loop).
    p = -16 / 355687428096000
    p = 15 / 20922789888000 + x * p
    p = -14 / 1307674368000 + x * p
    p = 13 / 87178291200 + x * p
    p = -12 / 6227020800 + x * p
    p = 11 / 479001600 + x * p
    p = -10 / 39916800 + x * p
    p = 9 / 3628800 + x * p
    p = -8 / 362880 + x * p
    p = 7 / 40320 + x * p
    p = -6 / 5040 + x * p
    p = 5 / 720 + x * p
    p = -4 / 120 + x * p
    p = 3 / 24 + x * p
    p = -2 / 6 + x * p
    p = 1 / 2 + x * p
    return x * x * p


def utility(rate: float, elapsed: float) -> float:
    """Olston & Pandey's utility of visiting a page *elapsed* after the last visit.

    U(t) = 1/rate - (t + 1/rate) * exp(-rate * t) = g(rate * t) / rate, the
    expected stale time that waiting has cost so far, measured so that visiting
    whenever U(t) reaches a threshold reproduces the Lagrangian optimum of Cho &
    Garcia-Molina (Olston & Pandey, WWW 2008, section 5).  It grows from 0 to
    1/rate, reached for ``elapsed = math.inf``.  A static page (rate 0) never
    needs a visit, so its utility is 0 (also the limit rate -> 0).

    >>> utility(2.0, math.inf)
    0.5
    >>> utility(0.0, 5.0), utility(3.0, 0.0)
    (0.0, 0.0)
    >>> round(utility(1.0, 1.0), 12) == round(1.0 - 2.0 / math.e, 12)
    True
    """
    _check_rate(rate)
    _check_duration(elapsed, "elapsed")
    if rate == 0.0 or elapsed == 0.0:
        return 0.0
    return utility_fraction(rate * elapsed) / rate


def _excess(a: float) -> float:
    # h(a) = a - (1 - exp(-a)) = sum_{k>=2} (-1)**k a**k / k!, >= 0 and without cancellation.
    if a >= _SERIES_BELOW:
        return a + math.expm1(-a)
    x = a
    p = -1 / 355687428096000
    p = 1 / 20922789888000 + x * p
    p = -1 / 1307674368000 + x * p
    p = 1 / 87178291200 + x * p
    p = -1 / 6227020800 + x * p
    p = 1 / 479001600 + x * p
    p = -1 / 39916800 + x * p
    p = 1 / 3628800 + x * p
    p = -1 / 362880 + x * p
    p = 1 / 40320 + x * p
    p = -1 / 5040 + x * p
    p = 1 / 720 + x * p
    p = -1 / 120 + x * p
    p = 1 / 24 + x * p
    p = -1 / 6 + x * p
    p = 1 / 2 + x * p
    return x * x * p


def cycle_utility(rate: float, elapsed: float, cycle: float) -> float:
    """Utility of visiting now rather than one *cycle* later, for a planner that acts once per cycle.

    Olston & Pandey's U(t) = G(t) - t·G'(t), with G(t) = (1 - exp(-rate·t)) / rate
    the expected fresh time after a visit, is the marginal freshness of a shorter
    revisit period when visits can happen at any time.  A planner that decides
    once per *cycle* only chooses between "now" and "a cycle later", so the
    derivative becomes the forward difference (the chord of Cho & Garcia-Molina's
    freshness curve between the periods t and t + cycle):

        U_c(t) = G(t) - t·(G(t + c) - G(t)) / c
               = [g(rate·t) + (t / c)·h(rate·c)·exp(-rate·t)] / rate,

    with g(x) = 1 - (1 + x)·exp(-x) and h(a) = a - (1 - exp(-a)), both summed
    without cancellation.  Ranking by it on a grid of cycles reproduces the
    Lagrangian optimum restricted to that grid; ``cycle = 0`` gives
    :func:`utility`.  It lies between U(t) and U(t + cycle).

    >>> round(cycle_utility(1.0, 1.0, 1.0), 6)  # (1 - 1/e)**2, the seed's one-visit-a-day gain
    0.399576
    >>> cycle_utility(2.0, math.inf, 1.0), cycle_utility(2.0, 3.0, 0.0) == utility(2.0, 3.0)
    (0.5, True)

    A negative rate, elapsed time or cycle raises ValueError.
    """
    _check_rate(rate)
    _check_duration(elapsed, "elapsed")
    _check_duration(cycle, "cycle")
    if cycle == 0.0:
        return utility(rate, elapsed)
    if rate == 0.0 or elapsed == 0.0:
        return 0.0
    if elapsed == math.inf:
        return 1.0 / rate
    x = rate * elapsed
    return (utility_fraction(x) + elapsed / cycle * _excess(rate * cycle) * math.exp(-x)) / rate


def visit_index(
    value: float,
    rate: float,
    elapsed: float,
    cost: float,
    *,
    cycle: float = 0.0,
    revalidation_cost: float | None = None,
) -> float:
    """Scheduler ranking key: *value* * utility / marginal expected cost.

    Olston & Pandey's threshold rule visits a page when value * U(t) / cost
    reaches the budget's multiplier T; ranking by this index spends a budget
    where it buys the most freshness per unit of cost.  With *cycle* > 0 the
    utility is :func:`cycle_utility` (the planner acts once per cycle).

    When an unchanged page costs only *revalidation_cost* (a 304 answer to a
    conditional request) and a changed one *cost*, the spend of visiting every
    t is (c304 + (cost - c304)·(1 - exp(-rate·t))) / t, whose marginal per extra
    visit is c304 + (cost - c304)·rate·U(t): that is the divisor (research.md
    section 1; it reproduces the KKT condition g(x) = mu·c304 / (w/rate - mu·dc)).

    >>> visit_index(3.0, 2.0, math.inf, 0.5)
    3.0
    >>> visit_index(1.0, 0.0, 10.0, 1.0)
    0.0
    >>> round(visit_index(1.0, 1.0, 1.0, 1.0, revalidation_cost=0.05), 6)  # U / (0.05 + 0.95·U)
    0.877793

    A negative value, a cost <= 0 or a revalidation cost outside (0, cost]
    raises ValueError.
    """
    _check_value_cost(value, cost)
    u = cycle_utility(rate, elapsed, cycle) if cycle else utility(rate, elapsed)
    if revalidation_cost is None:
        return value * u / cost
    if not 0.0 < revalidation_cost <= cost:
        raise ValueError("revalidation_cost must be positive and at most cost")
    return value * u / (revalidation_cost + (cost - revalidation_cost) * rate * u)
