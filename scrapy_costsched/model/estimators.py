"""Change-rate estimators for pages that are only observed when visited.

A visit reveals whether the page changed since the previous visit, not how
often, so the naive changes / time is biased low (Cho & Garcia-Molina, ACM
TOIT 2003).  This module has their estimators and a Bayesian one for crawl
histories with irregular intervals:

=================================  ============================================
Name                               Use
=================================  ============================================
:func:`naive_rate`                 changes / time, only for exact change counts
:func:`improved_rate`              equal intervals, bias-reduced
:func:`mle_rate`                   irregular intervals, maximum likelihood
:func:`last_modified_rate`         visits that report when the page last changed
:func:`complete_observation_rate`  every change is announced (feeds, sitemaps)
:class:`ChangeStats`               bounded summary of one page's history
:func:`fit_prior`                  log-normal prior for a group of pages
:func:`estimate_rate`              posterior rate and 90% interval for a page
=================================  ============================================

Time is in the caller's unit.  The grid of :func:`estimate_rate` and the
0.5 pseudo-counts were chosen for days.

References:

- J. Cho, H. Garcia-Molina, "Estimating frequency of change", ACM TOIT 3(3),
  2003, https://doi.org/10.1145/857166.857170
- A. Kolobov, Y. Peres, C. Lu, E. Horvitz, "Staying up to date with online
  content changes using reinforcement learning for scheduling", NeurIPS 2019
  (learning rates while crawling; pseudo-observations).
- A. Gelman, "Prior distributions for variance parameters in hierarchical
  models", Bayesian Analysis 1(3), 2006, https://doi.org/10.1214/06-BA117A
  (a weak prior on a group's spread where its members say little).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import accumulate, pairwise, repeat
from operator import add, mul, sub
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = [
    "SPREAD_PRIOR_PAGES",
    "SPREAD_PRIOR_SD_LOG",
    "ChangeStats",
    "RateEstimate",
    "RatePrior",
    "complete_observation_rate",
    "estimate_rate",
    "fit_prior",
    "improved_rate",
    "last_modified_rate",
    "log_marginal_likelihood",
    "log_spread_prior",
    "mle_rate",
    "naive_rate",
]

# Rate grid for the Bayesian estimates: 121 log-spaced rates from 1e-5 to 1e3
# per time unit (with days: one change in ~270 years to one per ~1.5 minutes).
_GRID_SIZE = 121
_LOG_GRID_LOW = math.log(1e-5)
_LOG_STEP = (math.log(1e3) - _LOG_GRID_LOW) / (_GRID_SIZE - 1)
_LOG_GRID = tuple(_LOG_GRID_LOW + j * _LOG_STEP for j in range(_GRID_SIZE))
_LOG_GRID_SQ = tuple(x * x for x in _LOG_GRID)
_RATE_GRID = tuple(math.exp(x) for x in _LOG_GRID)
_GRID_EDGES = tuple(_LOG_GRID_LOW + (j - 0.5) * _LOG_STEP for j in range(_GRID_SIZE + 1))
# What each estimate on the fixed grid would otherwise compute again: -rate (negation is exact, so
# (-rate) * u is -(rate * u)), and each cell's centre (every cell is _LOG_STEP wide).
_NEG_RATE_GRID = tuple(-rate for rate in _RATE_GRID)
_GRID_CENTRES = tuple(0.5 * (a + b) for a, b in pairwise(_GRID_EDGES))
_MIN_SD_LOG = 0.05
_SUPPORT_DROP = 40.0
_EM_TOLERANCE = 1e-4
_MIN_INTERVAL = 1e-9

#: The spread (sd_log) a group's prior returns to where its pages' histories cannot tell it, as when
#: each page has one compared visit, and how many pages' worth of evidence that default weighs
#: (:func:`log_spread_prior`): a factor of e between similar pages' rates, worth ten pages.
SPREAD_PRIOR_SD_LOG = 1.0
SPREAD_PRIOR_PAGES = 10.0


# -- classical estimators (Cho & Garcia-Molina, TOIT 2003) -------------------


def naive_rate(changes: int, total_time: float) -> float:
    """Changes per unit of time, X / T.

    Biased low when a visit can hide several changes: at rate * interval = 1
    it reports 0.632 of the truth (Cho & Garcia-Molina, TOIT 2003).

    >>> naive_rate(3, 10.0)
    0.3
    """
    if not changes >= 0:
        raise ValueError("changes must be non-negative")
    if not 0.0 < total_time < math.inf:
        raise ValueError("total_time must be positive and finite")
    return changes / total_time


def improved_rate(changes: int, visits: int, interval: float) -> float:
    """Rate from *visits* checks *interval* apart, *changes* of which saw a change.

    The bias-reduced estimator -log((n - X + 0.5) / (n + 0.5)) / I of Cho &
    Garcia-Molina (TOIT 2003, section 4), finite even when X == n.

    >>> improved_rate(3, 10, 1.0)  # doctest: +ELLIPSIS
    0.33647223...
    >>> improved_rate(10, 10, 1.0) == math.log(21.0)
    True
    """
    if not visits > 0:
        raise ValueError("visits must be positive")
    if not 0 <= changes <= visits:
        raise ValueError("changes must be between 0 and visits")
    if not 0.0 < interval < math.inf:
        raise ValueError("interval must be positive and finite")
    if changes == visits:  # exact form of the same expression
        return math.log(2.0 * visits + 1.0) / interval
    return -math.log1p(-changes / (visits + 0.5)) / interval


def _score(items: Sequence[tuple[float, float]], unchanged: float, rate: float) -> tuple[float, float]:
    # d/du of the log-likelihood in u = log(rate), and its derivative.
    value = -rate * unchanged
    slope = value
    for t, w in items:
        x = rate * t
        e = math.exp(-x)
        d = -math.expm1(-x)
        value += w * x * e / d  # x / (exp(x) - 1)
        slope += w * x * e * (d - x) / (d * d)
    return value, slope


def _mle(items: Sequence[tuple[float, float]], unchanged: float) -> float:
    """Root of sum(w * t / (exp(rate * t) - 1)) == unchanged over changed (t, w)."""
    weight = math.fsum(w for _, w in items)
    if weight == 0.0:
        return 0.0
    if unchanged == 0.0:
        return math.inf
    # t / (exp(x) - 1) lies between 1 / rate - t / 2 and 1 / rate.
    changed_time = math.fsum(w * t for t, w in items)
    a = math.log(weight / (unchanged + 0.5 * changed_time))
    b = math.log(weight / unchanged)
    u = a
    # Newton on log(rate), kept in the bracket [a, b] by bisection.
    for _ in range(200):
        value, slope = _score(items, unchanged, math.exp(u))
        if value == 0.0:
            break
        if value > 0.0:
            a = u
        else:
            b = u
        step = u - value / slope if slope < 0.0 else math.nan
        if not a <= step <= b:  # also when step is NaN
            step = 0.5 * (a + b)
        done = abs(step - u) <= 1e-15 * max(1.0, abs(u)) or b - a <= 1e-15 * max(1.0, abs(a))
        u = step
        if done:
            break
    return math.exp(u)


def mle_rate(
    intervals: Sequence[float],
    changed: Sequence[bool],
    pseudo_interval: float | None = None,
) -> float:
    """Maximum-likelihood rate from visits at irregular *intervals*.

    Solves sum_changed t / (exp(rate * t) - 1) == sum_unchanged t (Cho &
    Garcia-Molina, TOIT 2003, section 6), whose left side strictly decreases,
    by a bracketed Newton search.  The estimate is ``math.inf`` when every
    visit saw a change and 0.0 when none did, unless *pseudo_interval* adds
    one changed and one unchanged pseudo-visit of that length (Kolobov et al.
    2019 use 0.5 days).

    >>> round(mle_rate([1.0, 2.0, 0.5, 3.0, 1.0], [True, False, True, True, False]), 6)
    0.633499
    >>> mle_rate([1.0, 1.0], [True, True]), mle_rate([1.0], [False])
    (inf, 0.0)
    >>> round(mle_rate([1.0, 1.0], [True, True], pseudo_interval=0.5), 12) == round(math.log(9.0), 12)
    True

    Lengths that differ, intervals <= 0, or no intervals without a
    pseudo-interval raise ValueError.
    """
    if len(intervals) != len(changed):
        raise ValueError("intervals and changed must have the same length")
    if not intervals and pseudo_interval is None:
        raise ValueError("mle_rate requires at least one interval")
    if any(not 0.0 < t < math.inf for t in intervals):
        raise ValueError("intervals must be positive and finite")
    items = [(float(t), 1.0) for t, c in zip(intervals, changed, strict=True) if c]
    unchanged = [float(t) for t, c in zip(intervals, changed, strict=True) if not c]
    if pseudo_interval is not None:
        _check_pseudo(pseudo_interval)
        items.append((float(pseudo_interval), 1.0))
        unchanged.append(float(pseudo_interval))
    return _mle(items, math.fsum(unchanged))


def _check_pseudo(pseudo_interval: float) -> None:
    if not 0.0 < pseudo_interval < math.inf:
        raise ValueError("pseudo_interval must be positive and finite")


def last_modified_rate(visits: int, change_ages: Sequence[float], unchanged_time: float) -> float:
    """Rate from visits that also learn when the page last changed.

    *change_ages* holds, for each visit that saw a change, the time from that
    change to the visit (from Last-Modified); *unchanged_time* sums the
    intervals of the other visits.  With X = len(change_ages) and T the total
    of both, the bias-reduced estimate is ((X - 1) - X / (n log(1 - X/n))) / T
    (Cho & Garcia-Molina, TOIT 2003, section 5): 0 at X = 0, (n - 1) / T at
    X = n.  Unlike :func:`improved_rate` it does not saturate.

    >>> round(last_modified_rate(5, [0.2, 0.7, 0.4], 2.0), 6)
    0.804489

    More change ages than visits, negative times, or X > 0 with T == 0 raise
    ValueError.
    """
    changes = len(change_ages)
    if not visits > 0:
        raise ValueError("visits must be positive")
    if changes > visits:
        raise ValueError("change_ages cannot be longer than visits")
    if any(not 0.0 <= t < math.inf for t in change_ages):
        raise ValueError("change ages must be finite and non-negative")
    if not 0.0 <= unchanged_time < math.inf:
        raise ValueError("unchanged_time must be finite and non-negative")
    if changes == 0:
        return 0.0
    total = math.fsum(change_ages) + unchanged_time
    if total == 0.0:
        raise ValueError("total observed time must be positive")
    if changes == visits:
        return (visits - 1) / total
    return ((changes - 1) - changes / (visits * math.log1p(-changes / visits))) / total


def complete_observation_rate(changes: int, total_time: float) -> float:
    """Rate when every change is observed: (N + 0.5) / (T + 0.5).

    The 0.5 pseudo-counts keep the estimate positive and finite (Cho &
    Garcia-Molina, TOIT 2003); they are in the caller's time unit (days there).

    >>> round(complete_observation_rate(12, 30.0), 4)
    0.4098
    """
    if not changes >= 0:
        raise ValueError("changes must be non-negative")
    if not 0.0 <= total_time < math.inf:
        raise ValueError("total_time must be finite and non-negative")
    return (changes + 0.5) / (total_time + 0.5)


# -- bounded history summary ---------------------------------------------------


def _bin_key(interval: float) -> float:
    return float(f"{interval:.4g}")


@dataclass
class ChangeStats:
    """Sufficient statistics of a page's visits, in bounded space.

    A visit after an interval t that found a change contributes
    log(1 - exp(-rate * t)) to the log-likelihood, an unchanged one -rate * t,
    so the history reduces to the weights of changed intervals (*changed*,
    keyed by t rounded to 4 significant digits) and the total unchanged time.
    At most *max_bins* keys are kept: the two closest in log scale merge into
    their weighted geometric mean.  ``add(..., decay=d)`` first multiplies
    all weights by d, so old history can fade (d = 0.5 ** (elapsed / half_life)).

    >>> s = ChangeStats()
    >>> for interval, changed in [(1.0, True), (2.0, False), (1.0, True)]:
    ...     s.add(interval, changed)
    >>> s
    ChangeStats(changed={1.0: 2.0}, unchanged_time=2.0, visits=3.0, max_bins=16)
    >>> s.to_json()
    [2.0, 3.0, [[1.0, 2.0]]]
    >>> ChangeStats.from_json(s.to_json()) == s
    True
    """

    changed: dict[float, float] = field(default_factory=dict)
    unchanged_time: float = 0.0
    visits: float = 0.0
    max_bins: int = 16

    def __post_init__(self) -> None:
        if self.max_bins < 1:
            raise ValueError("max_bins must be at least 1")
        self._merge_bins()

    def add(self, interval: float, changed: bool, decay: float = 1.0, then_unchanged: float = 0.0) -> None:
        """Record a visit *interval* after the previous one; intervals <= 0 count as tiny.

        *then_unchanged* adds unchanged time to the same visit: a change dated by
        Last-Modified is a change within its resolution, then none until the visit.
        """
        if not 0.0 <= decay <= 1.0:
            raise ValueError("decay must be in the range 0.0 <= decay <= 1.0")
        if math.isnan(interval) or interval == math.inf:
            raise ValueError("interval must be finite")
        if decay != 1.0:
            self.changed = {t: w * decay for t, w in self.changed.items() if w * decay > 0.0}
            self.unchanged_time *= decay
            self.visits *= decay
        interval = max(interval, _MIN_INTERVAL)
        if changed:
            key = _bin_key(interval)
            self.changed[key] = self.changed.get(key, 0.0) + 1.0
            self._merge_bins()
        else:
            self.unchanged_time += interval
        self.unchanged_time += max(then_unchanged, 0.0)
        self.visits += 1.0

    def _merge_bins(self) -> None:
        while len(self.changed) > self.max_bins:
            keys = sorted(self.changed)
            i = min(range(len(keys) - 1), key=lambda j: keys[j + 1] / keys[j])
            t1, t2 = keys[i], keys[i + 1]
            w1, w2 = self.changed.pop(t1), self.changed.pop(t2)
            weight = w1 + w2
            t = _bin_key(math.exp((w1 * math.log(t1) + w2 * math.log(t2)) / weight))
            self.changed[t] = self.changed.get(t, 0.0) + weight

    def log_likelihood(self, rate: float) -> float:
        """Poisson log-likelihood of the history at *rate*.

        >>> s = ChangeStats({1.0: 1.0}, unchanged_time=1.0, visits=2.0)
        >>> s.log_likelihood(math.log(2.0)) == 2.0 * math.log(0.5)
        True
        """
        if not rate >= 0.0:
            raise ValueError("rate must be non-negative")
        seen = any(w > 0.0 for w in self.changed.values())
        if rate == 0.0:
            return -math.inf if seen else 0.0
        if rate == math.inf:
            return -math.inf if self.unchanged_time > 0.0 else 0.0
        total = -rate * self.unchanged_time
        for t, w in self.changed.items():
            total += w * math.log(-math.expm1(-rate * t))
        return total

    def mle(self, pseudo_interval: float | None = None) -> float:
        """Maximum-likelihood rate, as :func:`mle_rate` (0.0 with no changes seen).

        >>> ChangeStats({1.0: 1.0}, unchanged_time=1.0, visits=2.0).mle() == math.log(2.0)
        True
        """
        items = list(self.changed.items())
        unchanged = self.unchanged_time
        if pseudo_interval is not None:
            _check_pseudo(pseudo_interval)
            items.append((float(pseudo_interval), 1.0))
            unchanged += pseudo_interval
        return _mle(items, unchanged)

    def to_json(self) -> list[float | list[list[float]]]:
        """Compact JSON-able form ``[unchanged_time, visits, [[t, w], ...]]``."""
        bins = [[t, self.changed[t]] for t in sorted(self.changed)]
        return [self.unchanged_time, self.visits, bins]

    @classmethod
    def from_json(cls, data: object, max_bins: int = 16) -> ChangeStats:
        """Rebuild from :meth:`to_json` output; malformed data raises ValueError."""
        if not (isinstance(data, (list, tuple)) and len(data) == 3):
            raise ValueError("malformed change stats: expected [unchanged_time, visits, bins]")
        unchanged, visits, bins = data
        if not (_is_number(unchanged) and _is_number(visits) and isinstance(bins, (list, tuple))):
            raise ValueError("malformed change stats: bad field types")
        changed: dict[float, float] = {}
        for pair in bins:
            if not (isinstance(pair, (list, tuple)) and len(pair) == 2):
                raise ValueError("malformed change stats: bins must be [t, w] pairs")
            t, w = pair
            if not (_is_number(t) and _is_number(w) and t > 0.0):
                raise ValueError("malformed change stats: bad bin")
            key = _bin_key(float(t))
            changed[key] = changed.get(key, 0.0) + float(w)
        return cls(changed, float(unchanged), float(visits), max_bins)


def _is_number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and 0.0 <= x < math.inf


# -- Bayesian estimate with a group prior --------------------------------------


@dataclass(frozen=True)
class RatePrior:
    """Log-normal prior on a change rate: log(rate) ~ Normal(mean_log, sd_log).

    The default centres on one change per 10 time units (days) with a broad
    sd_log = 2.0 (a factor of e**2 ~ 7.4 per standard deviation); use
    :func:`fit_prior` to learn it for a group of similar pages.
    """

    mean_log: float = math.log(0.1)
    sd_log: float = 2.0

    @property
    def median(self) -> float:
        """The prior's median rate: what planning assumes for a page with no estimate yet."""
        return math.exp(self.mean_log)

    def __post_init__(self) -> None:
        if not math.isfinite(self.mean_log):
            raise ValueError("mean_log must be finite")
        if not 0.0 < self.sd_log < math.inf:
            raise ValueError("sd_log must be positive and finite")


