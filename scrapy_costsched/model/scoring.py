"""The ranking the scheduler plans with (and the simulator's ``costsched`` policy runs).

Olston & Pandey (WWW 2008) reach Cho & Garcia-Molina's Lagrangian optimum online
by visiting a page when ``w·U(t)/c`` clears a threshold, with
``U(t) = 1/λ − (t + 1/λ)·e^(−λt)`` and *t* the time since the last visit. Sorting by
that index and taking the top until the budget is spent is the same threshold
rule with the threshold set by the budget. Under the ``changes`` objective every
change counts, which is the freshness problem with weights ``w·λ`` (Cho &
Garcia-Molina 2003).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scrapy_costsched.model.freshness import visit_index

if TYPE_CHECKING:
    from collections.abc import Iterable

OBJECTIVES = ("freshness", "changes")


@dataclass(frozen=True)
class Candidate:
    """A page that could be visited now.

    *elapsed* is the time since its last successful visit (``math.inf`` if it was
    never fetched: there is no copy, so a visit buys the whole ``1/λ``), in the
    same unit as 1/*rate*.
    """

    key: str
    value: float
    rate: float
    elapsed: float
    cost: float


def score(candidate: Candidate, objective: str = "freshness") -> float:
    """The index of one candidate: ``value × U(elapsed) / cost`` (× rate under ``changes``).

    >>> score(Candidate("a", value=1.0, rate=1.0, elapsed=math.inf, cost=1.0))
    1.0
    >>> round(score(Candidate("a", 2.0, 1.0, 1.0, 4.0)), 6)  # (1 - 2/e) * 2 / 4
    0.132121
    """
    weight = candidate.value * candidate.rate if objective == "changes" else candidate.value
    return visit_index(weight, candidate.rate, candidate.elapsed, candidate.cost)


def rank(candidates: Iterable[Candidate], objective: str = "freshness") -> list[tuple[float, Candidate]]:
    """Candidates by index, best first, ties by key; pages with nothing to gain are left out.

    >>> [c.key for _, c in rank([Candidate("b", 1, 1, 1, 1), Candidate("a", 1, 1, 2, 1), Candidate("c", 1, 1, 0, 1)])]
    ['a', 'b']
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}")
    scored = [(score(c, objective), c) for c in candidates]
    scored = [(s, c) for s, c in scored if s > 0.0]
    scored.sort(key=lambda sc: (-sc[0], sc[1].key))
    return scored


def affordable_prefix(ranking: Iterable[tuple[float, Candidate]], budget: float) -> list[Candidate]:
    """The longest prefix of *ranking* whose costs add up to at most *budget*.

    >>> ranked = rank([Candidate(k, 1, 1, math.inf, 1) for k in "abc"])
    >>> [c.key for c in affordable_prefix(ranked, 2)]
    ['a', 'b']
    """
    chosen: list[Candidate] = []
    spent = 0.0
    for _, candidate in ranking:
        if spent + candidate.cost > budget + 1e-9:
            break
        spent += candidate.cost
        chosen.append(candidate)
    return chosen
