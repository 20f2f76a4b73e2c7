"""Seeded synthetic workloads: pages, their values, costs and exact change times.

Time is in days and the planner acts once per cycle of one day.  Every page of
a workload holds the sorted times of all its changes over the simulated span,
so metrics are computed exactly, and every policy of a run sees the same
changes (common random numbers).

Change-rate distributions (research.md section 5):

- ``cho2000``: the buckets of Cho & Garcia-Molina (SIGMOD 2000; 720k pages daily
  for 4 months): mean change interval <= 1 day 23%, 1 day-1 week 15%, 1 week-1
  month 16%, 1-4 months 16%, > 4 months 30%, log(rate) uniform in each bucket.
  ``cho2000-com`` / ``-netorg`` / ``-edu`` / ``-gov`` use one domain's calibrated
  profile; ``cho2000-domains`` mixes the four (shares of the study's 270 sites),
  each domain its own prior group.
- ``gamma``: rates Gamma-distributed with mean 1/day and coefficient of variation
  ``cv`` (Cho & Garcia-Molina, TODS 2003, section 5).
- ``weibull``: mean change interval Weibull(shape, scale 7 days) across pages
  (Brewington & Cybenko 2000 found Weibull-like spreads; parameters illustrative).
- ``nonpoisson``: ``cho2000`` rates on pages that are Poisson (40%), bursty (20%:
  bursts of 4 changes on average within an hour), weekly-periodic (20%: changes
  only on weekdays 9:00-17:00), or whose rate shifts 10x up or down mid-run
  (20%), with validators (304 at 5% of a full fetch) and 10% of hosts whose
  validators lie (they answer 304 although the page changed).

Options for any workload: heavy-tailed values (``lognormal``, ``pareto``) or
``tiers``; costs correlated with the change rate (``size``: larger pages change
more often, Fetterly et al. 2003); validators; new pages appearing over time
(Ntoulas et al. 2004 saw about 8% new pages a week); hosts whose answers carry
an honest Last-Modified.
"""

from __future__ import annotations

import math
import random
from array import array
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CHO2000_BUCKETS",
    "CHO2000_DOMAINS",
    "WORKLOADS",
    "Page",
    "Workload",
    "WorkloadOptions",
    "make_workload",
    "poisson_times",
]

#: Bounds of Cho & Garcia-Molina's change-interval buckets, as rates per day (high, low).
CHO2000_BUCKETS: tuple[tuple[float, float], ...] = (
    (24.0, 1.0),
    (1.0, 1.0 / 7.0),
    (1.0 / 7.0, 1.0 / 30.0),
    (1.0 / 30.0, 1.0 / 120.0),
    (1.0 / 120.0, 1.0 / 1000.0),
)
#: Share of pages per bucket: overall and per domain (research.md section 5, calibrated).
CHO2000_SHARES: dict[str, tuple[float, ...]] = {
    "all": (0.23, 0.15, 0.16, 0.16, 0.30),
    "com": (0.42, 0.17, 0.13, 0.12, 0.16),
    "netorg": (0.08, 0.20, 0.22, 0.20, 0.30),
    "edu": (0.03, 0.13, 0.16, 0.17, 0.51),
    "gov": (0.03, 0.10, 0.15, 0.21, 0.51),
}
#: Share of pages per domain in ``cho2000-domains`` (132, 30, 78 and 30 of the 270 sites).
CHO2000_DOMAINS: dict[str, float] = {"com": 132 / 270, "netorg": 30 / 270, "edu": 78 / 270, "gov": 30 / 270}

WORKLOADS = (
    "cho2000",
    "cho2000-com",
    "cho2000-netorg",
    "cho2000-edu",
    "cho2000-gov",
    "cho2000-domains",
    "gamma",
    "weibull",
    "nonpoisson",
    "replay:PATH",
)
VALUES = ("equal", "lognormal", "pareto", "tiers")
COSTS = ("equal", "size")
#: Value tiers (the scheduler's default COSTSCHED_VALUE_TIERS) and their shares of pages.
TIERS: tuple[tuple[float, float], ...] = ((0.25, 0.4), (1.0, 0.4), (4.0, 0.15), (16.0, 0.05))
PAGES_PER_HOST = 20
_BURST_SIZE = 4.0
_BURST_SPAN = 1.0 / 24.0
_SHIFT_FACTOR = 10.0


