"""The ranking the scheduler plans with (and the simulator's ``costsched`` policy runs).

Olston & Pandey (WWW 2008) reach Cho & Garcia-Molina's Lagrangian optimum online
by visiting a page when ``w·U(t)/c`` clears a threshold, with
``U(t) = 1/λ − (t + 1/λ)·e^(−λt)`` and *t* the time since the last visit. Sorting by
that index and taking the top until the budget is spent is the same threshold
rule with the threshold set by the budget. Under the ``changes`` objective every
change counts, which is the freshness problem with weights ``w·λ`` (Cho &
Garcia-Molina 2003).

Three refinements, each measured with the simulator (``python -m scrapy_costsched.sim``):

- *cycle*: a planner that acts once per cycle chooses between "now" and "one
  cycle later", so the utility is the chord :func:`~.freshness.cycle_utility`
  rather than the derivative; ranking by it reproduces the optimum on the grid
  of cycles.
- validators: a page whose unchanged answer (304) costs only
  *revalidation_cost* is priced by its marginal expected cost
  ``c304 + (cost − c304)·λ·U(t)`` (:func:`~.freshness.visit_index`), and the
  budget is charged its expected cost ``c304 + (cost − c304)·P(changed)``.
- learned rates: a page whose rate is uncertain (posterior 90% interval
  *rate_low*..*rate_high*) is ranked by its expected utility over the posterior
  (a three-point Gauss–Hermite rule in log(rate)) rather than the utility at
  the point estimate: the expected freshness a visit buys, which is what the
  budget should buy when rates are not known.
"""

from __future__ import annotations

import gc
import math
from operator import itemgetter
from typing import TYPE_CHECKING, NamedTuple

from scrapy_costsched.model.freshness import _excess, p_changed, utility_fraction

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

OBJECTIVES = ("freshness", "changes")
_SERIES_BELOW = 0.5  # as in freshness.utility_fraction
# Three-point rule in log(rate) with nodes at the 90% interval's ends (±1.6449 sd for a log-normal
# posterior) and the estimate, weighted to integrate log(rate)**k exactly for k <= 3 (Gauss–Hermite
# puts its nodes at ±sqrt(3) sd instead; this saves two powers per page).
_SIDE = 0.5 / 1.6448536269514722**2
_CENTRE = 1.0 - 2.0 * _SIDE


class Candidate(NamedTuple):
    """A page that could be visited now.

    *elapsed* is the time since its last successful visit (``math.inf`` if it was
    never fetched: there is no copy, so a visit buys the whole ``1/λ``), in the
    same unit as 1/*rate*.  *cost* is what a visit that downloads the page
    costs; *revalidation_cost*, when set, what a visit that finds it unchanged
    costs (a 304 answer to a conditional request).  *rate_low* and *rate_high*,
    when set, are the 5% and 95% quantiles of the rate's posterior
    (:class:`~.estimators.RateEstimate`) and *rate* its geometric mean.

    A named tuple rather than a dataclass: a plan builds one per known page,
    and a million of them build in well under a second.
    """

    key: str
    value: float
    rate: float
    elapsed: float
    cost: float
    revalidation_cost: float | None = None
    rate_low: float | None = None
    rate_high: float | None = None

    @property
    def expected_cost(self) -> float:
        """What the visit is expected to cost: *cost*, or c304 + (cost − c304)·P(changed) with validators.

        >>> Candidate("a", 1.0, math.log(2.0), 1.0, 1.0, 0.1).expected_cost
        0.55
        """
        if self.revalidation_cost is None:
            return self.cost
        return self.revalidation_cost + (self.cost - self.revalidation_cost) * p_changed(self.rate, self.elapsed)


