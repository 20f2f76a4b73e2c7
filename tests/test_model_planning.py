"""make_plan: the run's plan that the scheduler makes and the report shows (capacity, reserve, robots.txt, scout)."""

from __future__ import annotations

from scrapy_costsched.model.discovery import Discovery
from scrapy_costsched.model.planning import Plan, make_plan
from scrapy_costsched.model.scoring import Candidate, rank, rank_head

#: Pages of host "a" that change daily and were fetched a month ago, of values falling in key order: they outrank
#: the hub, and are more than a plan's head scores.
BACKLOG = 2000
HUB = Candidate("hub", 0.01, 0.01, 1.0, 1.0, hub=Discovery(rate=0.6, value=0.01, cost=1.0, page_rate=0.5, cap=10.0))


def _candidates() -> list[Candidate]:
    return [Candidate(f"a{i:05d}", 2.0 - i * 1e-4, 1.0, 30.0, 1.0) for i in range(BACKLOG)] + [HUB]


def _plan(remaining: float = 10.0, capacities: dict[str, int] | None = None, robots: float = 0.0,
          reserve_share: float = 0.2) -> Plan:
    return make_plan(_candidates(), remaining, reserve_share=reserve_share,
                     host_of=lambda key: "b" if key == HUB.key else "a",
                     capacity_of=lambda host: (capacities or {}).get(host, 10**9),
                     robots_cost=lambda hosts: robots * len(hosts), cycle=1.0)


def test_the_plan_is_the_affordable_prefix_of_the_ranking_less_the_discovery_reserve() -> None:
    plan = _plan(remaining=100.0)
    backlog = [c.key for _, c in rank(_candidates(), cycle=1.0) if c.key != HUB.key]
    assert [c.key for c in plan.planned[1:]] == backlog[:80]  # 100 less the 20% reserve; the scout comes first
    assert [c.key for _, c in plan.head[1:]] == backlog[:len(plan.head) - 1]


def test_the_hosts_robots_txt_is_paid_for_before_the_pages() -> None:
    plan = _plan(remaining=100.0, robots=3.0)
    assert plan.robots == 6.0  # hosts "a" and the scout's "b"
    assert len(plan.planned) == 1 + 77  # the scout, then 100 - 20 - 3 for host "a"'s robots.txt


def test_a_backlog_that_outranks_every_hub_gets_a_scout_from_the_rest_of_the_ranking() -> None:
    """No planned page is a hub, and the hub ranks below the head: the reserve pays for it, first."""
    unreserved = _plan(reserve_share=0.0)
    assert unreserved.scouts == []
    assert HUB in unreserved.rest  # not even ranked
    plan = _plan()
    assert plan.scouts == [HUB]
    assert plan.head[0][1] == HUB
    assert plan.planned[0] == HUB
    assert len(plan.planned) == 1 + 8  # the scout from the reserve of 2, then 8 of the backlog
    assert HUB.key not in {c.key for c in plan.rest}


def test_the_scout_is_the_hub_expected_to_reveal_the_most_for_its_cost_not_the_best_ranked() -> None:
    """Found in a trial: where every page changes daily, a hub's own changes put its index level with the
    rest, and the best ranked hub was a listing's sixth page (0.7 new pages expected) rather than its first
    (3.6): that day's new products were not found."""
    tail_page = Candidate("page6", 1.0, 2.7, 2.0, 1.0, hub=Discovery(rate=0.35, value=1.0, cost=1.0, page_rate=2.5))
    first_page = Candidate("page1", 1.0, 3.7, 1.0, 1.0, hub=Discovery(rate=3.6, value=1.0, cost=1.0, page_rate=2.5))
    backlog = [Candidate(f"p{i}", 5.0, 1.0, 30.0, 1.0) for i in range(20)]
    ranked = [c.key for _, c in rank([tail_page, first_page], cycle=1.0)]
    assert ranked == ["page6", "page1"]  # by index, the sixth page first
    plan = make_plan([*backlog, tail_page, first_page], 10.0, reserve_share=0.2, host_of=lambda key: "a",
                     capacity_of=lambda host: 100, robots_cost=lambda hosts: 0.0, cycle=1.0)
    assert plan.scouts == [first_page]