@dataclass
class Page:
    """One simulated page.

    *rate* is the mean change rate (per day) a policy with known rates uses;
    for a page whose rate shifts it is the rate before *shift_time*, and
    *shifted_rate* the one after.  *changes* holds every change time.  A page of
    the initial collection has a copy fetched at *last_visit* (<= 0); a new
    page appears at *birth* and has none.  *revalidation_cost* is what a 304
    costs (None: the host ignores validators); *lies* marks a host whose
    validators answer 304 although the page changed; *last_modified*, a host
    whose full answers carry a Last-Modified: the latest change's time, or for
    a host that *lies*, the time of the answer (a date stamped on every render).
    """

    key: str
    value: float
    cost: float
    rate: float
    changes: array[float]
    revalidation_cost: float | None = None
    birth: float = -math.inf
    last_visit: float | None = 0.0
    host: str = ""
    group: str = "default"
    kind: str = "poisson"
    lies: bool = False
    last_modified: bool = False
    shift_time: float = math.inf
    shifted_rate: float = 0.0

    def rate_at(self, time: float) -> float:
        """The mean change rate in force at *time*."""
        return self.shifted_rate if time >= self.shift_time else self.rate

    def modified_at(self, time: float) -> float | None:
        """The Last-Modified a full answer at *time* carries: the latest change (None: no date, or no change yet)."""
        if not self.last_modified:
            return None
        if self.lies:
            return time
        changes = bisect_right(self.changes, time)
        return self.changes[changes - 1] if changes else None


@dataclass
class Workload:
    """Pages plus what produced them; *start* is when change times begin, *horizon* when they end."""

    name: str
    pages: list[Page]
    start: float
    horizon: float
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class WorkloadOptions:
    """Everything :func:`make_workload` needs besides the workload's name."""

    pages: int = 2000
    cycles: int = 60
    seed: int = 1
    cv: float = 1.0
    shape: float = 0.7
    values: str = "equal"
    costs: str = "equal"
    validators: float | None = None
    lying_hosts: float = 0.0
    new_pages: float = 0.0
    last_modified: float = 0.0
    """Share of hosts whose full answers carry Last-Modified."""
    revisit_period: int = 5
    """Initial copies are 1..revisit_period cycles old, as if a uniform crawler had run before."""


def poisson_times(rng: random.Random, rate: float, start: float, end: float) -> list[float]:
    """Sorted event times of a Poisson process with *rate* on (start, end].

    >>> poisson_times(random.Random(1), 0.0, 0.0, 10.0)
    []
    >>> len(poisson_times(random.Random(1), 50.0, 0.0, 10.0))
    499
    """
    times: list[float] = []
    if rate <= 0.0:
        return times
    t = start
    expovariate = rng.expovariate
    while True:
        t += expovariate(rate)
        if t > end:
            return times
        times.append(t)


def _bursty_times(rng: random.Random, rate: float, start: float, end: float) -> list[float]:
    """Bursts at rate / 4, each of 1 + Geometric changes (4 on average) within an hour: mean rate *rate*."""
    times: list[float] = []
    p = 1.0 / _BURST_SIZE
    for burst in poisson_times(rng, rate / _BURST_SIZE, start, end):
        extra = int(math.log(1.0 - rng.random()) / math.log(1.0 - p)) if p < 1.0 else 0
        times.append(burst)
        times.extend(t for t in (burst + rng.random() * _BURST_SPAN for _ in range(extra)) if t <= end)
    times.sort()
    return times