@dataclass(frozen=True)
class RateEstimate:
    """Posterior rate (geometric mean) and its 5% and 95% quantiles."""

    rate: float
    low: float
    high: float


@lru_cache(maxsize=4096)
def _log_changed_column(t: float) -> tuple[float, ...]:
    return tuple(math.log(-math.expm1(-rate * t)) for rate in _RATE_GRID)


@lru_cache(maxsize=256)
def _log_prior_column(mean_log: float, sd_log: float) -> tuple[float, ...]:
    # Normal in log(rate), normalised over the grid.
    raw = [-0.5 * ((x - mean_log) / sd_log) ** 2 for x in _LOG_GRID]
    top = max(raw)
    norm = top + math.log(math.fsum(math.exp(v - top) for v in raw))
    return tuple(v - norm for v in raw)


def _grid_log_likelihood(stats: ChangeStats, start: Sequence[float] | None = None) -> list[float]:
    """The log-likelihood of *stats* at each rate of the fixed grid, plus *start* (a log-prior column) if given."""
    # -rate * u, then + w * log(1 - e^(-rate * t)) per changed bin, with map rather than a comprehension:
    # it runs at every visit's estimate.
    unchanged = map(mul, _NEG_RATE_GRID, repeat(stats.unchanged_time))
    ll = list(unchanged if start is None else map(add, start, unchanged))
    for t, w in stats.changed.items():
        column = _log_changed_column(t)
        ll = list(map(add, ll, column if w == 1.0 else map(mul, repeat(w), column)))
    return ll


