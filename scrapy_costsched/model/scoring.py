"""The ranking the scheduler plans with (and the simulator's ``costsched`` policy runs).

Olston & Pandey (WWW 2008) reach Cho & Garcia-Molina's Lagrangian optimum online
by visiting a page when ``w·U(t)/c`` clears a threshold, with
``U(t) = 1/λ − (t + 1/λ)·e^(−λt)`` and *t* the time since the last visit. Sorting by
that index and taking the top until the budget is spent is the same threshold
rule with the threshold set by the budget. Under the ``changes`` objective every
change counts, which is the freshness problem with weights ``w·λ`` (Cho &
Garcia-Molina 2003).

Two refinements, both measured with the simulator (``python -m scrapy_costsched.sim``):

- *cycle*: a planner that acts once per cycle chooses between "now" and "one
  cycle later", so the utility is the chord :func:`~.freshness.cycle_utility`
  rather than the derivative; ranking by it reproduces the optimum on the grid
  of cycles.
- validators: a page whose unchanged answer (304) costs only
  *revalidation_cost* is priced by its marginal expected cost
  ``c304 + (cost − c304)·λ·U(t)`` (:func:`~.freshness.visit_index`), and the
  budget is charged its expected cost ``c304 + (cost − c304)·P(changed)``.
"""

from __future__ import annotations

import gc
import math
from operator import itemgetter
from typing import TYPE_CHECKING, NamedTuple

from scrapy_costsched.model.freshness import _excess, p_changed, utility_fraction, visit_index

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

OBJECTIVES = ("freshness", "changes")
_SERIES_BELOW = 0.5  # as in freshness.utility_fraction


class Candidate(NamedTuple):
    """A page that could be visited now.

    *elapsed* is the time since its last successful visit (``math.inf`` if it was
    never fetched: there is no copy, so a visit buys the whole ``1/λ``), in the
    same unit as 1/*rate*.  *cost* is what a visit that downloads the page
    costs; *revalidation_cost*, when set, what a visit that finds it unchanged
    costs (a 304 answer to a conditional request).

    A named tuple rather than a dataclass: a plan builds one per known page,
    and a million of them build in well under a second.
    """

    key: str
    value: float
    rate: float
    elapsed: float
    cost: float
    revalidation_cost: float | None = None

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
    """
    weight = candidate.value * candidate.rate if objective == "changes" else candidate.value
    return visit_index(weight, candidate.rate, candidate.elapsed, candidate.cost, cycle=cycle,
                       revalidation_cost=candidate.revalidation_cost)


def _indexed(candidates: Iterable[Candidate], changes: bool, cycle: float) -> Iterator[tuple[float, Candidate]]:
    """(index, candidate) for every candidate with a positive index; the arithmetic of :func:`score`, inlined."""
    inf = math.inf
    exp, expm1 = math.exp, math.expm1
    for c in candidates:
        _, value, rate, elapsed, cost, c304 = c
        if not (0.0 <= value < inf and cost > 0.0 and 0.0 <= rate < inf and elapsed >= 0.0) or (
            c304 is not None and not 0.0 < c304 <= cost
        ):
            score(c)  # raises the ValueError that names the problem
        if rate == 0.0 or elapsed == 0.0 or value == 0.0:
            continue
        if elapsed == inf:
            g = 1.0  # rate × U(inf)
        else:
            x = rate * elapsed
            g = -expm1(-x) - x * exp(-x) if x >= _SERIES_BELOW else utility_fraction(x)
            if cycle:
                g += elapsed / cycle * _excess(rate * cycle) * exp(-x)
        weight = value * rate if changes else value
        marginal = cost if c304 is None else c304 + (cost - c304) * g
        index = weight * (g / rate) / marginal
        if index > 0.0:
            yield index, c


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
    # A plan allocates a tuple per page and no reference cycles: the cyclic
    # collector would only rescan the growing list (half the run time at 1M pages).
    collecting = gc.isenabled()
    gc.disable()
    try:
        scored = list(_indexed(candidates, objective == "changes", cycle))
        scored.sort(key=itemgetter(0), reverse=True)  # stable: equal indexes keep their order
        _order_ties_by_key(scored)
    finally:
        if collecting:
            gc.enable()
    return scored


def _order_ties_by_key(scored: list[tuple[float, Candidate]]) -> None:
    """Sort each run of equal indexes by key (the sort by index alone is stable, not by key)."""
    n = len(scored)
    i = 0
    while i < n - 1:
        if scored[i][0] != scored[i + 1][0]:
            i += 1
            continue
        j = i + 1
        while j < n - 1 and scored[j + 1][0] == scored[i][0]:
            j += 1
        scored[i : j + 1] = sorted(scored[i : j + 1], key=lambda sc: sc[1].key)
        i = j + 1


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
