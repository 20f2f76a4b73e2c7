from __future__ import annotations

import math
import random

import pytest

from scrapy_costsched.model import (
    Allocation,
    mean_age,
    mean_freshness,
    mean_freshness_of,
    optimal_rates,
    proportional_rates,
    solve_allocation,
    uniform_rates,
    visit_index,
)

RATES = [1.0, 2.0, 3.0, 4.0, 5.0]


def random_pages(seed: int, n: int = 12) -> tuple[list[float], list[float], list[float]]:
    rng = random.Random(seed)
    rates = [math.exp(rng.gauss(0.0, 1.2)) for _ in range(n)]
    weights = [rng.uniform(0.2, 3.0) for _ in range(n)]
    costs = [rng.uniform(0.3, 3.0) for _ in range(n)]
    return rates, weights, costs


# -- published and computed vectors (research.md section 1) --------------------


def test_freshness_optimum_published_example() -> None:
    result = solve_allocation(RATES, 5.0)
    assert isinstance(result, Allocation)
    assert result.frequencies == pytest.approx([1.150, 1.358, 1.354, 1.138, 0.0], abs=1e-3)
    assert result.frequencies[4] == 0.0
    assert result.multiplier == pytest.approx(0.21643, rel=1e-5)


def test_age_optimum() -> None:
    result = solve_allocation(RATES, 5.0, objective="age")
    assert result.frequencies == pytest.approx([0.835, 0.968, 1.034, 1.071, 1.093], abs=1e-3)
    assert result.multiplier == pytest.approx(0.38078, rel=1e-5)


def test_mean_freshness_uniform_proportional_optimal() -> None:
    uniform = mean_freshness_of(RATES, uniform_rates(5, 5.0))
    proportional = mean_freshness_of(RATES, proportional_rates(RATES, 5.0))
    optimal = mean_freshness_of(RATES, optimal_rates(RATES, 5.0))
    assert (round(uniform, 4), round(proportional, 4), round(optimal, 4)) == (0.3651, 0.3167, 0.3739)


def test_optimal_rates_is_solve_allocation() -> None:
    assert optimal_rates(RATES, 5.0, objective="age") == solve_allocation(RATES, 5.0, objective="age").frequencies


# -- KKT conditions and optimality, checked independently ----------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_freshness_kkt_with_weights_and_costs(seed: int) -> None:
    rates, weights, costs = random_pages(seed)
    result = solve_allocation(rates, 4.0, weights, costs)
    mu = result.multiplier
    assert math.fsum(c * f for c, f in zip(costs, result.frequencies, strict=True)) == pytest.approx(4.0, rel=1e-13)
    visited = 0
    for rate, w, c, f in zip(rates, weights, costs, result.frequencies, strict=True):
        if f > 0.0:
            visited += 1
            # Olston & Pandey's index at t = 1/f equals the multiplier.
            assert visit_index(w, rate, 1.0 / f, c) == pytest.approx(mu, rel=1e-9)
        else:
            # Abandoned: even the first visit is worth less than mu per unit of cost.
            assert w / (rate * c) <= mu * (1.0 + 1e-12)
    assert 0 < visited < len(rates)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_age_kkt_by_finite_differences(seed: int) -> None:
    rates, weights, costs = random_pages(seed)
    result = solve_allocation(rates, 4.0, weights, costs, objective="age")
    for rate, w, c, f in zip(rates, weights, costs, result.frequencies, strict=True):
        assert f > 0.0  # age never abandons a page
        h = 1e-5 * f
        slope = (mean_age(rate, f + h) - mean_age(rate, f - h)) / (2.0 * h)
        assert -w * slope / c == pytest.approx(result.multiplier, rel=1e-6)


def objective_value(rates, weights, frequencies, objective: str) -> float:
    if objective == "age":
        return -math.fsum(w * mean_age(r, f) for r, w, f in zip(rates, weights, frequencies, strict=True))
    scale = rates if objective == "changes" else [1.0] * len(rates)
    return math.fsum(
        w * s * mean_freshness(r, f) for r, w, s, f in zip(rates, weights, scale, frequencies, strict=True)
    )


