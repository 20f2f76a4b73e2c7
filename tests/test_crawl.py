"""Real ``scrapy crawl`` runs of the example project against the demo site, over simulated days."""

from __future__ import annotations

import json
import math
import re
import signal
import statistics
import subprocess
from typing import TYPE_CHECKING, Any

import pytest

from scrapy_costsched.kinds import KindCounts
from scrapy_costsched.model import RatePrior
from scrapy_costsched.model.discovery import Discovery, LinkPrior, NewLinkStats
from scrapy_costsched.model.scoring import Candidate, score
from tests.helpers import PROJECT, TIERS, DemoSite, crawl, crawl_command, read_state, start_site

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

BUDGET = 30
ROBOTS_TXT = 1
DAYS = 20
LEARNABLE_RATES = ((1.0, 1 / 20, 2.0),)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoSite]:
    tmp = tmp_path_factory.mktemp("site")
    mp = pytest.MonkeyPatch()
    mp.setenv("DEMO_CLOCK_FILE", str(tmp / "clock"))
    # Rates a once-a-day crawl can learn in 20 days (log-uniform over 1/20..2 per day). On the
    # Cho & Garcia-Molina mix of the demo, about half the pages never change within 20 days and a
    # quarter change faster than daily visits can resolve: there no estimator has the information.
    demo, server = start_site(tmp, products=60, categories=3, seed=7, horizon_days=DAYS + 5,
                              rate_buckets=LEARNABLE_RATES)
    yield demo
    server.close()
    mp.undo()


def expected_visits(state: dict[str, dict[str, Any]], now: float, budget: float) -> list[str]:
    """The documented rule, recomputed from the stored state with the model alone.

    Rank live pages by the model's index, ``value × U(t) / cost`` with U averaged over the rate's
    posterior interval and taken over a one-day cycle (rate = the page's estimate, or its group
    prior's median before it has one, its host's prior's for a group without one of its own; t = days
    since the last visit, infinite if never visited;
    cost 1 under request billing), best first, ties by fingerprint; take the longest prefix the
    budget pays for. A page that links out is also priced as a hub: its learned new links a day (from its
    page type's pooled prior once a run has fitted one), each a new page worth the mean value its group's new links
    were given (the stored counts by value, once there are :data:`~scrapy_costsched.kinds.MIN_PAGES`; else the default
    value) at the prior rate of the kind its group's new links were (the stored counts, by
    :class:`~scrapy_costsched.kinds.KindCounts`' rule; the listings reveal products), else the host's default-type
    prior rate, cost 1.
    """
    priors = state["meta"].get("priors", {})
    host_priors = state["meta"].get("host_priors", {})
    link_priors = state["meta"].get("link_priors", {})
    revealed = KindCounts.from_state(state["meta"].get("revealed_kinds"))
    values = KindCounts.from_state(state["meta"].get("revealed_values"))

    def weight(label: str) -> float:
        raw = json.loads(label)
        return TIERS[raw] if isinstance(raw, str) else float(raw)

    def prior_rate(group: str) -> float:
        host = group.partition("|")[0]
        if group in priors:
            return math.exp(priors[group][0])
        return math.exp(host_priors[host][0] if host in host_priors else RatePrior().mean_log)

    ranked = []
    for key, page in state["pages"].items():
        if page["gone"]:
            continue
        value = TIERS[page["value"]] if isinstance(page["value"], str) else page["value"]
        low = high = None
        if page["estimate"] is not None:
            rate, low, high = page["estimate"]
        else:
            rate = prior_rate(f"{page['host']}|{page['page_type']}")
        hub = None
        if page.get("links") is not None:
            links = NewLinkStats.from_json(page["links"])
            group = f"{page['host']}|{page['page_type']}"
            link_prior = LinkPrior(*link_priors[group]) if group in link_priors else LinkPrior()
            new_kind = revealed.kind_of(group) or "default"
            new_value = values.mean(group, weight) or TIERS["normal"]
            hub = Discovery(links.rate(link_prior), new_value, 1.0, prior_rate(f"{page['host']}|{new_kind}"), links.cap)
        elapsed = math.inf if page["last_visit"] is None else (now - page["last_visit"]) / 86400
        index = score(Candidate(key, value, rate, elapsed, 1.0, None, low, high, hub), cycle=1.0)
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
        # robots.txt (ROBOTSTXT_OBEY, as startproject sets it) is one request of the budget, and so
        # is each 304 that was verified by fetching its page again.
        extra = ROBOTS_TXT + day["result"].stats.get("costsched/not_modified/verifying", 0)
        expected = expected_visits(day["before"], day["now"], BUDGET - extra - len(new))
        assert visited_known == set(expected), f"day {day['day']}"
        assert len(day["visited"]) == BUDGET - extra, f"day {day['day']}: the budget is spent"
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
    assert stats["costsched/visits/discovery"] == BUDGET - ROBOTS_TXT
    assert "costsched/visits/refresh" not in stats