def _has_data(stats: ChangeStats) -> bool:
    return stats.unchanged_time > 0.0 or any(w > 0.0 for w in stats.changed.values())


def _log_sum_exp(values: Iterable[float]) -> float:
    values = list(values)
    top = max(values)
    return top + math.log(math.fsum(math.exp(v - top) for v in values))


def _summarise(log_post: Sequence[float], edges: Sequence[float], widths: Sequence[float] | float | None = None,
               centres: Sequence[float] | None = None) -> RateEstimate:
    """Posterior density taken constant over each cell [edges[j], edges[j + 1]] in log(rate).

    *widths* and *centres* of the cells when the caller has them; one width for cells that are all
    as wide (the fixed grid's), whose masses then need no weighting.
    """
    top = max(log_post)
    if widths is None or centres is None:
        widths = [b - a for a, b in pairwise(edges)]
        centres = [0.5 * (a + b) for a, b in pairwise(edges)]
    densities = map(math.exp, map(sub, log_post, repeat(top)))
    masses = list(densities if isinstance(widths, float) else map(mul, densities, widths))
    cumulative = list(accumulate(masses))
    total = cumulative[-1]
    mean_log = math.fsum(map(mul, masses, centres)) / total

    def quantile(q: float) -> float:
        target = q * total
        j = min(bisect_left(cumulative, target), len(masses) - 1)
        before = cumulative[j - 1] if j else 0.0
        share = (target - before) / masses[j] if masses[j] > 0.0 else 0.5
        return math.exp(edges[j] + share * (widths if isinstance(widths, float) else widths[j]))

    return RateEstimate(math.exp(mean_log), quantile(0.05), quantile(0.95))


