"""Pure change-model numerics: freshness, optimal allocation, rate estimation.

Imports only the standard library, so it can be used and tested without Scrapy.
"""

from __future__ import annotations

from .allocation import (
    Allocation,
    mean_freshness_of,
    optimal_rates,
    proportional_rates,
    solve_allocation,
    uniform_rates,
)
from .estimators import (
    ChangeStats,
    RateEstimate,
    RatePrior,
    complete_observation_rate,
    estimate_rate,
    fit_prior,
    improved_rate,
    last_modified_rate,
    log_marginal_likelihood,
    log_spread_prior,
    mle_rate,
    naive_rate,
)
from .freshness import (
    cycle_utility,
    freshness_gain,
    mean_age,
    mean_freshness,
    p_changed,
    seed_priority,
    utility,
    utility_fraction,
    visit_index,
)
from .grid import GridAllocation, expected_freshness, expected_spend, frequency_at, grid_allocation
from .learning import observe, refit_prior

__all__ = [
    "Allocation",
    "ChangeStats",
    "GridAllocation",
    "RateEstimate",
    "RatePrior",
    "complete_observation_rate",
    "cycle_utility",
    "estimate_rate",
    "expected_freshness",
    "expected_spend",
    "fit_prior",
    "frequency_at",
    "freshness_gain",
    "grid_allocation",
    "improved_rate",
    "last_modified_rate",
    "log_marginal_likelihood",
    "log_spread_prior",
    "mean_age",
    "mean_freshness",
    "mean_freshness_of",
    "mle_rate",
    "naive_rate",
    "observe",
    "optimal_rates",
    "p_changed",
    "proportional_rates",
    "refit_prior",
    "seed_priority",
    "solve_allocation",
    "uniform_rates",
    "utility",
    "utility_fraction",
    "visit_index",
]
