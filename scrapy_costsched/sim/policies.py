"""Revisit policies: this project's scheduler, the peers' rules and the oracle.

Every policy plans a cycle the same way: it orders the pages it knows and
visits the longest prefix of that order whose expected cost fits the cycle's
budget (:func:`~scrapy_costsched.model.scoring.affordable_prefix`), so all spend
the same budget.  They differ in the order:

==========================  ====================================================
``costsched``               the scheduler's own plan (:mod:`~.model.planning`):
                            its index value·U/marginal cost
``oracle``                  known rates; the Lagrangian optimum on the grid of
                            cycles, realised by visiting the pages whose credit
                            (frequency × time since the last visit) is largest
``uniform``                 least recently visited first (Cho & Garcia-Molina)
``proportional``            credits with frequencies proportional to the rate
``nutch``, ``nutch-nosync`` Apache Nutch AdaptiveFetchSchedule: on change the
                            interval × 0.8, else × 1.4, clamped to [60 s, 365 d];
                            sync_delta (rate 0.3) resynchronises with the last
                            change; most overdue first
``stormcrawler``            StormCrawler AdaptiveScheduler: on change the
                            interval moves halfway to the 1 h minimum, else
                            × 1.5 up to 2 weeks; ``stormcrawler-ccnews`` is Common
                            Crawl News' 0.2 / 0.5 within [90 min, 90 d]
``seed-greedy``             the seed article's value × freshness gain / cost, the
                            gain computed over the revisit period the budget
                            allows; ``seed-greedy-naive`` over one cycle
==========================  ====================================================

Initial fetch intervals of the adaptive peers are the revisit period the budget
allows, and their next fetches are staggered like the initial copies.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scrapy_costsched.model import ChangeStats, RateEstimate, RatePrior, estimate_rate
from scrapy_costsched.model.freshness import seed_priority
from scrapy_costsched.model.grid import frequency_at, grid_allocation
from scrapy_costsched.model.learning import PRIOR_SAMPLE, observe, refit_prior
from scrapy_costsched.model.planning import make_plan
from scrapy_costsched.model.scoring import Candidate, affordable_prefix
from scrapy_costsched.model.trust import DateTiming, SignalTrust, audit_date

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .metrics import Outcome
    from .workloads import Page

__all__ = [
    "POLICIES",
    "Context",
    "KnownRates",
    "LearnedRates",
    "Policy",
    "make_policy",
    "policy_class",
    "proportional_frequencies",
]

POLICIES = (
    "costsched",
    "oracle",
    "uniform",
    "proportional",
    "nutch",
    "nutch-nosync",
    "stormcrawler",
    "stormcrawler-ccnews",
    "seed-greedy",
    "seed-greedy-naive",
)
_SECOND = 1.0 / 86400.0
_HOUR = 1.0 / 24.0
_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0
_Z90 = 1.6448536269514722  # the 95% quantile of the standard normal


class KnownRates:
    """The true mean rate in force (the oracle's knowledge)."""

    def __init__(self, pages: Sequence[Page]) -> None:
        self.pages = pages

    def rate(self, i: int, time: float) -> float:
        return self.pages[i].rate_at(time)

    def observe(self, i: int, time: float, interval: float | None, changed: bool, modified: float | None) -> None:
        pass

    def end_cycle(self, cycle: int, alive: Sequence[int]) -> None:
        pass


class LearnedRates:
    """Rates learned from the policy's own visits, exactly as the Scrapy tracker learns them.

    Each visit after the first adds (interval, changed) to the page's history
    with a 180-day half-life (:func:`~scrapy_costsched.model.learning.observe`;
    a change dated by Last-Modified as such, once the host's dates have proven trustworthy),
    and the page's rate becomes the posterior under its group's prior; pages
    without history use the prior's median.  After each cycle (a crawl run) the
    prior of every group observed is refitted on a sample of its pages. (The
    tracker gives a group too small for a prior of its own its host's; a
    workload's groups are domains of thousands of pages, so that never applies.)
    """

    def __init__(self, pages: Sequence[Page], half_life: float = 180.0) -> None:
        self.pages = pages
        self.half_life = half_life
        self.stats: list[ChangeStats | None] = [None] * len(pages)
        self.estimates: list[RateEstimate | None] = [None] * len(pages)
        self.priors: dict[str, RatePrior] = {}
        #: The Last-Modified each page's copy came with (the initial copies' too, as their fetch saw it).
        self.dates = [None if p.last_visit is None else p.modified_at(p.last_visit) for p in pages]
        self.trust: dict[str, SignalTrust] = {}
        self.timing: dict[str, DateTiming] = {}
        self._observed_groups: set[str] = set()

    def prior_of(self, group: str) -> RatePrior:
        return self.priors.get(group) or RatePrior()

    def rate(self, i: int, time: float) -> float:
        estimate = self.estimates[i]
        return math.exp(self.prior_of(self.pages[i].group).mean_log) if estimate is None else estimate.rate

    def bounds(self, i: int) -> tuple[float, float]:
        """The 90% posterior interval of page *i*'s rate (its prior's, without history)."""
        estimate = self.estimates[i]
        if estimate is None:
            prior = self.prior_of(self.pages[i].group)
            spread = _Z90 * prior.sd_log
            return math.exp(prior.mean_log - spread), math.exp(prior.mean_log + spread)
        return estimate.low, estimate.high

    def observe(self, i: int, time: float, interval: float | None, changed: bool, modified: float | None) -> None:
        """A visit at *time*, *interval* after the previous one (None: the first), and its Last-Modified.

        The date is used as the tracker uses it: only once the host's dates have
        agreed with what its pages' visits found (:func:`~scrapy_costsched.model.trust.audit_date`),
        and to the day where they bunch at one time of the day
        (:class:`~scrapy_costsched.model.trust.DateTiming`).
        """
        previous_date = self.dates[i]
        host = self.pages[i].host
        timing = self.timing.setdefault(host, DateTiming())
        if modified is not None:  # a 304, or a host without dates, keeps the date last seen
            self.dates[i] = modified
            if modified != previous_date:
                timing.saw(modified % 1.0)
        if interval is None:
            return
        modified_ago = None
        if modified is not None:
            trust = self.trust.setdefault(host, SignalTrust())
            modified_ago = audit_date(trust, previous_date, modified, time - modified, changed, interval)[1]
        stats = self.stats[i]
        if stats is None:
            stats = self.stats[i] = ChangeStats()
        group = self.pages[i].group
        observe(stats, interval, changed, self.half_life, modified_ago, resolution=timing.resolution)
        self.estimates[i] = estimate_rate(stats, self.prior_of(group))
        self._observed_groups.add(group)

    def end_cycle(self, cycle: int, alive: Sequence[int]) -> None:
        if not self._observed_groups:
            return
        members: dict[str, list[int]] = {group: [] for group in self._observed_groups}
        for i in alive:
            group = self.pages[i].group
            if group in members:
                members[group].append(i)
        rng = random.Random(cycle)
        for group, indices in members.items():
            sample = indices if len(indices) <= PRIOR_SAMPLE else rng.sample(indices, PRIOR_SAMPLE)
            with_history = [(i, s) for i in sample if (s := self.stats[i]) is not None and s.visits > 0]
            prior = refit_prior([s for _, s in with_history], self.prior_of(group))
            if prior is None:
                continue
            self.priors[group] = prior
            for i, s in with_history:
                self.estimates[i] = estimate_rate(s, prior)
        self._observed_groups.clear()


@dataclass
class Context:
    """What a policy may know: the pages' keys, values and costs, its own visits, and rates."""

    pages: Sequence[Page]
    budget: float
    """Cost units per cycle."""
    cycle: float
    objective: str
    rates: KnownRates | LearnedRates
    true_rates: KnownRates
    revisit_period: float
    """Days between visits to every page that the budget allows (the uniform period)."""


class Policy:
    """Plans each cycle's visits; the engine reports what every visit found.

    *uses_rates*: whether the policy plans with change rates (those that do learn them with
    ``rates="learned"``; the others are spared the cost of estimating them).
    """

    name = "policy"
    uses_rates = True

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        pages = ctx.pages
        self.keys = [p.key for p in pages]
        self.alive: list[int] = []
        self.last_visit: list[float | None] = [p.last_visit for p in pages]
        self.index = {key: i for i, key in enumerate(self.keys)}
        self.mean_cost = [p.cost for p in pages]
        self._cost_count = [0] * len(pages)

    def add(self, indices: Sequence[int], time: float) -> None:
        """Pages that became known (the initial collection at time 0, then new pages)."""
        self.alive.extend(indices)

    def plan(self, time: float, budget: float) -> list[int]:
        raise NotImplementedError

    def observe(self, i: int, time: float, outcome: Outcome) -> None:
        """A visit to page *i* at *time* and what it found."""
        previous = self.last_visit[i]
        interval = None if previous is None or outcome.first else time - previous
        self.ctx.rates.observe(i, time, interval, outcome.changed, outcome.modified)
        self.last_visit[i] = time
        n = self._cost_count[i] = self._cost_count[i] + 1
        self.mean_cost[i] += (outcome.cost - self.mean_cost[i]) / n

    def end_cycle(self, cycle: int, time: float) -> None:
        self.ctx.rates.end_cycle(cycle, self.alive)

    # -- helpers ------------------------------------------------------------

    def elapsed(self, i: int, time: float) -> float:
        last = self.last_visit[i]
        return math.inf if last is None else time - last

    def candidate(self, i: int, time: float, rate: float, priced: bool) -> Candidate:
        """Page *i* as a candidate; *priced*: by its expected cost under *rate*, else by its mean cost so far."""
        page = self.ctx.pages[i]
        if priced:
            return Candidate(page.key, page.value, rate, self.elapsed(i, time), page.cost, page.revalidation_cost)
        return Candidate(page.key, page.value, rate, self.elapsed(i, time), self.mean_cost[i])

    def take(self, ordered: Sequence[Candidate], budget: float) -> list[int]:
        """The affordable prefix of *ordered* as page indices."""
        index = self.index
        return [index[c.key] for c in affordable_prefix(((0.0, c) for c in ordered), budget)]

    def weight(self, i: int, rate: float) -> float:
        value = self.ctx.pages[i].value
        return value * rate if self.ctx.objective == "changes" else value


class CostSched(Policy):
    """This project's scheduler: its plan (:func:`~scrapy_costsched.model.planning.make_plan`), with no discovery
    reserve (the simulated pages are all known), robots.txt or host limits."""

    name = "costsched"

    def plan(self, time: float, budget: float) -> list[int]:
        rates = self.ctx.rates
        if isinstance(rates, LearnedRates):  # as the tracker: the posterior's 90% interval goes with the estimate
            candidates = [self.candidate(i, time, rates.rate(i, time), priced=True)._replace(
                rate_low=low, rate_high=high) for i in self.alive for low, high in (rates.bounds(i),)]
        else:
            candidates = [self.candidate(i, time, rates.rate(i, time), priced=True) for i in self.alive]
        plan = make_plan(candidates, budget, reserve_share=0.0, host_of=_no_host, capacity_of=_unlimited,
                         robots_cost=_free, objective=self.ctx.objective, cycle=self.ctx.cycle)
        return [self.index[c.key] for c in plan.planned]


def _no_host(key: str) -> None:
    return None


def _unlimited(host: str) -> int:
    return 2**62


def _free(hosts: set[str | None]) -> float:
    return 0.0


class Uniform(Policy):
    """Least recently visited first: every page at the same frequency."""

    name = "uniform"
    uses_rates = False

    def plan(self, time: float, budget: float) -> list[int]:
        last, keys = self.last_visit, self.keys
        order = sorted(self.alive, key=lambda i: (-math.inf if last[i] is None else last[i], keys[i]))
        return self.take([self.candidate(i, time, 0.0, priced=False) for i in order], budget)


class Credits(Policy):
    """Target frequencies realised on the grid: credit grows by f × cycle, a visit spends 1; largest credit first."""

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.frequency = [0.0] * len(ctx.pages)
        self.credit = [0.0] * len(ctx.pages)

    def targets(self, time: float) -> None:
        raise NotImplementedError

    def add(self, indices: Sequence[int], time: float) -> None:
        super().add(indices, time)
        self.targets(time)
        for i in indices:
            last = self.last_visit[i]
            self.credit[i] = 1.0 if last is None else self.frequency[i] * (time - last)

    def plan(self, time: float, budget: float) -> list[int]:
        credit, cycle = self.credit, self.ctx.cycle
        for i in self.alive:
            credit[i] += self.frequency[i] * cycle
        keys, rates = self.keys, self.ctx.rates
        order = sorted(self.alive, key=lambda i: (-credit[i], keys[i]))
        return self.take([self.candidate(i, time, rates.rate(i, time), priced=True) for i in order], budget)

    def observe(self, i: int, time: float, outcome: Outcome) -> None:
        super().observe(i, time, outcome)
        self.credit[i] -= 1.0


class Proportional(Credits):
    """Visit frequencies proportional to the change rates (at most one visit per cycle), spending the budget."""

    name = "proportional"

    def plan(self, time: float, budget: float) -> list[int]:
        self.targets(time)
        return super().plan(time, budget)

    def targets(self, time: float) -> None:
        rates = self.ctx.rates
        alive = self.alive
        frequencies = proportional_frequencies(
            [rates.rate(i, time) for i in alive], [self.ctx.pages[i].cost for i in alive],
            self.ctx.budget / self.ctx.cycle, 1.0 / self.ctx.cycle)
        for i, f in zip(alive, frequencies, strict=True):
            self.frequency[i] = f


def proportional_frequencies(rates: Sequence[float], costs: Sequence[float], budget: float, cap: float) -> list[float]:
    """f = min(cap, s·rate) with s such that sum(cost · f) == budget (water-filling).

    >>> proportional_frequencies([1.0, 2.0, 8.0], [1.0, 1.0, 1.0], 2.0, 1.0)
    [0.3333333333333333, 0.6666666666666666, 1.0]
    """
    order = sorted(range(len(rates)), key=lambda i: -rates[i])
    capped = 0.0
    rest = math.fsum(c * r for c, r in zip(costs, rates, strict=True))
    scale = math.inf
    for i in order:
        if rest <= 0.0:
            break
        scale = (budget - capped) / rest
        if scale * rates[i] <= cap:
            break
        capped += costs[i] * cap
        rest -= costs[i] * rates[i]
        scale = math.inf
    return [min(cap, scale * r) if r > 0.0 else 0.0 for r in rates]


class Oracle(Credits):
    """Known rates: the optimum on the grid of cycles (:func:`grid_allocation`), realised with credits.

    Re-solved when a rate shifts and every 7 cycles while new pages appear
    (between two solutions a new page gets its frequency at the last multiplier).
    """

    name = "oracle"
    uses_rates = False  # it knows them: the engine gives it the true ones in every mode

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.multiplier: float | None = None
        self._solved_at = -math.inf
        self._added_since = False
        self._shifts = sorted({p.shift_time for p in ctx.pages if p.shift_time < math.inf})

    def targets(self, time: float) -> None:
        if self.multiplier is None:
            self.solve(time)
            return
        pages, truth, ctx = self.ctx.pages, self.ctx.true_rates, self.ctx
        for i in self.alive:  # pages new since the last solution: their frequency at its multiplier
            if self.last_visit[i] is None and self.frequency[i] == 0.0:
                p = pages[i]
                self.frequency[i] = frequency_at(self.multiplier, truth.rate(i, time), p.value, p.cost,
                                                 p.revalidation_cost, ctx.cycle, ctx.objective)
                self._added_since = True

    def solve(self, time: float) -> None:
        pages, truth, ctx = self.ctx.pages, self.ctx.true_rates, self.ctx
        alive = self.alive
        allocation = grid_allocation(
            [truth.rate(i, time) for i in alive],
            ctx.budget / ctx.cycle,
            weights=[pages[i].value for i in alive],
            costs=[pages[i].cost for i in alive],
            revalidation_costs=[pages[i].revalidation_cost for i in alive],
            cycle=ctx.cycle,
            objective=ctx.objective,
        )
        for i, f in zip(alive, allocation.frequencies, strict=True):
            self.frequency[i] = f
        self.multiplier = allocation.multiplier
        self._solved_at = time
        self._added_since = False

    def add(self, indices: Sequence[int], time: float) -> None:
        super().add(indices, time)
        if time > 0.0:
            return
        # Initial phases spread by the golden ratio within each frequency, so that the visits due in
        # a cycle add up to the budget as evenly as the grid allows (not by the copies' random ages).
        order = sorted(indices, key=lambda i: (self.frequency[i], self.keys[i]))
        for j, i in enumerate(order):
            self.credit[i] = (j * _GOLDEN) % 1.0

    def plan(self, time: float, budget: float) -> list[int]:
        shifted = any(time - self.ctx.cycle < shift <= time for shift in self._shifts)
        if shifted or (self._added_since and time - self._solved_at >= 7.0):
            self.solve(time)
        return super().plan(time, budget)


class Adaptive(Policy):
    """Shared state of the adaptive-interval peers: an interval and a next fetch time per page."""

    uses_rates = False

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        n = len(ctx.pages)
        self.interval = [0.0] * n
        self.next_fetch = [0.0] * n
        self.modified = [0.0] * n

    def initial_interval(self) -> float:
        return self.ctx.revisit_period

    def add(self, indices: Sequence[int], time: float) -> None:
        super().add(indices, time)
        start = self.initial_interval()
        for i in indices:
            last = self.last_visit[i]
            self.interval[i] = start
            self.next_fetch[i] = time if last is None else last + start
            self.modified[i] = time if last is None else last

    def plan(self, time: float, budget: float) -> list[int]:
        due, keys = self.next_fetch, self.keys
        order = sorted(self.alive, key=lambda i: (due[i], keys[i]))
        return self.take([self.candidate(i, time, 0.0, priced=False) for i in order], budget)


class Nutch(Adaptive):
    """Apache Nutch 1.x AdaptiveFetchSchedule (inc_rate 0.4, dec_rate 0.2, sync_delta_rate 0.3).

    The modified time that sync_delta pulls toward is Last-Modified where the host sends it, else the fetch time.
    """

    name = "nutch"
    inc, dec, sync_rate = 0.4, 0.2, 0.3
    minimum, maximum = 60.0 * _SECOND, 365.0
    sync_delta = True

    def observe(self, i: int, time: float, outcome: Outcome) -> None:
        super().observe(i, time, outcome)
        interval = self.interval[i]
        reference = time
        if outcome.first:
            pass  # STATUS_UNKNOWN: keep the interval
        elif outcome.changed:
            interval *= 1.0 - self.dec
            self.modified[i] = time if outcome.modified is None else outcome.modified
        else:
            interval *= 1.0 + self.inc
        if self.sync_delta:
            delta = time - self.modified[i]
            interval = max(interval, delta)
            reference = time - delta * self.sync_rate
        self.interval[i] = min(max(interval, self.minimum), self.maximum)
        self.next_fetch[i] = reference + self.interval[i]


class NutchNoSync(Nutch):
    name = "nutch-nosync"
    sync_delta = False


class StormCrawler(Adaptive):
    """StormCrawler AdaptiveScheduler: change → halfway to the minimum; unchanged or 304 → × 1.5."""

    name = "stormcrawler"
    inc, dec = 0.5, 0.5
    minimum, maximum = _HOUR, 14.0

    def initial_interval(self) -> float:
        return min(self.ctx.revisit_period, self.maximum)

    def observe(self, i: int, time: float, outcome: Outcome) -> None:
        super().observe(i, time, outcome)
        interval = self.interval[i]
        if outcome.first:
            pass
        elif outcome.changed:
            interval = (1.0 - self.dec) * interval + self.dec * self.minimum
        else:
            interval = min(interval * (1.0 + self.inc), self.maximum)
        self.interval[i] = interval
        self.next_fetch[i] = time + interval


class StormCrawlerCCNews(StormCrawler):
    """Common Crawl News' settings: decrement 0.2, increment 0.5, within [90 min, 90 days]."""

    name = "stormcrawler-ccnews"
    inc, dec = 0.5, 0.2
    minimum, maximum = 1.5 * _HOUR, 90.0


class SeedGreedy(Policy):
    """The seed article: value × P(stale now) × fresh time over *interval* / cost, best first."""

    name = "seed-greedy"

    def interval(self) -> float:
        return self.ctx.revisit_period

    def plan(self, time: float, budget: float) -> list[int]:
        rates, interval = self.ctx.rates, self.interval()
        ordered = []
        for i in self.alive:
            rate = rates.rate(i, time)
            candidate = self.candidate(i, time, rate, priced=True)
            priority = seed_priority(self.weight(i, rate), rate, candidate.elapsed, candidate.expected_cost, interval)
            if priority > 0.0:
                ordered.append((priority, candidate))
        ordered.sort(key=lambda sc: (-sc[0], sc[1].key))
        return self.take([c for _, c in ordered], budget)


class SeedGreedyNaive(SeedGreedy):
    name = "seed-greedy-naive"

    def interval(self) -> float:
        return self.ctx.cycle


_CLASSES: dict[str, type[Policy]] = {
    cls.name: cls
    for cls in (CostSched, Oracle, Uniform, Proportional, Nutch, NutchNoSync, StormCrawler, StormCrawlerCCNews,
                SeedGreedy, SeedGreedyNaive)
}


def policy_class(name: str) -> type[Policy]:
    """The class of the policy called *name* (one of :data:`POLICIES`)."""
    try:
        return _CLASSES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; use one of {', '.join(POLICIES)} or 'all'") from None


def make_policy(name: str, ctx: Context) -> Policy:
    """The policy called *name* (one of :data:`POLICIES`)."""
    return policy_class(name)(ctx)
