"""A plan that reads only the pages whose bound reaches its head equals the plan that reads them all."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import pytest
from scrapy import Request, Spider
from scrapy.utils.test import get_crawler

from bench.crawl_scale import seed_state, start_site, stop
from scrapy_costsched import CostAwareScheduler
from scrapy_costsched.model import RateEstimate
from scrapy_costsched.model.discovery import NewLinkStats
from scrapy_costsched.model.scoring import rank
from scrapy_costsched.pages import MeanBytes, PageState, make_template
from scrapy_costsched.preselection import bound_sql, hub_bound
from scrapy_costsched.storage import SqliteDictStorage
from scrapy_costsched.tracker import DAY, Tracker
from tests.helpers import FAKE_START, NOW, ROOT, fake_now

if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path

PAGES = 4000
#: Under byte billing host .1 is sent validators (its pages are bounded at its 304's price); host .2 is not.
HOSTS = {
    "host:127.0.0.1": {"bytes": {"127.0.0.1|p": [2000.0, 40], "127.0.0.1|p|304": [200.0, 40]},
                       "validators": {"etag": [3, 0, 0, 0, 0], "answers": [9, 1, 0, 0, 5, 0, 0.0, ""],
                                      "seen": [40, 40, 0]}},
    "host:127.0.0.2": {"bytes": {"127.0.0.2|p": [3000.0, 40]}},
}


class PlanSpider(Spider):
    name = "plan"

    def parse(self, response: Any) -> None:
        pass


def page_of(i: int, spider: PlanSpider) -> PageState:
    """Page *i* of a state whose pages differ in every field planning reads."""
    url = f"http://127.0.0.{1 + (i % 8 != 0)}:9/p/{i}"
    now = fake_now()
    meta: dict[str, Any] = {"depth": 3 if i % 97 == 0 else 1}
    if i % 13 == 0:
        meta["costsched_cost"] = 0.5 + i % 3
    rate = math.exp(-6.0 + 8.0 * ((i * 0.618) % 1.0))
    page = PageState(
        url=url, host=url.split("/")[2].split(":")[0], page_type="p",
        value=("high", "normal", "low", 2.5, "renamed")[i % 5] if i % 7 else "critical",
        first_seen=now - 90 * DAY,
        template=None if i % 89 == 0 else make_template(Request(url, callback=spider.parse, meta=meta), spider),
        last_visit=None if i % 61 == 0 else now - (0.01 + i % 19) * DAY - (i % 24) * 3600.0,
        estimate=None if i % 11 == 0 else RateEstimate(rate, rate / (1 + i % 4), rate * (1 + i % 3)),
        links=NewLinkStats(links=1.0 + i % 3, days=2.0, most=3) if i % 53 == 0 else None,
        gone_strikes=1 if i % 47 == 0 else 0, refusals=1 if i % 83 == 0 else 0,
        not_before=now + (DAY if i % 2 else -DAY) if i % 71 == 0 else None,
        unlinked_since=now - 10 * DAY if i % 79 == 0 else None, redirected=i % 3 == 0,
        full_bytes=MeanBytes(500.0 + 7.0 * (i % 300), 3) if i % 8 == 1 else None)
    page.last_attempt = page.last_visit
    return page


def write_state(path: Path, pages: Iterable[PageState]) -> Path:
    crawler = get_crawler(PlanSpider)
    store = SqliteDictStorage(path)
    store.open()
    for page in pages:
        store.put_page(crawler.request_fingerprinter.fingerprint(Request(page.url)).hex(), page.to_json(),
                       page.summary())
    for name, row in HOSTS.items():
        store.set_meta(name, row)
    store.close()
    return path


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spider = PlanSpider()
    return write_state(tmp_path_factory.mktemp("preselection") / "state.sqlite", (page_of(i, spider) for i in range(PAGES)))


def planned(state: Path, workdir: Path, preselect: bool, monkeypatch: pytest.MonkeyPatch,
            **settings: Any) -> CostAwareScheduler:
    """A scheduler over a copy of *state*, opened and planned without an engine, reading every page or not."""
    copy = workdir / f"{'pre' if preselect else 'full'}.sqlite"
    shutil.copy(state, copy)
    crawler = get_crawler(PlanSpider, {"COSTSCHED_STATE": str(copy), "COSTSCHED_CLOCK": "tests.helpers.fake_now",
                                       "COSTSCHED_FALLBACK_SCHEDULER": "tests.test_scheduler.ListScheduler",
                                       "DEPTH_LIMIT": 2, "COSTSCHED_UNLINKED_PERIODS": 3, **settings})
    crawler.spider = crawler._create_spider()
    scheduler = CostAwareScheduler.from_crawler(crawler)
    with monkeypatch.context() as patch:
        if not preselect:
            patch.setattr(Tracker, "preselect", lambda *_: None)
        scheduler.tracker.open()
        scheduler._plan()
    return scheduler


def assert_unread_below_head(pre: CostAwareScheduler, full: CostAwareScheduler, objective: str) -> None:
    """No page left unread ranks above a page of the head (after the hubs the discovery reserve pays for, which
    lead the ranking whatever their indexes)."""
    unread = set(pre._ranking.unread.keys)
    indexes = [index for index, c in rank(full.tracker.candidates(fake_now()), objective, cycle=full.cycle)
               if c.key in unread]
    scouts = pre.stats.get_value("costsched/plan/scout", 0)
    assert max(indexes) < min(pre._ranking.indices[scouts:])


def profiles(scheduler: CostAwareScheduler) -> dict[str, Any]:
    book = scheduler.tracker.pages
    assert book._index is not None
    return {key: book._profiles[number] for key, number in book._index.items()}


PLAN_STATS = ("known_pages", "planned", "depth_limit", "unlinked", "yield_only", "hubs", "scout")


@pytest.mark.parametrize(("billing", "budget", "objective"), [
    ("requests", 60, "freshness"),
    ("requests", 400, "changes"),
    ("requests", 900, "freshness"),
    ("requests", 1500, "changes"),
    ("bandwidth", "150kB", "freshness"),
    ("bandwidth", "150kB", "changes"),
])
def test_a_plan_that_reads_only_the_head_is_the_plan_that_reads_every_page(
        state: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, billing: str, budget: Any, objective: str
) -> None:
    settings = {"COSTSCHED_BILLING": billing, "COSTSCHED_BUDGET": budget, "COSTSCHED_OBJECTIVE": objective}
    pre = planned(state, tmp_path, True, monkeypatch, **settings)
    full = planned(state, tmp_path, False, monkeypatch, **settings)
    assert pre._ranking.unread  # some pages were not read
    assert not full._ranking.unread
    assert pre._plan_end == full._plan_end > 10
    assert pre._ranking.keys[:pre._plan_end] == full._ranking.keys[:full._plan_end]
    assert pre._discovery_allowance == pytest.approx(full._discovery_allowance)
    assert pre.tracker.yield_only == full.tracker.yield_only
    assert pre.tracker.too_deep == full.tracker.too_deep
    for name in PLAN_STATS:
        assert pre.stats.get_value(f"costsched/plan/{name}") == full.stats.get_value(f"costsched/plan/{name}"), name
    assert_unread_below_head(pre, full, objective)
    # Every page is indexed as reading them all indexes it, those the plan did not read too.
    assert profiles(pre) == profiles(full)
    # Leftover rounds that walk past the head read the rest and rank it as the plan that read it ranks it, pages
    # whose rows moved meanwhile too (rewritten as an SQLite without upsert rewrites them: with a new rowid).
    pre.tracker.pages.flush()
    pre.tracker.store.commit()  # type: ignore[union-attr]
    with sqlite3.connect(tmp_path / "pre.sqlite") as conn:
        for key in pre._ranking.unread.keys[:3]:
            row = conn.execute("SELECT * FROM costsched_plan WHERE key = ?", (key,)).fetchone()
            conn.execute("DELETE FROM costsched_plan WHERE key = ?", (key,))
            conn.execute(f"INSERT INTO costsched_plan VALUES ({', '.join('?' * len(row))})", row)
    for scheduler in (pre, full):
        scheduler._dispatched.update(scheduler._ranking.keys)
        while scheduler._rank_rest():
            pass
        assert not scheduler._ranking.unread
    assert pre._ranking.keys == full._ranking.keys
    ranked = {c.key for _, c in rank(full.tracker.candidates(fake_now()), objective, cycle=full.cycle)}
    assert set(pre._ranking.keys) == ranked
    for scheduler in (pre, full):
        scheduler.close("finished")


@pytest.mark.parametrize(("billing", "budget", "objective"), [
    ("requests", 60, "freshness"),
    ("bandwidth", "150kB", "freshness"),
    ("bandwidth", "150kB", "changes"),
])
def test_the_sql_bound_is_at_least_each_covered_page_s_index(state: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch, billing: str,
                                                             budget: Any, objective: str) -> None:
    """What makes the head exact: no page left unread can index above a page read. Checked page by page
    against the indexes ranking gives: the bound SQL computes, divided by the page's cost, or by its 304's
    price where it is sent validators (the least its marginal expected cost can be)."""
    scheduler = planned(state, tmp_path, True, monkeypatch, COSTSCHED_BILLING=billing, COSTSCHED_BUDGET=budget,
                        COSTSCHED_OBJECTIVE=objective)
    tracker, now = scheduler.tracker, fake_now()
    bound = bound_sql(now=now, cycle=scheduler.cycle, objective=objective, tiers=tracker.config.value_tiers,
                      default_value=tracker.resolve_value(tracker.config.default_value),
                      depth_limit=tracker.depth_limit)
    rows = {key: row for key, *row in tracker.store.scan_plan(  # type: ignore[union-attr]
        f"key, {bound.expression}, {bound.hub}", bound.args)}
    covered, validated, hubs = 0, set(), set()
    for index, candidate in rank(tracker.candidates(now), objective, cycle=scheduler.cycle):
        partial, last_seen, new_links, days, cap = rows[candidate.key]
        if partial is not None:
            covered += 1
            if candidate.revalidation_cost is not None:
                validated.add(candidate.key)
            least = candidate.cost if candidate.revalidation_cost is None else candidate.revalidation_cost
            if last_seen is None:
                assert candidate.hub is None
                assert index <= partial / least * (1 + 1e-9)
            else:
                hubs.add(candidate.key)
                page = tracker.page(candidate.key)
                assert page is not None
                terms = tracker._hub_terms(page.group, objective)
                elapsed = (now - last_seen) / DAY
                assert index <= hub_bound(partial, least, elapsed, new_links, days, cap, terms) * (1 + 1e-9)
    assert covered > PAGES / 2
    assert len(hubs) > 30  # one page in 53 links out
    # Pages sent validators are bounded, and some left unread (their bounds are looser by the full page's price
    # over the 304's, here ten times); under byte billing so are pages with sizes of their own.
    unread = set(scheduler._ranking.unread.keys)
    assert len(validated & unread) > 20 if billing == "bandwidth" else not validated
    assert billing == "requests" or len(validated) > 100
    own_sizes = {key for key in unread if tracker.page(key).full_bytes is not None}  # type: ignore[union-attr]
    assert len(own_sizes) > 20
    scheduler.close("finished")



def test_where_bounds_are_tight_the_head_stops_at_the_pages_left_unread(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages that change often and were visited long ago index within a few percent of their bounds, so the
    pages left unread index just below the threshold and the head read above it must stop there."""
    spider = PlanSpider()
    now = fake_now()
    pages = []
    for i in range(3000):
        url = f"http://127.0.0.2:9/p/{i}"
        rate = 1.0 + 7.0 * ((i * 0.618) % 1.0)
        pages.append(PageState(url=url, host="127.0.0.2", page_type="p", value="normal", first_seen=now - 90 * DAY,
                               template=make_template(Request(url, callback=spider.parse), spider),
                               last_visit=now - (5 + i % 15) * DAY, estimate=RateEstimate(rate, rate / 2, rate * 2)))
    state = write_state(tmp_path / "state.sqlite", pages)
    pre = planned(state, tmp_path, True, monkeypatch, COSTSCHED_BUDGET=700)
    full = planned(state, tmp_path, False, monkeypatch, COSTSCHED_BUDGET=700)
    assert pre._ranking.unread
    assert pre._plan_end == full._plan_end
    assert pre._ranking.keys[:pre._plan_end] == full._ranking.keys[:full._plan_end]
    assert_unread_below_head(pre, full, "freshness")
    for scheduler in (pre, full):
        scheduler.close("finished")


