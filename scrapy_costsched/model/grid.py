"""Optimal revisit frequencies on a grid of planning cycles, with validator pricing.

:func:`~.allocation.solve_allocation` is Cho & Garcia-Molina's optimum when a
page can be visited at any time.  A planner that acts once per *cycle* can only
revisit a page every k cycles (k = 1, 2, ...) or mix two neighbouring periods.
Mixing periods k and k + 1 in shares of time interpolates freshness and spend
linearly, so the best plan on the grid is the Lagrangian optimum over the chords
of the freshness curve between the points f = 1 / (k·cycle): a page takes the
smallest k whose chord slope ``w·U_c(k·cycle) / marginal cost`` reaches the
multiplier mu (:func:`~.freshness.cycle_utility`).  At most one visit per cycle
is the cap f <= 1 / cycle.  ``cycle = 0`` is the continuous problem.

With validators, an unchanged page costs only its revalidation cost c304 and a
changed one the full cost c, so a page visited every t costs
(c304 + (c - c304)·(1 - exp(-rate·t))) / t per unit of time; its marginal cost
per extra visit is c304 + (c - c304)·rate·U(t), and the KKT condition becomes
g(x) = mu·c304 / (w/rate - mu·(c - c304)) (research.md section 1, derived).

References:

- J. Cho, H. Garcia-Molina, "Effective page refresh policies for web crawlers",
  ACM TODS 28(4), 2003, https://doi.org/10.1145/958942.958945
- C. Olston, S. Pandey, "Recrawl scheduling based on information longevity",
  WWW 2008, https://doi.org/10.1145/1367497.1367556
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .allocation import _inverse_g
from .freshness import _excess, mean_freshness, utility_fraction

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["GridAllocation", "expected_freshness", "expected_spend", "frequency_at", "grid_allocation"]

_OBJECTIVES = ("freshness", "changes")


@dataclass(frozen=True)
class GridAllocation:
    """Visit frequencies (visits per time unit, each at most 1 / cycle) and their multiplier.

    *multiplier* is the objective gained per extra unit of budget per unit of
    time at the optimum, the threshold of the ranking index.
    """

    frequencies: list[float]
    multiplier: float


def _approx_inverse_g(y: float) -> float:
    """x with g(x) ~= y (relative error ~1e-6), for 0 < y < 1: the starting guess of
    :func:`~.allocation._inverse_g` and two Newton steps."""
    if y < 0.3:
        s = math.sqrt(2.0 * y)
        x = s + s * s / 3.0
    else:
        x = -math.log1p(-y)
        x += math.log1p(x)
        x = -math.log1p(-y) + math.log1p(x)
    for _ in range(2):
        slope = x * math.exp(-x)
        if slope <= 0.0:
            break
        x = max(x - (utility_fraction(x) - y) / slope, 0.5 * x)
    return x


def _scaled_cycle_utility(a: float, h: float, k: int) -> float:
    # rate·U_c(k·c) with a = rate·c and h = h(a): g(a·k) + k·h·exp(-a·k).
    x = a * k
    return utility_fraction(x) + k * h * math.exp(-x)


def _period_index(a: float, h: float, y: float) -> int:
    """Smallest k >= 1 with rate·U_c(k·c) >= y, for 0 < y < 1 (a = rate·c, h = h(a)).

    U(t) <= U_c(t) <= U(t + c) puts k within a step of the continuous root, as
    far as the approximate inverse of g allows: for a nearly static page (k of
    1e13 cycles) its 1e-6 error is millions of steps, so the search gallops to a
    bracket and bisects rather than stepping.
    """

    def reaches(k: int) -> bool:
        return _scaled_cycle_utility(a, h, k) >= y

    guess = max(1, math.ceil(_approx_inverse_g(y) / a) - 1)
    step = 1
    if reaches(guess):  # bracket (short, enough]: short = 0 stands for "no period is shorter"
        enough, short = guess, guess - 1
        while short >= 1 and reaches(short):
            enough, step = short, 2 * step
            short = max(enough - step, 0)
    else:
        short, enough = guess, guess + 1
        while not reaches(enough):
            short, step = enough, 2 * step
            enough = short + step
    while enough - short > 1:
        middle = (short + enough) // 2
        if reaches(middle):
            enough = middle
        else:
            short = middle
    return enough


def _response(rate: float, weight: float, cost: float, c304: float, mu: float, cycle: float, h: float) -> float:
    """One page's optimal frequency at multiplier *mu* (0.0: not worth visiting); h = h(rate·cycle)."""
    denominator = weight - mu * (cost - c304) * rate
    if denominator <= 0.0:
        return 0.0
    y = rate * mu * c304 / denominator  # rate × the utility a visit must reach
    if y >= 1.0:
        return 0.0
    if cycle == 0.0:
        return rate / _inverse_g(y) if y > 0.0 else math.inf
    if y <= 0.0:
        return 1.0 / cycle
    return 1.0 / (_period_index(rate * cycle, h, y) * cycle)


