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
from scrapy_costsched.model.scoring import Candidate, Ranked, affordable_prefix, discovery_spend, rank, rank_head

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
    scouts: list[Candidate] = field(default_factory=list)
    """The hubs the discovery reserve pays a visit to (:func:`_scouts`), first in the run."""
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
    ranked: Ranked | None = None,
) -> Plan:
    """The plan of a run with *remaining* budget: the affordable prefix of the ranking's head after
    *reserve_share* of the budget is kept for discovery and the hosts' robots.txt is paid for.

    The head covers what the whole remaining budget can buy (:func:`~.scoring.rank_head`, or *ranked*: the
    candidates' head and rest when ranked already), less the visits a host's download slot cannot make in
    the run (:mod:`~.capacity`). A hub is planned together with the new pages it is expected to reveal; the
    scouts the discovery reserve pays for lead the run.
    """
    capacities: dict[str, int] = {}

    def capacity(host: str) -> int:
        if host not in capacities:
            capacities[host] = capacity_of(host)
        return capacities[host]

    budget = max(remaining, 0.0)
    head, rest = rank_head(candidates, budget, objective, cycle=cycle) if ranked is None else ranked
    head, over = within_capacity(head, lambda entry: host_of(entry[1].key), capacity)
    rest = [candidate for _, candidate in over] + rest
    left_out = Counter(host_of(candidate.key) for _, candidate in over)
    ranking = [candidate for _, candidate in head]
    reserve = budget * reserve_share
    planned = _affordable(ranking, remaining - reserve)
    robots = robots_cost({host_of(c.key) for c in planned})
    if robots:
        planned = _affordable(ranking, remaining - reserve - robots)
    # What discovery gets: the reserve, and what the ranking left of the refresh share (unused refresh budget flows
    # to discovery).
    spare = remaining - robots - sum(candidate.expected_cost for candidate in planned)
    scouts = _scouts(head, rest, planned, spare, host_of, capacity, objective, cycle)
    if scouts:  # first in the ranking: the pages they reveal are found early in the run
        keys = {candidate.key for _, candidate in scouts}
        head = [*scouts, *(entry for entry in head if entry[1].key not in keys)]
        rest = [candidate for candidate in rest if candidate.key not in keys]
        planned = [*(candidate for _, candidate in scouts), *planned]
        robots = robots_cost({host_of(c.key) for c in planned})
    return Plan(head, rest, planned, robots, [candidate for _, candidate in scouts],
                {host: (count, capacities[host]) for host, count in left_out.items() if host is not None})


def _affordable(ranking: list[Candidate], budget: float) -> list[Candidate]:
    """The *ranking*'s longest prefix that *budget* pays for, a hub's visit together with the new pages it
    is expected to reveal (:func:`~.scoring.discovery_spend`): the hub is worth visiting only if they can
    be fetched too."""
    def bundle(candidate: Candidate) -> Candidate:
        return candidate._replace(cost=candidate.cost + min(discovery_spend(candidate), budget))

    return ranking[:len(affordable_prefix(((0.0, bundle(c)) for c in ranking), budget))]


def _scouts(head: list[tuple[float, Candidate]], rest: list[Candidate], planned: list[Candidate], spare: float,
            host_of: Callable[[str], str | None], capacity: Callable[[str], int], objective: str,
            cycle: float) -> list[tuple[float, Candidate]]:
    """The hubs the discovery reserve pays a visit to, with the new pages they are expected to reveal: of the hubs
    not planned, expected to reveal a new page every other visit at least and whose host's download slot has room,
    those expected to reveal the most new pages' value for their cost first (the best ranked among equals), while
    what is *spare* after the planned visits (the reserve, and what the ranking left of the refresh share), the
    new pages they are expected to reveal and the earlier scouts' pays for the visit. The ranking prices a hub's own changes
    too, so where every page changes daily it ties hubs that reveal ten times fewer (a trial's catalogue scouted
    its sixth page, 0.7 new products expected, over its first, 3.6).

    The reserve is for what the ranking cannot see (design: reserves), and new URLs are found only
    through hubs. Known pages never fetched (a backlog the budget has not caught up with) rank as high
    as the new pages a hub reveals and above the hub itself, which costs a visit of its own: without a
    scout, such a plan visits no hub, the reserve finds nothing to pay for, and no new page is found
    for as long as the backlog lasts (two days of 25 new articles missed in a trial). One scout a run was not
    enough where several hubs each list only their newest pages: on a classifieds site with three
    categories of ten listings a page and five new ones a day each, the two categories not scouted went
    unvisited for days behind known listings, their new listings slid to later pages, and a third of them
    were never fetched. Until their visits have been counted, hubs are known by their prior alike, so a
    front page may be scouted before its sections; one whose visits reveal nothing falls below the
    threshold after one or two.
    """
    left = spare - sum(map(discovery_spend, planned))
    if left <= 0.0:
        return []
    hubs = [entry for entry in head[len(planned):] if entry[1].hub is not None]
    hubs += rank([candidate for candidate in rest if candidate.hub is not None], objective, cycle=cycle)
    worth: list[tuple[float, int, tuple[float, Candidate]]] = []
    for position, entry in enumerate(hubs):
        candidate = entry[1]
        if leads_to_new_pages(candidate):
            hub = candidate.hub
            assert hub is not None  # typing: leads_to_new_pages
            reveals = expected_new(hub.rate, candidate.elapsed, hub.cap) * hub.value / candidate.expected_cost
            worth.append((-reveals, position, entry))
    visits: Counter[str | None] | None = None
    scouts = []
    for _, _, entry in sorted(worth, key=lambda item: item[:2]):
        candidate = entry[1]
        if candidate.expected_cost > left:
            continue
        host = host_of(candidate.key)
        if host is not None:
            if visits is None:
                visits = Counter(host_of(c.key) for c in planned)
            if visits[host] >= capacity(host):
                continue
            visits[host] += 1
        scouts.append(entry)
        left -= candidate.expected_cost + discovery_spend(candidate)
        if left <= 0.0:
            break
    return scouts