def test_planned_pages_whose_links_reveal_next_to_nothing_do_not_stand_in_for_a_scout() -> None:
    """Found in the same trial: a listing's later pages, planned for their own changes, have link histories too
    (a new page every few weeks), and the scout was left out because a planned page had one."""
    later_page = Candidate("page9", 50.0, 1.0, 1.0, 1.0, hub=Discovery(rate=0.05, value=1.0, cost=1.0, page_rate=2.5))
    backlog = [Candidate(f"p{i}", 5.0, 1.0, 30.0, 1.0) for i in range(20)]
    plan = make_plan([later_page, *backlog, HUB], 10.0, reserve_share=0.2, host_of=lambda key: "a",
                     capacity_of=lambda host: 100, robots_cost=lambda hosts: 0.0, cycle=1.0)
    assert later_page in plan.planned
    assert plan.scouts == [HUB]


def test_no_scout_for_a_host_whose_download_slot_is_full() -> None:
    assert _plan(capacities={"b": 0}).scouts == []
    assert _plan(capacities={"b": 1}).scouts == [HUB]


def test_visits_beyond_a_host_s_capacity_leave_the_head_and_are_reported() -> None:
    head, _ = rank_head(_candidates(), 10.0, cycle=1.0)
    plan = _plan(capacities={"a": 5})
    assert [c.key for c in plan.planned] == [HUB.key, "a00000", "a00001", "a00002", "a00003", "a00004"]
    assert plan.over_capacity == {"a": (sum(c.key != HUB.key for _, c in head) - 5, 5)}
    # Below the head, where a leftover round reaches them if the run has budget and time left.
    over = [c.key for _, c in head if c.key.startswith("a")][5:]
    assert len(over) == plan.over_capacity["a"][0]
    assert set(over) <= {c.key for c in plan.rest}


def test_the_reserve_scouts_as_many_hubs_as_it_pays_for_with_the_new_pages_they_reveal() -> None:
    """Found in a classifieds trial: three categories list their ten newest listings each and gain five a day, and
    known listings outranked them all. One scout a run left the other two unvisited for days, their new listings
    slid to later pages, and a third of them were never fetched. The reserve pays for the best hub's visit and the
    new pages it is expected to reveal, then the next's while it lasts; the planned visits' new pages come first."""
    categories = [Candidate(f"cat{n}", 1.0, 16.0, 1.0 + 0.2 * n, 1.0,
                            hub=Discovery(rate=4.5, value=1.0, cost=1.0, page_rate=0.8, cap=10.0)) for n in range(3)]
    backlog = [Candidate(f"p{i}", 5.0, 1.0, 30.0, 1.0) for i in range(60)]

    def plan(remaining: float, reserve_share: float, planned_hub: Candidate | None = None) -> Plan:
        return make_plan([*backlog, *categories, *([planned_hub] if planned_hub else [])], remaining,
                         reserve_share=reserve_share, host_of=lambda key: "a", capacity_of=lambda host: 100,
                         robots_cost=lambda hosts: 0.0, cycle=1.0)

    # Longest unvisited first (most new pages waiting): each takes a visit and 6.3, 5.4 or 4.5 new pages.
    assert [c.key for c in plan(40.0, 0.45).scouts] == ["cat2", "cat1", "cat0"]  # 18 - 7.3 - 6.4 leaves 4.3
    assert [c.key for c in plan(40.0, 0.3).scouts] == ["cat2", "cat1"]  # 12 - 7.3 - 6.4: nothing left
    assert [c.key for c in plan(40.0, 0.05).scouts] == ["cat2"]  # 2: one visit, its pages as the reserve allows
    assert plan(40.0, 0.45).planned[:3] == [categories[2], categories[1], categories[0]]
    # A hub planned on its own rank takes its new pages out of what is spare first: the planned visits cost 21 of
    # 40 (the hub's bundle of 18 and 20 of the backlog), and 19 - 17 leaves one scout.
    busy = Candidate("front", 500.0, 1.0, 1.0, 1.0, hub=Discovery(rate=17.0, value=1.0, cost=1.0, page_rate=0.8))
    ranked = plan(40.0, 0.05, busy)
    assert ranked.planned[1] == busy  # on its own rank, after the scout
    assert [c.key for c in ranked.scouts] == ["cat2"]
    # What the ranking leaves of the refresh share is spare too: its prefix stops at the first hub whose visit and
    # new pages do not fit. 30 of the backlog and cat2's 7.3 leave 0.7 of 38 unplanned, 9 spare with the reserve,
    # and 2.7 once cat2's new pages are paid for: a visit to cat1.
    partial = make_plan([*backlog[:30], *categories], 40.0, reserve_share=0.05, host_of=lambda key: "a",
                        capacity_of=lambda host: 100, robots_cost=lambda hosts: 0.0, cycle=1.0)
    assert categories[2] in partial.planned
    assert [c.key for c in partial.scouts] == ["cat1"]