def frequency_at(
    multiplier: float,
    rate: float,
    weight: float,
    cost: float,
    revalidation_cost: float | None = None,
    cycle: float = 0.0,
    objective: str = "freshness",
) -> float:
    """One page's frequency in the allocation whose multiplier is *multiplier* (see :func:`grid_allocation`).

    >>> round(frequency_at(0.21643, 1.0, 1.0, 1.0), 3)  # the first page of the published example
    1.15
    """
    if objective not in _OBJECTIVES:
        raise ValueError(f"objective must be one of {_OBJECTIVES}")
    if rate == 0.0 or weight == 0.0:
        return 0.0
    w = weight * rate if objective == "changes" else weight
    c304 = cost if revalidation_cost is None else revalidation_cost
    return _response(rate, w, cost, c304, multiplier, cycle, _excess(rate * cycle))


def expected_spend(
    rate: float, frequency: float, cost: float, revalidation_cost: float | None = None, cycle: float = 0.0
) -> float:
    """Expected cost per unit of time of visiting evenly at *frequency*.

    f·(c304 + (c - c304)·(1 - exp(-rate / f))): every visit pays the
    revalidation cost c304 and a changed page the full *cost*.  On a grid of
    *cycle*, between the periods k and k + 1 it interpolates like
    :func:`expected_freshness`.

    >>> expected_spend(1.0, 2.0, 1.0), round(expected_spend(1.0, 1.0, 1.0, 0.05), 6)
    (2.0, 0.650515)
    """
    if revalidation_cost is None or frequency == 0.0:
        return frequency * cost

    def even(f: float) -> float:
        return f * (revalidation_cost + (cost - revalidation_cost) * -math.expm1(-rate / f))

    if cycle == 0.0 or frequency * cycle >= 1.0:
        return even(frequency)
    k = math.floor(1.0 / (frequency * cycle))
    hi, lo = 1.0 / (k * cycle), 1.0 / ((k + 1) * cycle)
    share = (frequency - lo) / (hi - lo)
    return share * even(hi) + (1.0 - share) * even(lo)


def expected_freshness(rate: float, frequency: float, cycle: float = 0.0) -> float:
    """Time-averaged freshness at *frequency* realised on a grid of *cycle*.

    Between the grid periods k and k + 1 cycles, mixing them in shares of
    time interpolates linearly (the chord); ``cycle = 0`` is
    :func:`~.freshness.mean_freshness`.

    >>> round(expected_freshness(1.0, 0.75, 1.0), 6)  # halfway between every day and every 2 days
    0.532226
    """
    if cycle == 0.0 or frequency == 0.0 or rate == 0.0:
        return mean_freshness(rate, frequency)
    if frequency * cycle >= 1.0:
        return mean_freshness(rate, 1.0 / cycle)
    k = math.floor(1.0 / (frequency * cycle))
    hi, lo = 1.0 / (k * cycle), 1.0 / ((k + 1) * cycle)
    share = (frequency - lo) / (hi - lo)
    return share * mean_freshness(rate, hi) + (1.0 - share) * mean_freshness(rate, lo)