@pytest.mark.parametrize("objective", ["freshness", "age", "changes"])
def test_no_budget_transfer_improves_the_objective(objective: str) -> None:
    rates, weights, costs = random_pages(7, n=8)
    f = solve_allocation(rates, 3.0, weights, costs, objective).frequencies
    best = objective_value(rates, weights, f, objective)
    for i in range(len(f)):
        for j in range(len(f)):
            if i == j:
                continue
            spent = min(1e-4, f[j] * costs[j])  # move budget from j to i
            if spent == 0.0:
                continue
            g = list(f)
            g[i] += spent / costs[i]
            g[j] -= spent / costs[j]
            assert objective_value(rates, weights, g, objective) <= best + 1e-12


def test_costs_rescale_the_rates() -> None:
    # Freshness with per-visit cost c equals the unit-cost problem on c * rate.
    rates, weights, costs = random_pages(4)
    with_costs = solve_allocation(rates, 5.0, weights, costs)
    scaled = solve_allocation([c * r for c, r in zip(costs, rates, strict=True)], 5.0, weights)
    expected = [f / c for f, c in zip(scaled.frequencies, costs, strict=True)]
    assert with_costs.frequencies == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert with_costs.multiplier == pytest.approx(scaled.multiplier, rel=1e-9)


def test_changes_objective_is_freshness_with_rate_weights() -> None:
    rates, weights, costs = random_pages(5)
    changes = solve_allocation(rates, 5.0, weights, costs, objective="changes")
    weighted = solve_allocation(rates, 5.0, [w * r for w, r in zip(weights, rates, strict=True)], costs)
    assert changes.frequencies == pytest.approx(weighted.frequencies, rel=1e-9, abs=1e-12)


def test_changes_objective_with_equal_weights_and_costs_is_proportional() -> None:
    result = optimal_rates(RATES, 5.0, objective="changes")
    assert result == pytest.approx(proportional_rates(RATES, 5.0), rel=1e-12)


def test_static_and_weightless_pages_get_nothing() -> None:
    result = solve_allocation([0.0, 1.0, 2.0, 3.0], 2.0, weights=[1.0, 1.0, 0.0, 1.0])
    assert result.frequencies[0] == 0.0
    assert result.frequencies[2] == 0.0
    assert math.fsum(result.frequencies) == pytest.approx(2.0, rel=1e-14)


def test_nothing_to_allocate() -> None:
    assert solve_allocation([0.0, 0.0], 3.0) == Allocation([0.0, 0.0], 0.0)
    assert solve_allocation([], 3.0) == Allocation([], 0.0)
    assert solve_allocation([1.0, 2.0], 3.0, weights=[0.0, 0.0], objective="age") == Allocation([0.0, 0.0], 0.0)


def test_order_does_not_matter_and_input_is_not_mutated() -> None:
    rates, weights, costs = random_pages(6)
    copies = (list(rates), list(weights), list(costs))
    result = solve_allocation(rates, 3.0, weights, costs).frequencies
    assert (rates, weights, costs) == copies
    order = list(range(len(rates)))
    random.Random(0).shuffle(order)
    shuffled = solve_allocation(
        [rates[i] for i in order], 3.0, [weights[i] for i in order], [costs[i] for i in order]
    ).frequencies
    assert shuffled == pytest.approx([result[i] for i in order], rel=1e-10, abs=1e-13)


@pytest.mark.parametrize("objective", ["freshness", "age"])
def test_time_unit_does_not_matter(objective: str) -> None:
    # Rates and budget per day vs per hour: frequencies scale, multiplier scales back.
    per_day = solve_allocation(RATES, 5.0, objective=objective)
    per_hour = solve_allocation([r / 24.0 for r in RATES], 5.0 / 24.0, objective=objective)
    assert [f * 24.0 for f in per_hour.frequencies] == pytest.approx(per_day.frequencies, rel=1e-10, abs=1e-13)
    factor = 24.0 if objective == "freshness" else 24.0**2
    assert per_hour.multiplier == pytest.approx(per_day.multiplier * factor, rel=1e-10)