def _refined_estimate(stats: ChangeStats, prior: RatePrior, start: float) -> RateEstimate:
    """Posterior on a local grid, for posteriors too narrow for the fixed one.

    The log-posterior is concave in u = log(rate), so Newton's method from the
    best grid point finds the mode.  From there the grid steps outwards, at
    first by a third of the standard deviation of the Laplace approximation,
    doubling the step in flat tails, until the density has dropped by e**-25
    or the fixed grid's range ends.
    """
    items = list(stats.changed.items())
    unchanged = stats.unchanged_time
    m, var = prior.mean_log, prior.sd_log**2

    def log_post(u: float) -> float:
        rate = math.exp(u)
        total = -rate * unchanged - 0.5 * (u - m) ** 2 / var
        for t, w in items:
            total += w * math.log(-math.expm1(-rate * t))
        return total

    a, b = start - _LOG_STEP, start + _LOG_STEP
    mode = start
    for _ in range(100):
        value, slope = _score(items, unchanged, math.exp(mode))
        value -= (mode - m) / var
        slope -= 1.0 / var
        if value > 0.0:
            a = mode
        elif value < 0.0:
            b = mode
        step = mode - value / slope
        if not a <= step <= b:
            step = 0.5 * (a + b)
        done = abs(step - mode) <= 1e-12 or value == 0.0
        mode = step
        if done:
            break
    _, slope = _score(items, unchanged, math.exp(mode))
    first_step = 1.0 / (3.0 * math.sqrt(1.0 / var - slope))
    top = log_post(mode)
    sides = []
    for direction in (-1.0, 1.0):
        side: list[tuple[float, float]] = []
        u, previous, step = mode, top, first_step
        limit = _GRID_EDGES[0] if direction < 0.0 else _GRID_EDGES[-1]
        while len(side) < 400 and (u - limit) * direction < 0.0:
            u += direction * step
            if (u - limit) * direction > 0.0:
                u = limit
            value = log_post(u)
            side.append((u, value))
            if value < top - 25.0:
                break
            # Past 1.5 sd a Gaussian drops by more than 1/4 per step; a smaller
            # drop means a heavy tail, which a doubled step still resolves.
            if len(side) > 4 and previous - value < 0.25:
                step *= 2.0
            previous = value
        sides.append(side)
    nodes = [*reversed(sides[0]), (mode, top), *sides[1]]
    points = [u for u, _ in nodes]
    edges = [points[0], *(0.5 * (x + y) for x, y in pairwise(points)), points[-1]]
    return _summarise([v for _, v in nodes], edges)


