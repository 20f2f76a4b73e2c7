"""The crawl's view of host health: what attempts say about each host, what that does to prices and plans,
and Retry-After pauses enforced where requests leave.

The state is the host book's (:class:`~.hosts.HostBook`, one :class:`~.model.health.HostHealth` per
host); the rules are :mod:`~.model.health` and :mod:`~.model.capacity`; the download slots are held by
:mod:`~.slots`. With ``COSTSCHED_HEALTH = False`` nothing here changes a price, a plan or a request.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from scrapy.utils.httpobj import urlparse_cached

from scrapy_costsched.learner import DAY
from scrapy_costsched.model.capacity import host_capacity
from scrapy_costsched.model.health import OK, outage_pages, outage_pause, outcome_of, visit_cost
from scrapy_costsched.slots import SlotHolds
from scrapy_costsched.visits import PAGE_META

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy import Request
    from scrapy.crawler import Crawler

    from scrapy_costsched.billing import BillingModel
    from scrapy_costsched.hosts import HostBook
    from scrapy_costsched.settings import Config

logger = logging.getLogger(__name__)

__all__ = ["Health"]


class Health:
    """Per-host health of one crawl: attempts in, prices, capacities and pauses out."""

    def __init__(self, crawler: Crawler, config: Config, billing: BillingModel, hosts: HostBook,
                 clock: Callable[[], float]) -> None:
        self.crawler = crawler
        self.config = config
        self.billing = billing
        self.hosts = hosts
        self.stats = hosts.stats
        self.clock = clock
        self.slots = SlotHolds(crawler)
        self._started: dict[int, float] = {}  # id(request) -> when a download handler took it (monotonic)
        self._priced_failures: dict[str, float] = {}  # host -> failed attempts a success was first priced with
        # host -> the pages a streak of failures must reach to take it for down, and the URLs that failed since
        # its last answer
        self._failing: dict[str, tuple[int, set[str]]] = {}

    def _today(self) -> float:
        return self.clock() / DAY

    # -- attempts ----------------------------------------------------------

    def reached(self, request: Request) -> None:
        """A download handler took *request*: its latency runs from now."""
        self._started[id(request)] = time.monotonic()

    def attempt(self, request: Request, status: int | None, billed: float) -> None:
        """*request* left the downloader with *status* (``None``: no answer) having moved *billed* bytes.

        A failure that lasted the whole download timeout was a timeout; any other one a connection failure.
        """
        started = self._started.pop(id(request), None)
        elapsed = time.monotonic() - started if started is not None else None
        timeout = request.meta.get("download_timeout") or self.crawler.settings.getfloat("DOWNLOAD_TIMEOUT")
        timed_out = status is None and elapsed is not None and timeout and elapsed >= 0.99 * timeout
        outcome = outcome_of(status, "timeout" if timed_out else None)
        host = urlparse_cached(request).hostname or ""
        # The server's latency as the download handler measured it (request sent to headers back), not
        # the time since the slot took the request, which includes its DOWNLOAD_DELAY queue.
        latency = request.meta.get("download_latency") if status is not None else None
        page = PAGE_META in request.meta  # not robots.txt, which a site in maintenance may still serve
        # Whether a streak of failures may take the host for down (shadow mode sends what plain Scrapy sends).
        watched = page and self.config.health and not self.config.shadow
        if watched and outcome != OK and host not in self._failing:  # a streak begins: how long it must be to count
            health = self.hosts.health_of(host)
            self._failing[host] = (1 if health.outages else outage_pages(health.p_success(self._today())), set())
        self.hosts.attempt(host, outcome, self._today(), billed, latency if isinstance(latency, (int, float)) else None,
                           page)
        if not watched:
            return
        if outcome == OK:
            self._failing.pop(host, None)
        else:
            self._failed(request, host, f"HTTP {status}" if status is not None else f"a {outcome} failure")

    def _failed(self, request: Request, host: str, how: str) -> None:
        """*request*'s attempt at *host* failed (*how*): a host whose distinct pages keep failing with no answer
        between (:func:`~.model.health.outage_pages`) is taken for down and paused
        (:func:`~.model.health.outage_pause`), its visits kept for a later run rather than spent on it. After
        an outage one failing page is enough (the probe of a circuit breaker). Failures while the host is paused
        (a Retry-After it sent with the answer, requests that were on the wire) tell nothing more."""
        if self.pause_left(host) > 0:
            return
        needed, failing = self._failing[host]
        failing.add(request.url)
        if len(failing) < needed:
            return
        del self._failing[host]
        outages = self.hosts.health_of(host).outages
        seconds = outage_pause(outages + 1, self.config.max_retry_after)
        if self.hosts.block(host, time.time() + seconds, outage=True):
            logger.info("costsched: %s failed %s with no answer between (the last: %s): taken for down, nothing "
                        "goes to it for %.0f s", host, "again" if outages else f"{needed} pages in a row", how, seconds)
        self.hold_slot(request, self.hosts.blocked_for(host, time.time()))

    # -- prices ------------------------------------------------------------

    def expected_failures(self, host: str) -> float:
        """Failed attempts a success at *host* is expected to take (0 with health off). The first figure of
        the run is remembered, so :meth:`cost_now` can tell how far a host's visits went up since."""
        health = self.hosts.health.get(host) if self.config.health else None
        failures = health.expected_failures(self._today()) if health is not None else 0.0
        self._priced_failures.setdefault(host, failures)
        return failures

    def failure_cost(self, host: str) -> float:
        """What one failed attempt at *host* costs, as the billing model bills a 429 of its usual size
        (bytes under bandwidth, a request under requests, nothing under credits)."""
        return self.billing.attempt_cost(429, round(self.hosts.health_of(host).failed_size))

    def priced(self, host: str, cost: float) -> float:
        """*cost*, a successful visit's, with the failed attempts *host* is expected to take before it."""
        failures = self.expected_failures(host)
        return visit_cost(cost, self.failure_cost(host), failures) if failures else cost

    def cost_now(self, host: str, planned: float) -> float:
        """What a visit of *host* priced at *planned* in this run costs at the host's health now."""
        health = self.hosts.health.get(host) if self.config.health else None
        if health is None:
            return planned
        failure_cost = self.failure_cost(host)
        success = planned - failure_cost * self._priced_failures.get(host, 0.0)
        return visit_cost(success, failure_cost, health.expected_failures(self._today()))

    def worsened(self) -> bool:
        """Whether some host's visits cost more now than when they were priced in this run."""
        today = self._today()
        return self.config.health and any(self.hosts.health_of(host).expected_failures(today) > failures
                                           for host, failures in self._priced_failures.items())

    def capacity(self, host: str) -> int:
        """Visits *host*'s download slot can make in this run (:mod:`~.model.capacity`): its concurrency and
        delay (``DOWNLOAD_SLOTS``, else ``CONCURRENT_REQUESTS_PER_DOMAIN`` and ``DOWNLOAD_DELAY``, AutoThrottle's
        start delay if larger) over the run's length (``CLOSESPIDER_TIMEOUT``, else the budget period), less
        a Retry-After pause the run will not wait out."""
        settings = self.crawler.settings
        slot = (settings.getdict("DOWNLOAD_SLOTS") or {}).get(host) or {}
        delay = float(slot.get("delay", settings.getfloat("DOWNLOAD_DELAY")))
        if settings.getbool("AUTOTHROTTLE_ENABLED"):
            delay = max(delay, settings.getfloat("AUTOTHROTTLE_START_DELAY"))
        concurrency = int(slot.get("concurrency", settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN")))
        run_seconds = settings.getfloat("CLOSESPIDER_TIMEOUT") or self.config.budget_period
        health = self.hosts.health.get(host) if self.config.health else None
        if health is not None:
            pause = self.pause_left(host)
            run_seconds = 0.0 if pause > self.config.block_wait else run_seconds - pause
        return host_capacity(run_seconds, concurrency, delay, health.latency if health is not None else None)

    def down(self, host: str) -> bool:
        """Whether *host* is paused because it is taken for down (rather than because it asked)."""
        health = self.hosts.health.get(host)
        return health is not None and health.outage and self.pause_left(host) > 0

    def pause_reason(self, host: str) -> str:
        """Why *host* is paused, to follow its name: it asked (Retry-After), or it is taken for down."""
        health = self.hosts.health.get(host)
        if health is not None and health.outage:
            return "is taken for down (its pages failed in a row) for a pause"
        return "asked for a pause (Retry-After)"

    def pause_left(self, host: str) -> float:
        """Seconds of *host*'s Retry-After pause still to run (0 with health off). A pause is the server's
        word in real time, so it keeps the real clock whatever ``COSTSCHED_CLOCK`` says."""
        return self.hosts.blocked_for(host, time.time()) if self.config.health else 0.0

    # -- pauses ------------------------------------------------------------

    def blocked_for(self, request: Request) -> float:
        """Seconds before *request*'s host may be sent anything (its Retry-After); 0 with health off."""
        return self.pause_left(urlparse_cached(request).hostname or "")

    def pause(self, request: Request, status: int, seconds: float | None) -> None:
        """*request* was answered *status* with a ``Retry-After`` of *seconds* (``None``: none): pause its
        host if that is a 429 or 503 (capped by ``COSTSCHED_MAX_RETRY_AFTER``) and hold its download slot
        (nothing to obey with health off)."""
        if not self.config.health or status not in (429, 503) or not seconds:
            return
        if seconds > self.config.max_retry_after:
            self.stats.inc_value("costsched/retry_after/capped")
            seconds = self.config.max_retry_after
        host = urlparse_cached(request).hostname or ""
        if self.hosts.block(host, time.time() + seconds):
            logger.info("costsched: %s asked for a pause (%d, Retry-After): nothing goes to it for %.0f s",
                        host, status, seconds)
        self.hold_slot(request, self.hosts.blocked_for(host, time.time()))

    def hold_slot(self, request: Request, seconds: float) -> None:
        """Send nothing more from *request*'s download slot for *seconds* (:mod:`~.slots`); what waits in the
        slot leaves it when this run will not wait that long."""
        if seconds > 0 and self.slots.hold(request, seconds, release_queued=seconds > self.config.block_wait):
            self.stats.inc_value("costsched/retry_after/slot_held")
