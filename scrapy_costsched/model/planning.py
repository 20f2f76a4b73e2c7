"""A run's plan: which known pages its budget visits, and in what order (pure).

The scheduler plans each run with :func:`make_plan`, and ``scrapy costsched-report`` shows the next
run's plan with the same call, so the two cannot tell different stories. What depends on the crawl
(a page's host, a host's capacity, what its robots.txt costs) comes in as functions.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from scrapy_costsched.model.capacity import within_capacity
from scrapy_costsched.model.discovery import expected_new
from scrapy_costsched.model.scoring import Candidate, affordable_prefix, discovery_spend, rank, rank_head

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["HUB_MIN_NEW_PAGES", "Plan", "leads_to_new_pages", "make_plan"]

#: New pages a visit must be expected to reveal for its page to count as a hub (every page that links out is
#: priced for the new pages it may reveal; most reveal none): one every other visit, what a hub never
#: measured is expected to reveal a day after its first visit (LinkPrior).
HUB_MIN_NEW_PAGES = 0.5


def leads_to_new_pages(candidate: Candidate) -> bool:
    """Whether *candidate*'s visit is expected to reveal at least :data:`HUB_MIN_NEW_PAGES` new pages: the hubs
    a scout is chosen from, a leftover round sends first and the report marks."""
    hub = candidate.hub
    return hub is not None and expected_new(hub.rate, candidate.elapsed, hub.cap) >= HUB_MIN_NEW_PAGES


@dataclass
class Plan:
    """What :func:`make_plan` decided."""

    head: list[tuple[float, Candidate]]
    """The head of the ranking (index, candidate), best first and within its hosts' capacity; the scout first."""
    rest: list[Candidate]
    """The candidates below the head, not ranked: ``head + rank(rest)`` is the whole ranking. The visits the head
    left out for their host's capacity are among them: a run that goes idle with budget and time left (the
    capacity was a forecast: visits refused or failed fast, a host faster than its latency was known to be)
    reaches them in a leftover round."""
    planned: list[Candidate]
    """The visits the run's budget pays for, in the head's order."""
    robots: float = 0.0
    """What the planned pages' hosts' robots.txt requests are expected to cost."""
    scout: Candidate | None = None
    """The hub the discovery reserve pays a visit to because no other planned page is one."""
    over_capacity: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Hosts whose visits the head left out for their download slot's capacity: (visits left out, capacity)."""


def make_plan(
    candidates: list[Candidate],
    remaining: float,
    *,
    reserve_share: float,
    host_of: Callable[[str], str | None],
    capacity_of: Callable[[str], int],
    robots_cost: Callable[[set[str | None]], float],
    objective: str = "freshness",
    cycle: float = 0.0,
) -> Plan:
    """The plan of a run with *remaining* budget: the affordable prefix of the ranking's head after
    *reserve_share* of the budget is kept for discovery and the hosts' robots.txt is paid for.

    The head covers what the whole remaining budget can buy (:func:`~.scoring.rank_head`), less the
    visits a host's download slot cannot make in the run (:mod:`~.capacity`). A hub is planned together
    with the new pages it is expected to reveal; when no planned page is a hub, the scout leads the run.
    """
    capacities: dict[str, int] = {}

    def capacity(host: str) -> int:
        if host not in capacities:
            capacities[host] = capacity_of(host)
        return capacities[host]

    budget = max(remaining, 0.0)
    head, rest = rank_head(candidates, budget, objective, cycle=cycle)
    head, over = within_capacity(head, lambda entry: host_of(entry[1].key), capacity)
    rest = [candidate for _, candidate in over] + rest
    left_out = Counter(host_of(candidate.key) for _, candidate in over)
    ranking = [candidate for _, candidate in head]
    reserve = budget * reserve_share
    planned = _affordable(ranking, remaining - reserve)
    robots = robots_cost({host_of(c.key) for c in planned})
    if robots:
        planned = _affordable(ranking, remaining - reserve - robots)
    scout = _scout(head, rest, planned, reserve, host_of, capacity, objective, cycle)
    if scout is not None:  # first in the ranking: the pages it reveals are found early in the run
        head = [scout, *(entry for entry in head if entry[1].key != scout[1].key)]
        rest = [candidate for candidate in rest if candidate.key != scout[1].key]
        planned = [scout[1], *planned]
        robots = robots_cost({host_of(c.key) for c in planned})
    return Plan(head, rest, planned, robots, None if scout is None else scout[1],
                {host: (count, capacities[host]) for host, count in left_out.items() if host is not None})


def _affordable(ranking: list[Candidate], budget: float) -> list[Candidate]:
    """The *ranking*'s longest prefix that *budget* pays for, a hub's visit together with the new pages it
    is expected to reveal (:func:`~.scoring.discovery_spend`): the hub is worth visiting only if they can
    be fetched too."""
    def bundle(candidate: Candidate) -> Candidate:
        return candidate._replace(cost=candidate.cost + min(discovery_spend(candidate), budget))

    return ranking[:len(affordable_prefix(((0.0, bundle(c)) for c in ranking), budget))]


def _scout(head: list[tuple[float, Candidate]], rest: list[Candidate], planned: list[Candidate], reserve: float,
           host_of: Callable[[str], str | None], capacity: Callable[[str], int], objective: str,
           cycle: float) -> tuple[float, Candidate] | None:
    """The hub the discovery reserve pays a visit to when no planned page is a hub: of those whose visit
    *reserve* affords, whose host's download slot has room for one more visit, and that are expected to
    reveal a new page every other visit at least, the one expected to reveal the most new pages' value for
    its cost (the best ranked among equals). The ranking prices a hub's own changes too, so where every page
    changes daily it ties hubs that reveal ten times fewer (a trial's catalogue scouted its sixth page, 0.7
    new products expected, over its first, 3.6).

    The reserve is for what the ranking cannot see (design: reserves), and new URLs are found only
    through hubs. Known pages never fetched (a backlog the budget has not caught up with) rank as high
    as the new pages a hub reveals and above the hub itself, which costs a visit of its own: without a
    scout, such a plan visits no hub, the reserve finds nothing to pay for, and no new page is found
    for as long as the backlog lasts (two days of 25 new articles missed in a trial). Until their visits
    have been counted, hubs are known by their prior alike, so a front page may be scouted before its
    sections; one whose visits reveal nothing falls below the threshold after one or two.
    """
    if reserve <= 0.0 or any(map(leads_to_new_pages, planned)):  # a listing's later pages reveal next to nothing
        return None
    hubs = [entry for entry in head[len(planned):] if entry[1].hub is not None]
    hubs += rank([candidate for candidate in rest if candidate.hub is not None], objective, cycle=cycle)
    visits: Counter[str | None] | None = None
    best: tuple[float, tuple[float, Candidate]] | None = None
    for entry in hubs:
        candidate = entry[1]
        if not leads_to_new_pages(candidate) or candidate.expected_cost > reserve:
            continue
        host = host_of(candidate.key)
        if host is not None:
            if visits is None:
                visits = Counter(host_of(c.key) for c in planned)
            if visits[host] >= capacity(host):
                continue
        hub = candidate.hub
        assert hub is not None  # typing: leads_to_new_pages
        reveals = expected_new(hub.rate, candidate.elapsed, hub.cap) * hub.value / candidate.expected_cost
        if best is None or reveals > best[0]:
            best = (reveals, entry)
    return None if best is None else best[1]
