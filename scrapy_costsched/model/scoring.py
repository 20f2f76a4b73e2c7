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

A hub (index, category or listing page) is also worth the new pages it reveals
(:mod:`~.discovery`). A candidate with :attr:`Candidate.hub` set is priced as the
bundle of the visit and the pages it is expected to reveal, each new page valued
as this ranking values a never-visited page, so hubs, the pages they reveal and
refresh visits are ranked in one unit: see :func:`score`.
"""

from __future__ import annotations

import gc
import math
from itertools import compress, groupby
from operator import itemgetter
from typing import TYPE_CHECKING, NamedTuple

from scrapy_costsched.model.discovery import Discovery, expected_new
from scrapy_costsched.model.freshness import _excess, p_changed, utility_fraction

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

OBJECTIVES = ("freshness", "changes")
_SERIES_BELOW = 0.5  # as in freshness.utility_fraction
# Three-point rule in log(rate) with nodes at the 90% interval's ends (±1.6449 sd for a log-normal
# posterior) and the estimate, weighted to integrate log(rate)**k exactly for k <= 3 (Gauss–Hermite
# puts its nodes at ±sqrt(3) sd instead; this saves two powers per page).
SIDE_WEIGHT = 0.5 / 1.6448536269514722**2
CENTRE_WEIGHT = 1.0 - 2.0 * SIDE_WEIGHT


class Candidate(NamedTuple):
    """A page that could be visited now.

    *elapsed* is the time since its last successful visit (``math.inf`` if it was
    never fetched: there is no copy, so a visit buys the whole ``1/λ``), in the
    same unit as 1/*rate*.  *cost* is what a visit that downloads the page
    costs; *revalidation_cost*, when set, what a visit that finds it unchanged
    costs (a 304 answer to a conditional request).  *rate_low* and *rate_high*,
    when set, are the 5% and 95% quantiles of the rate's posterior
    (:class:`~.estimators.RateEstimate`) and *rate* its geometric mean.
    *hub*, when set, says what new pages the visit is expected to reveal
    (a hub's :class:`~.discovery.Discovery`).

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
    hub: Discovery | None = None

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

    A hub (*hub* set) visited *t* = *elapsed* after its last visit is expected
    to reveal E = min(hub.rate·t, hub.cap) new pages
    (:func:`~.discovery.expected_new`), each worth what this ranking gives a
    visit to a never-visited page: U_new = 1/hub.page_rate under ``freshness``
    (all the fresh time a first copy buys), 1 under ``changes``. The visit and
    the pages it reveals are bought together, so the index is the bundle's
    value per cost (Lefortier et al., CIKM 2013, price a content source by the
    new pages it yields):

        [value·U(t) + E·hub.value·U_new] / (marginal cost + E·hub.cost)

    that is, the mean of the hub's own index and a new page's index
    hub.value·U_new / hub.cost weighted by what each part costs. With E = 0 it
    is the hub's own index, computed exactly as without *hub*; the longer the
    wait, the closer it comes to the new pages' index (reached, for a hub that
    shows no limit, at ``elapsed = math.inf``). A hub that changes 8 times a
    day is worth little by its own record, but at 2 new pages a day, each
    changing every 10 days, it is worth two thirds of a new page:

    >>> hub = Discovery(rate=2.0, value=1.0, cost=1.0, page_rate=0.1)
    >>> round(score(Candidate("h", 1.0, 8.0, 1.0, 1.0), cycle=1.0), 4)
    0.1249
    >>> round(score(Candidate("h", 1.0, 8.0, 1.0, 1.0, hub=hub), cycle=1.0), 4)  # (0.1249 + 2·10) / (1 + 2)
    6.7083

    A negative value, rate or elapsed time, a cost <= 0, a revalidation cost
    outside (0, cost], bounds out of order, a negative cycle, an unknown
    objective and a *hub* with a negative or infinite rate or value, a cost or
    page rate that is not positive and finite, or a cap <= 0, raise ValueError.
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}")
    if not 0.0 <= cycle < math.inf:
        raise ValueError("cycle must be finite and non-negative")
    _check(candidate)
    return _index(candidate, objective == "changes", cycle)


def _check(candidate: Candidate) -> None:
    _, value, rate, elapsed, cost, c304, low, high, hub = candidate
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
    if hub is not None and not _hub_ok(hub):
        _check_hub(hub)


def _hub_ok(hub: Discovery) -> bool:
    rate, value, cost, page_rate, cap = hub
    return 0.0 <= rate < math.inf and 0.0 <= value < math.inf and 0.0 < cost < math.inf and (
        0.0 < page_rate < math.inf and cap > 0.0
    )


def _check_hub(hub: Discovery) -> None:
    rate, value, cost, page_rate, _ = hub
    if not 0.0 <= rate < math.inf:
        raise ValueError("hub rate must be finite and non-negative")
    if not 0.0 <= value < math.inf:
        raise ValueError("hub value must be finite and non-negative")
    if not 0.0 < cost < math.inf:
        raise ValueError("hub cost must be positive and finite")
    if not 0.0 < page_rate < math.inf:
        raise ValueError("hub page_rate must be positive and finite")
    raise ValueError("hub cap must be positive")


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
    return SIDE_WEIGHT * (g_low / low + g_high / high) + CENTRE_WEIGHT * g / rate, SIDE_WEIGHT * (g_low + g_high) + CENTRE_WEIGHT * g


def _index(candidate: Candidate, changes: bool, cycle: float) -> float:
    """The index of a valid candidate."""
    _, value, rate, elapsed, cost, c304, _, _, hub = candidate
    if hub is not None and (found := expected_new(hub.rate, elapsed, hub.cap)):
        # The bundle of the visit and the pages it reveals (see score); found > 0 implies elapsed > 0.
        new_gain = hub.new_gain(changes)
        if found == math.inf:
            return new_gain / hub.cost
        gain, divisor = _own(candidate, changes, cycle) if rate else (0.0, cost if c304 is None else c304)
        return (gain + found * new_gain) / (divisor + found * hub.cost)
    if rate == 0.0 or elapsed == 0.0 or value == 0.0:
        return 0.0
    gain, divisor = _own(candidate, changes, cycle)
    return gain / divisor


def _own(candidate: Candidate, changes: bool, cycle: float) -> tuple[float, float]:
    """The page's own gain, value × E[U] (× rate under ``changes``), and its marginal expected cost,
    for a valid candidate with rate > 0 and elapsed > 0."""
    _, value, rate, elapsed, cost, c304, low, high, _ = candidate
    if low is None or high is None:
        expected_ru = 1.0 if elapsed == math.inf else _node(rate, elapsed, cycle, elapsed / cycle if cycle else 0.0)
        expected_u = expected_ru / rate
    elif elapsed == math.inf:
        expected_u, expected_ru = SIDE_WEIGHT * (1.0 / low + 1.0 / high) + CENTRE_WEIGHT / rate, 1.0
    else:
        expected_u, expected_ru = _posterior_utility(rate, low, high, elapsed, cycle)
    gain = value * (expected_ru if changes else expected_u)
    return gain, (cost if c304 is None else c304 + (cost - c304) * expected_ru)


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
    inf, node, side, centre = math.inf, _node, SIDE_WEIGHT, CENTRE_WEIGHT
    # A plan allocates a tuple per page and no reference cycles: the cyclic
    # collector would only rescan the growing list (half the run time at 1M pages).
    collecting = gc.isenabled()
    gc.disable()
    try:
        scored: list[tuple[float, Candidate]] = []
        append = scored.append
        for c in candidates:
            _, value, rate, elapsed, cost, c304, low, high, hub = c
            if not (0.0 <= value < inf and cost > 0.0 and 0.0 <= rate < inf and elapsed >= 0.0) or (
                (c304 is not None and not 0.0 < c304 <= cost)
                or (high is not None if low is None else high is None or not 0.0 < low <= high < inf)
                or (hub is not None and not _hub_ok(hub))
            ):
                _check(c)  # raises the error that names the problem
            if c304 is not None or hub is not None or elapsed == inf:
                index = _index(c, changes, cycle)
            elif rate == 0.0 or elapsed == 0.0 or value == 0.0:
                continue
            elif low is not None and high is not None:
                # _index of a learned rate without validators, with fewer calls: the same arithmetic
                per_cycle = elapsed / cycle if cycle else 0.0
                g_low = node(low, elapsed, cycle, per_cycle)
                g = node(rate, elapsed, cycle, per_cycle)
                g_high = node(high, elapsed, cycle, per_cycle)
                if changes:
                    index = value * (side * (g_low + g_high) + centre * g) / cost
                else:
                    index = value * (side * (g_low / low + g_high / high) + centre * g / rate) / cost
            elif cycle:
                index = _index(c, changes, cycle)
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


#: The head of a ranking and the candidates below it, not ranked (:func:`rank_head`).
Ranked = tuple[list[tuple[float, Candidate]], list[Candidate]]

#: :func:`rank_head` first ranks this many times the pages its *need* asks for, at least
#: :data:`HEAD_MIN_PAGES`, and four times more at each retry.
HEAD_FACTOR = 2.0
HEAD_MIN_PAGES = 1024
# Bounds are computed in floating point, as the indexes they bound: inflated by far more than their rounding.
BOUND_MARGIN = 1.0 + 1e-9


def rank_head(
    candidates: list[Candidate], need: float, objective: str = "freshness", cycle: float = 0.0
) -> Ranked:
    """The best part of :func:`rank`'s ranking, whose expected costs add up to more than *need* (or all of
    it), and the candidates below it, not ranked: ``head + rank(rest)`` is ``rank(candidates)``.

    A plan needs only the top of the ranking, so most pages need not be scored. A page without
    validators or hub, visited a finite time *t* ago, has an index no greater than its bound, from
    g(x) = 1 − (1 + x)·e^−x ≤ min(1, x²/2) (as g′(x) = x·e^−x ≤ x) and U_c(t) ≤ U(t + c)
    (:func:`~.freshness.cycle_utility`): each node's rate·U is at most min(1, (rate·(t + c))²/2).
    Only pages whose bound reaches the threshold are scored; those scored at or above it are the head.

    >>> pages = [Candidate(f"p{i}", 1.0, 0.1 * (i + 1), 2.0, 1.0) for i in range(50)]
    >>> head, rest = rank_head(pages, 2.0, cycle=1.0)
    >>> head + rank(rest, cycle=1.0) == rank(pages, cycle=1.0), len(head) >= 3
    (True, True)
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}")
    if not 0.0 <= cycle < math.inf:
        raise ValueError("cycle must be finite and non-negative")
    changes = objective == "changes"
    inf, side, centre = math.inf, SIDE_WEIGHT, CENTRE_WEIGHT
    collecting = gc.isenabled()
    gc.disable()
    try:
        bounded: list[Candidate] = []
        bounds: list[float] = []
        others: list[Candidate] = []  # scored in any case (and validated by rank)
        for c in candidates:
            _, value, rate, elapsed, cost, c304, low, high, hub = c
            if not (c304 is None and hub is None and 0.0 < value < inf and 0.0 < cost < inf and 0.0 < rate < inf
                    and 0.0 < elapsed < inf
                    and (low is None if high is None else low is not None and 0.0 < low <= high < inf)):
                others.append(c)
                continue
            reach = (elapsed + cycle) * (elapsed + cycle) * 0.5  # each node's bound: min(1, (r·(t + c))²/2) [/ r]
            if low is None or high is None:
                bound = min(1.0, rate * rate * reach) if changes else min(1.0 / rate, rate * reach)
            elif changes:
                bound = side * (min(1.0, low * low * reach) + min(1.0, high * high * reach)) + centre * min(
                    1.0, rate * rate * reach)
            else:
                bound = side * (min(1.0 / low, low * reach) + min(1.0 / high, high * reach)) + centre * min(
                    1.0 / rate, rate * reach)
            bounds.append(value * bound / cost * BOUND_MARGIN)
            bounded.append(c)
        if not bounded:
            return rank(others, objective, cycle), []
        by_bound = sorted(bounds, reverse=True)
        mean_cost = math.fsum(map(itemgetter(4), bounded)) / len(bounded)
        pages = max(HEAD_MIN_PAGES, math.ceil(HEAD_FACTOR * need / mean_cost)) if need < inf else len(bounded)
        scored: list[tuple[float, Candidate]] = []
        previous = None  # the last try's threshold: the pages bounded above it are scored already
        while True:
            if pages >= len(bounded):
                return rank(candidates, objective, cycle), []
            threshold = by_bound[pages - 1]
            if previous is None:
                scored = rank([*compress(bounded, map(threshold.__le__, bounds)), *others], objective, cycle)
            else:
                # Only the pages the lower threshold lets in are scored; merged as rank orders (index, then key).
                scored += rank(compress(bounded, [threshold <= b < previous for b in bounds]), objective, cycle)
                scored.sort(key=itemgetter(0), reverse=True)
                _order_ties_by_key(scored)
            previous = threshold
            end = _first_below(scored, threshold)
            if _expected_cost(scored[:end]) > need:
                break
            pages *= 4
        rest = list(compress(bounded, map(threshold.__gt__, bounds)))
        rest += map(itemgetter(1), scored[end:])
        del scored[end:]
        return scored, rest
    finally:
        if collecting:
            gc.enable()


def head_above(
    candidates: list[Candidate], need: float, floor: float, objective: str = "freshness", cycle: float = 0.0
) -> Ranked | None:
    """:func:`rank_head` of *candidates* where other candidates, not given, index below *floor*: the head
    holds only indexes at or above it, which rank above all of those; ``None`` if such a head does not cost
    more than *need* (more candidates must be given).
    """
    head, rest = rank_head(candidates, need, objective, cycle)
    end = _first_below(head, floor)
    if _expected_cost(head[:end]) <= need:
        return None
    return head[:end], [*map(itemgetter(1), head[end:]), *rest]


def _expected_cost(scored: list[tuple[float, Candidate]]) -> float:
    """What the visits of *scored* are expected to cost, as a plan counts them."""
    return math.fsum(c.cost if c.revalidation_cost is None else c.expected_cost for _, c in scored)


def _first_below(scored: list[tuple[float, Candidate]], threshold: float) -> int:
    """The position of the first index below *threshold* in *scored* (best first)."""
    low, high = 0, len(scored)
    while low < high:
        middle = (low + high) // 2
        if scored[middle][0] >= threshold:
            low = middle + 1
        else:
            high = middle
    return low


def _order_ties_by_key(scored: list[tuple[float, Candidate]]) -> None:
    """Sort each run of equal indexes by key (the sort by index alone is stable, not by key).

    The runs are found by :func:`itertools.groupby`, so a ranking with few ties costs one pass in C.
    """
    i = 0
    for _, run in groupby(map(itemgetter(0), scored)):
        j = i + sum(1 for _ in run)
        if j - i > 1:
            scored[i:j] = sorted(scored[i:j], key=_key_of)
        i = j


def _key_of(scored: tuple[float, Candidate]) -> str:
    return scored[1].key


def discovery_spend(candidate: Candidate) -> float:
    """What the new pages a planned visit reveals are expected to cost: E[new] × hub.cost (0 for a non-hub).

    :func:`affordable_prefix` charges the visit itself; the pages it reveals
    are fetched as discovery, whose allowance should grow by this much.
    Unbounded (``math.inf``) for a never-visited hub that shows no limit.

    >>> hub = Discovery(rate=2.0, value=1.0, cost=0.5, page_rate=0.1, cap=10.0)
    >>> discovery_spend(Candidate("h", 1.0, 8.0, 1.5, 1.0, hub=hub)), discovery_spend(Candidate("p", 1, 1, 1, 1))
    (1.5, 0.0)
    """
    hub = candidate.hub
    if hub is None:
        return 0.0
    return expected_new(hub.rate, candidate.elapsed, hub.cap) * hub.cost


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