@pytest.fixture
def small_site(tmp_path: Path) -> Iterator[DemoSite]:
    mp = pytest.MonkeyPatch()
    mp.setenv("DEMO_CLOCK_FILE", str(tmp_path / "clock"))
    demo, server = start_site(tmp_path, products=24, categories=2, seed=3, horizon_days=10, new_per_day=0)
    yield demo
    server.close()
    mp.undo()


def test_known_pages_the_spider_does_not_yield_are_reissued_with_their_callback(
        small_site: DemoSite, tmp_path: Path) -> None:
    small_site.set_time(small_site.day(1))
    first = crawl(small_site, tmp_path, budget=100, tag="first")
    assert len(first.items) == 24
    small_site.set_time(small_site.day(4))
    second = crawl(small_site, tmp_path, budget=100, spider_args={"follow": 0}, tag="second")
    assert second.returncode == 0, second.log[-3000:]
    # The listings yielded nothing, yet products were fetched and parsed by parse_product.
    assert second.stats["costsched/visits/refresh"] > 2
    products = {item["product_id"] for item in second.items}
    assert len(products) == second.stats["costsched/visits/refresh"] - 2
    assert all(item["name"] and item["price"] for item in second.items)


def test_a_restart_in_the_same_period_continues_its_ledger(small_site: DemoSite, tmp_path: Path) -> None:
    small_site.set_time(small_site.day(1))
    crawl(small_site, tmp_path, budget=100, tag="seed")
    small_site.set_time(small_site.day(3))
    interrupted = crawl(small_site, tmp_path, budget=20, settings={"CLOSESPIDER_PAGECOUNT": 5,
                                                                     "CONCURRENT_REQUESTS": 1}, tag="interrupted")
    spent = interrupted.stats["costsched/spent"]
    assert 5 <= spent < 20
    small_site.set_time(small_site.day(3, hour=9))  # same day: same budget period
    resumed = crawl(small_site, tmp_path, budget=20, tag="resumed")
    assert resumed.stats["costsched/period_spent_at_start"] == spent
    assert resumed.stats["downloader/request_count"] == 20 - spent
    small_site.set_time(small_site.day(4))  # a new period has its whole budget again
    next_day = crawl(small_site, tmp_path, budget=20, tag="next")
    assert next_day.stats["costsched/period_spent_at_start"] == 0
    assert next_day.stats["downloader/request_count"] == 20


def test_sigkill_loses_no_committed_observation(small_site: DemoSite, tmp_path: Path) -> None:
    small_site.set_time(small_site.day(1))
    cmd, env, _, _ = crawl_command(small_site, tmp_path, budget=100, settings={
        "COSTSCHED_COMMIT_EVERY": 2, "LOG_LEVEL": "DEBUG", "CONCURRENT_REQUESTS": 1, "DOWNLOAD_DELAY": 0.05})
    proc = subprocess.Popen(cmd, cwd=PROJECT, env=env, stderr=subprocess.PIPE, text=True)
    committed = 0
    assert proc.stderr is not None
    for line in proc.stderr:  # bounded: the crawl ends on its own if never killed
        if match := re.search(r"costsched: committed; (\d+) observations", line):
            committed = int(match.group(1))
            if committed >= 8:
                proc.send_signal(signal.SIGKILL)
                break
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    state = read_state(tmp_path / "state.sqlite")  # the file opens and reads
    observed = sum(page["visits"] for page in state["pages"].values())
    assert observed >= committed >= 8
    resumed = crawl(small_site, tmp_path, budget=100, tag="after-kill")  # and the crawl goes on from it
    assert resumed.returncode == 0, resumed.log[-3000:]


