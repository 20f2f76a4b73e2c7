"""Host health in real crawls: Retry-After obeyed where requests leave, what failed and rendered attempts bill.

A loopback host throttles (429 with Retry-After after a few page requests) beside a healthy one, and
logs when each request arrived and whether a pause it had announced was still running: that log is
the truth "no request reaches the host before the time given" is checked against, for the add-on and
for plain Scrapy on the same site.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import pytest

from tests.helpers import ROOT
from tests.mockserver import ThrottlingSite

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

PAGES = 20
#: A polite crawl's delay between requests to a host. Without one, up to CONCURRENT_REQUESTS_PER_DOMAIN
#: requests are on the wire when a 429 comes back, and they arrive after it whatever the crawler does.
POLITE = "DOWNLOAD_DELAY=0.1"


def crawl_pages(tmp: Path, sites: list[ThrottlingSite], *settings: str, pages: int = PAGES,
                render: bool = False, gives_up: bool = False) -> dict[str, Any]:
    """``scrapy runspider tests/health_spider.py`` over every page of *sites*; its stats (and ``_log``).

    Only with *gives_up* may RetryMiddleware give up on a request (which it logs as an error)."""
    stats_file = tmp / "stats.json"
    cmd = [sys.executable, "-m", "scrapy", "runspider", str(ROOT / "tests" / "health_spider.py"),
           "-a", f"sites={','.join(site.url for site in sites)}", "-a", f"pages={pages}",
           "-a", f"stats_file={stats_file}", "-s", f"COSTSCHED_STATE={tmp / 'state.sqlite'}"]
    if render:
        cmd += ["-a", "render=1"]
    for setting in settings:
        cmd += ["-s", setting]
    proc = subprocess.run(cmd, cwd=tmp, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    stats: dict[str, Any] = json.loads(stats_file.read_text())
    assert gives_up or "log_count/ERROR" not in stats, proc.stderr[-3000:]
    stats["_log"] = proc.stderr
    return stats


@pytest.fixture
def throttled() -> Iterator[ThrottlingSite]:
    site = ThrottlingSite("127.0.0.1", quota=5, retry_after=2.0)
    yield site
    site.close()


@pytest.fixture
def healthy() -> Iterator[ThrottlingSite]:
    site = ThrottlingSite("127.0.0.2")
    yield site
    site.close()


def test_no_request_reaches_a_host_inside_its_retry_after_and_plain_scrapy_sends_some(
        throttled: ThrottlingSite, healthy: ThrottlingSite, tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    (tmp_path / "costsched").mkdir()
    crawl_pages(tmp_path / "plain", [throttled, healthy], "COSTSCHED_ENABLED=False", POLITE, gives_up=True)
    plain_inside, plain_429 = throttled.inside_pause, sum(status == 429 for _, _, status, _ in throttled.log)
    throttled.log.clear()
    stats = crawl_pages(tmp_path / "costsched", [throttled, healthy], "COSTSCHED_BUDGET=1000", POLITE)
    host = "127.0.0.1"
    assert stats[f"costsched/hosts/{host}/retry_after"] >= 1
    assert stats[f"costsched/hosts/{host}/held"] >= 1  # retries waited in the scheduler, not in a download slot
    assert throttled.inside_pause == 0, throttled.log
    assert plain_429 >= 1
    assert plain_inside >= 1  # plain Scrapy retries straight through the pause
    # The run waited the pauses out: the throttled host's pages were fetched after all.
    assert sum(status == 200 for _, _, status, _ in throttled.log) == PAGES
    assert stats[f"costsched/hosts/{host}/health"] < stats["costsched/hosts/127.0.0.2/health"] == 1.0
    assert stats[f"costsched/hosts/{host}/failures/throttled"] >= 1
    print(f"\nrequests inside Retry-After: plain Scrapy {plain_inside} (of {plain_429} answered 429), "
          f"costsched {throttled.inside_pause}")


def test_a_retry_after_given_as_a_date_is_obeyed(healthy: ThrottlingSite, tmp_path: Path) -> None:
    site = ThrottlingSite("127.0.0.3", quota=4, retry_after=2.0, as_date=True)
    try:
        stats = crawl_pages(tmp_path, [site, healthy], "COSTSCHED_BUDGET=1000", POLITE, pages=10)
    finally:
        site.close()
    assert stats["costsched/hosts/127.0.0.3/retry_after"] >= 1
    assert site.inside_pause == 0, site.log


def test_a_pause_longer_than_the_run_waits_releases_its_visits_to_the_next_run(
        healthy: ThrottlingSite, tmp_path: Path) -> None:
    site = ThrottlingSite("127.0.0.4", quota=3, retry_after=600.0)
    try:
        stats = crawl_pages(tmp_path, [site, healthy], "COSTSCHED_BUDGET=1000", "COSTSCHED_BLOCK_WAIT=1", POLITE)
    finally:
        site.close()
    assert site.inside_pause == 0
    assert stats["costsched/retry_after/released"] >= 1
    assert "not sent in this run" in stats["_log"]
    assert "Spider closed (finished)" in stats["_log"]
    # What was released went back to the period's budget: the ledger holds what reached the servers (their
    # pages and two robots.txt), and no more.
    assert stats["costsched/period_spent"] == len(site.log) + len(healthy.log) + 2 == stats["downloader/response_count"]
    assert len(site.log) < PAGES


def test_an_absurd_retry_after_is_capped(tmp_path: Path, healthy: ThrottlingSite) -> None:
    site = ThrottlingSite("127.0.0.5", quota=3, retry_after=1.0)
    site.announce = "999999999"  # the host pauses 1 s but asks for 31 years
    try:
        stats = crawl_pages(tmp_path, [site, healthy], "COSTSCHED_BUDGET=1000", "COSTSCHED_MAX_RETRY_AFTER=2",
                            POLITE, pages=8)
    finally:
        site.close()
    assert stats["costsched/retry_after/capped"] >= 1
    assert site.inside_pause == 0
    assert sum(status == 200 for _, _, status, _ in site.log) == 8  # capped to 2 s, so the run waited it out


def test_health_off_sends_requests_inside_the_pause(throttled: ThrottlingSite, healthy: ThrottlingSite,
                                                    tmp_path: Path) -> None:
    stats = crawl_pages(tmp_path, [throttled, healthy], "COSTSCHED_BUDGET=1000", "COSTSCHED_HEALTH=False", POLITE,
                        gives_up=True)
    assert throttled.inside_pause >= 1
    assert "costsched/hosts/127.0.0.1/retry_after" not in stats


#: More than any attempt at the throttling site moves: a page of 1.2 kB, its headers and the request's.
MAX_ATTEMPT_BYTES = 2000


@pytest.mark.parametrize(("billing", "budget", "amount", "attempt_cost", "pages"), [
    ("requests", "12", 12, 1, PAGES), ("credits", "12", 12, 1, PAGES),
    # Above the 64 kB a page of an unknown kind is planned at until one is fetched.
    ("bandwidth", "100kB", 100_000, MAX_ATTEMPT_BYTES, 60)])
def test_the_ledger_overspends_by_no_more_than_the_requests_in_flight(
        billing: str, budget: str, amount: float, attempt_cost: float, pages: int, throttled: ThrottlingSite,
        healthy: ThrottlingSite, tmp_path: Path) -> None:
    """Two runs in one period with retries (the throttled host's 429s): the period's spend stays within its
    budget plus what the requests in flight at the moment it ran out could cost."""
    settings = (f"COSTSCHED_BILLING={billing}", f"COSTSCHED_BUDGET={budget}", "COSTSCHED_CLOCK=tests.helpers.fake_now",
                "CONCURRENT_REQUESTS=4")
    # RetryMiddleware may give up on a page the throttled host keeps refusing: still charged, every attempt.
    first = crawl_pages(tmp_path, [throttled, healthy], *settings, pages=4, gives_up=True)  # within the budget
    second = crawl_pages(tmp_path, [throttled, healthy], *settings, pages=pages, gives_up=True)  # resumes, runs out
    in_flight = 4 * attempt_cost  # CONCURRENT_REQUESTS attempts at most
    assert 0 < second["costsched/period_spent_at_start"] == first["costsched/period_spent"] < amount
    assert second.get("costsched/skipped/budget", 0) + second.get("costsched/skipped/discovery_deferred", 0) > 0
    assert amount - attempt_cost <= second["costsched/period_spent"] <= amount + in_flight
