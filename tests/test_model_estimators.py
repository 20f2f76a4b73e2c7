from __future__ import annotations

import itertools
import json
import math
import random

import pytest

from scrapy_costsched.model import (
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

INTERVALS = [1.0, 2.0, 0.5, 3.0, 1.0]
CHANGED = [True, False, True, True, False]


def stats_of(intervals, changed) -> ChangeStats:
    stats = ChangeStats()
    for t, c in zip(intervals, changed, strict=True):
        stats.add(t, c)
    return stats


# -- research vectors (Cho & Garcia-Molina, TOIT 2003) -------------------------


def test_naive_and_improved_regular_intervals() -> None:
    assert naive_rate(3, 10.0) == 0.3
    assert round(improved_rate(3, 10, 1.0), 6) == 0.336472
    assert improved_rate(10, 10, 1.0) == math.log(21.0)
    assert round(improved_rate(10, 10, 1.0), 6) == 3.044522
    assert round(improved_rate(5, 20, 1.0), 6) == 0.279585
    assert improved_rate(0, 20, 1.0) == 0.0
    assert improved_rate(3, 10, 2.0) == improved_rate(3, 10, 1.0) / 2.0


@pytest.mark.parametrize("visits", [10, 20, 50])
@pytest.mark.parametrize("rate", [0.5, 1.0, 2.0])
def test_improved_rate_is_nearly_unbiased(visits: int, rate: float) -> None:
    # Exact expectation over the binomial number of detected changes (interval 1).
    p = -math.expm1(-rate)

    def expect(estimator):
        return math.fsum(
            math.comb(visits, x) * p**x * (1.0 - p) ** (visits - x) * estimator(x) for x in range(visits + 1)
        )

    assert expect(lambda x: improved_rate(x, visits, 1.0)) / rate == pytest.approx(1.0, abs=0.04)
    # The naive estimate converges to (1 - exp(-rate)) / rate of the truth.
    assert expect(lambda x: naive_rate(x, float(visits))) == pytest.approx(p, rel=1e-12)


def test_mle_irregular_intervals() -> None:
    assert round(mle_rate(INTERVALS, CHANGED), 6) == 0.633499
    assert round(mle_rate(INTERVALS, CHANGED, pseudo_interval=0.5), 6) == 0.741744


def test_mle_solves_the_likelihood_equation() -> None:
    rate = mle_rate(INTERVALS, CHANGED)
    lhs = math.fsum(t / math.expm1(rate * t) for t, c in zip(INTERVALS, CHANGED, strict=True) if c)
    assert lhs == pytest.approx(3.0, rel=1e-13)
    stats = stats_of(INTERVALS, CHANGED)
    best = stats.log_likelihood(rate)
    for factor in (0.999, 1.001):
        assert stats.log_likelihood(rate * factor) < best


def test_mle_saturated_histories() -> None:
    assert mle_rate([1.0, 2.0], [True, True]) == math.inf
    assert mle_rate([1.0, 2.0], [False, False]) == 0.0
    assert mle_rate([], [], pseudo_interval=0.5) == pytest.approx(mle_rate([0.5, 0.5], [True, False]), rel=1e-15)
    # 2 / (e**r - 1) + 0.5 / (e**(r/2) - 1) == 0.5 at r = log(9)
    assert mle_rate([1.0, 1.0], [True, True], pseudo_interval=0.5) == pytest.approx(math.log(9.0), rel=1e-14)
    assert 0.0 < mle_rate([1.0, 1.0], [False, False], pseudo_interval=0.5) < math.inf


def test_mle_matches_improved_rate_shape_on_regular_intervals() -> None:
    # With equal intervals the MLE is -log(1 - X/n) / I (no 0.5 corrections).
    rate = mle_rate([2.0] * 10, [True] * 3 + [False] * 7)
    assert rate == pytest.approx(-math.log(0.7) / 2.0, rel=1e-13)


def test_mle_extreme_intervals() -> None:
    # Changed intervals much longer than unchanged ones: the root is deep in the exponential tail.
    rate = mle_rate([1000.0, 0.001], [True, False])
    assert 1000.0 / math.expm1(rate * 1000.0) == pytest.approx(0.001, rel=1e-12)
    rate = mle_rate([1e-6, 1e3], [True, False])
    assert 1e-6 / math.expm1(rate * 1e-6) == pytest.approx(1e3, rel=1e-12)


def test_last_modified() -> None:
    ages = [0.2, 0.7, 0.4]  # visits 1, 3, 5 changed; visits 2 and 4 (1 day each) did not
    assert math.fsum(ages) + 2.0 == pytest.approx(3.3, rel=1e-15)
    assert round(naive_rate(3, 3.3), 6) == 0.909091
    assert round(last_modified_rate(5, ages, 2.0), 6) == 0.804489
    assert last_modified_rate(5, [], 5.0) == 0.0
    assert last_modified_rate(4, [0.5, 0.5, 0.5, 0.5], 0.0) == 3.0 / 2.0


def test_complete_observations() -> None:
    assert round(complete_observation_rate(12, 30.0), 4) == 0.4098
    assert complete_observation_rate(0, 0.0) == 1.0


# -- ChangeStats ---------------------------------------------------------------


def test_change_stats_mle_equals_mle_rate() -> None:
    stats = stats_of(INTERVALS, CHANGED)
    assert stats.mle() == pytest.approx(mle_rate(INTERVALS, CHANGED), rel=1e-9)
    assert stats.mle(0.5) == pytest.approx(mle_rate(INTERVALS, CHANGED, 0.5), rel=1e-9)
    rng = random.Random(3)
    intervals = [round(rng.uniform(0.1, 5.0), 2) for _ in range(12)]
    changed = [rng.random() < 0.5 for _ in intervals]
    assert stats_of(intervals, changed).mle() == pytest.approx(mle_rate(intervals, changed), rel=1e-9)


def test_change_stats_log_likelihood_is_the_sum_over_visits() -> None:
    stats = stats_of(INTERVALS, CHANGED)
    rate = 0.8
    direct = math.fsum(
        math.log(1.0 - math.exp(-rate * t)) if c else -rate * t for t, c in zip(INTERVALS, CHANGED, strict=True)
    )
    assert stats.log_likelihood(rate) == pytest.approx(direct, rel=1e-14)
    assert stats.log_likelihood(0.0) == -math.inf
    assert stats.log_likelihood(math.inf) == -math.inf
    assert ChangeStats().log_likelihood(0.0) == 0.0


def test_change_stats_summary() -> None:
    stats = stats_of(INTERVALS, CHANGED)
    assert stats.changed == {1.0: 1.0, 0.5: 1.0, 3.0: 1.0}
    assert stats.unchanged_time == 3.0
    assert stats.visits == 5.0


def test_equal_intervals_share_a_bin() -> None:
    stats = ChangeStats()
    stats.add(1.0, True)
    stats.add(1.00001, True)  # same to 4 significant digits
    stats.add(0.99999, True)
    assert stats.changed == {1.0: 3.0}


def test_short_intervals_are_clamped() -> None:
    stats = ChangeStats()
    stats.add(0.0, True)
    stats.add(-5.0, True)
    stats.add(-1.0, False)
    assert list(stats.changed) == [1e-9]
    assert stats.changed[1e-9] == 2.0
    assert stats.unchanged_time == 1e-9
    assert 0.0 < stats.mle() < math.inf


def test_decay_halves_old_weights() -> None:
    stats = ChangeStats()
    stats.add(1.0, True)
    stats.add(2.0, False)
    stats.add(3.0, True, decay=0.5)
    assert stats.changed == {1.0: 0.5, 3.0: 1.0}
    assert stats.unchanged_time == 1.0
    assert stats.visits == 2.0
    stats.add(1.0, False, decay=0.0)  # forget everything
    assert stats == ChangeStats({}, 1.0, 1.0)


def test_bins_stay_bounded() -> None:
    stats = ChangeStats(max_bins=4)
    rng = random.Random(1)
    total = 0.0
    log_weighted = 0.0
    for _ in range(500):
        t = math.exp(rng.uniform(-3.0, 3.0))
        stats.add(t, True)
        total += 1.0
        log_weighted += math.log(float(f"{t:.4g}"))
        assert len(stats.changed) <= 4
    assert math.fsum(stats.changed.values()) == pytest.approx(total, rel=1e-12)
    # Merging keeps the weighted mean of log(t) (up to 4-digit rounding).
    merged = math.fsum(w * math.log(t) for t, w in stats.changed.items()) / total
    assert merged == pytest.approx(log_weighted / total, abs=1e-3)
    assert len(ChangeStats().to_json()) == 3
    assert len(json.dumps(stats.to_json())) < 200


def test_merge_uses_weighted_geometric_mean() -> None:
    stats = ChangeStats(max_bins=2)
    stats.add(1.0, True)
    stats.add(1.0, True)
    stats.add(4.0, True)
    stats.add(100.0, True)  # 1 and 4 are closest in log scale
    expected = float(f"{math.exp((2.0 * math.log(1.0) + math.log(4.0)) / 3.0):.4g}")
    assert stats.changed == {expected: 3.0, 100.0: 1.0}


def test_json_round_trip() -> None:
    stats = stats_of(INTERVALS, CHANGED)
    data = json.loads(json.dumps(stats.to_json()))
    assert data == [3.0, 5.0, [[0.5, 1.0], [1.0, 1.0], [3.0, 1.0]]]
    assert ChangeStats.from_json(data) == stats
    assert ChangeStats.from_json((0, 0, [])) == ChangeStats()


@pytest.mark.parametrize(
    "data",
    [
        None,
        "[]",
        [1.0, 2.0],
        [1.0, 2.0, [], 4.0],
        ["1", 2.0, []],
        [1.0, True, []],
        [-1.0, 2.0, []],
        [1.0, math.nan, []],
        [1.0, 2.0, {}],
        [1.0, 2.0, [[1.0]]],
        [1.0, 2.0, [[0.0, 1.0]]],
        [1.0, 2.0, [[1.0, -1.0]]],
        [1.0, 2.0, [[1.0, math.inf]]],
        [1.0, 2.0, [1.0, 1.0]],
    ],
)
def test_from_json_rejects_malformed_data(data: object) -> None:
    with pytest.raises(ValueError, match="malformed change stats"):
        ChangeStats.from_json(data)


def test_from_json_and_constructor_merge_down_to_max_bins() -> None:
    data = [0.0, 5.0, [[float(t), 1.0] for t in range(1, 6)]]
    assert len(ChangeStats.from_json(data, max_bins=2).changed) == 2
    assert len(ChangeStats({1.0: 1.0, 2.0: 1.0, 30.0: 1.0}, max_bins=2).changed) == 2


# -- Bayesian estimates --------------------------------------------------------


def test_estimate_is_finite_for_saturated_histories() -> None:
    prior = RatePrior()
    all_changed = stats_of([1.0] * 30, [True] * 30)
    never_changed = stats_of([1.0] * 30, [False] * 30)
    assert all_changed.mle() == math.inf
    assert never_changed.mle() == 0.0
    high = estimate_rate(all_changed, prior)
    low = estimate_rate(never_changed, prior)
    for est in (high, low):
        assert isinstance(est, RateEstimate)
        assert 0.0 < est.low < est.rate < est.high < math.inf
    assert high.low > 2.0  # 30 changes in 30 daily visits: several changes a day
    assert low.high < 0.1  # no change in 30 days


def test_estimate_approaches_mle_with_much_data() -> None:
    rng = random.Random(5)
    stats = ChangeStats()
    intervals = [rng.choice([0.5, 1.0, 2.0]) for _ in range(2000)]
    changed = [rng.random() < -math.expm1(-0.7 * t) for t in intervals]
    for t, c in zip(intervals, changed, strict=True):
        stats.add(t, c)
    est = estimate_rate(stats, RatePrior())
    assert est.rate == pytest.approx(stats.mle(), rel=0.02)
    assert est.low < 0.7 < est.high
    assert est.high / est.low < 1.3


def brute_force_posterior(stats: ChangeStats, prior: RatePrior, n: int = 8001) -> tuple[float, float, float]:
    """Geometric mean and 5%/95% quantiles by brute-force quadrature in log(rate)."""
    lo, hi = math.log(1e-5), math.log(1e3)
    step = (hi - lo) / (n - 1)
    us = [lo + k * step for k in range(n)]
    log_post = [stats.log_likelihood(math.exp(u)) - 0.5 * ((u - prior.mean_log) / prior.sd_log) ** 2 for u in us]
    top = max(log_post)
    weights = [math.exp(v - top) for v in log_post]
    total = math.fsum(weights)
    mean = math.fsum(w * u for w, u in zip(weights, us, strict=True)) / total
    quantiles = []
    for q in (0.05, 0.95):
        acc = 0.0
        for w, u in zip(weights, us, strict=True):
            acc += w
            if acc >= q * total:
                quantiles.append(u - step * (acc - q * total) / w)
                break
    return math.exp(mean), math.exp(quantiles[0]), math.exp(quantiles[1])


@pytest.mark.parametrize(
    ("visits", "rate", "interval"),
    [
        (0, 0.3, 1.0),
        (3, 0.3, 1.0),
        (30, 0.3, 1.0),
        (300, 0.3, 1.0),
        (3000, 2.0, 0.5),
        (100, 30.0, 1.0),
        (200, 0.001, 1.0),
    ],
)
def test_estimate_matches_brute_force_quadrature(visits: int, rate: float, interval: float) -> None:
    rng = random.Random(visits)
    stats = ChangeStats()
    for _ in range(visits):
        t = interval * rng.uniform(0.8, 1.2)
        stats.add(t, rng.random() < -math.expm1(-rate * t))
    prior = RatePrior(math.log(0.2), 1.5)
    est = estimate_rate(stats, prior)
    mean, low, high = brute_force_posterior(stats, prior)
    width = math.log(high) - math.log(low)
    assert math.log(est.rate) == pytest.approx(math.log(mean), abs=0.002 * width)
    assert math.log(est.low) == pytest.approx(math.log(low), abs=0.02 * width)
    assert math.log(est.high) == pytest.approx(math.log(high), abs=0.02 * width)


def test_estimate_without_data_is_the_prior() -> None:
    est = estimate_rate(ChangeStats(), RatePrior(math.log(0.5), 1.0))
    assert est.rate == pytest.approx(0.5, rel=1e-6)
    z95 = 1.6448536269514722
    assert est.low == pytest.approx(0.5 * math.exp(-z95), rel=0.02)
    assert est.high == pytest.approx(0.5 * math.exp(z95), rel=0.02)


def test_estimate_uses_the_prior() -> None:
    stats = stats_of([1.0] * 3, [True, False, False])
    slow = estimate_rate(stats, RatePrior(math.log(0.01), 1.0))
    fast = estimate_rate(stats, RatePrior(math.log(10.0), 1.0))
    assert slow.rate < fast.rate


def test_rate_prior_validation() -> None:
    assert RatePrior().mean_log == math.log(0.1)
    assert RatePrior().sd_log == 2.0
    with pytest.raises(ValueError, match="sd_log must be positive"):
        RatePrior(0.0, 0.0)
    with pytest.raises(ValueError, match="mean_log must be finite"):
        RatePrior(math.nan, 1.0)


MEAN_LOG, SD_LOG = math.log(0.3), 1.0


@pytest.fixture(scope="module")
def population() -> tuple[list[float], list[ChangeStats]]:
    """400 pages, log-rates ~ Normal(log 0.3, 1), 30 daily visits each."""
    rng = random.Random(20240601)
    rates, pages = [], []
    for _ in range(400):
        rate = math.exp(rng.gauss(MEAN_LOG, SD_LOG))
        stats = ChangeStats()
        for _ in range(30):
            stats.add(1.0, rng.random() < -math.expm1(-rate))
        rates.append(rate)
        pages.append(stats)
    return rates, pages


def test_fit_prior_recovers_the_population(population) -> None:
    _, pages = population
    prior = fit_prior(pages)
    assert prior.mean_log == pytest.approx(MEAN_LOG, abs=0.15)
    assert prior.sd_log == pytest.approx(SD_LOG, abs=0.15)


def _fitted_objective(pages: list[ChangeStats], prior: RatePrior, spread_pages: float) -> float:
    return log_marginal_likelihood(pages, prior) + log_spread_prior(prior.sd_log, spread_pages)


@pytest.mark.parametrize(("size", "spread_pages"), [(400, 0.0), (400, 10.0), (30, 10.0)])
def test_fit_prior_maximises_the_marginal_likelihood_with_its_spread_prior(population, size, spread_pages) -> None:
    pages = population[1][:size]
    prior = fit_prior(pages, spread_pages=spread_pages, iterations=500)
    best = _fitted_objective(pages, prior, spread_pages)
    assert best > _fitted_objective(pages, RatePrior(), spread_pages)
    for dm, ds in [(0.02, 0.0), (-0.02, 0.0), (0.0, 0.02), (0.0, -0.02)]:
        assert _fitted_objective(pages, RatePrior(prior.mean_log + dm, prior.sd_log + ds), spread_pages) < best


def test_the_spread_prior_weighs_as_many_pages_as_it_says(population) -> None:
    """Thirty pages of thirty visits: sd_log**2 moves a quarter of the way (10 in 40) to SPREAD_PRIOR_SD_LOG**2,
    four hundred barely (10 in 410)."""
    _, pages = population
    for size, share in [(30, 10 / 40), (400, 10 / 410)]:
        free = fit_prior(pages[:size], spread_pages=0.0, iterations=500)
        weak = fit_prior(pages[:size], iterations=500)
        assert weak.mean_log == pytest.approx(free.mean_log, abs=0.05)
        assert weak.sd_log**2 == pytest.approx((1 - share) * free.sd_log**2 + share * 1.0, rel=0.05)


def test_one_compared_visit_per_page_fits_the_same_prior_from_every_start() -> None:
    """Trial 25: forty job pages, each seen once unchanged or changed after four days. The marginal likelihood
    alone cannot tell the spread and leaves it where it starts (3.3 there, pricing an unchanged page at 0.024
    changes a day); with the weak prior on the spread every start ends at the same prior."""
    rng = random.Random(25)
    rates = [1 / (2 + i % 8) for i in range(40)]
    pages = [stats_of([4.0], [rng.random() < -math.expm1(-4.0 * rate)]) for rate in rates]
    starts = [RatePrior(), RatePrior(-0.148, 3.31), RatePrior(math.log(4.0), 0.3)]
    unchanged = stats_of([4.0], [False])
    free = [fit_prior(pages, start=start, spread_pages=0.0) for start in starts]
    assert max(p.sd_log for p in free) - min(p.sd_log for p in free) > 1.0
    weak = [fit_prior(pages, start=start) for start in starts]
    assert max(p.sd_log for p in weak) - min(p.sd_log for p in weak) < 0.02
    assert max(p.mean_log for p in weak) - min(p.mean_log for p in weak) < 0.02
    for prior in weak:
        assert 0.1 < estimate_rate(unchanged, prior).rate < 0.2  # these pages change every 2-9 days


def test_posterior_intervals_cover_the_truth(population) -> None:
    rates, pages = population
    prior = fit_prior(pages)
    estimates = [estimate_rate(stats, prior) for stats in pages]
    covered = sum(est.low <= rate <= est.high for est, rate in zip(estimates, rates, strict=True))
    assert covered / len(rates) >= 0.8


def test_fit_prior_ignores_pages_without_observations(population) -> None:
    _, pages = population
    subset = pages[:50]
    assert fit_prior([*subset, ChangeStats(), ChangeStats()]) == fit_prior(subset)
    start = RatePrior(0.0, 1.0)
    assert fit_prior([], start) is start
    assert fit_prior([ChangeStats()]) == RatePrior()
    assert fit_prior(iter(subset)) == fit_prior(subset)  # any iterable


def test_fit_prior_floors_the_spread() -> None:
    pages = [stats_of([1.0] * 50, [i % 2 == 0 for i in range(50)]) for _ in range(20)]
    assert fit_prior(pages, iterations=200, spread_pages=0.0).sd_log == 0.05


# -- errors --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: naive_rate(-1, 1.0), "changes must be non-negative"),
        (lambda: naive_rate(1, 0.0), "total_time must be positive"),
        (lambda: improved_rate(1, 0, 1.0), "visits must be positive"),
        (lambda: improved_rate(11, 10, 1.0), "changes must be between 0 and visits"),
        (lambda: improved_rate(1, 10, 0.0), "interval must be positive"),
        (lambda: mle_rate([1.0], [True, False]), "same length"),
        (lambda: mle_rate([], []), "at least one interval"),
        (lambda: mle_rate([0.0], [True]), "intervals must be positive"),
        (lambda: mle_rate([1.0], [True], pseudo_interval=0.0), "pseudo_interval must be positive"),
        (lambda: last_modified_rate(2, [0.1, 0.2, 0.3], 0.0), "cannot be longer than visits"),
        (lambda: last_modified_rate(2, [-0.1], 0.0), "change ages must be finite and non-negative"),
        (lambda: last_modified_rate(2, [0.0], 0.0), "total observed time must be positive"),
        (lambda: complete_observation_rate(-1, 1.0), "changes must be non-negative"),
        (lambda: ChangeStats().add(1.0, True, decay=1.5), "decay must be in the range"),
        (lambda: ChangeStats().add(math.nan, True), "interval must be finite"),
        (lambda: ChangeStats().log_likelihood(-1.0), "rate must be non-negative"),
        (lambda: ChangeStats().mle(pseudo_interval=-1.0), "pseudo_interval must be positive"),
        (lambda: ChangeStats(max_bins=0), "max_bins must be at least 1"),
        (lambda: fit_prior([], iterations=0), "iterations must be at least 1"),
        (lambda: fit_prior([], spread_pages=-1.0), "spread_pages must be non-negative and finite"),
        (lambda: fit_prior([], spread_pages=math.inf), "spread_pages must be non-negative and finite"),
    ],
)
def test_bad_input_raises(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def reference_estimate(stats: ChangeStats, prior: RatePrior) -> RateEstimate:
    """The fixed-grid posterior spelled out rate by rate: the log-likelihood from ChangeStats itself, the prior's
    normal density normalised over the grid, the density constant over each cell."""
    from scrapy_costsched.model import estimators

    grid, edges = estimators._LOG_GRID, estimators._GRID_EDGES
    raw = [-0.5 * ((u - prior.mean_log) / prior.sd_log) ** 2 for u in grid]
    norm = max(raw) + math.log(math.fsum(math.exp(v - max(raw)) for v in raw))
    post = [stats.log_likelihood(math.exp(u)) + v - norm for u, v in zip(grid, raw, strict=True)]
    widths = [b - a for a, b in itertools.pairwise(edges)]
    masses = [math.exp(v - max(post)) * w for v, w in zip(post, widths, strict=True)]
    total = math.fsum(masses)
    centres = [0.5 * (a + b) for a, b in itertools.pairwise(edges)]
    mean_log = math.fsum(m * c for m, c in zip(masses, centres, strict=True)) / total

    def quantile(q: float) -> float:
        acc = 0.0
        for m, a, w in zip(masses, edges, widths, strict=True):
            if acc + m >= q * total:
                return math.exp(a + (q * total - acc) / m * w)
            acc += m
        raise AssertionError("unreachable")

    return RateEstimate(math.exp(mean_log), quantile(0.05), quantile(0.95))


def _on_fixed_grid(stats: ChangeStats, prior: RatePrior) -> bool:
    """Whether estimate_rate stays on the fixed grid (a posterior wider than two grid steps)."""
    from scrapy_costsched.model import estimators

    grid = estimators._LOG_GRID
    post = [stats.log_likelihood(math.exp(u)) - 0.5 * ((u - prior.mean_log) / prior.sd_log) ** 2 for u in grid]
    j = post.index(max(post))
    return not (0 < j < len(grid) - 1 and post[j - 1] - 2.0 * post[j] + post[j + 1] < -0.25)


def test_estimate_on_the_fixed_grid_matches_the_posterior_spelled_out() -> None:
    """estimate_rate's vectorised grid arithmetic gives the posterior computed rate by rate (research vectors,
    and random decayed histories under several priors)."""
    cases = [stats_of(INTERVALS, CHANGED), ChangeStats(), stats_of([1.0] * 5, [True] * 5)]
    rng = random.Random(8)
    for _ in range(300):
        stats = ChangeStats()
        for _ in range(rng.randint(1, 12)):
            stats.add(rng.choice([0.01, 0.5, 1.0, 7.0, rng.uniform(0.1, 30.0)]), rng.random() < 0.4,
                      decay=rng.choice([1.0, 0.9, 0.5]))
        cases.append(stats)
    priors = [RatePrior(), RatePrior(math.log(0.05), 1.3), RatePrior(math.log(2.0), 0.5)]
    compared = 0
    for stats in cases:
        for prior in priors:
            if not _on_fixed_grid(stats, prior):
                continue  # the refined grid: test_estimate_matches_brute_force_quadrature
            est, ref = estimate_rate(stats, prior), reference_estimate(stats, prior)
            assert est.rate == pytest.approx(ref.rate, rel=1e-9)
            assert est.low == pytest.approx(ref.low, rel=1e-9)
            assert est.high == pytest.approx(ref.high, rel=1e-9)
            compared += 1
    assert compared > 600