def score(candidate: Candidate, objective: str = "freshness", cycle: float = 0.0) -> float:
    """The index of one candidate: ``value × U(elapsed) / marginal cost`` (× rate under ``changes``).

    >>> score(Candidate("a", value=1.0, rate=1.0, elapsed=math.inf, cost=1.0))
    1.0
    >>> round(score(Candidate("a", 2.0, 1.0, 1.0, 4.0)), 6)  # (1 - 2/e) * 2 / 4
    0.132121
    >>> round(score(Candidate("a", 2.0, 1.0, 1.0, 4.0), cycle=1.0), 6)  # (1 - 1/e)**2 * 2 / 4
    0.199788

    An uncertain rate is valued by the posterior's expected utility: 20 days
    after the last visit, more than at the estimate (1.000) since the page may
    be slower than estimated, and has then gone stale with more to gain:

    >>> round(score(Candidate("a", 1.0, 1.0, 20.0, 1.0, rate_low=0.2, rate_high=5.0)), 3)
    1.507

    A negative value, rate or elapsed time, a cost <= 0, a revalidation cost
    outside (0, cost], bounds out of order, a negative cycle
    and an unknown objective raise ValueError.
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}")
    if not 0.0 <= cycle < math.inf:
        raise ValueError("cycle must be finite and non-negative")
    _check(candidate)
    return _index(candidate, objective == "changes", cycle)


def _check(candidate: Candidate) -> None:
    _, value, rate, elapsed, cost, c304, low, high = candidate
    if not 0.0 <= value < math.inf:
        raise ValueError("value must be finite and non-negative")
    if not cost > 0.0:
        raise ValueError("cost must be positive")
    if not 0.0 <= rate < math.inf:
        raise ValueError("rate must be finite and non-negative")
    if not elapsed >= 0.0:
        raise ValueError("elapsed must be non-negative")
    if c304 is not None and not 0.0 < c304 <= cost:
        raise ValueError("revalidation_cost must be positive and at most cost")
    if (low is None) != (high is None) or (low is not None and high is not None and not 0.0 < low <= high < math.inf):
        raise ValueError("rate_low and rate_high must both be set or unset, positive, finite and in order")


def _node(
    rate: float,
    elapsed: float,
    cycle: float,
    per_cycle: float,
    _exp: Callable[[float], float] = math.exp,
    _expm1: Callable[[float], float] = math.expm1,
) -> float:
    """rate × U(elapsed), or rate × U_cycle(elapsed) (:func:`~.freshness.cycle_utility`), for rate > 0 and a
    finite *elapsed*; *per_cycle* is elapsed / cycle.  (Math functions bound as defaults: it runs up to three
    times per page and plan.)"""
    x = rate * elapsed
    if x >= _SERIES_BELOW:
        if x > 40.0:  # 1 - (1 + x)·e^-x, and the cycle term, are within an ulp of 1
            return 1.0
        e = _exp(-x)
        if cycle:  # g(x) + (t/c)·h(a)·e^-x with h(a) = a + expm1(-a), a = rate·c, regrouped
            return 1.0 - e + per_cycle * e * _expm1(-rate * cycle)
        return 1.0 - e - x * e
    g: float = utility_fraction(x)
    if cycle:
        g += per_cycle * _excess(rate * cycle) * _exp(-x)
    return g


def _posterior_utility(rate: float, low: float, high: float, elapsed: float, cycle: float) -> tuple[float, float]:
    """E[U] and E[rate·U] over the posterior by the three-point rule, for a finite *elapsed*."""
    per_cycle = elapsed / cycle if cycle else 0.0
    g_low = _node(low, elapsed, cycle, per_cycle)
    g = _node(rate, elapsed, cycle, per_cycle)
    g_high = _node(high, elapsed, cycle, per_cycle)
    return _SIDE * (g_low / low + g_high / high) + _CENTRE * g / rate, _SIDE * (g_low + g_high) + _CENTRE * g


def _index(candidate: Candidate, changes: bool, cycle: float) -> float:
    """The index of a valid candidate."""
    _, value, rate, elapsed, cost, c304, low, high = candidate
    if rate == 0.0 or elapsed == 0.0 or value == 0.0:
        return 0.0
    if low is None or high is None:
        expected_ru = 1.0 if elapsed == math.inf else _node(rate, elapsed, cycle, elapsed / cycle if cycle else 0.0)
        expected_u = expected_ru / rate
    elif elapsed == math.inf:
        expected_u, expected_ru = _SIDE * (1.0 / low + 1.0 / high) + _CENTRE / rate, 1.0
    else:
        expected_u, expected_ru = _posterior_utility(rate, low, high, elapsed, cycle)
    gain = value * (expected_ru if changes else expected_u)
    return gain / (cost if c304 is None else c304 + (cost - c304) * expected_ru)


def rank(
    candidates: Iterable[Candidate], objective: str = "freshness", cycle: float = 0.0
) -> list[tuple[float, Candidate]]:
    """Candidates by index, best first, ties by key; pages with nothing to gain are left out.

    *cycle* (in the unit of *elapsed*; 0 for continuous time) is how often the
    planner runs: see :func:`~.freshness.cycle_utility`.

    >>> [c.key for _, c in rank([Candidate("b", 1, 1, 1, 1), Candidate("a", 1, 1, 2, 1), Candidate("c", 1, 1, 0, 1)])]
    ['a', 'b']
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}")
    if not 0.0 <= cycle < math.inf:
        raise ValueError("cycle must be finite and non-negative")
    changes = objective == "changes"
    inf, node = math.inf, _node
    # A plan allocates a tuple per page and no reference cycles: the cyclic
    # collector would only rescan the growing list (half the run time at 1M pages).
    collecting = gc.isenabled()
    gc.disable()
    try:
        scored: list[tuple[float, Candidate]] = []
        append = scored.append
        for c in candidates:
            _, value, rate, elapsed, cost, c304, low, high = c
            if not (0.0 <= value < inf and cost > 0.0 and 0.0 <= rate < inf and elapsed >= 0.0) or (
                (c304 is not None and not 0.0 < c304 <= cost)
                or (high is not None if low is None else high is None or not 0.0 < low <= high < inf)
            ):
                _check(c)  # raises the error that names the problem
            if c304 is not None or low is not None or cycle:
                index = _index(c, changes, cycle)
            elif rate == 0.0 or elapsed == 0.0 or value == 0.0:
                continue
            else:  # _index for a known rate without validators, with fewer steps: same arithmetic
                g = 1.0 if elapsed == inf else node(rate, elapsed, 0.0, 0.0)
                index = value * (g if changes else g / rate) / cost
            if index > 0.0:
                append((index, c))
        scored.sort(key=itemgetter(0), reverse=True)  # stable: equal indexes keep their order
        _order_ties_by_key(scored)
    finally:
        if collecting:
            gc.enable()
    return scored


def _order_ties_by_key(scored: list[tuple[float, Candidate]]) -> None:
    """Sort each run of equal indexes by key (the sort by index alone is stable, not by key)."""
    n = len(scored)
    i = 0
    while i < n - 1:
        if scored[i][0] != scored[i + 1][0]:
            i += 1
            continue
        j = i + 1
        while j < n - 1 and scored[j + 1][0] == scored[i][0]:
            j += 1
        scored[i : j + 1] = sorted(scored[i : j + 1], key=lambda sc: sc[1].key)
        i = j + 1


def affordable_prefix(ranking: Iterable[tuple[float, Candidate]], budget: float) -> list[Candidate]:
    """The longest prefix of *ranking* whose expected costs add up to at most *budget*.

    >>> ranked = rank([Candidate(k, 1, 1, math.inf, 1) for k in "abc"])
    >>> [c.key for c in affordable_prefix(ranked, 2)]
    ['a', 'b']
    """
    chosen: list[Candidate] = []
    spent = 0.0
    for _, candidate in ranking:
        cost = candidate.cost if candidate.revalidation_cost is None else candidate.expected_cost
        if spent + cost > budget + 1e-9:
            break
        spent += cost
        chosen.append(candidate)
    return chosen