def _weekly_times(rng: random.Random, rate: float, start: float, end: float) -> list[float]:
    """Changes only on weekdays 9:00-17:00 (day 0 is a Monday), at mean rate *rate* per day."""
    times: list[float] = []
    intensity = rate * 7.0 / 5.0 * 3.0  # a week's changes squeezed into 5 × 8 hours
    day = math.floor(start)
    while day < end:
        if day % 7 < 5:
            lo, hi = max(day + 9.0 / 24.0, start), min(day + 17.0 / 24.0, end)
            if hi > lo:
                times.extend(poisson_times(rng, intensity, lo, hi))
        day += 1
    return times


def _rate_sampler(name: str, options: WorkloadOptions, rng: random.Random) -> tuple[Any, dict[str, Any]]:
    """A function drawing (rate, group) for one page, and the parameters to report."""

    def from_buckets(shares: tuple[float, ...]) -> float:
        high, low = rng.choices(CHO2000_BUCKETS, weights=shares)[0]
        return math.exp(rng.uniform(math.log(low), math.log(high)))

    if name in ("cho2000", "nonpoisson"):
        return (lambda: (from_buckets(CHO2000_SHARES["all"]), "default")), {}
    if name.startswith("cho2000-") and name[8:] in CHO2000_SHARES:
        domain = name[8:]
        return (lambda: (from_buckets(CHO2000_SHARES[domain]), domain)), {"domain": domain}
    if name == "cho2000-domains":
        domains, shares = list(CHO2000_DOMAINS), list(CHO2000_DOMAINS.values())

        def draw() -> tuple[float, str]:
            domain = rng.choices(domains, weights=shares)[0]
            return from_buckets(CHO2000_SHARES[domain]), domain

        return draw, {"domains": CHO2000_DOMAINS}
    if name == "gamma":
        cv = options.cv
        if not 0.0 <= cv < math.inf:
            raise ValueError(f"--cv ({cv!r}) must be a finite number >= 0")
        if cv == 0.0:
            return (lambda: (1.0, "default")), {"cv": cv}
        shape = 1.0 / (cv * cv)
        return (lambda: (rng.gammavariate(shape, 1.0 / shape), "default")), {"cv": cv}
    if name == "weibull":
        k = options.shape
        if not 0.0 < k < math.inf:
            raise ValueError(f"--shape ({k!r}) must be a positive number")
        return (lambda: (1.0 / rng.weibullvariate(7.0, k), "default")), {"shape": k, "scale_days": 7.0}
    known = ", ".join(WORKLOADS)
    raise ValueError(f"unknown workload {name!r}; use one of {known}")


def _values(kind: str, n: int, rng: random.Random) -> list[float]:
    if kind == "equal":
        return [1.0] * n
    if kind == "lognormal":  # sigma 1, mean 1
        return [math.exp(rng.gauss(-0.5, 1.0)) for _ in range(n)]
    if kind == "pareto":  # alpha 1.5, mean 1
        return [rng.paretovariate(1.5) / 3.0 for _ in range(n)]
    if kind == "tiers":
        levels, shares = zip(*TIERS, strict=True)
        return rng.choices(levels, weights=shares, k=n)
    raise ValueError(f"--values ({kind!r}) must be one of {', '.join(VALUES)}")


def _costs(kind: str, rates: list[float], rng: random.Random) -> list[float]:
    if kind == "equal":
        return [1.0] * len(rates)
    if kind == "size":  # log(cost) = 0.3 × standardised log(rate) + noise; mean 1
        logs = [math.log(max(r, 1e-6)) for r in rates]
        mean = sum(logs) / len(logs)
        sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / len(logs)) or 1.0
        raw = [math.exp(0.3 * (x - mean) / sd + rng.gauss(0.0, 0.5)) for x in logs]
        scale = len(raw) / sum(raw)
        return [c * scale for c in raw]
    raise ValueError(f"--costs ({kind!r}) must be one of {', '.join(COSTS)}")


