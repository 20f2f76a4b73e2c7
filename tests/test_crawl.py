"""Real ``scrapy crawl`` runs of the example project against the demo site, over simulated days."""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING, Any

import pytest

from scrapy_costsched.model import RatePrior, visit_index
from tests.helpers import TIERS, DemoSite, crawl, read_state, start_site

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

BUDGET = 30
DAYS = 20


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoSite]:
    tmp = tmp_path_factory.mktemp("site")
    mp = pytest.MonkeyPatch()
    mp.setenv("DEMO_CLOCK_FILE", str(tmp / "clock"))
    demo, server = start_site(tmp, products=60, categories=3, seed=7, horizon_days=DAYS + 5)
    yield demo
    server.shutdown()
    mp.undo()


def expected_visits(state: dict[str, dict[str, Any]], now: float, budget: float) -> list[str]:
    """The documented rule, recomputed from the stored state with the model alone.

    Rank live pages with a template by ``value × U(t) / cost`` (rate = the page's estimate, or its
    group prior's median before it has one; t = days since the last visit, infinite if never
    visited; cost 1 under request billing), best first, ties by fingerprint; take the longest
    prefix the budget pays for.
    """
    ranked = []
    for key, page in state["pages"].items():
        if page["gone"]:
            continue
        value = TIERS[page["value"]] if isinstance(page["value"], str) else page["value"]
        if page["estimate"] is not None:
            rate = page["estimate"][0]
        else:
            prior = state["meta"].get(f"prior:{page['host']}|{page['page_type']}")
            rate = math.exp(prior[0] if prior else RatePrior().mean_log)
        elapsed = math.inf if page["last_visit"] is None else (now - page["last_visit"]) / 86400
        index = visit_index(value, rate, elapsed, 1.0)
        if index > 0:
            ranked.append((-index, key))
    ranked.sort()
    return [key for _, key in ranked[: int(budget)]]


@pytest.fixture(scope="module")
def history(site: DemoSite, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Crawl once a day for DAYS days; record before each run what the rule says it must visit."""
    work = tmp_path_factory.mktemp("days")
    state_path = work / "state.sqlite"
    days = []
    for day in range(1, DAYS + 1):
        now = site.day(day)
        site.set_time(now)
        before = read_state(state_path) if state_path.exists() else None
        result = crawl(site, work, budget=BUDGET, tag=f"day{day}")
        assert result.returncode == 0, result.log[-3000:]
        after = read_state(state_path)
        visited = {key for key, page in after["pages"].items() if page["last_attempt"] == now}
        days.append({"day": day, "now": now, "before": before, "after": after, "visited": visited,
                     "result": result})
    return {"days": days, "state": state_path, "work": work}


def test_each_run_visits_exactly_the_affordable_prefix_of_the_ranking(history: dict[str, Any]) -> None:
    checked = 0
    for day in history["days"][1:]:
        known = set(day["before"]["pages"])
        visited_known = {key for key in day["visited"] if key in known}
        new = day["visited"] - known
        expected = expected_visits(day["before"], day["now"], BUDGET - len(new))
        assert visited_known == set(expected), f"day {day['day']}"
        assert len(day["visited"]) == BUDGET, f"day {day['day']}: the budget is spent"
        checked += 1
    assert checked == DAYS - 1


def test_spend_never_exceeds_the_budget(history: dict[str, Any]) -> None:
    for day in history["days"]:
        stats = day["result"].stats
        assert stats["downloader/request_count"] <= BUDGET
        assert stats["costsched/spent"] <= BUDGET


def test_estimates_converge_to_true_rates(site: DemoSite, history: dict[str, Any]) -> None:
    state = history["days"][-1]["after"]
    errors = []
    for page in state["pages"].values():
        if page["visits"] < 5 or page["page_type"] != "product":
            continue
        product = site.catalog.product(int(page["url"].rsplit("/", 1)[1]))
        errors.append(abs(math.log(page["estimate"][0] / product.rate)))
    assert len(errors) >= 20
    assert statistics.median(errors) < 0.5, sorted(errors)


def test_first_run_is_all_discovery(history: dict[str, Any]) -> None:
    stats = history["days"][0]["result"].stats
    assert stats["costsched/visits/discovery"] == BUDGET
    assert "costsched/visits/refresh" not in stats