def estimate_rate(stats: ChangeStats, prior: RatePrior) -> RateEstimate:
    """Posterior change rate of one page under a log-normal *prior*.

    The posterior is evaluated on a fixed log-spaced grid of 121 rates from
    1e-5 to 1e3 per time unit, or, once a long history makes it narrower than
    the grid, on a local grid around its mode.  *rate* is the posterior
    geometric mean exp(E[log rate]), finite and positive even when every
    visit, or no visit, saw a change (where the MLE is inf or 0); *low* and
    *high* are the 5% and 95% posterior quantiles.

    >>> est = estimate_rate(ChangeStats(), RatePrior(math.log(0.5), 1.0))
    >>> round(est.rate, 3), round(est.low, 2), round(est.high, 1)
    (0.5, 0.1, 2.6)
    """
    post = _grid_log_likelihood(stats, start=_log_prior_column(prior.mean_log, prior.sd_log))
    j = post.index(max(post))  # the first of equal maxima, as max(range(...), key=...) gives
    # A second difference below -1/4 means a posterior sd under two grid steps,
    # too narrow for accurate quantiles on the fixed grid.
    if 0 < j < _GRID_SIZE - 1 and post[j - 1] - 2.0 * post[j] + post[j + 1] < -0.25:
        return _refined_estimate(stats, prior, _LOG_GRID[j])
    return _summarise(post, _GRID_EDGES, _LOG_STEP, _GRID_CENTRES)


