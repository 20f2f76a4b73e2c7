"""The Scrapy set-ups real projects run (issue 8): real ``scrapy runspider`` crawls over simulated days.

Each test crawls the loopback :class:`~tests.mockserver.EdgeSite` with ``tests/setups_spider.py``
and the settings a user leaves on (``ROBOTSTXT_OBEY``, retries, redirects).
"""

from __future__ import annotations

import json
import os
import random
import re
import socket
import subprocess
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from tests.helpers import PROJECT, ROOT, DemoSite, read_state
from tests.mockserver import EdgeSite

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@dataclass
class Run:
    stats: dict[str, Any]
    log: str
    hits: dict[str, int]
    """Requests the site received during this run, by path."""


class Crawls:
    """Runs of the setups spider on one state, one simulated day after another."""

    def __init__(self, site: EdgeSite, tmp: Path) -> None:
        self.site = site
        self.tmp = tmp
        self.clock = tmp / "clock"
        self.day = 0.0

    def _env(self) -> dict[str, str]:
        return dict(os.environ, DEMO_CLOCK_FILE=str(self.clock), PYTHONPATH=os.pathsep.join([str(ROOT), str(PROJECT)]))

    def _next_day(self, day: float | None) -> None:
        self.day = self.day + 1 if day is None else day
        DemoSite(None, "", self.clock).set_time(DemoSite.day(self.day))  # type: ignore[arg-type]

    def run(self, *settings: str, day: float | None = None, **spider_args: str) -> Run:
        self._next_day(day)
        stats_file = self.tmp / "stats.json"
        stats_file.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "scrapy", "runspider", str(ROOT / "tests" / "setups_spider.py"),
               "-a", f"site={self.site.url}", "-a", f"stats_file={stats_file}",
               "-s", f"COSTSCHED_STATE={self.tmp / 'state.sqlite'}", "-o", f"{self.tmp / 'items.jsonl'}:jsonlines"]
        for name, value in spider_args.items():
            cmd += ["-a", f"{name}={value}"]
        for setting in settings:
            cmd += ["-s", setting]
        before = dict(self.site.hits)
        proc = subprocess.run(cmd, cwd=self.tmp, env=self._env(), capture_output=True, text=True, timeout=120,
                              check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        stats: dict[str, Any] = json.loads(stats_file.read_text())
        hits = {path: n - before.get(path, 0) for path, n in self.site.hits.items() if n > before.get(path, 0)}
        return Run(stats, proc.stderr, hits)

    def run_script(self, source: str) -> str:
        """A user's script that runs crawls itself (``CrawlerProcess``), on the next day; its log."""
        self._next_day(None)
        script = self.tmp / "run.py"
        script.write_text(source, encoding="utf-8")
        proc = subprocess.run([sys.executable, str(script)], cwd=self.tmp, env=self._env(), capture_output=True,
                              text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stderr

    def report(self, *options: str, settings: tuple[str, ...] = ()) -> str:
        """``scrapy costsched-report`` on the state, at the time of the last run."""
        return self._command("costsched-report", *options, settings=settings)

    def show(self, path: str, *options: str) -> str:
        """``scrapy costsched-state show`` of the page at *path*, at the time of the last run."""
        return self._command("costsched-state", "show", self.site.url + path, *options)

    def _command(self, *args: str, settings: tuple[str, ...] = ()) -> str:
        """A command of the add-on's on the state; its output."""
        cmd = [sys.executable, "-m", "scrapy", *args, "--state", str(self.tmp / "state.sqlite"),
               "-s", "COSTSCHED_CLOCK=demo_site.clock.now"]  # the spider's clock, which --state does not name
        for setting in settings:
            cmd += ["-s", setting]
        proc = subprocess.run(cmd, cwd=self.tmp, env=self._env(), capture_output=True, text=True, timeout=120,
                              check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout

    def page(self, path: str) -> dict[str, Any]:
        """The stored page at *path* on the site, or at a whole URL."""
        url = path if "://" in path else self.site.url + path
        pages = read_state(self.tmp / "state.sqlite")["pages"]
        return next(page for page in pages.values() if page["url"] == url)


@pytest.fixture
def crawls(tmp_path: Path) -> Iterator[Crawls]:
    site = EdgeSite()
    yield Crawls(site, tmp_path)
    site.close()


def test_robots_disallowed_page_costs_nothing_and_waits(crawls: Crawls) -> None:
    first = crawls.run("COSTSCHED_BUDGET=10", paths="/page/1,/private/2")
    assert first.stats["robotstxt/forbidden"] == 1
    assert first.stats["costsched/ignored"] == 1
    assert ("0 failed; 1 more refused before download (robots.txt, offsite rules or a downloader middleware)"
            in first.log)
    assert "/private/2" not in first.hits
    assert first.stats["costsched/spent"] == first.stats["downloader/request_count"] == 2  # robots.txt, page/1
    assert "costsched/unsent_at_close" not in first.stats  # no reservation was left behind
    assert crawls.page("/private/2")["not_before"] is not None
    assert crawls.page("/private/2")["refusals"] == 1  # planned at half its worth once it may go again
    # The report says why a live page was never visited (a job board's trial: 55 such pages were only "never
    # visited"), and its prose wraps within 100 columns, as its tables do (that line ran to 180).
    report = crawls.report()
    assert "(1 never visited, 1 of them refused before download or failed so far)" in " ".join(report.split())
    assert max(map(len, report.splitlines()[1:])) <= 100  # below the title, which names the state's path
    assert json.loads(crawls.report("--json"))["dataset"]["refused_or_failed"] == 1
    later = crawls.run("COSTSCHED_BUDGET=10", paths="/page/1,/private/2", day=1.5)  # same budget period
    assert "robotstxt/forbidden" not in later.stats  # not planned again while it waits
    # The report's outcomes add up to its visits; the refusal is no visit, and no failure either.
    figures = json.loads(crawls.report("--json"))["periods"][0]["figures"]
    outcomes = ("new", "rebaselined", "changed", "unchanged", "not_modified", "failed", "gone", "redirected",
                "cut_short")
    assert sum(figures[name] for name in outcomes) == figures["visits"] == 2  # page/1 in each run
    assert (figures["failed"], figures["refused"]) == (0, 1)
    # Refused again after each wait, three times in a row: retired as a page gone, re-checked as rarely (found on a
    # shop trial: cart links robots.txt forbids came back to the plans as their waits ran out, ahead of products).
    for day in (3, 6):
        again = crawls.run("COSTSCHED_BUDGET=10", paths="/page/1,/private/2", day=day)
        assert again.stats["robotstxt/forbidden"] == 1
        # The plan's line tells it from the pages found and not tried yet (a job board's trial: a backlog of links
        # robots.txt forbids looked like discovery falling behind).
        assert again.stats["costsched/plan/never_fetched_tried"] == 1
        assert "(2 ranked; 1 of the 1 never fetched, 1 of them refused before download or answered 404 so far)" \
            in again.log
    retired = crawls.page("/private/2")
    assert (retired["refusals"], retired["gone"]) == (3, True)
    report = crawls.report()
    assert "1 gone (1 of them refused before download by robots.txt" in " ".join(report.split())
    assert max(map(len, report.splitlines()[1:])) <= 100  # below the title, which names the state's path
    assert "refused before download 3 times in a row" in crawls.show("/private/2")
    later = crawls.run("COSTSCHED_BUDGET=10", paths="/page/1,/private/2", day=10)
    assert "robotstxt/forbidden" not in later.stats
    assert (f"start URL {crawls.site.url}/private/2 not visited in this run: it was refused before download (robots.txt, "
            "offsite rules or a downloader middleware) 3 times in a row, and is retired") in later.log


def test_crawls_run_side_by_side_in_one_process_name_their_spiders_in_their_lines(crawls: Crawls) -> None:
    """Found in a job board's trial: a script running two spiders with ``CrawlerProcess``, as Scrapy's docs show,
    logged two plan lines and two "run finished" lines into one log, and neither said which crawl it was."""
    log = crawls.run_script(f"""
from scrapy.crawler import CrawlerProcess
from tests.setups_spider import SetupsSpider

class OtherSpider(SetupsSpider):
    name = "other"

process = CrawlerProcess({{"COSTSCHED_STATE": {str(crawls.tmp / "%(name)s.sqlite")!r}, "COSTSCHED_BUDGET": 10}})
process.crawl(SetupsSpider, site={crawls.site.url!r}, paths="/page/1,/page/2", stats_file="setups.json")
process.crawl(OtherSpider, site={crawls.site.url!r}, paths="/page/3", stats_file="other.json")
process.start()
""")
    for spider, visits in (("setups", 2), ("other", 1)):
        assert f"costsched ({spider}): run finished (finished): {visits} visits: {visits} new pages" in log, log[-3000:]
        assert re.search(rf"costsched \({spider}\): 10 requests left in this period; planned 0 of 0 ", log)
    assert " ERROR: " not in log
    assert "costsched: " not in log.partition("Spider opened")[2]  # once both states are open, each line says whose
    # A crawl alone in its process keeps the short form.
    alone = crawls.run("COSTSCHED_BUDGET=10", paths="/page/1")
    assert "costsched: run finished (finished): 1 visits" in alone.log


def test_a_crawl_without_a_twisted_reactor_plans_learns_and_logs_its_progress(crawls: Crawls) -> None:
    """Found in a blog's trial: with ``TWISTED_REACTOR_ENABLED = False`` (Scrapy 2.15 and later crawl on asyncio's
    loop alone), the plan's worker thread imported the reactor Scrapy forbids there, and the crawl closed with
    three tracebacks before its first request."""
    pytest.importorskip("scrapy.utils.reactorless", reason="Scrapy 2.15 and later can crawl without a reactor")
    settings = ("TWISTED_REACTOR_ENABLED=False", "COSTSCHED_BUDGET=10", "DOWNLOAD_DELAY=0.3",
                "COSTSCHED_LOG_INTERVAL=0.4")
    first = crawls.run(*settings, paths="/page/1,/page/2,/page/3")
    assert " ERROR: " not in first.log, first.log[-3000:]
    assert first.stats["costsched/baseline"] == 3
    assert re.search(r"costsched: \d+ of 10 requests spent this period; this run: \d+ visits", first.log)  # progress
    second = crawls.run(*settings, paths="/page/1,/page/2,/page/3", day=3)
    assert second.stats["costsched/plan/planned"] == 3  # planned from what the first run stored
    assert second.stats["costsched/visits/refresh"] == 3
    assert crawls.page("/page/1")["visits"] == 2

def test_under_byte_billing_the_plan_reserves_what_robots_txt_was_measured_to_cost(crawls: Crawls) -> None:
    """Found in a trial: each host's robots.txt was planned at the prior page (a quarter of a small byte
    budget, 10 kB here), and the refreshes it crowded out left the new pages no share of the budget."""
    bandwidth = ("COSTSCHED_BUDGET=40KB", "COSTSCHED_BILLING=bandwidth")
    paths = ",".join(f"/page/{n}" for n in range(1, 9))
    first = crawls.run(*bandwidth, paths=paths)
    robots = first.stats["costsched/bytes/other"]  # robots.txt is the only request that is no page's
    assert first.hits["/robots.txt"] == 1
    assert 0 < robots < 1000
    later = crawls.run(*bandwidth, paths=paths)
    plan_line = next(line for line in later.log.splitlines() if " known pages (" in line)
    assert f" and {robots:g} bytes for their hosts' robots.txt, " in plan_line
    assert " bytes kept for discovery" in plan_line


def test_a_run_still_going_when_its_budget_period_ends_spends_that_period_and_says_so(crawls: Crawls) -> None:
    """Found in a trial: a daily run that went on past midnight closed with "0 requests left in this period; next
    period starts in 0.0 h". Its spend counts on the period it began in, and the next run spends the new one's."""
    run = crawls.run("COSTSCHED_BUDGET=3", paths="/page/1,/page/2", outlive=str(1.5 * 86400))
    assert run.stats["costsched/spent"] == 3  # robots.txt and both pages, on the period the run began in
    assert re.search(r"; spent 3 requests; the budget period this run began in ended \d+\.\d h ago, during the run \(what "
                     r"it spent counts there\); the next run spends the new period's budget\n", run.log), run.log[-3000:]
    assert "next period starts in" not in run.log
    later = crawls.run("COSTSCHED_BUDGET=3", paths="/page/1,/page/2,/page/3", day=crawls.day + 1.5)
    assert "3 requests left in this period; planned " in later.log  # nothing of the new period was spent
    assert later.stats["costsched/spent"] == 3


def test_a_retry_the_budget_cannot_pay_for_reaches_the_errback(crawls: Crawls) -> None:
    """Found in a trial: a retry the add-on did not send vanished, so the spider heard nothing of a page whose
    500 RetryMiddleware had taken. Now it leaves the downloader with AttemptRefused, as robots.txt refusals do."""
    run = crawls.run("COSTSCHED_BUDGET=2", paths="/error/1", errback="1")  # robots.txt and the first attempt
    assert run.hits == {"/robots.txt": 1, "/error/1": 1}
    assert run.stats["costsched/spent"] == 2
    assert run.stats["retry/count"] == 1  # made by RetryMiddleware, not sent
    assert run.stats["costsched/skipped/budget"] == 1
    assert run.stats["setups/errback/AttemptRefused"] == 1
    assert run.stats["costsched/failed"] == 1  # the page backs off
    assert "costsched/ignored" not in run.stats  # nor is it counted as a refusal before download
    assert "costsched/unsent_at_close" not in run.stats  # no reservation was left behind


def test_an_empty_state_file_starts_a_new_state_with_a_counted_warning(crawls: Crawls) -> None:
    """A crash before the first commit leaves a 0-byte state: the crawl starts anew and says so where
    monitoring reads warnings (Scrapy 2.14 and later count ``log_count/WARNING`` once the spider is open)."""
    (crawls.tmp / "state.sqlite").touch()
    run = crawls.run("COSTSCHED_BUDGET=10", paths="/page/1")
    assert f"costsched: new state {crawls.tmp / 'state.sqlite'}" in run.log
    warning = next(line for line in run.log.splitlines() if "was an empty file" in line)
    assert "initialised as a new state" in warning
    assert run.stats["log_count/WARNING"] == run.log.count("] WARNING: ") >= 1
    assert crawls.page("/page/1")["visits"] == 1


@pytest.mark.parametrize("concurrency", [
    ("CONCURRENT_REQUESTS=4",),
    # startproject's: one request at a time per host, a second apart (here 0.05 s), with 16 in the downloader
    ("CONCURRENT_REQUESTS_PER_DOMAIN=1", "DOWNLOAD_DELAY=0.05"),
], ids=["four_at_a_time", "one_per_host_with_a_delay"])
def test_a_byte_budget_is_not_overspent_when_pages_cost_more_than_the_first_ones_measured(
        crawls: Crawls, concurrency: tuple[str, ...]) -> None:
    """New pages are reserved at the mean bytes measured so far: here the first three are ten times smaller
    than the rest, so the requests moved into the wrapped scheduler after them are reserved far too low.
    Each is sent only if the budget pays for it as the latest answers price what is in flight, and a request
    whose host's download slot is busy waits in the scheduler, not in the slot (found in a trial: with
    startproject's settings, 16 requests sat in the one slot at the first estimates, and a first run spent
    73,911 bytes of 60,000)."""
    paths = ",".join(f"/sized/{n}" for n in (1, 2, 3, *random.Random(8).sample(range(40, 80), 30)))
    run = crawls.run("COSTSCHED_BILLING=bandwidth", "COSTSCHED_BUDGET=60000", *concurrency, paths=paths)
    assert len(read_state(crawls.tmp / "state.sqlite")["pages"]) == 33  # each known, for the next runs
    largest = 100 * 80 + 1000  # the largest page and the headers each way
    # Within a page of the budget either way; sent at the first estimates, the requests cost about 180,000.
    assert 60_000 - largest <= run.stats["costsched/period_spent"] <= 60_000 + largest


def test_a_redirect_goes_on_with_its_visit_and_is_priced_with_it(crawls: Crawls) -> None:
    """Found in a trial (links to ``/p/N`` answered 301 to ``/post/N/``, billed per answer): the visits queued
    behind a redirect had reserved the budget, so the redirect was refused and the hop it had cost was wasted
    (15 hops sent for 1 page parsed out of 25 credits). A visit under way now goes on ahead of first attempts
    merely queued, which are held back at their turn when what was sent leaves no room for them; and a visit
    is priced with the redirects its kind of page went through, so eight sent at once are eight paid for."""
    paths = ",".join(f"/redirect/{n}" for n in range(1, 17))
    for day, concurrency in enumerate([("CONCURRENT_REQUESTS_PER_DOMAIN=1", "DOWNLOAD_DELAY=0.05"), ()], start=1):
        run = crawls.run("COSTSCHED_BUDGET=11", *concurrency, paths=paths)  # robots.txt and five visits of two hops
        hops = {path.rpartition("/")[2] for path in run.hits if path.startswith("/redirect/")}
        parsed = {path.rpartition("/")[2] for path in run.hits if path.startswith("/page/")}
        assert hops == parsed, f"day {day}"  # every hop paid for was followed to its page
        assert len(parsed) == 5, f"day {day}"
        assert run.stats["costsched/period_spent"] == 11
        assert "downloader/exception_type_count/scrapy_costsched.visits.AttemptRefused" not in run.stats
    # Each planned at two requests: four and robots.txt fill the plan's share (ten at one request each would not
    # leave the budget room for their redirects).
    assert run.stats["costsched/plan/planned"] == 4


def test_a_byte_budget_is_not_overspent_by_redirects_to_pages_larger_than_those_measured(crawls: Crawls) -> None:
    """Found in a trial: a redirect's target is reserved at the mean of the pages measured so far (small hubs),
    and waited behind the first attempts queued before it, each already counted: 15 targets of 917 bytes were
    held at 600, and a first run spent 24,827 bytes of 20,000. A target now goes out next through its slot."""
    paths = ",".join(["/sized/1", "/sized/2", "/sized/3", *(f"/redirect/{n}" for n in range(1, 31))])
    run = crawls.run("COSTSCHED_BILLING=bandwidth", "COSTSCHED_BUDGET=30000", "CONCURRENT_REQUESTS_PER_DOMAIN=1",
                     "DOWNLOAD_DELAY=0.05", paths=paths)
    parsed = sum(path.startswith("/page/") for path in run.hits)
    assert parsed >= 5
    largest = 3000 + 1000  # a /page/ and the headers each way
    assert 30_000 - largest <= run.stats["costsched/period_spent"] <= 30_000 + largest


def test_a_page_that_moved_permanently_is_visited_at_its_new_url(crawls: Crawls) -> None:
    """Found in a trial (a blog's links to ``/p/N`` answered 301 to ``/post/N/``): every visit paid for the redirect
    and then its page, and none could earn a 304 (validators belong to the URL that answered). The page now moves to
    its new URL with its history, as Nutch and StormCrawler crawl a redirect's target as a URL of its own; the old
    URL is retired (re-checked rarely), and the spider yielding it again does not send it. A visit at the new URL
    is planned at one request (the trial's first version still priced it with the redirects of the pages' first
    visits, so the last credit of each day went unspent)."""
    crawls.site.validators = True
    paths = ",".join(f"/redirect/{n}" for n in range(1, 4))
    first = crawls.run("COSTSCHED_BUDGET=20", paths=paths)
    pages = {f"/page/{n}" for n in range(1, 4)}
    assert first.hits == {"/robots.txt": 1} | dict.fromkeys(pages, 1) | {f"/redirect/{n}": 1 for n in range(1, 4)}
    assert first.stats["costsched/moved"] == 3
    assert re.search(r"/redirect/\d moved permanently to .*/page/\d, the page's history goes with it", first.log)
    for day in range(2, 7):
        seen = len(crawls.site.requests)
        run = crawls.run("COSTSCHED_BUDGET=4", paths=paths)  # robots.txt and the three pages at one request each
        assert run.hits == {"/robots.txt": 1} | dict.fromkeys(pages, 1), f"day {day}"
        conditional = {path for path, etag in crawls.site.requests[seen:] if etag is not None}
    assert conditional == pages  # the host earned trust, and each page's own validators went to its own URL
    assert run.stats["costsched/not_modified"] == run.stats["costsched/conditional/sent"] >= 2  # one may verify
    moved, old = crawls.page("/page/1"), crawls.page("/redirect/1")
    assert moved["visits"] == 6
    assert moved["first_seen"] == old["first_seen"]
    assert old["gone"]
    assert old["moved_to"] == crawls.site.url + "/page/1"
    shown = crawls.show("/redirect/1")
    assert f"moved permanently to {crawls.site.url}/page/1" in shown
    assert re.search(r"P\(changed\) +none: retired\n", shown)
    assert re.search(r"visit cost +1 request\b", crawls.show("/page/1"))


def test_a_page_that_moved_by_an_instant_meta_refresh_is_visited_at_its_new_url(crawls: Crawls) -> None:
    """Found in a trial (a blog's feed linked old permalinks ``/p?id=N`` that answer 200 with a meta refresh to
    ``/post/N``): MetaRefreshMiddleware follows them as redirects, but only 301 and 308 moved a page, so every visit
    paid for two requests and none could earn a 304. A refresh of under 5 s now moves the page as a 301 does
    (Nutch's rule); a slower one, an interstitial, stays a temporary redirect reached through the old URL."""
    crawls.site.validators = True
    paths = "/refresh/1,/refresh/2,/interstitial/3"
    first = crawls.run("COSTSCHED_BUDGET=20", paths=paths)
    assert first.hits == {"/robots.txt": 1, "/refresh/1": 1, "/refresh/2": 1, "/interstitial/3": 1,
                          "/page/1": 1, "/page/2": 1, "/page/3": 1}
    assert first.stats["costsched/moved"] == 2
    assert re.search(r"/refresh/\d moved permanently to .*/page/\d, the page's history goes with it", first.log)
    for day in range(2, 7):
        seen = len(crawls.site.requests)
        run = crawls.run("COSTSCHED_BUDGET=6", paths=paths)
        assert run.hits == {"/robots.txt": 1, "/page/1": 1, "/page/2": 1, "/interstitial/3": 1, "/page/3": 1}, day
        conditional = {path for path, etag in crawls.site.requests[seen:] if etag is not None}
    assert conditional == {"/page/1", "/page/2"}  # validators go to the URL that answers
    assert run.stats["costsched/not_modified"] >= 1
    assert crawls.page("/page/1")["visits"] == 6
    assert crawls.page("/refresh/1")["moved_to"] == crawls.site.url + "/page/1"
    assert crawls.page("/interstitial/3")["visits"] == 6
    assert not crawls.page("/interstitial/3")["gone"]


def test_a_page_that_moved_is_re_baselined_at_its_new_url(crawls: Crawls) -> None:
    """Found by the news project's test: a page whose items say where they were found moved to a URL the crawl did
    not know yet, and its first answer there, compared with the old URL's record, counted as a change that its
    unchanged Last-Modified denied: the host lost its dates' trust. The record and dates came from another URL."""
    crawls.site.page_headers = {"Last-Modified": "Sun, 01 Nov 2026 12:00:00 GMT"}
    for _ in range(4):
        crawls.run("COSTSCHED_BUDGET=10", paths="/page/1")
    crawls.site.moved["/page/1"] = "/page/11"  # its heading says page 11 there
    run = crawls.run("COSTSCHED_BUDGET=10", paths="/page/1")
    assert run.hits["/page/1"] == run.hits["/page/11"] == 1
    assert run.stats["costsched/moved"] == run.stats["costsched/rebaseline"] == 1
    assert "costsched/changed" not in run.stats
    assert run.stats["costsched/hosts/127.0.0.1/last_modified"] == "trusted"
    moved = crawls.page("/page/11")
    assert (moved["visits"], moved["changes"]) == (5, 0)


def test_a_page_that_moved_to_another_host_is_visited_there(crawls: Crawls) -> None:
    """``example.com`` to ``www.example.com``: a permanent redirect to another host the crawl does not know moves the
    page there as one on its host does, when ``allowed_domains`` take the new host in (here there are none). The
    spider's cookie stays with the old host, as Scrapy's cookie jar kept it there on the redirect."""
    port = crawls.site.url.rsplit(":", 1)[1]
    new = f"http://localhost:{port}/page/6"
    crawls.site.moved["/page/5"] = new
    first = crawls.run("COSTSCHED_BUDGET=20", paths="/page/5", cookie="region=de")
    assert first.hits == {"/robots.txt": 2, "/page/5": 1, "/page/6": 1}  # each host's robots.txt
    assert first.stats["costsched/moved"] == 1
    assert crawls.site.cookies[-1] == ("/page/6", None)
    for day in (2, 3):
        seen = len(crawls.site.cookies)
        run = crawls.run("COSTSCHED_BUDGET=20", paths="/page/5", cookie="region=de")
        assert run.hits == {"/robots.txt": 1, "/page/6": 1}, f"day {day}"
        assert crawls.site.cookies[seen:] == [("/robots.txt", None), ("/page/6", None)], f"day {day}"
        assert (f"start URL {crawls.site.url}/page/5 not visited in this run: it moved permanently to {new}, which is "
                "visited as a page of its own (start from that URL to drop this line)") in run.log
    moved, old = crawls.page(new), crawls.page("/page/5")
    assert (moved["host"], moved["visits"], moved["first_seen"]) == ("localhost", 3, old["first_seen"])
    assert moved["template"]["cookies"] == {}
    assert old["gone"]
    assert old["moved_to"] == new


def test_a_page_that_moved_outside_allowed_domains_is_visited_through_its_old_url(crawls: Crawls) -> None:
    """A permanent redirect to a host ``allowed_domains`` leave out is not a move: OffsiteMiddleware drops it when it
    is scheduled, and a page moved there would be filtered at every run while its old URL stayed retired."""
    port = crawls.site.url.rsplit(":", 1)[1]
    crawls.site.moved["/page/5"] = f"http://localhost:{port}/page/6"
    for day in (1, 2):
        run = crawls.run("COSTSCHED_BUDGET=20", paths="/page/5", allowed="127.0.0.1")
        assert run.hits == {"/robots.txt": 1, "/page/5": 1}, f"day {day}"
        assert run.stats["offsite/filtered"] == 1
        assert "costsched/moved" not in run.stats
    assert not crawls.page("/page/5")["gone"]


def test_http_cache_hits_are_free_and_not_visits(crawls: Crawls) -> None:
    cache = ["HTTPCACHE_ENABLED=True", f"HTTPCACHE_DIR={crawls.tmp / 'cache'}"]
    crawls.run("COSTSCHED_BUDGET=10", *cache, paths="/page/1,/page/2")
    second = crawls.run("COSTSCHED_BUDGET=10", *cache, paths="/page/1,/page/2")
    assert second.hits == {}  # every answer came from the cache
    assert second.stats["costsched/cached"] == 3  # robots.txt and the two pages
    assert second.stats.get("costsched/spent", 0) == 0
    assert "costsched/visits" not in second.stats
    assert "costsched/unsent_at_close" not in second.stats
    assert crawls.page("/page/1")["visits"] == 1  # the cached copy says nothing about the page now
    assert "0 visits (3 more answers came from the HTTP cache: free, and not learned from)" in second.log
    warning = next(line for line in second.log.splitlines() if "HTTP cache" in line)
    assert "keeps pages for ever" in warning
    assert "HTTPCACHE_EXPIRATION_SECS below COSTSCHED_BUDGET_PERIOD" in warning
    # Counted where monitoring reads warnings: every WARNING line of the log, this one included.
    assert second.stats["log_count/WARNING"] == second.log.count("] WARNING: ")


def test_jobdir_disk_queues_keep_every_reservation(crawls: Crawls) -> None:
    """With JOBDIR the scheduler's disk queues hand back copies of the requests: reservations must
    still be found, or the budget looks spent by requests long answered."""
    paths = "/page/1,/page/2,/page/3,/page/4,/page/5"
    jobdir = f"JOBDIR={crawls.tmp / 'job'}"
    crawls.run("COSTSCHED_BUDGET=20", jobdir, paths=paths)
    second = crawls.run("COSTSCHED_BUDGET=3", jobdir, paths="")  # known pages only, re-issued from the plan
    assert "costsched/unsent_at_close" not in second.stats
    assert second.stats["costsched/spent"] == second.stats["downloader/request_count"] == 3  # robots.txt + 2
    assert second.stats["costsched/visits"] == 2


def test_reissued_pages_keep_their_cookies(crawls: Crawls) -> None:
    """A spider that sets a cookie on its requests (a region, a currency) gets the same page when the
    scheduler re-issues it in a later run, whose cookie jar starts empty."""
    crawls.run("COSTSCHED_BUDGET=10", paths="/page/1", cookie="region=de")
    crawls.site.cookies.clear()
    second = crawls.run("COSTSCHED_BUDGET=10", paths="")  # known pages only, re-issued from their templates
    assert second.stats["costsched/visits/refresh"] == 1
    assert [cookie for path, cookie in crawls.site.cookies if path == "/page/1"] == ["region=de"]


def test_a_request_is_not_reissued_without_what_its_meta_carried(crawls: Crawls) -> None:
    """An item passed to the callback in the meta cannot be stored: the page is visited only when the
    spider yields it, rather than re-issued without it (where its callback fails)."""
    first = crawls.run("COSTSCHED_BUDGET=10", paths="/page/1", carry="1")
    assert first.stats["costsched/template/unstorable"] == 1
    warning = next(line for line in first.log.splitlines() if "cannot be re-issued" in line)
    assert "'SetupsSpider.parse_carried'" in warning
    assert "meta, cb_kwargs or cookies that JSON cannot hold" in warning
    second = crawls.run("COSTSCHED_BUDGET=10", paths="")
    assert "/page/1" not in second.hits
    assert "spider_exceptions/KeyError" not in second.stats
    assert "'SetupsSpider.parse_carried'" in second.log  # named again at start
    assert second.stats["log_count/WARNING"] == second.log.count("] WARNING: ")  # that warning counted


def test_a_pipeline_returning_new_items_loses_no_observation(crawls: Crawls) -> None:
    pipeline = 'ITEM_PIPELINES={"tests.setups_spider.NewObjectPipeline": 300}'
    first = crawls.run("COSTSCHED_BUDGET=10", pipeline, paths="/page/1,/page/2")
    assert first.stats["costsched/baseline"] == 2
    second = crawls.run("COSTSCHED_BUDGET=10", pipeline, paths="/page/1,/page/2")
    assert second.stats["costsched/unchanged"] == 2
    assert crawls.page("/page/1")["visits"] == 2
    assert crawls.page("/page/1")["failures"] == 0


def test_a_page_takes_the_class_the_spider_yields_behind_a_pipeline_that_returns_dicts(crawls: Crawls) -> None:
    """The page type names the item class of the spider's output, not of the pipelines' (found on a job board's
    API whose pipeline stored dataclass items and passed on dicts: every page stayed 'default')."""
    crawls.run("COSTSCHED_BUDGET=10", 'ITEM_PIPELINES={"tests.setups_spider.NewObjectPipeline": 300}',
               paths="/page/1", typed="1")
    assert crawls.page("/page/1")["page_type"] == "PageRecord"


def test_a_files_pipeline_s_downloads_are_charged_to_their_page_and_its_results_change_no_record(
        crawls: Crawls) -> None:
    """Found on a parts catalogue whose datasheets went through ``FilesPipeline``: under byte billing the files,
    downloaded outside the scheduler, were charged to no page (the plan priced a visit at its HTML alone), and
    each page counted as changed at its second visit, the pipeline's ``files`` saying "uptodate" where it had
    said "downloaded"."""
    settings = ("COSTSCHED_BILLING=bandwidth", "COSTSCHED_BUDGET=1 MB", f"FILES_STORE={crawls.tmp / 'files'}",
                'ITEM_PIPELINES={"scrapy.pipelines.files.FilesPipeline": 1}')
    first = crawls.run(*settings, paths="/page/1", files="/sized/50")
    assert "budget 1,000,000 bytes per period, 1,000,000 bytes left in this period" in first.log  # not 1e+06
    assert first.hits.get("/sized/50") == 1
    assert first.stats["file_status_count/downloaded"] == 1
    page_type = crawls.page("/page/1")["page_type"]
    # The file (5,000 bytes and its headers) is the page's; only robots.txt belongs to no page.
    assert first.stats[f"costsched/bytes/type/{page_type}"] > 5000
    assert first.stats["costsched/bytes/other"] < 1000
    # A first visit of a page of its kind brings one download of that size: what the next new ones are planned with.
    host = crawls.page("/page/1")["host"]
    per_visit, visits, (mean, _) = read_state(crawls.tmp / "state.sqlite")["meta"][f"host:{host}"]["media"][
        f"{host}|{page_type}|new"]
    assert (per_visit, visits) == (1.0, 1)
    assert mean > 5000
    second = crawls.run(*settings, paths="/page/1", files="/sized/50")
    assert second.stats["file_status_count/uptodate"] == 1
    assert second.stats["costsched/unchanged"] == 1
    assert "costsched/changed" not in second.stats


def test_a_byte_budget_pays_for_the_files_new_pages_bring(crawls: Crawls) -> None:
    """Planned at their HTML alone, new pages whose items list a file each (a few kB of page, 62 kB of file) were
    all let out, and their files, downloaded after, took the period far over its budget."""
    settings = ("COSTSCHED_BILLING=bandwidth", f"FILES_STORE={crawls.tmp / 'files'}",
                'ITEM_PIPELINES={"scrapy.pipelines.files.FilesPipeline": 1}')
    crawls.run(*settings, "COSTSCHED_BUDGET=1 MB", paths=",".join(f"/page/{n}" for n in range(11, 19)),
               files="/sized/6{n}")
    # Next day, new pages only (the known ones left to the plan's 10%): the discovery reserve pays for two.
    second = crawls.run(*settings, "COSTSCHED_BUDGET=150 kB", "COSTSCHED_RESERVE_DISCOVERY=0.9",
                        paths=",".join(f"/page/{n}" for n in range(21, 29)), files="/sized/6{n}")
    assert second.stats["file_status_count/downloaded"] == 2
    assert second.stats["costsched/period_spent"] <= 150_000


def test_a_first_run_s_files_stay_within_the_budget(crawls: Crawls) -> None:
    """Found reading the last trial's leftovers: a first run knows nothing of the files its pages' items list, so
    it let out every new page at its HTML, and the files, which the media pipeline downloads outside the
    scheduler, took a 150 kB period to 519 kB. A file now goes out only if the budget pays for it."""
    settings = ("COSTSCHED_BILLING=bandwidth", f"FILES_STORE={crawls.tmp / 'files'}",
                'ITEM_PIPELINES={"scrapy.pipelines.files.FilesPipeline": 1}', "COSTSCHED_BUDGET=150 kB")
    first = crawls.run(*settings, paths=",".join(f"/page/{n}" for n in range(11, 19)), files="/sized/6{n}")
    assert first.stats["costsched/period_spent"] <= 150_000
    downloaded, refused = first.stats["file_status_count/downloaded"], first.stats["costsched/media/refused"]
    assert downloaded >= 1
    assert refused >= 1
    assert downloaded + refused == 8  # refused before it went out, or cut at its headers: larger than what was left
    assert re.search(r"costsched: http://\S+, a file an item lists, not downloaded: the period's budget cannot pay "
                     r"for it", first.log)
    # A file cut at its headers is refused as one that never went out. Newer media pipelines log a refused file at
    # DEBUG ("File (filtered)"); older ones (Scrapy 2.13) log each as an ERROR of theirs.
    from scrapy.pipelines import media

    quiet = hasattr(media, "_media_request_filtered")
    assert first.log.count("] ERROR: ") == (0 if quiet else refused)
    assert first.stats["item_scraped_count"] == 8  # the items go on without the files
    # Visits whose files were refused teach nothing of what files their kind of page brings (they would teach that
    # it brings fewer, and price the next ones too low): learned from those that downloaded theirs.
    page = crawls.page("/page/11")
    host, page_type = page["host"], page["page_type"]
    per_visit, visits, _ = read_state(crawls.tmp / "state.sqlite")["meta"][f"host:{host}"]["media"][
        f"{host}|{page_type}|new"]
    assert (per_visit, visits) == (1.0, downloaded)
    # A later visit brings them: FilesPipeline downloads what its store lacks.
    later = crawls.run(*settings[:-1], "COSTSCHED_BUDGET=1 MB", paths=",".join(f"/page/{n}" for n in range(11, 19)),
                       files="/sized/6{n}", day=3)
    assert later.stats["file_status_count/downloaded"] == 8 - downloaded


def test_drop_unchanged_works_behind_a_pipeline_returning_new_items(crawls: Crawls) -> None:
    settings = ('ITEM_PIPELINES={"tests.setups_spider.NewObjectPipeline": 300}', "COSTSCHED_DROP_UNCHANGED=True",
                "COSTSCHED_BUDGET=10", "CONCURRENT_ITEMS=1")
    crawls.run(*settings, paths="/page/1")
    second = crawls.run(*settings, paths="/page/1")
    assert second.stats["item_dropped_count"] == 1
    # The feed (-o appends) holds the first run's item only: an item dropped as unchanged is not exported.
    assert len((crawls.tmp / "items.jsonl").read_text().splitlines()) == 1
    assert second.stats["costsched/unchanged"] == 1
    assert "WARNING" not in second.log.split("costsched: run finished")[0].split("Spider opened")[-1]


def test_sets_and_mixed_key_dicts_hash_the_same_in_every_run(crawls: Crawls) -> None:
    first = crawls.run("COSTSCHED_BUDGET=10", paths="/page/1,/page/2", odd="1")
    assert first.stats["costsched/baseline"] == 2
    assert first.stats["item_scraped_count"] == 2  # nothing lost to the mixed-key dict
    # Each run is a process with its own hash seed, so the set iterates in another order.
    for _ in range(2):
        later = crawls.run("COSTSCHED_BUDGET=10", paths="/page/1,/page/2", odd="1")
        assert later.stats["costsched/unchanged"] == 2
        assert "costsched/changed" not in later.stats
        assert "costsched/items/unhashable" not in later.stats


def test_a_value_hook_that_raises_loses_no_item_and_says_so_once(crawls: Crawls) -> None:
    """Found in a trial: a ``costsched_value()`` written for requests raised on every item, and each item was lost."""
    first = crawls.run("COSTSCHED_BUDGET=10", paths="/page/1,/page/2,/page/3", value_hook="1")
    assert first.stats["item_scraped_count"] == 3
    assert "spider_exceptions/count" not in first.stats
    assert first.stats["costsched/baseline"] == 3
    assert first.stats["costsched/value_hook/errors"] == 3  # the items; the requests have a url
    assert first.log.count("costsched_value() raised AttributeError on item of type dict") == 1
    assert crawls.page("/page/1")["value"] == "high"  # what it said of the request stands
    assert crawls.page("/page/2")["value"] == "normal"


def test_a_middleware_that_rewrites_urls_keeps_visits_and_budget(crawls: Crawls) -> None:
    """Each request goes out as the middleware's replacement; the one it replaced holds no budget (found on a
    shop trial behind a scraping API: half of 60 credits stayed reserved by requests never sent)."""
    api = 'DOWNLOADER_MIDDLEWARES={"tests.setups_spider.ApiRewriteMiddleware": 600}'
    pages = [f"/page/{n}" for n in range(1, 7)]
    first = crawls.run("COSTSCHED_BUDGET=7", api, paths=",".join(pages))  # robots.txt and the six pages
    assert first.hits == {"/robots.txt": 1} | {f"/api?url={page}": 1 for page in pages}
    assert first.stats["costsched/baseline"] == 6
    assert first.stats["costsched/spent"] == 7
    assert "costsched/skipped/budget" not in first.stats
    assert "costsched/duplicate_fetch" not in first.stats
    assert crawls.page("/page/1")["visits"] == 1


def test_a_redirected_sub_request_joins_its_pages_visit(crawls: Crawls) -> None:
    first = crawls.run("COSTSCHED_BUDGET=10", paths="/page/6", chain="1")
    assert first.hits.get("/redirect/7") == 1
    assert "costsched/duplicate_fetch" not in first.stats
    page = crawls.page("/page/6")
    assert page["failures"] == 0
    assert page["record_kind"] == "items"
    assert page["visits"] == 1


def test_narrowed_allowed_domains_stop_reissued_pages(crawls: Crawls) -> None:
    crawls.run("COSTSCHED_BUDGET=10", paths="/page/1,/page/2")
    narrowed = crawls.run("COSTSCHED_BUDGET=10", allowed="example.com")  # the spider yields nothing itself
    assert "/page/1" not in narrowed.hits
    assert "/page/2" not in narrowed.hits
    assert narrowed.stats["offsite/filtered"] == 2
    assert "costsched/unsent_at_close" not in narrowed.stats


def test_failures_back_off_whatever_the_billing(crawls: Crawls) -> None:
    with socket.socket() as probe:  # a port nothing listens on: connections are refused
        probe.bind(("127.0.0.1", 0))
        refused = f"http://127.0.0.1:{probe.getsockname()[1]}/down"
    paths = f"/error/1,/sometimes/2,{refused}"
    settings = ("COSTSCHED_BUDGET=50", "COSTSCHED_BILLING=credits")
    crawls.site.missing = True
    days = [crawls.run(*settings, paths=paths)]
    crawls.site.missing = False
    days += [crawls.run(*settings, paths=paths) for _ in range(3)]
    errors = [day.hits.get("/error/1", 0) for day in days]
    refusals = [day.stats.get("downloader/exception_count", 0) for day in days]
    # One visit (three attempts) on day 1, again after one period, then a wait of two periods.
    assert errors == [3, 3, 0, 3], errors
    assert refusals == [6, 6, 0, 6], refusals  # the page's three attempts and its host's robots.txt's
    sometimes = crawls.page("/sometimes/2")
    assert not sometimes["gone"]  # one 404 does not retire a page that answers the next day
    assert sometimes["visits"] == 3


def test_a_failed_page_is_tried_again_in_the_next_period_whatever_the_time_of_day(crawls: Crawls) -> None:
    """Found in a job board's trial: a failure's wait was counted from the moment it failed, so a daily run that
    started earlier in the day than the failure had happened the day before left the page out, and a wait of one
    period lasted two runs. It now ends as the period after the failure's begins."""
    paths = "/page/1,/sometimes/2,/error/1"
    crawls.site.missing = True  # /sometimes/2 answers 404; /error/1 answers 500 to every attempt
    first = crawls.run("COSTSCHED_BUDGET=20", paths=paths, day=1.25)  # 12:00
    assert (first.hits["/sometimes/2"], first.hits["/error/1"]) == (1, 3)
    crawls.site.missing = False
    again = crawls.run("COSTSCHED_BUDGET=20", paths=paths, day=2.0)  # 06:00 the next day
    assert (again.hits.get("/sometimes/2"), again.hits.get("/error/1")) == (1, 3)
    assert "start URL" not in again.log
    # /error/1 failed again: the start-URL line of the next run says why it waits, not that the budget ran short.
    waiting = crawls.run("COSTSCHED_BUDGET=20", paths=paths, day=3.0)
    assert "/error/1" not in waiting.hits
    assert (f"start URL {crawls.site.url}/error/1 not visited in this run: its last attempt failed (2 in a row), so it "
            "waits for the budget period that begins 2026-01-05T00:00:00Z (each failure in a row doubles the wait)"
            in waiting.log), waiting.log[-3000:]


def test_a_timed_run_sends_a_delayed_host_no_more_than_it_can_start_before_the_timeout(crawls: Crawls) -> None:
    """Requests that wait in a download slot with a delay when ``CLOSESPIDER_TIMEOUT`` strikes go out while the
    crawl closes: ten new pages of a host one second apart went into its slot as fast as its concurrency let
    them, and a 3 s run sent all ten over fourteen seconds (a fresh clone's test saw a leftover round do it).
    Each is admitted only if its slot can start it before the timeout; the others stay unsent, their budget
    unspent."""
    paths = ",".join(f"/page/{n}" for n in range(1, 11))
    run = crawls.run("COSTSCHED_BUDGET=20", "DOWNLOAD_DELAY=1", "CLOSESPIDER_TIMEOUT=3", paths=paths)
    assert "Closing spider (closespider_timeout)" in run.log
    sent = sum(n for path, n in run.hits.items() if path.startswith("/page/"))
    assert 1 <= sent <= 3  # robots.txt first, then a page a second until the timeout
    assert run.stats["costsched/spent"] == sent + 1


def test_state_show_says_a_page_answered_404_since_its_last_visit(crawls: Crawls) -> None:
    """Found in a trial: the page showed "0 failed" and its last 200 as its last visit, nothing of its 404."""
    crawls.run("COSTSCHED_BUDGET=20", paths="/page/1,/sometimes/2")
    crawls.site.missing = True
    crawls.run("COSTSCHED_BUDGET=20", paths="/page/1,/sometimes/2")
    shown = json.loads(crawls.show("/sometimes/2", "--json"))
    assert shown["not_found_in_a_row"] == 1
    assert shown["last_attempt"]["epoch"] > shown["last_visit"]["epoch"]
    assert "0 failed (0 in a row); since then 404 or 410 1 time in a row" in crawls.show("/sometimes/2")


def test_a_page_that_answers_410_is_retired_at_once(crawls: Crawls) -> None:
    """Found in a classifieds trial: expired listings answered 410 Gone and were taken for live pages until three
    410s in a row, which their halved worth put off for weeks. A 410 says the page is gone for good; a 404 still
    needs three in a row."""
    paths = "/page/1,/removed/1,/gone/1"
    first = crawls.run("COSTSCHED_BUDGET=20", paths=paths)
    assert (first.stats["costsched/gone"], first.stats["costsched/not_found"]) == (1, 1)
    assert crawls.page("/removed/1")["gone"]
    assert not crawls.page("/gone/1")["gone"]
    again = crawls.run("COSTSCHED_BUDGET=20", paths=paths)
    assert "/removed/1" not in again.hits
    assert again.hits["/gone/1"] == 1
    assert (f"start URL {crawls.site.url}/removed/1 not visited in this run: it answered 410, or 404 3 times in a "
            "row, and is retired (tried again every 30 periods)" in again.log)


def test_a_start_url_the_plan_left_out_is_reported_only_if_no_leftover_round_visited_it(crawls: Crawls) -> None:
    """The plan pays for 8 of ten start URLs (a tenth of the budget is kept for discovery, one request goes to
    robots.txt); the reserve finds nothing new and a leftover round spends it on the next start URL. Only the one
    left unvisited is reported (a SitemapSpider's robots.txt was once reported on every day a leftover fetched it)."""
    paths = ",".join(f"/page/{n}" for n in range(1, 11))
    crawls.run("COSTSCHED_BUDGET=20", paths=paths)
    run = crawls.run("COSTSCHED_BUDGET=10", paths=paths)
    assert run.stats["costsched/plan/planned"] == 8
    visited = {path for path in run.hits if path.startswith("/page/")}
    assert len(visited) == 9
    reported = [line.split("start URL ")[1].split()[0] for line in run.log.splitlines()
                if "not visited in this run" in line]
    assert [url.removeprefix(crawls.site.url) for url in reported] == [
        path for path in (f"/page/{n}" for n in range(1, 11)) if path not in visited]
    assert run.stats["costsched/skipped/start_url"] == 1


def test_a_first_run_counts_no_page_as_not_planned_and_reports_the_start_urls_it_deferred(crawls: Crawls) -> None:
    """Found on a job board's first run, from an empty state: URLs new in the run and yielded again counted as
    known pages the plan left out (``not_planned``), and a start URL the discovery budget did not reach left no
    line of its own."""
    first = crawls.run("COSTSCHED_BUDGET=2", paths="/page/1,/page/2,/page/3,/page/1,/page/2,/page/3")
    assert first.stats["costsched/visits"] == 1
    assert "costsched/skipped/not_planned" not in first.stats
    assert first.stats["costsched/skipped/duplicate"] == 3
    assert first.stats["costsched/skipped/start_url"] == 2
    for path in ("/page/2", "/page/3"):
        assert re.search(rf"start URL \S+{path} not visited in this run: it is new, and what this run could spend on "
                         "new URLs did not reach it", first.log)


def test_a_visit_whose_redirect_the_budget_cannot_pay_for_is_an_outcome_of_the_summary(crawls: Crawls) -> None:
    """Found in a trial: the budget ran out at a meta refresh's target, whose request reached the spider's errback
    refused; the run summary said "8 visits: 7 new pages, 0 changed, 0 unchanged (0 of them 304s), 0 failed", one
    visit short of its count, with no word of the one that was cut short."""
    first = crawls.run("COSTSCHED_BUDGET=2", paths="/refresh/1")  # robots.txt and the refresh: no room for its target
    assert first.hits == {"/robots.txt": 1, "/refresh/1": 1}
    assert first.stats["costsched/visits"] == first.stats["costsched/cut_short"] == 1
    assert "costsched/failed" not in first.stats
    assert re.search(r"run finished \(finished\): 1 visits: 0 new pages, 0 changed, 0 unchanged \(0 of them 304s\), "
                     r"1 cut short \(a redirect or retry the budget, its host's health or its host's pause kept back\), "
                     r"0 failed;", first.log)
    # The report counts the visits the summary counts (found in a Scrapyd trial: 7 visits there, 9 in the log).
    figures = json.loads(crawls.report("--json"))["periods"][0]["figures"]
    assert (figures["visits"], figures["cut_short"], figures["spent"]) == (1, 1, 2)
    second = crawls.run("COSTSCHED_BUDGET=2", paths="/refresh/1", day=2.0)  # planned again, at its new URL
    assert second.hits == {"/robots.txt": 1, "/page/1": 1}
    assert second.stats["costsched/baseline"] == 1


def test_the_state_says_why_a_page_s_last_visit_failed(crawls: Crawls) -> None:
    """Found in a trial (a blog's gallery posts, over the project's ``DOWNLOAD_MAXSIZE``): ``costsched-state show``
    said "0 visits, 0 changed, 5 failed (5 in a row)" and that the page waits, and nothing of why. The last failure
    is kept with the page: an HTTP status, or the download's exception as Scrapy logs it; a visit that answers
    clears it."""
    crawls.run("COSTSCHED_BUDGET=20", paths="/error/1,/page/1")
    assert "1 failed (1 in a row, the last: HTTP 500)" in crawls.show("/error/1")  # after Scrapy's two retries
    assert crawls.page("/page/1")["last_failure"] is None
    crawls.site.sold = {"/error/1"}  # it answers 200 again
    crawls.run("COSTSCHED_BUDGET=20", paths="/error/1", day=3.0)  # its wait is over
    assert crawls.page("/error/1")["last_failure"] is None
    assert "1 failed (0 in a row)" in crawls.show("/error/1")


def test_a_page_larger_than_its_download_may_be_is_retired_at_once(crawls: Crawls) -> None:
    """Found in the same trial: each gallery post over ``DOWNLOAD_MAXSIZE``, cancelled by Scrapy after its headers,
    was tried again after 1, 2, 4, ... periods as any failure is; with a new one every few days they took up to a
    third of a day's requests. The crawl's own size limit is its standing word, as robots.txt is the site's: the
    page is retired at the first such answer and re-checked as rarely as a page gone."""
    first = crawls.run("COSTSCHED_BUDGET=20", "DOWNLOAD_MAXSIZE=4000", paths="/sized/50,/page/1")
    assert first.hits == {"/robots.txt": 1, "/sized/50": 1, "/page/1": 1}
    assert first.stats["costsched/too_large"] == 1
    assert "1 failed (1 of them larger than their download may be: retired)" in first.log
    assert re.search(r"/sized/50 is larger than its download may be \(DOWNLOAD_MAXSIZE, COSTSCHED_MAXSIZE or the "
                     r"request's download_maxsize\): retired, and re-checked every 30 periods", first.log)
    shown = crawls.show("/sized/50")
    assert re.search(r"1 failed \(1 in a row, the last: \w+: .*larger than download max size .*\), gone", shown)
    for day in (2.0, 5.0):
        later = crawls.run("COSTSCHED_BUDGET=20", "DOWNLOAD_MAXSIZE=4000", paths="/sized/50,/page/1", day=day)
        assert "/sized/50" not in later.hits, day
    recheck = crawls.run("COSTSCHED_BUDGET=20", paths="/sized/50,/page/1", day=32.0)  # the limit lifted since
    assert recheck.hits["/sized/50"] == 1
    assert not crawls.page("/sized/50")["gone"]
    assert crawls.page("/sized/50")["last_failure"] is None


def test_pages_gone_that_still_answer_200_back_off_and_retire_as_404s_do(crawls: Crawls) -> None:
    """Found in a classifieds trial: a filled job's page answered 200 with a notice and the spider yielded nothing.
    Such a visit did not move the page's last visit, so every filled job was planned again every day (one from
    day 3 to day 8), a growing share of the budget. While other pages of the type yield their items, each visit
    without them counts as a 404 does: the next waits one period, then two, and the third retires the page."""
    paths = ",".join(f"/page/{n}" for n in range(1, 7))
    crawls.run("COSTSCHED_BUDGET=20", paths=paths)
    crawls.site.sold = {"/page/1", "/page/2"}
    days = [crawls.run("COSTSCHED_BUDGET=20", paths=paths) for _ in range(6)]
    assert [day.hits.get("/page/1", 0) for day in days] == [1, 1, 0, 1, 0, 0]
    assert all(day.hits["/page/6"] == 1 for day in days)  # the pages that are there, every day
    assert [crawls.page(f"/page/{n}")["gone"] for n in (1, 2, 3)] == [True, True, False]
    assert days[3].stats["costsched/empty_gone"] == 2
    assert "'default' pages that yielded none of the items they used to: 2 (" in days[0].log
    assert "while 4 of the type yielded theirs: taken for pages gone that still answer 200" in days[0].log
    assert (f"start URL {crawls.site.url}/page/1 not visited in this run: its last attempt yielded none of the items "
            "it used to (2 in a row), so it waits" in days[2].log), days[2].log[-3000:]
    assert "/page/1 not visited in this run: it yielded none of the items it used to 3 times in a row" in days[4].log


def test_pages_of_a_type_that_all_come_back_without_items_keep_their_visits(crawls: Crawls) -> None:
    """When no page of the type yields its items, a selector that stopped matching is the likelier cause: the pages
    are not struck, and keep being visited, until the spider is fixed."""
    paths = ",".join(f"/page/{n}" for n in range(1, 4))
    crawls.run("COSTSCHED_BUDGET=20", paths=paths)
    crawls.site.sold = {f"/page/{n}" for n in range(1, 4)}
    days = [crawls.run("COSTSCHED_BUDGET=20", paths=paths) for _ in range(2)]
    assert [day.hits.get("/page/1", 0) for day in days] == [1, 1]
    assert "costsched/empty_gone" not in days[1].stats
    warning = "WARNING: costsched: 'default' pages that yielded no items this time, though they used to: 3 ("
    assert all(warning in day.log and "and 0 of the type yielded any" in day.log for day in days)
    assert crawls.page("/page/1")["empty_strikes"] == 0


def test_a_page_redirected_for_good_to_a_page_of_another_kind_is_gone_and_leaves_that_page_its_visit(
        crawls: Crawls) -> None:
    """Found in a classifieds trial: an expired car's page answered 301 to its category, which the crawl knew. Taken
    for a move, the redirect was followed and the category's visit was the car's: the car's callback parsed the
    category (its links unfollowed that day) and the category's record was what that callback made of it."""
    crawls.run("COSTSCHED_BUDGET=20", paths="/page/1,/page/2", hubs="/page/9")
    crawls.site.moved = {"/page/1": "/page/9"}
    run = crawls.run("COSTSCHED_BUDGET=20", "CONCURRENT_REQUESTS=1", paths="/page/1,/page/2")
    assert (run.hits["/page/1"], run.hits["/page/9"]) == (1, 1)
    assert run.stats["costsched/redirected_away"] == 1
    gone = crawls.page("/page/1")
    assert gone["gone"]
    assert gone["moved_to"] == crawls.site.url + "/page/9"
    hub = crawls.page("/page/9")
    assert hub["visits"] == 2
    items = [json.loads(line) for line in (crawls.tmp / "items.jsonl").read_text().splitlines()]
    assert [item.get("hub") for item in items if item["url"].endswith("/page/9")] == [True, True]
    assert "1 gone, redirected for good to a page of another kind" in run.log


def test_the_report_plans_the_next_period_when_what_is_left_of_this_one_pays_for_no_visit(crawls: Crawls) -> None:
    """Found on a trial with a byte budget: each day's run left a few hundred bytes, and the report's next plan,
    made on them, reached none of its rows."""
    paths = ",".join(f"/page/{n}" for n in range(1, 9))
    assert crawls.run("COSTSCHED_BUDGET=5", paths=paths, day=1.0).stats["costsched/period_spent"] == 5
    for budget, day in (("5.5", "2026-01-03"), ("7", "2026-01-02")):  # the next period, or the last run's
        ahead = json.loads(crawls.report("--json", settings=(f"COSTSCHED_BUDGET={budget}",)))
        assert ahead["next_plan_at"].startswith(day), budget
        assert any(row["planned"] for row in ahead["next_plan"]), budget


def test_a_change_of_billing_or_period_length_mid_period_keeps_what_the_period_spent(crawls: Crawls) -> None:
    paths = ",".join(f"/page/{n}" for n in range(1, 9))
    first = crawls.run("COSTSCHED_BUDGET=5", paths=paths, day=1.0)  # a day's budget, all spent
    assert first.stats["costsched/period_spent"] == 5
    # Read before any crawl on new terms, the report counts the period as that crawl will: all spent, so the
    # next plan is the next day's (five requests read as five bytes planned for now).
    ahead = json.loads(crawls.report("--json", settings=("COSTSCHED_BUDGET=40KB", "COSTSCHED_BILLING=bandwidth")))
    assert ahead["next_plan_at"] == "2026-01-03T00:00:00Z"
    assert ahead["next_plan"]
    # Twelve-hour periods from the same morning: the day's period is still running, and all of it was spent.
    halves = crawls.run("COSTSCHED_BUDGET=5", "COSTSCHED_BUDGET_PERIOD=12h", paths=paths, day=1.1)
    assert halves.hits == {}
    assert ("COSTSCHED_BUDGET_PERIOD changed from 1d to 12h while the period it was counting was still running: "
            "it had spent 5 of 5 requests, so 100% of this budget counts as spent (0 requests left in this period)") in halves.log
    # Then bytes: five requests are not five bytes.
    bandwidth = ("COSTSCHED_BUDGET=40KB", "COSTSCHED_BILLING=bandwidth", "COSTSCHED_BUDGET_PERIOD=12h")
    in_bytes = crawls.run(*bandwidth, paths=paths, day=1.15)
    assert in_bytes.hits == {}
    assert "the billing unit (COSTSCHED_BILLING) changed from requests to bytes" in in_bytes.log
    assert "(0 bytes left in this period)" in in_bytes.log
    assert in_bytes.stats["costsched/period_spent_at_start"] == 40_000
    # The next twelve hours are counted in bytes from the start, and the requests' books are kept apart.
    later = crawls.run(*bandwidth, paths=paths, day=1.3)
    assert later.hits
    assert "changed from" not in later.log
    meta = read_state(crawls.tmp / "state.sqlite")["meta"]
    books = {name: value for name, value in meta.items() if name.startswith("accounts:")}
    half = [value for value in books.values() if value["period_seconds"] == 43_200]
    assert sorted((value["unit"], value["superseded"]) for value in half) == [
        ("bytes", False), ("bytes", False), ("requests", True)]
    superseded = next(value for value in half if value["superseded"])
    assert sum(c["spent"] for types in superseded["counters"].values() for c in types.values()) == 0
    # The report shows each unit's periods by start, the half-days with their hours, and what was carried.
    periods = json.loads(crawls.report("--json", settings=bandwidth))["periods"]
    assert [(p["start"], p["seconds"], p["spent"] > 0, p["carried"]) for p in periods] == [
        ("2026-01-02T00:00:00Z", 43_200, False, 40_000), ("2026-01-02T12:00:00Z", 43_200, True, 0)]
    requests = json.loads(crawls.report("--json"))["periods"]
    assert [(p["seconds"], p["spent"], p["carried"]) for p in requests] == [(43_200, 0, 5), (86_400, 5, 0)]
    table = crawls.report(settings=bandwidth)
    lines = table.splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("2026-01-02"))
    assert lines[row].startswith("2026-01-02 00:00") or lines[row + 1].startswith("00:00")  # its hour, wrapped or not
    assert " 0 B " in lines[row]
    assert "(+40.00 kB" in table  # below the spend, wrapped within 100 columns
    assert "carried)" in table
    assert max(map(len, lines[1:])) <= 100


def test_a_budget_set_after_a_shadow_run_in_the_same_period_says_nothing_is_left_and_why(crawls: Crawls) -> None:
    paths = ",".join(f"/page/{n}" for n in range(1, 5))
    shadow = crawls.run(paths=paths, day=1.0)
    spent = shadow.stats["costsched/period_spent"]
    assert spent == 5  # four pages and robots.txt
    budgeted = crawls.run("COSTSCHED_BUDGET=3", paths=paths, day=1.2)
    assert budgeted.hits == {}
    assert f"budget 3 requests per period, 0 requests left in this period ({spent:g} spent, over this budget)" \
        in budgeted.log
    assert "left in this period in this period" not in budgeted.log
    assert ("start URL " + crawls.site.url + "/page/1 not visited in this run: nothing was left of the period's "
            "budget when the run started") in budgeted.log
    assert "ranks below" not in budgeted.log
    # The report says the period's spend was the shadow run's, not an overspent budget.
    period = json.loads(crawls.report("--json"))["periods"][0]
    assert (period["budget"], period["spent"], period["shadow_spent"], period["shadow"]) == (3, spent, spent, False)
    assert f"({spent:g} in shadow runs)" in crawls.report()  # below the spend (the note wraps within 100 columns)
    crawls.report("--html", str(crawls.tmp / "report.html"))
    assert f"{spent:g} in shadow runs</span>" in (crawls.tmp / "report.html").read_text(encoding="utf-8")
    assert crawls.run("COSTSCHED_BUDGET=3", paths=paths, day=2.2).hits  # the next period's budget is whole


def test_a_budget_lowered_below_the_period_s_spend_leaves_nothing_and_says_so(crawls: Crawls) -> None:
    paths = ",".join(f"/page/{n}" for n in range(1, 9))
    crawls.run("COSTSCHED_BUDGET=6", paths=paths, day=1.0)
    lowered = crawls.run("COSTSCHED_BUDGET=4", paths=paths, day=1.2)
    assert lowered.hits == {}
    assert "budget 4 requests per period, 0 requests left in this period (6 spent, over this budget)" in lowered.log
    assert "-2 requests" not in lowered.log
    raised = crawls.run("COSTSCHED_BUDGET=8", paths=paths, day=1.3)
    assert raised.stats["costsched/spent"] == 2
    assert "budget 8 requests per period, 2 requests left in this period" in raised.log


def test_a_resumed_jobdir_crawl_spends_within_the_budget_and_fetches_each_page_once(crawls: Crawls) -> None:
    """A crawl stopped early with JOBDIR leaves its admitted requests in the disk queue. Resumed, they
    are offered to the plan again, as the spider's own requests are: not sent past the budget, nor next
    to the same pages re-issued from the plan, and their reservations and visits are this run's."""
    paths = ",".join(f"/page/{n}" for n in range(1, 9))
    crawls.run("COSTSCHED_BUDGET=50", paths=paths)
    jobdir, budget = f"JOBDIR={crawls.tmp / 'job'}", "COSTSCHED_BUDGET=6"
    stopped = crawls.run(budget, jobdir, "CLOSESPIDER_PAGECOUNT=2", "CONCURRENT_REQUESTS=1", paths="", day=2.0)
    assert "Closing spider (closespider_pagecount)" in stopped.log
    assert stopped.stats["costsched/unsent_at_close"] >= 1  # admitted, left in the disk queue
    resumed = crawls.run(budget, jobdir, paths="", day=2.2)  # the same budget period
    assert "Resuming crawl" in resumed.log
    pages = [path for run in (stopped, resumed) for path, n in run.hits.items() for _ in range(n)
             if path.startswith("/page/")]
    assert len(pages) == len(set(pages)) == 4  # the period's budget: robots.txt in each run and four pages
    assert resumed.stats["costsched/period_spent"] == 6
    assert resumed.stats["costsched/resumed"] >= 1
    assert "costsched/duplicate_fetch" not in resumed.stats
    outcomes = sum(resumed.stats.get(f"costsched/{outcome}", 0) for outcome in ("baseline", "changed", "unchanged"))
    assert outcomes == resumed.stats["costsched/visits"] == len(resumed.hits) - ("/robots.txt" in resumed.hits)


def test_a_resumed_jobdir_crawl_in_shadow_mode_sends_what_plain_scrapy_would_as_visits_of_its_own(
        crawls: Crawls) -> None:
    """Without a budget the requests left in the disk queue go out as they would without the add-on, each a
    visit of this run: the stopped run's visit numbers in their meta must not pass for this run's."""
    paths = ",".join(f"/page/{n}" for n in range(1, 9))
    jobdir = f"JOBDIR={crawls.tmp / 'job'}"
    stopped = crawls.run(jobdir, "CLOSESPIDER_PAGECOUNT=2", "CONCURRENT_REQUESTS=1", paths=paths)
    resumed = crawls.run(jobdir, paths=paths, day=1.2)
    assert "Resuming crawl" in resumed.log
    pages = [path for run in (stopped, resumed) for path, n in run.hits.items() for _ in range(n)
             if path.startswith("/page/")]
    assert sorted(pages) == sorted(set(pages)) == paths.split(",")  # each page once, as plain Scrapy would
    assert resumed.stats["costsched/resumed"] == len(resumed.hits) - ("/robots.txt" in resumed.hits)
    assert "costsched/duplicate_fetch" not in resumed.stats
    assert resumed.stats["costsched/baseline"] == resumed.stats["costsched/visits"] == resumed.stats["costsched/resumed"]


def test_the_report_tells_re_baselined_pages_from_new_ones(crawls: Crawls) -> None:
    """Ignoring a field re-baselines the known pages: neither new nor changed, in the report as in the log."""
    crawls.run("COSTSCHED_BUDGET=10", paths="/page/1,/page/2")
    second = crawls.run("COSTSCHED_BUDGET=10", 'COSTSCHED_IGNORE_FIELDS=["title"]', paths="/page/1,/page/2,/page/3")
    assert "1 new pages" in second.log
    assert "2 re-baselined" in second.log
    periods = json.loads(crawls.report("--json"))["periods"]
    assert [(p["figures"]["new"], p["figures"]["rebaselined"]) for p in periods] == [(2, 0), (1, 2)]
    report = crawls.report()
    assert "; 2 re-baselined (not new, not comparable with their last record" in " ".join(report.split())
    assert max(map(len, report.splitlines()[1:])) <= 100  # below the title, which names the state's path


def test_a_site_behind_a_login_gets_its_planned_pages_once_the_spider_has_logged_in(crawls: Crawls) -> None:
    """Found in a trial with a members-only catalogue: the spider logs in first (a form, then its POST), and the
    scheduler re-issued the planned product pages at once, before the POST, so each was redirected to the log-in
    page (24 of 30 requests on one day). The log-in requests, marked ``costsched_session``, now go first and the
    planned pages wait for them; they are charged, and not pages: never planned, re-issued or recorded."""
    paths = ",".join(f"/members/{n}" for n in range(1, 9))
    first = crawls.run("COSTSCHED_BUDGET=20", paths=paths, login="1")
    assert first.hits["POST /login"] == 1
    crawls.site.version = 1
    second = crawls.run("COSTSCHED_BUDGET=20", paths=paths, login="1")
    assert not [path for path in second.hits if path.startswith("/login?next=")], second.hits
    assert second.hits["POST /login"] == 1
    assert {path: second.hits.get(path) for path in paths.split(",")} == dict.fromkeys(paths.split(","), 1)
    assert first.stats["costsched/session_steps"] == 3  # the form, its POST and the POST's redirect
    assert first.stats["costsched/visits"] == 8
    assert second.stats["costsched/changed"] == 8
    assert second.stats["costsched/plan/planned"] == 8  # the members' pages only
    assert "3 requests for session steps (as many as the last run's)" in second.log
    assert second.stats["costsched/spent"] == 12  # robots.txt, three session steps, eight pages
    assert "spent 12 requests, 3 requests of them on session steps (1.5 requests per change)" in second.log
    assert "spider_exceptions" not in json.dumps(second.stats)
    pages = read_state(crawls.tmp / "state.sqlite")["pages"].values()
    assert sorted(page["url"].removeprefix(crawls.site.url) for page in pages) == sorted(paths.split(","))


def test_pages_recorded_for_log_in_requests_before_they_were_marked_are_not_replayed(crawls: Crawls) -> None:
    """A spider that logged in without marking its requests left the log-in form, its POST (with that day's form
    token) and the welcome page in the state as pages: replayed, the stale POST fails. Once the spider marks
    its log-in requests, pages of their method, URL and callback are no longer re-issued."""
    paths = "/members/1,/members/2"
    unmarked = crawls.run("COSTSCHED_BUDGET=20", paths=paths, login="unmarked")
    assert unmarked.hits["POST /login"] == 1
    marked = crawls.run("COSTSCHED_BUDGET=20", paths=paths, login="1")
    assert (marked.hits["/login"], marked.hits["POST /login"]) == (1, 1)  # the spider's own; neither replayed
    assert marked.stats["costsched/skipped/session_step"] == 2  # the form's page and the POST's
    later = crawls.run("COSTSCHED_BUDGET=20", paths=paths, login="1")
    assert later.stats["costsched/plan/known_pages"] == 2  # they wait as retired pages do
    assert "costsched/skipped/session_step" not in later.stats


def test_a_log_in_form_among_the_start_urls_is_taken_for_a_session_step_once_its_callback_yields_one(
        crawls: Crawls) -> None:
    """Scrapy's docs log in from a form in ``start_urls``, whose request a spider cannot mark: its callback marks the
    POST alone. The form's page then went out as a page, and the planned pages with it, before the POST. A start
    URL whose callback yields a session step is taken for one from the next run on."""
    paths = ",".join(f"/members/{n}" for n in range(1, 5))
    first = crawls.run("COSTSCHED_BUDGET=20", paths=paths, login="post")
    assert f"start URL {crawls.site.url}/login leads to session steps (costsched_session): from the next run on" \
        in first.log
    crawls.site.version = 1
    second = crawls.run("COSTSCHED_BUDGET=20", paths=paths, login="post")
    assert not [path for path in second.hits if path.startswith("/login?next=")], second.hits
    assert (second.hits["/login"], second.hits["POST /login"]) == (1, 1)
    assert second.stats["costsched/session_steps"] == 3
    assert second.stats["costsched/changed"] == 4
    assert "leads to session steps" not in second.log


def test_a_jobdir_kept_from_day_to_day_lets_the_log_in_through_each_day(crawls: Crawls) -> None:
    """Found in the members-only catalogue's trial: with the same ``JOBDIR`` the next day, its ``requests.seen``
    dropped the redirect the log-in POST answers with (seen the day before), so the spider's ``after_login``
    never ran (here, where the form's request is not ``dont_filter``, the form too). Session steps now pass it
    as planned visits do, once per run."""
    paths = "/members/1,/members/2"
    job = f"JOBDIR={crawls.tmp / 'job'}"
    first = crawls.run("COSTSCHED_BUDGET=20", job, paths=paths, login="1")
    assert first.hits["/welcome"] == 1
    second = crawls.run("COSTSCHED_BUDGET=20", job, paths=paths, login="1")
    assert (second.hits.get("/login"), second.hits.get("POST /login"), second.hits.get("/welcome")) == (1, 1, 1)
    assert "dupefilter/filtered" not in second.stats
    assert second.stats["costsched/session_steps"] == 3


def test_the_plan_says_how_many_pages_found_were_never_fetched_and_how_many_of_them_it_reaches(crawls: Crawls) -> None:
    """Found in a trial: discovery fell behind (the lists kept naming 20 new jobs a day, the plans reached 6) and
    nothing said so. The plan's line and stats count the known pages never fetched and those it plans."""
    paths = ",".join(f"/page/{n}" for n in range(1, 9))
    first = crawls.run("COSTSCHED_BUDGET=3", paths=paths)
    fetched = first.stats["costsched/baseline"]
    later = crawls.run("COSTSCHED_BUDGET=4", paths=paths)
    never, planned = later.stats["costsched/plan/never_fetched"], later.stats["costsched/plan/never_fetched_planned"]
    assert never == 8 - fetched
    assert 0 < planned < never
    assert re.search(rf"planned \d+ of 8 known pages \(\d+ ranked; {planned} of the {never} never fetched\)", later.log)
    assert "costsched/plan/never_fetched_tried" not in later.stats  # none was tried: all are discovery's backlog