def grid_allocation(
    change_rates: Sequence[float],
    budget: float,
    weights: Sequence[float] | None = None,
    costs: Sequence[float] | None = None,
    revalidation_costs: Sequence[float | None] | None = None,
    cycle: float = 0.0,
    objective: str = "freshness",
) -> GridAllocation:
    """Best visit frequencies for *budget* (cost per unit of time) on a grid of *cycle*.

    Maximises sum(w·F) (``"freshness"``) or the changes caught, sum(w·rate·F)
    (``"changes"``), where F is the freshness on the grid, subject to the
    expected spend sum(:func:`expected_spend`) == *budget* and f <= 1 / cycle.
    The multiplier is found by bisection in log(mu); the plans at both ends of
    the final bracket are mixed so that the budget is spent exactly.  Without
    validators and with ``cycle = 0`` it is Cho & Garcia-Molina's optimum
    (the published example):

    >>> [round(f, 3) for f in grid_allocation([1, 2, 3, 4, 5], 5.0).frequencies]
    [1.15, 1.358, 1.354, 1.138, 0.0]

    Once a day at most (the same budget cannot be spent any better):

    >>> [round(f, 3) for f in grid_allocation([1, 2, 3, 4, 5], 5.0, cycle=1.0).frequencies]
    [1.0, 1.0, 1.0, 1.0, 1.0]

    A budget <= 0, negative rates or weights, costs <= 0, revalidation costs
    outside (0, cost], lengths that differ and an unknown objective raise
    ValueError.
    """
    if objective not in _OBJECTIVES:
        raise ValueError(f"objective must be one of {_OBJECTIVES}")
    if not 0.0 < budget < math.inf:
        raise ValueError("budget must be positive and finite")
    if not 0.0 <= cycle < math.inf:
        raise ValueError("cycle must be finite and non-negative")
    rates = [float(r) for r in change_rates]
    n = len(rates)
    w = [1.0] * n if weights is None else [float(x) for x in weights]
    c = [1.0] * n if costs is None else [float(x) for x in costs]
    c0 = list(c) if revalidation_costs is None else [ci if r is None else float(r)
                                                      for ci, r in zip(c, revalidation_costs, strict=True)]
    if not len(w) == len(c) == len(c0) == n:
        raise ValueError("weights, costs and revalidation_costs must have the length of change_rates")
    if any(not 0.0 <= x < math.inf for x in rates + w):
        raise ValueError("change rates and weights must be finite and non-negative")
    if any(not 0.0 < x < math.inf for x in c) or any(not 0.0 < a <= b for a, b in zip(c0, c, strict=True)):
        raise ValueError("costs must be positive and finite, revalidation costs in (0, cost]")
    if objective == "changes":
        w = [wi * ri for wi, ri in zip(w, rates, strict=True)]
    active = [i for i in range(n) if rates[i] > 0.0 and w[i] > 0.0]
    h = [_excess(r * cycle) for r in rates]

    def plan(mu: float) -> tuple[list[float], float]:
        freqs = [0.0] * n
        total = 0.0
        for i in active:
            f = _response(rates[i], w[i], c[i], c0[i], mu, cycle, h[i])
            if f:
                freqs[i] = f
                total += expected_spend(rates[i], f, c[i], c0[i])
        return freqs, total

    if not active:
        return GridAllocation([0.0] * n, 0.0)
    if cycle > 0.0:
        at_cap, cap_spend = plan(0.0)
        if cap_spend <= budget:  # every changing page every cycle, budget left over
            return GridAllocation(at_cap, 0.0)
    # No page is visited above mu_max = max w / (rate·c) (the index of a never-visited page).
    hi = max(w[i] / (rates[i] * c[i]) for i in active)
    freqs_hi, spend_hi = [0.0] * n, 0.0
    lo = hi
    while True:
        lo *= 1e-3
        freqs_lo, spend_lo = plan(lo)
        if spend_lo >= budget:
            break
    # Illinois (regula falsi) on log(mu), bisecting whenever the bracket fails to halve in three steps.
    a, b = math.log(lo), math.log(hi)
    fa, fb = spend_lo - budget, spend_hi - budget
    side, width, step = 0, b - a, 0
    while b - a > 1e-10 * max(1.0, abs(a)) and fa > 0.0:
        step += 1
        u = (a * fb - b * fa) / (fb - fa)
        if step % 3 == 0:
            if b - a > 0.5 * width:
                u = 0.5 * (a + b)
            width = b - a
        if not a < u < b:
            u = 0.5 * (a + b)
        freqs, spend = plan(math.exp(u))
        if spend >= budget:
            a, fa, freqs_lo, spend_lo = u, spend - budget, freqs, spend
            if side == -1:
                fb *= 0.5
            side = -1
        else:
            b, fb, freqs_hi, spend_hi = u, spend - budget, freqs, spend
            if side == 1:
                fa *= 0.5
            side = 1
    theta = 1.0 if spend_lo == spend_hi else (budget - spend_hi) / (spend_lo - spend_hi)
    mixed = [theta * x + (1.0 - theta) * y for x, y in zip(freqs_lo, freqs_hi, strict=True)]
    return GridAllocation(mixed, math.exp(a if theta >= 0.5 else b))