def log_marginal_likelihood(stats: Iterable[ChangeStats], prior: RatePrior) -> float:
    """Sum over pages of log of the integral of L(rate) * prior(rate).

    The objective :func:`fit_prior` maximises, on the same grid.

    >>> log_marginal_likelihood([ChangeStats()], RatePrior())
    0.0
    """
    log_prior = _log_prior_column(prior.mean_log, prior.sd_log)
    return math.fsum(
        _log_sum_exp(a + b for a, b in zip(_grid_log_likelihood(s), log_prior, strict=True))
        for s in stats
        if _has_data(s)
    )


def log_spread_prior(sd_log: float, pages: float = SPREAD_PRIOR_PAGES) -> float:
    """Log density, up to a constant, of the weak prior :func:`fit_prior` puts on a group's spread.

    One compared visit per page (an unchanged four-day interval, say) tells a group's median
    rate but not how far its pages spread around it: the marginal likelihood is flat in sd_log
    there, and maximising it leaves the spread wherever it started (Gelman 2006 on variance
    parameters with little information). A scaled inverse-chi-squared on sd_log**2 with *pages*
    degrees of freedom at :data:`SPREAD_PRIOR_SD_LOG`, taken on the scale of log(sd_log**2) so
    that its mode is that spread, brings such a group back to it; where a group's n pages'
    histories do tell the spread, it moves sd_log**2 a share pages / (pages + n) of the way.

    >>> log_spread_prior(SPREAD_PRIOR_SD_LOG) > log_spread_prior(3.0)
    True
    """
    variance = sd_log * sd_log
    return -0.5 * pages * (math.log(variance) + SPREAD_PRIOR_SD_LOG**2 / variance)