def test_foreign_state_file_stops_the_crawl_with_one_line_and_is_untouched(
        small_site: DemoSite, tmp_path: Path) -> None:
    state = tmp_path / "foreign.sqlite"
    state.write_bytes(b"not a database at all" * 50)
    before = state.read_bytes()
    result = crawl(small_site, tmp_path, budget=10, state=state)
    assert result.returncode != 0
    assert re.search(r"CRITICAL: The costsched state .* is not a readable SQLite file .*; it was left untouched",
                     result.log)
    assert result.stats.get("downloader/request_count", 0) == 0
    assert state.read_bytes() == before


# -- Last-Modified: trusted once it has agreed with the records, and then it dates changes ----------


def _summed(history: dict[str, Any], stat: str) -> int:
    return sum(day["result"].stats.get(stat, 0) for day in history["days"])


def _dated_change_weight(state: dict[str, dict[str, Any]]) -> float:
    """History weight of changes dated to within one second (how the tracker records a dated change)."""
    one_second = float(f"{1.0 / 86400.0:.4g}")
    return sum(weight for page in state["pages"].values()
               for interval, weight in page["stats"][2] if interval == one_second)


@pytest.fixture(scope="module")
def volatile_history(site: DemoSite, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The same shop and crawl plan for eight days, served by a host whose Last-Modified is always "now"."""
    from demo_site.server import serve_in_thread

    server, url = serve_in_thread(site.catalog, last_modified="volatile")
    volatile = DemoSite(site.catalog, url, site.clock_file)
    work = tmp_path_factory.mktemp("volatile")
    days = []
    for day in range(1, 9):
        volatile.set_time(volatile.day(day))
        result = crawl(volatile, work, budget=BUDGET, tag=f"day{day}")
        assert result.returncode == 0, result.log[-3000:]
        days.append({"result": result})
    yield {"days": days, "state": read_state(work / "state.sqlite")}
    server.close()


def test_an_honest_hosts_last_modified_is_trusted_and_dates_changes(history: dict[str, Any]) -> None:
    state = read_state(history["state"])
    assert state["meta"]["host:127.0.0.1"]["last_modified"][2] == 0  # never contradicted
    assert _summed(history, "costsched/last_modified/contradicts") == 0
    assert _summed(history, "costsched/last_modified/volatile") == 0
    assert _summed(history, "costsched/last_modified/agrees") > 100
    dated = _summed(history, "costsched/last_modified/dated_changes")
    # Every change seen after the first audits is dated (trust comes within the second day).
    assert dated >= 0.9 * _summed(history, "costsched/changed") > 0


def test_a_volatile_last_modified_is_never_trusted(volatile_history: dict[str, Any]) -> None:
    counts = volatile_history["state"]["meta"]["host:127.0.0.1"]["last_modified"]
    assert counts[1] > counts[0] / 2  # volatile audits: unchanged records under a moving date
    assert _summed(volatile_history, "costsched/last_modified/dated_changes") == 0
    assert _summed(volatile_history, "costsched/changed") > 0


def test_dated_changes_enter_the_rate_history(history: dict[str, Any], volatile_history: dict[str, Any]) -> None:
    # A dated change is a change within the date's one-second resolution, then unchanged time since.
    assert _dated_change_weight(read_state(history["state"])) > 10.0
    assert _dated_change_weight(volatile_history["state"]) == 0.0


def test_a_frozen_last_modified_is_caught_at_the_first_change(small_site: DemoSite, tmp_path: Path) -> None:
    from demo_site.server import serve_in_thread

    server, url = serve_in_thread(small_site.catalog, last_modified="frozen")
    frozen = DemoSite(small_site.catalog, url, small_site.clock_file)
    try:
        results = []
        for day in range(1, 8):
            frozen.set_time(frozen.day(day))
            results.append(crawl(frozen, tmp_path, budget=40, tag=f"day{day}"))
            assert results[-1].returncode == 0, results[-1].log[-3000:]
    finally:
        server.close()
    changed = sum(r.stats.get("costsched/changed", 0) for r in results)
    contradicted = sum(r.stats.get("costsched/last_modified/contradicts", 0) for r in results)
    assert changed > 0
    assert contradicted == changed  # every change under a date that never moves
    assert sum(r.stats.get("costsched/last_modified/dated_changes", 0) for r in results) == 0
    assert read_state(tmp_path / "state.sqlite")["meta"]["host:127.0.0.1"]["last_modified"][2] == contradicted
