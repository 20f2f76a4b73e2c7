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
    mle_rate,
    naive_rate,
)
from .freshness import (
    freshness_gain,
    mean_age,
    mean_freshness,
    p_changed,
    seed_priority,
    utility,
    utility_fraction,
    visit_index,
)

__all__ = [
    "Allocation",
    "ChangeStats",
    "RateEstimate",
    "RatePrior",
    "complete_observation_rate",
    "estimate_rate",
    "fit_prior",
    "freshness_gain",
    "improved_rate",
    "last_modified_rate",
    "log_marginal_likelihood",
    "mean_age",
    "mean_freshness",
    "mean_freshness_of",
    "mle_rate",
    "naive_rate",
    "optimal_rates",
    "p_changed",
    "proportional_rates",
    "seed_priority",
    "solve_allocation",
    "uniform_rates",
    "utility",
    "utility_fraction",
    "visit_index",
]