@pytest.mark.parametrize("budget", [1e-100, 1e-6, 1e-2, 1e2, 1e6, 1e100])
@pytest.mark.parametrize("objective", ["freshness", "age", "changes"])
def test_extreme_budgets_are_spent(budget: float, objective: str) -> None:
    result = solve_allocation(RATES, budget, objective=objective)
    assert math.fsum(result.frequencies) == pytest.approx(budget, rel=1e-13)
    assert all(f >= 0.0 for f in result.frequencies)


def test_huge_budget_approaches_square_root_rule() -> None:
    # For f >> rate, g(x) ~ x**2 / 2, so the KKT condition gives f proportional to sqrt(rate).
    f = optimal_rates(RATES, 1e7)
    assert [x / f[0] for x in f] == pytest.approx([math.sqrt(r) for r in RATES], rel=1e-5)


# -- distributions of rates (research.md section 1) ----------------------------


def test_uniform_visits_exponential_rates_mean_freshness_is_ln2() -> None:
    # E[F(rate, 1)] for rate ~ Exp(1), integrated in u = log(rate) (trapezoid
    # on a smooth integrand that decays doubly exponentially at both ends).
    h = 0.01
    us = [-40.0 + k * h for k in range(int(45.0 / h) + 1)]
    integrand = [mean_freshness(math.exp(u), 1.0) * math.exp(u - math.exp(u)) for u in us]
    total = h * (math.fsum(integrand) - 0.5 * (integrand[0] + integrand[-1]))
    assert total == pytest.approx(math.log(2.0), rel=1e-10)
    # The same through mean_freshness_of, on a quantile sample of the distribution.
    n = 1000
    rates = [-math.log1p(-(k + 0.5) / n) for k in range(n)]
    assert mean_freshness_of(rates, uniform_rates(n, float(n))) == pytest.approx(math.log(2.0), abs=1e-3)


def gamma_p(shape: float, x: float) -> float:
    """Regularized lower incomplete gamma P(shape, x): series, or Lentz's continued fraction."""
    if x <= 0.0:
        return 0.0
    log_front = shape * math.log(x) - x - math.lgamma(shape)
    if x < shape + 1.0:
        term = total = 1.0 / shape
        k = shape
        while abs(term) > 1e-17 * total:
            k += 1.0
            term *= x / k
            total += term
        return total * math.exp(log_front)
    tiny = 1e-300
    b = x + 1.0 - shape
    c, d = 1.0 / tiny, 1.0 / b
    h = d
    i = 1
    while True:
        an = -i * (i - shape)
        b += 2.0
        d = an * d + b
        d = 1.0 / (d if abs(d) >= tiny else tiny)
        c = b + an / c
        c = c if abs(c) >= tiny else tiny
        h *= d * c
        if abs(d * c - 1.0) < 1e-16:
            return 1.0 - math.exp(log_front) * h
        i += 1


def gamma_quantile(p: float, shape: float, scale: float) -> float:
    lo, hi = -80.0, 10.0  # bisection on log(x / scale)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if gamma_p(shape, math.exp(mid)) < p:
            lo = mid
        else:
            hi = mid
    return math.exp(0.5 * (lo + hi)) * scale


def test_gamma_p_known_values() -> None:
    assert gamma_p(1.0, 2.0) == pytest.approx(-math.expm1(-2.0), rel=1e-14)
    assert gamma_p(0.5, 2.0) == pytest.approx(math.erf(math.sqrt(2.0)), rel=1e-14)
    assert gamma_p(0.5, 0.3) == pytest.approx(math.erf(math.sqrt(0.3)), rel=1e-14)


# Gamma rates with mean 1 and coefficient of variation cv, one visit per page per
# day on average: mean freshness of the optimal and uniform plans.
GAMMA_TABLE = [(0.5, 0.6550, 0.6507), (1.0, 0.7132, 0.6931), (2.0, 0.8349, 0.7812), (3.0, 0.9045, 0.8428)]