def fit_prior(
    stats: Iterable[ChangeStats],
    start: RatePrior | None = None,
    iterations: int = 50,
    spread_pages: float = SPREAD_PRIOR_PAGES,
) -> RatePrior:
    """Log-normal prior of a group of pages, fitted by marginal likelihood with a weak prior on its spread.

    Maximises :func:`log_marginal_likelihood` plus :func:`log_spread_prior` (worth
    *spread_pages* pages; 0 for the marginal likelihood alone) over (mean_log, sd_log) by EM on
    the rate grid: the E-step takes each page's posterior, the M-step sets mean_log to the mean
    of the posterior means of log(rate) and sd_log**2 to (n*S + spread_pages *
    SPREAD_PRIOR_SD_LOG**2) / (n + spread_pages), where S is the mean over the n pages of
    posterior variance plus squared deviation (sd_log >= 0.05). Unlike averaging per-page
    estimates, this accounts for how little a short or saturated history says; the prior on
    the spread keeps a group whose pages were each compared once from a spread that only its
    starting point set (trial 25: sd_log 3.3, so one unchanged four-day interval put a job
    page at 0.024 changes a day). Only the fixed grid is used, so a likelihood narrower than
    its step enters coarsely; that matters little for the spread of a group. Each page enters
    only where its likelihood is within e**-40 of its peak, and EM stops once both parameters
    move by less than 1e-4 (a prior needs no more). Pages without observations are ignored;
    with none left, *start* (or the default prior) is returned.

    >>> fit_prior([]) == RatePrior()
    True
    """
    prior = RatePrior() if start is None else start
    if iterations < 1:
        raise ValueError("iterations must be at least 1")
    if not 0.0 <= spread_pages < math.inf:
        raise ValueError("spread_pages must be non-negative and finite")
    # Each page's likelihood only where it is within e**-40 of its peak: the
    # E-step then costs the width of the likelihood, not of the whole grid.
    supports: list[tuple[int, list[float], list[float]]] = []
    for s in stats:
        if _has_data(s):
            ll = _grid_log_likelihood(s)
            top = max(ll)
            kept = [j for j, v in enumerate(ll) if v > top - _SUPPORT_DROP]
            lo, hi = kept[0], kept[-1] + 1
            supports.append((lo, ll[lo:hi], [math.exp(v - top) for v in ll[lo:hi]]))
    if not supports:
        return prior
    pages = len(supports)
    default_spread = spread_pages * SPREAD_PRIOR_SD_LOG**2
    mean_log, sd_log = prior.mean_log, prior.sd_log
    for _ in range(iterations):
        log_prior = _log_prior_column(mean_log, sd_log)
        prior_weights = [math.exp(v) for v in log_prior]
        first = second = 0.0
        for lo, ll, lik in supports:
            hi = lo + len(lik)
            post = list(map(mul, lik, prior_weights[lo:hi]))
            total = sum(post)
            if not total > 1e-280:  # prior and likelihood barely overlap
                lp = list(map(add, ll, log_prior[lo:hi]))
                top = max(lp)
                post = [math.exp(v - top) for v in lp]
                total = sum(post)
            first += sum(map(mul, post, _LOG_GRID[lo:hi])) / total
            second += sum(map(mul, post, _LOG_GRID_SQ[lo:hi])) / total
        new_mean = first / pages
        spread = max(second - pages * new_mean**2, 0.0)
        new_sd = max(math.sqrt((spread + default_spread) / (pages + spread_pages)), _MIN_SD_LOG)
        done = abs(new_mean - mean_log) <= _EM_TOLERANCE and abs(new_sd - sd_log) <= _EM_TOLERANCE
        mean_log, sd_log = new_mean, new_sd
        if done:
            break
    return RatePrior(mean_log, sd_log)