def make_workload(name: str, options: WorkloadOptions) -> Workload:
    """Build the workload *name* (see the module docstring) with *options*; seeded and reproducible.

    >>> w = make_workload("gamma", WorkloadOptions(pages=50, cycles=10, seed=3))
    >>> len(w.pages), w.pages[0].key, w.pages[0].last_visit <= -1.0
    (50, 'p000000', True)
    """
    if name.startswith("replay:"):
        from .replay import replay_workload

        return replay_workload(name[len("replay:"):], options)
    if options.pages < 1 or options.cycles < 1:
        raise ValueError("--pages and --cycles must be at least 1")
    rng = random.Random(f"{name}:{options.seed}")
    draw, params = _rate_sampler(name, options, rng)
    nonpoisson = name == "nonpoisson"
    validators = options.validators if options.validators is not None or not nonpoisson else 0.05
    lying = options.lying_hosts if options.lying_hosts or not nonpoisson else 0.1
    if validators is not None and not 0.0 < validators <= 1.0:
        raise ValueError(f"--validators ({validators!r}) must be in (0, 1]: the cost of a 304 over a full fetch")
    if not 0.0 <= lying <= 1.0 or not 0.0 <= options.new_pages < math.inf:
        raise ValueError("--lying-hosts must be in [0, 1] and --new-pages >= 0")
    if not 0.0 <= options.last_modified <= 1.0:
        raise ValueError(f"--last-modified ({options.last_modified!r}) must be in [0, 1]")
    period = max(1, options.revisit_period)
    start = -float(period)
    horizon = float(options.cycles)
    # New pages: a Poisson stream of options.new_pages × pages per week over the run.
    births = [-math.inf] * options.pages + poisson_times(rng, options.new_pages * options.pages / 7.0, 0.0, horizon)
    n = len(births)
    drawn = [draw() for _ in range(n)]
    rates = [r for r, _ in drawn]
    values = _values(options.values, n, rng)
    costs = _costs(options.costs, rates, rng)
    hosts = max(1, options.pages // PAGES_PER_HOST)
    liars = set(rng.sample(range(hosts), round(lying * hosts))) if validators is not None else set()
    # Its own stream, so that the pages and changes stay those of the same seed without it.
    dated = set(random.Random(f"{name}:{options.seed}:last-modified").sample(
        range(hosts), round(options.last_modified * hosts)))
    kinds = ("poisson", "bursty", "weekly", "shift")
    pages = []
    for i in range(n):
        rate, group = drawn[i]
        birth = births[i]
        host = rng.randrange(hosts)
        kind = rng.choices(kinds, weights=(0.4, 0.2, 0.2, 0.2))[0] if nonpoisson else "poisson"
        begin = start if birth == -math.inf else birth
        shift_time, shifted = math.inf, rate
        if kind == "bursty":
            times = _bursty_times(rng, rate, begin, horizon)
        elif kind == "weekly":
            times = _weekly_times(rng, rate, begin, horizon)
        elif kind == "shift":
            shift_time = float(options.cycles // 2)
            shifted = rate * (_SHIFT_FACTOR if rng.random() < 0.5 else 1.0 / _SHIFT_FACTOR)
            times = poisson_times(rng, rate, begin, max(begin, shift_time))
            times += poisson_times(rng, shifted, max(begin, shift_time), horizon)
        else:
            times = poisson_times(rng, rate, begin, horizon)
        pages.append(Page(
            key=f"p{i:06d}",
            value=values[i],
            cost=costs[i],
            rate=rate,
            changes=array("d", times),
            revalidation_cost=None if validators is None else validators * costs[i],
            birth=birth,
            last_visit=-float(rng.randint(1, period)) if birth == -math.inf else None,
            host=f"h{host:05d}",
            group=group,
            kind=kind,
            lies=host in liars,
            last_modified=host in dated,
            shift_time=shift_time,
            shifted_rate=shifted,
        ))
    params.update(values=options.values, costs=options.costs, validators=validators, lying_hosts=lying,
                  last_modified=options.last_modified,
                  new_pages_per_week=options.new_pages, new_pages=n - options.pages)
    return Workload(name, pages, start, horizon, params)