@pytest.mark.parametrize(("cv", "optimal", "uniform"), GAMMA_TABLE)
def test_gamma_distributed_rates(cv: float, optimal: float, uniform: float) -> None:
    n = 200
    shape, scale = 1.0 / cv**2, cv**2
    rates = [gamma_quantile((k + 0.5) / n, shape, scale) for k in range(n)]
    assert math.fsum(rates) / n == pytest.approx(1.0, abs=2e-2)
    assert mean_freshness_of(rates, optimal_rates(rates, float(n))) == pytest.approx(optimal, abs=2e-3)
    assert mean_freshness_of(rates, uniform_rates(n, float(n))) == pytest.approx(uniform, abs=2e-3)


def test_constant_rates_all_plans_agree() -> None:
    rates = [1.0] * 10
    assert optimal_rates(rates, 10.0) == pytest.approx([1.0] * 10, rel=1e-12)
    assert round(mean_freshness_of(rates, uniform_rates(10, 10.0)), 4) == 0.6321


@pytest.mark.parametrize("seed", range(5))
def test_uniform_beats_proportional(seed: int) -> None:
    rates, _, _ = random_pages(seed, n=30)
    uniform = mean_freshness_of(rates, uniform_rates(30, 10.0))
    proportional = mean_freshness_of(rates, proportional_rates(rates, 10.0))
    optimal = mean_freshness_of(rates, optimal_rates(rates, 10.0))
    assert proportional <= uniform <= optimal


# -- simple plans and mean_freshness_of ----------------------------------------


def test_uniform_and_proportional_rates() -> None:
    assert uniform_rates(4, 2.0) == [0.5, 0.5, 0.5, 0.5]
    assert uniform_rates(2, 3.0, costs=[1.0, 2.0]) == [1.0, 1.0]
    assert uniform_rates(0, 3.0) == []
    assert proportional_rates([1.0, 3.0], 2.0) == [0.5, 1.5]
    assert proportional_rates([1.0, 3.0], 2.0, costs=[2.0, 2.0]) == [0.25, 0.75]
    assert proportional_rates([0.0, 0.0], 2.0) == [0.0, 0.0]


def test_mean_freshness_of_weights() -> None:
    assert mean_freshness_of([0.0, 1.0], [0.0, 1.0], weights=[1.0, 0.0]) == 1.0
    expected = (3.0 * mean_freshness(1.0, 2.0) + mean_freshness(2.0, 1.0)) / 4.0
    assert mean_freshness_of([1.0, 2.0], [2.0, 1.0], weights=[3.0, 1.0]) == pytest.approx(expected, rel=1e-15)


# -- errors --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: solve_allocation(RATES, 0.0), "budget must be positive"),
        (lambda: solve_allocation(RATES, -1.0), "budget must be positive"),
        (lambda: solve_allocation(RATES, math.inf), "budget must be positive and finite"),
        (lambda: solve_allocation([1.0, -1.0], 1.0), "change rates must be finite and non-negative"),
        (lambda: solve_allocation([1.0, 2.0], 1.0, weights=[1.0]), "same length"),
        (lambda: solve_allocation([1.0, 2.0], 1.0, weights=[1.0, -1.0]), "weights must be finite and non-negative"),
        (lambda: solve_allocation([1.0, 2.0], 1.0, costs=[1.0, 2.0, 3.0]), "same length"),
        (lambda: solve_allocation([1.0, 2.0], 1.0, costs=[1.0, 0.0]), "costs must be positive"),
        (lambda: solve_allocation([1.0], 1.0, objective="speed"), "unknown objective: 'speed'"),
        (lambda: optimal_rates([1.0], 1.0, objective="Age"), "unknown objective"),
        (lambda: uniform_rates(-1, 1.0), "n must be non-negative"),
        (lambda: uniform_rates(2, 1.0, costs=[1.0]), "costs must have length n"),
        (lambda: proportional_rates([1.0], 0.0), "budget must be positive"),
        (lambda: mean_freshness_of([1.0], [1.0, 2.0]), "same length"),
        (lambda: mean_freshness_of([], []), "at least one page"),
        (lambda: mean_freshness_of([1.0], [1.0], weights=[0.0]), "weights must not all be zero"),
    ],
)
def test_bad_input_raises(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()