@pytest.mark.parametrize(("billing", "budget", "sizes"), [("requests", "200", None), ("bandwidth", "150kB", 700.0)])
def test_a_real_crawl_of_a_large_state_reads_part_of_it_and_visits_what_reading_it_all_plans(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, billing: str, budget: str, sizes: float | None) -> None:
    """``scrapy runspider`` of the scale bench's spider (``ROBOTSTXT_OBEY``, the add-on) against its generated site,
    over a state that knows 3,000 of its pages: the plan reads only part of them, and the crawl visits every page
    the plan made from reading them all would visit. Under byte billing each page has a size of its own."""
    moved, NOW[0] = NOW[0], FAKE_START  # the crawl's clock: other tests move this process's
    site_process, site = start_site(3000)
    settings = {"COSTSCHED_BUDGET": budget, "COSTSCHED_BILLING": billing}
    try:
        seed = tmp_path / "seed.sqlite"
        seed_state(seed, site, 3000, fake_now(), sizes=sizes)
        expected = planned(seed, tmp_path, False, monkeypatch, ROBOTSTXT_OBEY=True, **settings)
        planned_urls = set()
        for key in expected._ranking.keys[:expected._plan_end]:
            page = expected.tracker.page(key)
            assert page is not None
            planned_urls.add(page.url)
        expected.close("finished")
        state, visited, stats_file = tmp_path / "crawl.sqlite", tmp_path / "visited.txt", tmp_path / "stats.json"
        shutil.copy(seed, state)
        proc = subprocess.run(
            [sys.executable, "-m", "scrapy", "runspider", str(ROOT / "bench" / "scale_spider.py"), "-a", f"site={site}",
             "-a", f"visited={visited}", "-s", f"COSTSCHED_STATE={state}", "-s", f"COSTSCHED_BUDGET={budget}",
             "-s", f"COSTSCHED_BILLING={billing}", "-s", "COSTSCHED_CLOCK=tests.helpers.fake_now",
             "-s", f"BENCH_STATS_FILE={stats_file}"],
            cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=300,
            check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
    finally:
        stop(site_process)
        NOW[0] = moved
    stats = json.loads(stats_file.read_text())["stats"]
    assert "log_count/ERROR" not in stats, proc.stderr[-3000:]
    assert stats["costsched/plan/known_pages"] == 3000
    assert 0 < stats["costsched/plan/unread"] < 3000
    assert stats["costsched/plan/planned"] == len(planned_urls) > 100
    assert planned_urls <= set(visited.read_text().split())
    # The log counts the pages known, not only those ranked (found in trial 23).
    line = re.search(rf"; planned {len(planned_urls)} of 3000 known pages \((\d+) ranked\)", proc.stderr)
    assert line is not None, proc.stderr[-3000:]
    assert len(planned_urls) <= int(line[1]) <= 3000 - stats["costsched/plan/unread"]


@pytest.mark.parametrize("objective", ["freshness", "changes"])
def test_where_most_pages_link_out_they_are_bounded_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       objective: str) -> None:
    """Found in a trial with a CrawlSpider that follows links from every product page: every page is a hub, priced
    with the new pages it may reveal, and the plan read them all. A hub is bounded by the larger of its own bound
    and a new page's index, weighed by the new links it may show (some pages here show many, some few)."""
    spider = PlanSpider()
    pages = [page_of(i, spider) for i in range(3000)]
    for i, page in enumerate(pages):
        if i % 3:
            page.links = NewLinkStats(links=0.1 + 4.0 * (i % 5 == 0), days=5.0, most=3, saturated=i % 7 == 0)
    state = write_state(tmp_path / "state.sqlite", pages)
    pre = planned(state, tmp_path, True, monkeypatch, COSTSCHED_BUDGET=60, COSTSCHED_OBJECTIVE=objective)
    full = planned(state, tmp_path, False, monkeypatch, COSTSCHED_BUDGET=60, COSTSCHED_OBJECTIVE=objective)
    unread = set(pre._ranking.unread.keys)
    assert sum(pre.tracker.page(key).links is not None for key in unread) > 500  # type: ignore[union-attr]
    assert pre._ranking.keys[:pre._plan_end] == full._ranking.keys[:full._plan_end]
    assert pre.stats.get_value("costsched/plan/hubs") == full.stats.get_value("costsched/plan/hubs")
    assert_unread_below_head(pre, full, objective)
    for scheduler in (pre, full):
        scheduler.close("finished")


