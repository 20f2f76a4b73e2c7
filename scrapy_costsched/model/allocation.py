"""Optimal division of a visit budget among pages (Cho & Garcia-Molina, TODS 2003).

Every page *i* changes as a Poisson process with rate lambda_i and is visited
evenly at frequency f_i for a cost c_i per visit; the budget is
sum(c_i * f_i) = B per unit of time.  :func:`solve_allocation` finds the
frequencies that

- ``"freshness"``: maximise the weighted mean freshness sum(w_i * F(lambda_i, f_i)),
- ``"age"``: minimise the weighted mean age sum(w_i * A(lambda_i, f_i)),
- ``"changes"``: maximise the changes detected per unit of time,
  sum(w_i * lambda_i * F(lambda_i, f_i)), i.e. freshness with weights w * lambda.

Freshness depends on (lambda, f) only through lambda / f, so fixed per-visit costs
reduce to the unit-cost problem on lambda' = c * lambda, f' = c * f; age scales
as A(lambda', f') = A(lambda, f) / c, so there the weights also become w * c.
The Lagrange (KKT) conditions give each page's frequency from the multiplier mu,
the value of one more unit of budget; mu is found by a bracketed root find on the
total spend, and each page's frequency by a 1-D monotone inversion.  Freshness
abandons pages with w / lambda' <= mu: they change too fast to be worth the
budget.  The multiplier is the threshold of Olston & Pandey's online rule:
``visit_index(w, lambda, 1 / f, c) == mu`` for every visited page.

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

from .freshness import mean_freshness, utility_fraction

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = [
    "Allocation",
    "mean_freshness_of",
    "optimal_rates",
    "proportional_rates",
    "solve_allocation",
    "uniform_rates",
]

_OBJECTIVES = ("freshness", "age", "changes")
# 1 - g(x) = (1 + x) exp(-x) <= _G_TAIL * exp(-x / 2) bounds g's inverse from above.
_G_TAIL = 2.0 * math.exp(-0.5)


@dataclass(frozen=True)
class Allocation:
    """Visit frequencies of an optimal allocation and its Lagrange multiplier.

    *multiplier* is the marginal objective per unit of budget: for the freshness
    objective, weighted mean freshness gained per extra unit of cost per unit of
    time.  It is 0.0 when no page can use the budget.
    """

    frequencies: list[float]
    multiplier: float


def _age_marginal(x: float) -> float:
    # m(x) = x**2/2 - g(x) = sum_{k>=3} (-1)**(k+1) (k - 1) x**k / k!
    if x >= 1.0:
        return 0.5 * x * x - utility_fraction(x)
    total = 0.0
    power = x * x * x / 6.0  # x**k / k! for k = 3
    k = 3
    while True:
        term = (k - 1) * power
        total += term
        if abs(term) <= 1e-17 * total:
            return total
        k += 1
        power *= -x / k


def _age_marginal_over_square(x: float) -> float:
    # m(x) / x**2 = 1/2 - g(x) / x**2, without overflow for huge x.
    if x >= 1.0:
        return 0.5 - utility_fraction(x) / x / x
    if x < 1e-20:
        return x / 3.0
    return _age_marginal(x) / (x * x)


def _invert(
    fn: Callable[[float], float],
    slope: Callable[[float], float],
    target: float,
    x: float,
    lo: float,
    hi: float,
) -> float:
    """Solve fn(x) == target for increasing fn on [lo, hi] from guess *x*.

    Newton's method, with bisection whenever a step leaves the bracket.
    """
    for _ in range(200):
        excess = fn(x) - target
        if excess == 0.0:
            return x
        if excess > 0.0:
            hi = x
        else:
            lo = x
        d = slope(x)
        step = x - excess / d if d > 0.0 else math.nan
        if lo < step < hi:
            # Quadratic convergence: after a step of 1e-8 the error is ~1e-16.
            if abs(step - x) <= 1e-8 * x:
                return step
        else:  # also when step is NaN
            step = 0.5 * (lo + hi)
            if hi - lo <= 1e-15 * hi:
                return step
        x = step
    return x


def _inverse_g(y: float) -> float:
    """x > 0 with g(x) == y, for 0 < y < 1 (x = rate / frequency)."""
    s = math.sqrt(2.0 * y)
    lo = s  # g(x) <= x**2 / 2
    hi = max(lo, 2.0 * (math.log(_G_TAIL) - math.log1p(-y)))
    if y < 0.3:
        x = s + s * s / 3.0  # from g(x) = x**2/2 - x**3/3 + ...
        if y < 1e-40:  # exact to rounding; avoids subnormal arithmetic
            return x
    else:  # from 1 - y = (1 + x) exp(-x)
        x = -math.log1p(-y)
        x += math.log1p(x)
        x = -math.log1p(-y) + math.log1p(x)
    x = min(max(x, lo), hi)
    return _invert(utility_fraction, lambda x: x * math.exp(-x), y, x, lo, hi)


def _inverse_age_marginal(y: float) -> float:
    """x > 0 with x**2/2 - g(x) == y, for y > 0."""
    c = math.pow(3.0 * y, 1.0 / 3.0)
    lo = c  # m(x) <= x**3 / 3
    hi = max(lo, math.sqrt(2.0 * y + 2.0))  # m(x) >= x**2 / 2 - 1
    x = c + c * c / 8.0 if y < 0.5 else hi  # m(x) = x**3/3 - x**4/8 + ...
    if y < 1e-60:  # exact to rounding; avoids subnormal arithmetic
        return x
    x = min(max(x, lo), hi)
    return _invert(_age_marginal, lambda x: -x * math.expm1(-x), y, x, lo, hi)


def _check_inputs(
    change_rates: Sequence[float],
    budget: float,
    weights: Sequence[float] | None,
    costs: Sequence[float] | None,
) -> tuple[list[float], list[float], list[float]]:
    if not 0.0 < budget < math.inf:
        raise ValueError("budget must be positive and finite")
    rates = [float(r) for r in change_rates]
    n = len(rates)
    if any(not 0.0 <= r < math.inf for r in rates):
        raise ValueError("change rates must be finite and non-negative")
    if weights is None:
        w = [1.0] * n
    else:
        w = [float(x) for x in weights]
        if len(w) != n:
            raise ValueError("weights and change_rates must have the same length")
        if any(not 0.0 <= x < math.inf for x in w):
            raise ValueError("weights must be finite and non-negative")
    if costs is None:
        c = [1.0] * n
    else:
        c = [float(x) for x in costs]
        if len(c) != n:
            raise ValueError("costs and change_rates must have the same length")
        if any(not 0.0 < x < math.inf for x in c):
            raise ValueError("costs must be positive and finite")
    return rates, w, c


def _bracket_multiplier(
    spend: Callable[[float], float], budget: float, mu0: float, mu_max: float
) -> tuple[float, float]:
    """Adjacent multipliers lo < hi with spend(lo) >= budget > spend(hi).

    spend decreases in mu and spend(mu_max) < budget.  It is continuous but
    has a logarithmic singularity where a page is abandoned (its frequency
    vanishes like 1 / log(1 / (1 - mu / threshold))), so near such a point it
    jumps within one ulp of mu; the caller interpolates between the ends.
    """
    lo = hi = mu0
    if spend(mu0) >= budget:
        while True:
            hi = min(hi * 8.0, mu_max)
            if hi >= mu_max or spend(hi) < budget:
                break
            lo = hi
    else:
        while True:
            lo *= 0.125
            if spend(lo) >= budget:
                break
            hi = lo
    # Illinois (regula falsi) on log(mu), with a bisection step whenever the
    # bracket fails to halve in three steps.  lo and hi stay the exact values
    # spend was evaluated at, so the bracket property holds for the caller.
    a, b = math.log(lo), math.log(hi)
    fa, fb = spend(lo) - budget, spend(hi) - budget
    side = 0
    width = b - a
    for step in range(1, 400):
        if fa == 0.0 or b - a <= 1e-15 * max(1.0, abs(a)):
            break
        u = (a * fb - b * fa) / (fb - fa)
        if step % 3 == 0:
            if b - a > 0.5 * width:
                u = 0.5 * (a + b)
            width = b - a
        if not a < u < b:
            u = 0.5 * (a + b)
        mu = math.exp(u)
        if not lo < mu < hi:
            break
        fu = spend(mu) - budget
        if fu >= 0.0:
            a, fa, lo = u, fu, mu
            if side == -1:
                fb *= 0.5
            side = -1
        else:
            b, fb, hi = u, fu, mu
            if side == 1:
                fa *= 0.5
            side = 1
        if abs(fu) <= 1e-14 * budget:
            break
    return lo, hi


def solve_allocation(
    change_rates: Sequence[float],
    budget: float,
    weights: Sequence[float] | None = None,
    costs: Sequence[float] | None = None,
    objective: str = "freshness",
) -> Allocation:
    """Optimal visit frequencies for *budget* and their Lagrange multiplier.

    See the module docstring for the objectives and the method (Cho &
    Garcia-Molina, TODS 2003).  Pages with rate 0 or weight 0 get frequency 0;
    the returned frequencies spend exactly *budget*: sum(c * f) == budget,
    up to rounding.  Five pages changing 1..5 times a day, 5 visits a day
    (the published example):

    >>> a = solve_allocation([1, 2, 3, 4, 5], 5.0)
    >>> [round(f, 3) for f in a.frequencies], round(a.multiplier, 5)
    ([1.15, 1.358, 1.354, 1.138, 0.0], 0.21643)

    A budget <= 0, a negative rate, weight or cost, lengths that differ from
    *change_rates* and an unknown *objective* raise ValueError.
    """
    if objective not in _OBJECTIVES:
        raise ValueError(f"unknown objective: {objective!r}")
    rates, w, c = _check_inputs(change_rates, budget, weights, costs)
    n = len(rates)
    if objective == "changes":
        w = [wi * ri for wi, ri in zip(w, rates, strict=True)]
    elif objective == "age":
        w = [wi * ci for wi, ci in zip(w, c, strict=True)]
    active = [i for i in range(n) if rates[i] > 0.0 and w[i] > 0.0]
    if not active:
        return Allocation([0.0] * n, 0.0)
    # Solve in the time unit where the budget is one visit per active page,
    # on rates c * lambda (see the module docstring); scale back at the end.
    unit = len(active) / budget
    scaled = [ci * ri * unit for ci, ri in zip(c, rates, strict=True)]
    if not all(math.isfinite(x) for x in (unit, *scaled)):
        raise ValueError("change rates and budget differ by too many orders of magnitude")

    def frequencies(mu: float) -> list[float]:
        out = [0.0] * n
        for i in active:
            lam, weight = scaled[i], w[i]
            if objective == "age":
                y = mu * lam * lam / weight
                if y > 1e6:  # m(x) == x**2/2 - 1 to double precision; avoids overflow
                    out[i] = 1.0 / math.sqrt(2.0 * (mu / weight + 1.0 / (lam * lam)))
                elif y < 1e-60:  # m(x) == x**3/3 to double precision; avoids underflow
                    out[i] = math.pow(lam * weight / (3.0 * mu), 1.0 / 3.0)
                else:
                    out[i] = lam / _inverse_age_marginal(y)
            else:
                y = mu * lam / weight
                if y < 1e-40:  # g(x) == x**2/2 to double precision; avoids underflow
                    out[i] = math.sqrt(lam * weight / (2.0 * mu))
                elif y < 1.0:
                    out[i] = lam / _inverse_g(y)
        return out

    def spend(mu: float) -> float:
        return math.fsum(frequencies(mu))

    # Start at the multiplier of the uniform plan (one visit each) of the best page.
    if objective == "age":
        mu0 = max(w[i] * _age_marginal_over_square(scaled[i]) for i in active)
        mu_max = math.inf
    else:
        mu0 = max(w[i] * utility_fraction(scaled[i]) / scaled[i] for i in active)
        mu_max = max(w[i] / scaled[i] for i in active)
    mu_lo, mu_hi = _bracket_multiplier(spend, float(len(active)), max(mu0, 1e-300), mu_max)
    # Mix the plans at both ends so that the spend is exactly the budget; each
    # page's marginal value stays between mu_lo and mu_hi.
    f_lo, f_hi = frequencies(mu_lo), frequencies(mu_hi)
    s_lo, s_hi = math.fsum(f_lo), math.fsum(f_hi)
    theta = 1.0 if s_lo <= s_hi else min(max((len(active) - s_hi) / (s_lo - s_hi), 0.0), 1.0)
    mixed = [theta * x + (1.0 - theta) * y for x, y in zip(f_lo, f_hi, strict=True)]
    total = math.fsum(mixed)
    mu = mu_lo if theta >= 0.5 else mu_hi
    mu *= unit * unit if objective == "age" else unit  # may overflow to inf
    return Allocation([fi / total * budget / ci for fi, ci in zip(mixed, c, strict=True)], mu)


def optimal_rates(
    change_rates: Sequence[float],
    budget: float,
    weights: Sequence[float] | None = None,
    costs: Sequence[float] | None = None,
    objective: str = "freshness",
) -> list[float]:
    """Optimal visit frequencies: ``solve_allocation(...).frequencies``.

    >>> [round(f, 3) for f in optimal_rates([1, 2, 3, 4, 5], 5.0, objective="age")]
    [0.835, 0.968, 1.034, 1.071, 1.093]
    """
    return solve_allocation(change_rates, budget, weights, costs, objective).frequencies


def mean_freshness_of(
    change_rates: Sequence[float],
    frequencies: Sequence[float],
    weights: Sequence[float] | None = None,
) -> float:
    """Weighted mean of :func:`~.freshness.mean_freshness` over pages.

    >>> round(mean_freshness_of([1, 2, 3, 4, 5], [1, 1, 1, 1, 1]), 4)
    0.3651

    Empty input, lengths that differ, or weights that are all zero raise
    ValueError.
    """
    if len(frequencies) != len(change_rates):
        raise ValueError("frequencies and change_rates must have the same length")
    if not change_rates:
        raise ValueError("mean_freshness_of requires at least one page")
    w = [1.0] * len(change_rates) if weights is None else [float(x) for x in weights]
    if len(w) != len(change_rates):
        raise ValueError("weights and change_rates must have the same length")
    if any(not 0.0 <= x < math.inf for x in w):
        raise ValueError("weights must be finite and non-negative")
    total = math.fsum(w)
    if total == 0.0:
        raise ValueError("weights must not all be zero")
    return math.fsum(wi * mean_freshness(r, f) for wi, r, f in zip(w, change_rates, frequencies, strict=True)) / total


def uniform_rates(n: int, budget: float, costs: Sequence[float] | None = None) -> list[float]:
    """The same visit frequency for each of *n* pages, spending *budget*.

    Uniform beats proportional for any distribution of change rates (Cho &
    Garcia-Molina, TODS 2003, theorem 1).

    >>> uniform_rates(4, 2.0)
    [0.5, 0.5, 0.5, 0.5]
    >>> uniform_rates(2, 3.0, costs=[1.0, 2.0])
    [1.0, 1.0]
    """
    if n < 0:
        raise ValueError("n must be non-negative")
    if not 0.0 < budget < math.inf:
        raise ValueError("budget must be positive and finite")
    c = [1.0] * n if costs is None else [float(x) for x in costs]
    if len(c) != n:
        raise ValueError("costs must have length n")
    if any(not 0.0 < x < math.inf for x in c):
        raise ValueError("costs must be positive and finite")
    if n == 0:
        return []
    return [budget / math.fsum(c)] * n


def proportional_rates(
    change_rates: Sequence[float], budget: float, costs: Sequence[float] | None = None
) -> list[float]:
    """Visit frequencies proportional to the change rates, spending *budget*.

    The intuitive plan, worse than uniform (Cho & Garcia-Molina, TODS 2003).
    All-static input gets all zeros.

    >>> proportional_rates([1.0, 3.0], 2.0)
    [0.5, 1.5]
    """
    rates, _, c = _check_inputs(change_rates, budget, None, costs)
    spend = math.fsum(ci * r for ci, r in zip(c, rates, strict=True))
    if spend == 0.0:
        return [0.0] * len(rates)
    return [r * budget / spend for r in rates]