def test_without_sqlite_s_json_functions_hubs_are_read_in_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An SQLite built without its JSON functions (before 3.38 they were an extension) cannot read a hub's link
    stats: hubs are read and ranked in full, the other pages pre-selected as before."""
    spider = PlanSpider()
    pages = [page_of(i, spider) for i in range(3000)]
    for i, page in enumerate(pages):
        if i % 7 == 0:
            page.links = NewLinkStats(links=0.1, days=5.0, most=3)
    state = write_state(tmp_path / "state.sqlite", pages)
    monkeypatch.setattr(SqliteDictStorage, "json_functions", False)
    pre = planned(state, tmp_path, True, monkeypatch, COSTSCHED_BUDGET=60)
    full = planned(state, tmp_path, False, monkeypatch, COSTSCHED_BUDGET=60)
    unread = pre._ranking.unread.keys
    assert unread
    assert not any(pre.tracker.page(key).links for key in unread)  # type: ignore[union-attr]
    assert pre._ranking.keys[:pre._plan_end] == full._ranking.keys[:full._plan_end]
    for scheduler in (pre, full):
        scheduler.close("finished")


def test_where_the_bound_covers_few_pages_the_plan_reads_them_all_at_once(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Most pages never fetched (a crawl's first days): reading the few covered ones by rowid after the scan that
    bounds them would only add that scan."""
    spider = PlanSpider()
    pages = [page_of(i, spider) for i in range(3000)]
    for i, page in enumerate(pages):
        if i % 3:
            page.last_visit = page.last_attempt = None
    state = write_state(tmp_path / "state.sqlite", pages)
    pre = planned(state, tmp_path, True, monkeypatch, COSTSCHED_BUDGET=60)
    full = planned(state, tmp_path, False, monkeypatch, COSTSCHED_BUDGET=60)
    assert not pre._ranking.unread
    assert pre.stats.get_value("costsched/plan/unread") is None
    assert pre._ranking.keys == full._ranking.keys
    assert pre._plan_end == full._plan_end
    for scheduler in (pre, full):
        scheduler.close("finished")
