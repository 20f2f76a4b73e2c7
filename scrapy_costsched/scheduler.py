"""CostAwareScheduler: spends each period's budget on the visits worth most per cost."""

from __future__ import annotations

import gc
import heapq
import itertools
import logging
import math
import time
from array import array
from collections import Counter, deque
from datetime import datetime, timezone
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.core.scheduler import BaseScheduler
from scrapy.dupefilters import BaseDupeFilter
from scrapy.exceptions import DontCloseSpider
from scrapy.extensions.httpcache import DummyPolicy
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.misc import build_from_crawler, load_object

from scrapy_costsched.ledger import amount
from scrapy_costsched.loop import in_thread
from scrapy_costsched.model.health import OUTCOMES
from scrapy_costsched.model.planning import leads_to_new_pages, make_plan
from scrapy_costsched.model.scoring import Candidate, discovery_spend, rank, rank_head, score
from scrapy_costsched.preselection import Unread
from scrapy_costsched.sessions import SESSION_META, SESSION_STEP_META
from scrapy_costsched.tracker import DAY, GONE_AFTER, GONE_RECHECK_PERIODS, Tracker
from scrapy_costsched.visits import PAGE_META, REASON_META, REFUSED_META, RUN_META, SUBREQUEST_META, VISIT_META

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings
    from twisted.internet.defer import Deferred
    from typing_extensions import Self

logger = logging.getLogger(__name__)

#: Refresh visits re-issued from templates queue behind what the spider yields
#: (hubs first: they discover), so their priority is lowered by this much.
REFRESH_PRIORITY_OFFSET = -10
#: Requests moved from the plan into the wrapped scheduler at a time.
TOP_UP = 64
#: Visits the plan left out that a sick host's visit is weighed against before it may sink.
SINK_WINDOW = 16
#: How the log says a page gone that still answers 200 answered (:meth:`Tracker._judge_emptied`).
EMPTY_ANSWERS = "yielded none of the items it used to"

_DEFEATING_MIDDLEWARES = {
    "scrapy_deltafetch.DeltaFetch": ("DELTAFETCH_ENABLED", "scrapy-deltafetch skips every URL it has seen once"),
    "scrapy_deltafetch.middleware.DeltaFetch": ("DELTAFETCH_ENABLED",
                                                "scrapy-deltafetch skips every URL it has seen once"),
    "scrapy_crawl_once.CrawlOnceMiddleware": ("CRAWL_ONCE_ENABLED",
                                              "scrapy-crawl-once skips every request it has crawled once"),
    "scrapy_crawl_once.middlewares.CrawlOnceMiddleware": ("CRAWL_ONCE_ENABLED",
                                                          "scrapy-crawl-once skips every request it has crawled once"),
}


def check_revisit_settings(settings: BaseSettings) -> None:
    """Refuse add-ons that skip every URL seen once; they defeat revisits by design."""
    for setting in ("SPIDER_MIDDLEWARES", "DOWNLOADER_MIDDLEWARES"):
        for component, order in settings.getwithbase(setting).items():
            name = component if isinstance(component, str) else f"{component.__module__}.{component.__qualname__}"
            if order is None or name not in _DEFEATING_MIDDLEWARES:
                continue
            switch, why = _DEFEATING_MIDDLEWARES[name]
            if settings.getbool(switch, True):
                raise ValueError(
                    f"{setting} enables {name}, and {why}, so known pages would never be revisited. "
                    f"Remove it or set {switch} = False while COSTSCHED_ENABLED is on."
                )
    if settings.get("JOBDIR"):
        logger.info(
            "costsched: JOBDIR is set; its requests.seen would drop re-yielded URLs, so CostAwareScheduler "
            "lets the visits it plans and the session steps past the duplicate filter and deduplicates them "
            "itself, by fingerprint, once per run."
        )


def check_http_cache(settings: BaseSettings, budget_period: float) -> None:
    """Warn when the HTTP cache would answer revisits with a copy from an earlier period: then no change
    and no new link is ever seen, and every cached visit is free, so the plan runs through all pages."""
    if not settings.getbool("HTTPCACHE_ENABLED"):
        return
    policy = load_object(settings.get("HTTPCACHE_POLICY"))
    expiration = settings.getint("HTTPCACHE_EXPIRATION_SECS")
    if issubclass(policy, DummyPolicy) and (expiration <= 0 or expiration >= budget_period):
        logger.warning(
            "costsched: the HTTP cache (HTTPCACHE_ENABLED, %s) keeps pages for %s, so revisits in later periods "
            "get the cached copy and see no change; set HTTPCACHE_EXPIRATION_SECS below COSTSCHED_BUDGET_PERIOD "
            "(%g s) or turn the cache off for recurring crawls.", policy.__name__,
            "ever" if expiration <= 0 else f"{expiration} s", budget_period)


class PlannedVisitsPass(BaseDupeFilter):
    """The wrapped scheduler's duplicate filter, except for the visits and session steps CostAwareScheduler let
    out.

    Those go out once per run (the scheduler deduplicates visits by fingerprint, this filter session steps), so
    a filter that remembers across runs (``JOBDIR``'s ``requests.seen``) must not drop them; they are still
    shown to it, so it keeps its record. Unlike ``dont_filter``, this leaves ``allowed_domains``
    (OffsiteMiddleware) in force. Found on a trial: with a ``JOBDIR`` kept from day to day, the redirect a
    log-in POST answers with was dropped as seen the day before, and the spider never got past its log-in.
    """

    def __init__(self, inner: BaseDupeFilter, fingerprint: Callable[[Request], str]) -> None:
        self.inner = inner
        self._fingerprint = fingerprint
        self._session_steps: set[str] = set()  # this run's, by fingerprint

    def request_seen(self, request: Request) -> bool:
        seen = self.inner.request_seen(request)
        if SESSION_STEP_META in request.meta:
            key = self._fingerprint(request)
            seen = key in self._session_steps
            self._session_steps.add(key)
            return seen
        return seen and VISIT_META not in request.meta

    def open(self) -> Deferred[None] | None:
        return self.inner.open()

    def close(self, reason: str) -> Deferred[None] | None:
        return self.inner.close(reason)

    def log(self, request: Request, spider: Spider) -> None:
        self.inner.log(request, spider)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _Ranking:
    """The ranking, best first, as the plan reads it: each candidate's key, index, cost and whether its
    page was never fetched.

    Parallel arrays rather than the candidates: a plan ranks every known page, and a few hundred
    thousand live tuples would be scanned by every full garbage collection for the rest of the
    crawl. The keys are a tuple of strings, which the collector stops tracking.

    Only the head of the ranking that the budget can reach is ranked when the plan is made
    (:func:`~.scoring.rank_head`); the candidates below it (:attr:`rest`) are ranked a head at a time
    if the plan is extended that far, and new URLs discovery could not pay for (:attr:`tail`) after
    every known page. Where the plan did not read every known page (:mod:`~.preselection`), the pages
    it left unread (:attr:`unread`, all below the head) are read with the rest a head at a time, as much
    of them as can reach the head the budget left asks for, as of the plan's time (:attr:`read_at`).
    """

    def __init__(self) -> None:
        self.keys: tuple[str, ...] = ()
        self.indices = array("d")
        self.costs = array("d")
        self.never_fetched = bytearray()
        # What the new pages each visit is expected to reveal will cost (:func:`~.scoring.discovery_spend`), and
        # whether it is a hub's (:func:`~.planning.leads_to_new_pages`).
        self.reveals = array("d")
        self.hubs = bytearray()
        self.rest: list[Candidate] = []
        self.tail: list[Candidate] = []
        self.unread = Unread()
        self.read_at = 0.0

    def __len__(self) -> int:
        return len(self.keys)

    def extend(self, scored: Sequence[tuple[float, Candidate]]) -> None:
        self.indices.extend(map(itemgetter(0), scored))
        candidates = list(map(itemgetter(1), scored))
        self.keys += tuple(map(itemgetter(0), candidates))
        self.costs.extend(map(itemgetter(4), candidates))
        self.never_fetched.extend(map(math.inf.__eq__, map(itemgetter(3), candidates)))
        self.reveals.extend(map(discovery_spend, candidates))
        self.hubs.extend(map(leads_to_new_pages, candidates))

    def reorder(self, start: int, order: Sequence[int]) -> None:
        """Put the visits at the positions *order* lists (a permutation of ``start .. start + len(order)``) in
        that order."""
        end = start + len(order)
        self.keys = self.keys[:start] + tuple(self.keys[p] for p in order) + self.keys[end:]
        self.indices[start:end] = array("d", (self.indices[p] for p in order))
        self.costs[start:end] = array("d", (self.costs[p] for p in order))
        self.never_fetched[start:end] = bytes(self.never_fetched[p] for p in order)
        self.reveals[start:end] = array("d", (self.reveals[p] for p in order))
        self.hubs[start:end] = bytes(self.hubs[p] for p in order)


def _scouted(urls: list[str]) -> str:
    """The plan's log line on the hubs the discovery reserve pays a visit to (:attr:`~.planning.Plan.scouts`)."""
    if not urls:
        return ""
    if len(urls) == 1:
        return (f" (the first planned, {urls[0]}, is a hub the discovery reserve pays for, with the new pages it "
                "leads to)")
    return (f" (the first {len(urls)} planned, {', '.join(urls[:-1])} and {urls[-1]}, are hubs the discovery "
            "reserve pays for, with the new pages they lead to)")


class CostAwareScheduler(BaseScheduler):
    """Wraps the previous scheduler and decides which requests reach it.

    A run proceeds in phases. Requests the spider yields go first (hubs and listings
    discover). New URLs are visits of *discovery* and get up to
    ``COSTSCHED_RESERVE_DISCOVERY`` of what is left of the period's budget, plus
    whatever the refresh plan does not need. Known pages are ranked by
    ``value × U(t) / cost`` (:mod:`scrapy_costsched.model.scoring`) and the
    affordable prefix of that ranking is the refresh plan: planned pages the spider
    yields go out as it yields them, the rest are re-issued from their stored
    templates; known pages outside the plan are skipped. When the crawl would go
    idle with budget left, the ranking is continued (leftovers). Retries,
    redirects and chained sub-requests of a visit (requests carrying
    ``costsched_page``) are charged but neither scored nor counted as discovery.

    Without ``COSTSCHED_BUDGET`` (shadow mode) every request is passed on unchanged
    and only observed.

    Where it departs from Scrapy's scheduler contract: ``enqueue_request`` returns
    ``False`` (the engine then sends ``request_dropped``) for known pages outside
    the plan, for new URLs discovery cannot pay for yet (they are stored and ranked
    later) and for a page already sent in this run, even with ``dont_filter=True``:
    planned pages are deduplicated by fingerprint, once per run.
    """

    def __init__(self, crawler: Crawler, fallback: BaseScheduler, tracker: Tracker) -> None:
        self.crawler = crawler
        self.fallback = fallback
        self.tracker = tracker
        self.config = tracker.config
        self.stats = tracker.stats
        inner_filter = getattr(fallback, "df", None)
        if self.budgeted and isinstance(inner_filter, BaseDupeFilter):
            fallback.df = PlannedVisitsPass(inner_filter, tracker.fingerprint)  # type: ignore[attr-defined]
        self._dispatched: set[str] = set()
        # Pages fetched in this run as the target of another page's redirect, and whose visit fetched them.
        self._redirected_to: dict[str, str] = {}
        self._ranking = _Ranking()
        self._cursor = 0
        self._plan_end = 0
        self._planned: dict[str, int] = {}  # planned page -> its place in the ranking
        self._discovery_allowance = 0.0
        self._discovery_spent = 0.0
        # Budget held for planned pages only the spider can yield, until it yields them or goes idle.
        self._held = 0.0
        # New URLs wait here, best index first, until the wrapped scheduler runs dry.
        self._discovery: list[tuple[float, int, str, Request]] = []
        self._arrivals = itertools.count()
        self._deferred: set[str] = set()
        # New URLs of this run (waiting for discovery, or deferred): yielded again, they are not known pages.
        self._new_urls: set[str] = set()
        # Planned pages held back for the budget (_overdrawn), offered once more when the run goes idle.
        self._held_back: list[str] = []
        self._sunk: Counter[str] = Counter()  # host -> its planned visits that fell out of the plan (_sank)
        self._reoffered: set[str] = set()
        # Start URLs left out of the plan, by page: reported at the close unless a leftover round visited them.
        self._left_out_starts: dict[str, str] = {}
        # Requests taken from the wrapped scheduler for a host under a Retry-After block, by host.
        self._waiting: dict[str, deque[Request]] = {}
        # Requests taken from the wrapped scheduler while their download slot was busy, by slot (_next_in_turn);
        # as many at most as the downloader takes (CONCURRENT_REQUESTS; 16 where 0 lifts its limit).
        self._slot_queues: dict[str, deque[Request]] = {}
        self._slot_queue_limit = max(crawler.settings.getint("CONCURRENT_REQUESTS"), 0) or 16
        self._closes_at: float | None = None  # when CLOSESPIDER_TIMEOUT ends the run (time.monotonic)
        # Session steps let into the wrapped scheduler and not yet taken out (_session_pending).
        self._session_queued = 0
        self._session_seen = False
        self._frozen = False
        crawler.signals.connect(self._spider_idle, signal=signals.spider_idle)
        crawler.signals.connect(self._spider_opened, signal=signals.spider_opened)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        tracker = Tracker.of(crawler)
        check_revisit_settings(crawler.settings)
        fallback_cls = load_object(tracker.config.fallback_scheduler)
        if fallback_cls is cls or not issubclass(fallback_cls, BaseScheduler):
            raise ValueError(f"COSTSCHED_FALLBACK_SCHEDULER ({tracker.config.fallback_scheduler!r}) must be a "
                             "Scrapy scheduler other than CostAwareScheduler.")
        return cls(crawler, build_from_crawler(fallback_cls, crawler), tracker)

    @property
    def cycle(self) -> float:
        """Days between plans: one run per budget period (:func:`~.freshness.cycle_utility`)."""
        return self.config.budget_period / DAY

    @property
    def budgeted(self) -> bool:
        return self.config.enabled and not self.config.shadow

    def open(self, spider: Spider) -> Deferred[None] | None:
        """Open the state and plan the run; planning reads every known page, so it runs in a thread."""
        if self.config.enabled:
            self.tracker.open()
            self.tracker.scheduled = True
        if not self.budgeted:
            return self.fallback.open(spider)
        planned: Deferred[None] = in_thread(self._plan)
        planned.addCallback(self._freeze)
        planned.addCallback(lambda _: self.fallback.open(spider))
        return planned

    def _spider_opened(self) -> None:
        """Warn about the HTTP cache once the spider is open, where Scrapy 2.14 and later count log_count/WARNING from;
        note when ``CLOSESPIDER_TIMEOUT`` ends the run (its clock starts now)."""
        check_http_cache(self.crawler.settings, self.config.budget_period)
        timeout = self.crawler.settings.getfloat("CLOSESPIDER_TIMEOUT")
        self._closes_at = time.monotonic() + timeout if timeout > 0 else None

    def _freeze(self, _: None) -> None:
        """Take what is alive once the plan is made out of the cyclic garbage collector's sight.

        That is what lives as long as the crawl: Scrapy's modules and components, the ranking
        and the page index. Each full collection, which the crawl's own garbage triggers every
        hundred requests or so, would otherwise scan all of it again; frozen (:func:`gc.freeze`),
        it is not scanned until :meth:`close` unfreezes it. Freezing is process-wide, so objects
        frozen by others are unfrozen at close too.
        """
        gc.freeze()
        self._frozen = True

    def _plan(self) -> None:
        started = time.perf_counter()
        remaining = self.tracker.ledger.remaining()
        # Room for the session steps the spider will send first, as much as the last run's cost.
        session = min(self.tracker.sessions.last_run_spent, max(remaining, 0.0))
        now = self.tracker.now()
        # A plan allocates a few objects per known page and no reference cycles, so the cyclic
        # collector would only rescan them as they pile up: it is off until the plan is made.
        collecting = gc.isenabled()
        gc.disable()
        try:
            preselected = self.tracker.preselect(now, max(remaining - session, 0.0), self.config.objective, self.cycle)
            plan = make_plan(self.tracker.candidates(now) if preselected is None else preselected.candidates,
                             remaining - session, reserve_share=self.config.reserve_discovery,
                             host_of=self.tracker.host_of, capacity_of=self.tracker.health.capacity,
                             robots_cost=self.tracker.robots_cost, objective=self.config.objective, cycle=self.cycle,
                             ranked=None if preselected is None else preselected.ranked)
            self._ranking.extend(plan.head)
            self._ranking.rest = plan.rest
            if preselected is not None:
                self._ranking.unread, self._ranking.read_at = preselected.unread, now
        finally:
            if collecting:
                gc.enable()
        for host, (count, capacity) in plan.over_capacity.items():
            self.stats.set_value(f"costsched/hosts/{host}/over_capacity", count)
            pause = self.tracker.health.pause_left(host)
            if pause > self.config.block_wait:
                logger.info("%s: %d visits of %s left out of the plan: it %s that ends in %.0f s, later than this "
                            "run waits (COSTSCHED_BLOCK_WAIT = %g s); a later run plans them", self.tracker.who, count,
                            host, self.tracker.health.pause_reason(host), pause, self.config.block_wait)
            else:
                logger.info("%s: %d visits of %s left out of the plan: its download slot can make %d in this run "
                            "(its concurrency and delay over CLOSESPIDER_TIMEOUT or the budget period)",
                            self.tracker.who, count, host, capacity)
        planned, robots, scouts = plan.planned, plan.robots, plan.scouts
        self._set_plan_end(len(planned))
        # What the plan expects to spend, as it was made to fit: a visit with validators at its expected cost
        # (most come back 304). Counted in full, a plan of revalidations left discovery nothing. A page only the
        # spider yields holds its full cost, which its admission needs and releases (:meth:`_admit`).
        planned_cost = sum(c.expected_cost for c in planned)
        self._held = sum(c.cost for c in planned if c.key in self.tracker.yield_only)
        if self.tracker.yield_only:
            self.stats.set_value("costsched/plan/yield_only", len(self.tracker.yield_only & self._planned.keys()))
        # Refresh budget the plan does not use flows to discovery (all of it on a first run), which
        # includes what the new pages planned hubs reveal are expected to cost.
        self._discovery_allowance = max(remaining - session - planned_cost - robots, 0.0)
        self.stats.set_value("costsched/plan/hubs", sum(map(leads_to_new_pages, planned)))
        if scouts:
            self.stats.set_value("costsched/plan/scout", len(scouts))
        known = len(self._ranking) + len(self._ranking.rest) + len(self._ranking.unread)
        self.stats.set_value("costsched/plan/known_pages", known)
        if self._ranking.unread:
            self.stats.set_value("costsched/plan/unread", len(self._ranking.unread))
        self.stats.set_value("costsched/plan/planned", self._plan_end)
        # Pages found but never fetched, and how many of them the plan reaches: where discovery stands (in a trial,
        # a plan that reached 6 of the new pages a day while the lists kept naming 20 was the only sign it had
        # fallen behind). Those tried already are told apart: in another, most were links robots.txt forbids, refused
        # once or twice, and the backlog they made looked like discovery falling behind.
        never_fetched = sum(self._ranking.never_fetched) + sum(c.elapsed == math.inf for c in self._ranking.rest)
        never_planned = sum(self._ranking.never_fetched[:self._plan_end])
        tried = len(self.tracker.tried_unfetched)
        self.stats.set_value("costsched/plan/never_fetched", never_fetched)
        self.stats.set_value("costsched/plan/never_fetched_planned", never_planned)
        if tried:
            self.stats.set_value("costsched/plan/never_fetched_tried", tried)
        self.stats.set_value("costsched/budget/remaining_at_start", remaining)
        self.stats.set_value("costsched/plan_seconds", time.perf_counter() - started)
        unlinked = self.stats.get_value("costsched/plan/unlinked")
        if unlinked:
            logger.info("%s: %d known pages left out of the plan: no request for them was seen in the %d budget periods "
                        "since a page stopped linking to them (COSTSCHED_UNLINKED_PERIODS); a link to one brings it "
                        "back", self.tracker.who, unlinked, self.config.unlinked_periods)
        scouted = [page.url for page in map(self.tracker.page, (c.key for c in scouts)) if page is not None]
        unit = self.tracker.billing.unit
        logger.info("%s: %s; planned %d of %d known pages (%d ranked%s%s)%s%s, %s kept for discovery%s",
                    self.tracker.who, self.tracker.ledger.left(), self._plan_end, known, len(self._ranking),
                    f"; {never_planned} of the {never_fetched} never fetched" if never_fetched else "",
                    f", {tried} of them refused before download or answered 404 so far" if tried else "",
                    f" and {amount(robots, unit)} for their hosts' robots.txt" if robots else "",
                    f", {amount(session, unit)} for session steps (as many as the last run's)" if session else "",
                    amount(self._discovery_allowance, unit, ".0f"),
                    _scouted(scouted))

    def _available(self) -> float:
        """What the next visit may spend: the ledger's remaining budget less what planned pages hold."""
        return self.tracker.ledger.spendable() - self._held

    def _budgeted_cost(self, position: int) -> float:
        """Leftovers plan a page only the spider can yield (no stored template) at no cost: it goes
        out only if the spider yields it again, so its budget goes to the next pages meanwhile."""
        return 0.0 if self._ranking.keys[position] in self.tracker.yield_only else self._ranking.costs[position]

    def close(self, reason: str) -> Deferred[None] | None:
        """Close the wrapped scheduler, then release what ``open()`` took: the state store and its lock.

        Requests waiting here for their download slot go back to the wrapped scheduler first, so a
        ``JOBDIR`` keeps them."""
        for queue in self._slot_queues.values():
            for request in queue:
                self.fallback.enqueue_request(request)
        self._slot_queues.clear()
        closed = self.fallback.close(reason)
        if self._frozen:
            gc.unfreeze()
            self._frozen = False
        if not self.config.enabled:
            return closed
        self._report_left_out_starts()
        self._report_sunk()
        finished = self.tracker.close(reason)
        if finished is None:
            return closed
        if closed is not None:
            finished.addCallback(lambda _: closed)
        return finished

    def _report_sunk(self) -> None:
        """Say, for each host whose planned visits fell out of the plan in this run (:meth:`_sank`), how many and
        why. Its failures are in Scrapy's log, but in a trial where a shop was down for two days nothing said where
        its pages went (50 of them in one run, ``costsched/skipped/unhealthy`` the only trace)."""
        today = self.tracker.now() / DAY
        for host, count in sorted(self._sunk.items()):
            failures = {outcome: n for outcome in OUTCOMES
                        if (n := self.stats.get_value(f"costsched/hosts/{host}/failures/{outcome}"))}
            logger.info("%s: %d planned %s of %s not sent: its attempts failed in this run%s and it answers "
                        "%.0f%% of them now, so its visits cost more than the pages the budget went to instead; later "
                        "runs plan its pages again as its health recovers", self.tracker.who, count,
                        "visit" if count == 1 else "visits", host,
                        f" ({', '.join(f'{n} {outcome}' for outcome, n in failures.items())})" if failures else "",
                        100 * self.tracker.hosts.health_of(host).p_success(today))

    def __len__(self) -> int:
        """Requests in the wrapped scheduler, new URLs waiting for discovery budget (not the plan), requests
        waiting out a Retry-After and requests waiting for their download slot."""
        return (len(self.fallback) + len(self._discovery) + sum(map(len, self._waiting.values()))  # type: ignore[arg-type]
                + sum(map(len, self._slot_queues.values())))

    def has_pending_requests(self) -> bool:
        """Whether a request is queued (in the wrapped scheduler or for its download slot), or waits out a
        Retry-After this run will see the end of, or a planned or new one the budget still pays for."""
        return self.fallback.has_pending_requests() or bool(self._slot_queues) or self._waiting_ends_soon() or (
            self.budgeted and (self._next_discovery_fits() or self._next_planned_fits()))

    def _waiting_ends_soon(self) -> bool:
        return any(self.tracker.health.blocked_for(queue[0]) <= self.config.block_wait for queue in self._waiting.values())

    def _next_discovery_fits(self) -> bool:
        if not self._discovery:
            return False
        cost = self.tracker.planned_cost(self._discovery[0][3].meta, self._discovery[0][2])
        return self._discovery_spent + cost <= self._discovery_allowance and self._fits(cost)

    def _next_planned_fits(self) -> bool:
        self._skip_dispatched()
        return self._cursor < self._plan_end and self._fits(self._ranking.costs[self._cursor])

    def _fits(self, cost: float) -> bool:
        """Whether a visit of *cost* may move into the wrapped scheduler: the budget left after what is queued and
        held pays for it, and so would the check at its turn (:meth:`_overdrawn`). Were the second not asked, a
        leftover round would offer page after page the check then holds back, down the whole ranking."""
        return cost <= self._available() and self.tracker.ledger.affords(cost)

    def _skip_dispatched(self) -> None:
        while self._cursor < self._plan_end and self._ranking.keys[self._cursor] in self._dispatched:
            self._cursor += 1

    def enqueue_request(self, request: Request) -> bool:
        """Pass *request* on if the plan or the discovery share wants it (see the class docstring)."""
        if not self.config.enabled:
            return self.fallback.enqueue_request(request)
        if request.meta.get(SESSION_META) or self._leads_to_session(request):
            return self._enqueue_session_step(request)
        if PAGE_META in request.meta:
            return self._enqueue_attempt(request)
        key = self.tracker.fingerprint(request)
        self.tracker.linked(key)
        if self.budgeted and key in self._redirected_to:
            # Fetched in this run as a redirect's target; known from now on, so a page that moved here is
            # retired at its next visit instead of being fetched twice.
            self.tracker.sighting(request, key)
            self.stats.inc_value("costsched/skipped/duplicate")
            return False
        if self.budgeted and key in self._dispatched:
            self.stats.inc_value("costsched/skipped/duplicate")
            return False
        if self.budgeted and key in self._new_urls and key not in self._planned:
            # A new URL of this run, yielded again: it waits for discovery's budget, or was deferred.
            self.stats.inc_value("costsched/skipped/discovery_deferred" if key in self._deferred
                                 else "costsched/skipped/duplicate")
            return False
        if self.budgeted and key not in self._planned and self.tracker.sighting_changes_nothing(request, key):
            return self._not_planned(request, key)
        page, new = self.tracker.sighting(request, key)
        reason = "discovery" if page.last_visit is None else "refresh"
        if not self.budgeted:
            self.tracker.admitted(request, key, reason)
            return self.fallback.enqueue_request(request)
        cost = self.tracker.planned_cost(request.meta, key)
        if not new:
            if key not in self._planned:
                return self._not_planned(request, key)
            return self._admit(request, key, cost, reason)
        self._new_urls.add(key)
        if self._discovery_spent + cost > self._discovery_allowance:
            self._defer(key, request)
            return False
        candidate = Candidate(key, self.tracker.value_of(page), self.tracker.prior_rate(page.group), math.inf, cost)
        index = score(candidate, self.config.objective, cycle=self.cycle)
        heapq.heappush(self._discovery, (-index, next(self._arrivals), key, request))
        return True

    def _enqueue_session_step(self, request: Request) -> bool:
        """A request that sets up the crawl's session (``costsched_session``), or its redirect or retry: not a page,
        so neither planned nor recorded; charged as an attempt of a visit under way is, ahead of first attempts
        merely queued, and planned pages wait for it (:meth:`_session_pending`)."""
        for name in (PAGE_META, VISIT_META, SUBREQUEST_META, REASON_META):  # meta copied from a page's response
            request.meta.pop(name, None)
        self.tracker.sessions.saw(request)
        self._session_seen = True
        request.meta[SESSION_STEP_META] = self.tracker.visits.new_token()  # this run's (see _next_in_turn)
        if not self.budgeted:
            if not self.fallback.enqueue_request(request):
                return False
            self.stats.inc_value("costsched/session_steps")
            return True
        self.tracker.ledger.release(request)  # a redirect's or retry's: the attempt before it was charged
        cost = self.tracker.planned_cost(request.meta, attempt=True)
        if not self.tracker.ledger.affords(cost):
            self.stats.inc_value("costsched/skipped/budget")
            return False
        if not self._pass_on(request, cost, "costsched/session_steps"):
            return False
        self._session_queued += 1
        return True

    def _leads_to_session(self, request: Request) -> bool:
        """Whether *request* is a start request of the shape of one whose callback yielded session steps in an
        earlier run (the log-in page among ``start_urls``, whose request the spider cannot mark): then it is
        marked as a session step too (:meth:`Tracker.session_from`)."""
        if not (self.tracker.sessions.shapes and request.meta.get("is_start_request") and request in self.tracker.sessions):
            return False
        request.meta[SESSION_META] = True
        return True

    def _session_pending(self) -> bool:
        """Whether a session step is queued here, or in the engine's hands: downloading, or its callback still
        running (which may yield the next step). The engine keeps a request in its slot's ``inprogress`` from
        the scheduler until its response's callback output is handled, or its redirect or retry is scheduled."""
        if not self._session_seen:
            return False
        if self._session_queued > 0:
            return True
        try:
            slot = getattr(self.crawler.engine, "_slot", None)
        except RuntimeError:  # Scrapy 2.19: no engine yet
            return False
        return slot is not None and any(request.meta.get(SESSION_META) for request in slot.inprogress)

    def _not_planned(self, request: Request, key: str) -> bool:
        """A known page outside the plan: skipped (a start URL is reported at the close, see :meth:`close`)."""
        self.stats.inc_value("costsched/skipped/not_planned")
        if request.meta.get("is_start_request"):
            self._left_out_starts[key] = request.url
            logger.debug("%s: start URL %s is not in the plan (a leftover round may still visit it)",
                         self.tracker.who, request.url)
        return False

    def _report_left_out_starts(self) -> None:
        """Log and count the start URLs the run did not visit: those a leftover round reached were visited."""
        ledger = self.tracker.ledger
        spent_before = ledger.budget is not None and ledger.spent_at_start >= ledger.budget
        for key, url in self._left_out_starts.items():
            if key in self._dispatched:
                continue
            self.stats.inc_value("costsched/skipped/start_url")
            page = self.tracker.page(key)
            if page is not None and page.moved_to is not None:
                why = (f"it moved permanently to {page.moved_to}, which is visited as a page of its own (start "
                       "from that URL to drop this line)")
            elif page is not None and page.gone:
                how = (f"was refused before download (robots.txt, offsite rules or a downloader middleware) {GONE_AFTER} "
                       "times in a row" if page.refusals else f"{EMPTY_ANSWERS} {GONE_AFTER} times in a row"
                       if page.empty_strikes else f"answered 410, or 404 {GONE_AFTER} times in a row")
                why = f"it {how}, and is retired (tried again every {GONE_RECHECK_PERIODS} periods)"
            elif page is not None and page.not_before is not None and page.not_before > self.tracker.now():
                if page.gone_strikes:
                    in_a_row, how = page.gone_strikes, "answered 404 or 410"
                elif page.empty_strikes:
                    in_a_row, how = page.empty_strikes, EMPTY_ANSWERS
                elif page.refusals:
                    in_a_row, how = page.refusals, ("was refused before download (robots.txt, offsite rules or a "
                                                    "downloader middleware)")
                else:
                    in_a_row, how = page.consecutive_failures, "failed"
                begins = datetime.fromtimestamp(page.not_before, timezone.utc).isoformat(timespec="seconds").replace(
                    "+00:00", "Z")
                why = (f"its last attempt {how} ({in_a_row} in a row), so it waits for the budget period that "
                       f"begins {begins} (each failure in a row doubles the wait)")
            elif page is not None and (pause := self.tracker.health.pause_left(page.host)) > 0:
                why = (f"its host {self.tracker.health.pause_reason(page.host)} that ends in {pause:.0f} s, later than "
                       "this run waits")
            elif spent_before:
                why = "nothing was left of the period's budget when the run started"
            elif key in self._new_urls:
                why = ("it is new, and what this run could spend on new URLs did not reach it; later runs rank it with "
                       "the known pages")
            elif page is not None and page.last_visit is not None and page.last_visit >= ledger.basis.start:
                why = "it was visited earlier in this period, and ranks below the pages this run's budget pays for"
            else:
                why = "it ranks below the pages this run's budget pays for"
            logger.info("%s: start URL %s not visited in this run: %s", self.tracker.who, url, why)

    def _defer(self, key: str, request: Request) -> None:
        """A new URL discovery cannot pay for now: stored, ranked in the leftovers and in later runs (a start URL is
        reported at the close unless a leftover round visits it)."""
        self._deferred.add(key)
        self.stats.inc_value("costsched/skipped/discovery_deferred")
        if request.meta.get("is_start_request"):
            self._left_out_starts[key] = request.url

    def _set_plan_end(self, end: int) -> None:
        self._planned.update(zip(self._ranking.keys[self._plan_end:end], range(self._plan_end, end), strict=True))
        self._plan_end = end

    def _enqueue_attempt(self, request: Request) -> bool:
        """Retries, redirects and chained sub-requests of a visit already under way.

        A permanent redirect to a page the crawl knows makes the visit that page's (:meth:`Tracker.moved`), unless
        the spider parses that page with another callback: then the page is gone and the redirect is dropped;
        a page goes out once per run, by its own URL or as a redirect's target, as Scrapy's duplicate filter
        lets a URL out once: a redirect to a page that went out already is dropped, and a page a redirect
        reached is not re-issued from the plan.
        """
        hop = False  # a redirect to another page, not a retry after one
        hop_of: str | None = None  # the page whose visit it goes on with (none once the page moved there)
        if "redirect_urls" in request.meta and not request.meta.get(SUBREQUEST_META):
            page, target = request.meta[PAGE_META], self.tracker.fingerprint(request)
            hop = target != page and self._redirected_to.get(target) != page
            if hop:
                moved = self.tracker.moved(page, request, target)
                if moved == "away":
                    return False
                if moved:
                    request.meta[PAGE_META] = target
                else:
                    self._redirected_to[target] = hop_of = page
                if self.budgeted and target in self._dispatched:
                    self.stats.inc_value("costsched/skipped/duplicate")
                    self.tracker.redirected_to_fetched(hop_of)
                    return False
                self._dispatched.add(target)
        if not self.budgeted:
            if self.fallback.enqueue_request(request):
                return True
            if hop:  # Scrapy's duplicate filter dropped it (shadow mode is plain Scrapy)
                self.tracker.redirected_to_fetched(hop_of)
            return False
        # An attempt that still carries a reservation is a downloader middleware's replacement of the request that
        # took it (``request.replace(url=...)``, as scraping-API plugins send each request), made before that one
        # was answered: Scrapy schedules it in that one's place, which never reaches a download handler.
        self.tracker.ledger.release(request)
        # A visit under way goes on ahead of first attempts merely queued: the attempt it already paid for is
        # wasted unless this one goes out. So it needs only what was sent to leave room for it, and counts
        # as sent at once; a queued first attempt the budget no longer pays for is held back at its turn.
        cost = self.tracker.planned_cost(request.meta, attempt=True)
        if not self.tracker.ledger.affords(cost):
            self.stats.inc_value("costsched/skipped/budget")
            return self.fallback.enqueue_request(self._refused(request, "the period's budget cannot pay for it"))
        # A redirect's target is priced at an estimate for its kind of page: it goes out next through its slot
        # (the duplicate filter's work is done above), so what the estimate misses is in flight, not in what
        # waits. A retry waits its turn, as RetryMiddleware's lower priority asks, and so does a sub-request.
        slot = self._slot_of(request) if hop else None
        if slot is None:
            if not self._pass_on(request, cost, "costsched/attempts/extra"):
                return False
        else:
            self.tracker.reserve(request, cost)
            self._slot_queues.setdefault(slot, deque()).appendleft(request)
            self.stats.inc_value("costsched/attempts/extra")
        self.tracker.ledger.dispatch(request)
        return True

    @staticmethod
    def _refused(request: Request, why: str) -> Request:
        """*request*, a later attempt of a visit under way, marked to leave the downloader unsent with
        :exc:`~.visits.AttemptRefused`: the spider's errback hears *why* rather than nothing."""
        request.meta[REFUSED_META] = why
        return request

    def _admit(self, request: Request, key: str, cost: float, reason: str) -> bool:
        held = cost if key in self._planned and key in self.tracker.yield_only else 0.0
        if cost > self._available() + min(held, self._held):  # retries took what the plan had counted on
            self.stats.inc_value("costsched/skipped/budget")
            return False
        self._held = max(self._held - held, 0.0)
        self._dispatched.add(key)
        self.tracker.admitted(request, key, reason)
        return self._pass_on(request, cost, f"costsched/admitted/{reason}")

    def _pass_on(self, request: Request, cost: float, stat: str) -> bool:
        """Into the wrapped scheduler; what it accepts holds its cost until it is charged or released.

        Reserved first: a disk queue (``JOBDIR``) stores the request as it is when enqueued, and the
        reservation's number travels in its meta.
        """
        self.tracker.reserve(request, cost)
        if not self.fallback.enqueue_request(request):
            self.tracker.ledger.release(request)
            self.stats.inc_value("costsched/skipped/fallback_refused")
            return False
        self.stats.inc_value(stat)
        return True

    def next_request(self) -> Request | None:
        """The wrapped scheduler's next request; when it runs dry, the next new and planned visits.

        A request for a host that asked for a pause (Retry-After) waits here until the pause ends,
        so a blocked host never fills ``CONCURRENT_REQUESTS``: other hosts' requests go meanwhile.
        Top-ups go on while everything they moved sank or waits: returning ``None`` with sendable
        visits further down the plan would leave the engine idle until its next heartbeat (5 s),
        one top-up per heartbeat through a sick host's share of the plan. Top-ups wait while the wrapped
        scheduler holds requests (their download slots are busy).
        """
        request = self._next_sendable()
        while request is None and self.budgeted and not self.fallback.has_pending_requests() and self._top_up():
            request = self._next_sendable()
        if request is not None and self.budgeted:
            self.tracker.ledger.dispatch(request)
            if request.meta.get(SESSION_META):
                self._session_queued -= 1
        return request

    def _next_sendable(self) -> Request | None:
        if not self.config.enabled:
            return self.fallback.next_request()
        for host, queue in self._waiting.items():
            if self.tracker.health.blocked_for(queue[0]) <= 0:
                waited = queue.popleft()
                if not queue:
                    del self._waiting[host]
                return waited
        while (request := self._next_in_turn()) is not None:
            if REFUSED_META in request.meta:
                return request
            if self._sank(request):
                if "retry_times" in request.meta or "redirect_urls" in request.meta:
                    return self._refused(request, "its host fell too sick for the visit to stay in this run's plan")
                continue
            if self._overdrawn(request):
                continue
            wait = self.tracker.health.blocked_for(request)
            if wait <= 0:
                return request
            if wait > self.config.block_wait:
                self.tracker.paused(request)
                if request.meta.get(SESSION_META):
                    self._session_queued -= 1
                continue
            host = urlparse_cached(request).hostname or ""
            self._waiting.setdefault(host, deque()).append(request)
            self.stats.inc_value(f"costsched/hosts/{host}/held")
        return None

    def _next_in_turn(self) -> Request | None:
        """The next request whose download slot can start it: one that waited here for its slot, else the
        wrapped scheduler's next; while budgeted, one whose slot is busy waits here (as many as the
        downloader takes at most), and so does the wrapped scheduler's queue behind them.

        Scrapy's engine moves up to ``CONCURRENT_REQUESTS`` requests into the downloader, where those
        of one host wait in its slot for ``CONCURRENT_REQUESTS_PER_DOMAIN`` and ``DOWNLOAD_DELAY``
        (1 and 1 s in a ``startproject`` project): fifteen of sixteen could not be held back when the
        answers before them showed the budget no longer paid for them (:meth:`_overdrawn`). Kept here
        until their slot can start them, each is checked at its turn.
        """
        for key, queue in self._slot_queues.items():
            if self._slot_has_room(key):
                waited = queue.popleft()
                if not queue:
                    del self._slot_queues[key]
                return waited
        while (sum(map(len, self._slot_queues.values())) < self._slot_queue_limit
               and (queued := self.fallback.next_request()) is not None):
            token = queued.meta.get(VISIT_META, queued.meta.get(SESSION_STEP_META))
            request = queued if self.tracker.visits.issued(token) else self._resumed(queued)
            if request is None:
                continue
            slot = self._slot_of(request) if self.budgeted and REFUSED_META not in request.meta else None
            if slot is None or self._slot_has_room(slot):
                return request
            self._slot_queues.setdefault(slot, deque()).append(request)
        return None

    def _slot_of(self, request: Request) -> str | None:
        """The download slot *request* goes out through, as Scrapy's downloader names it; ``None`` without a
        downloader (the scheduler driven on its own), where every request goes out in its turn."""
        try:
            downloader = getattr(self.crawler.engine, "downloader", None)
        except RuntimeError:  # Scrapy 2.19: no engine yet
            return None
        return downloader.get_slot_key(request) if downloader is not None else None

    def _slot_has_room(self, slot: str) -> bool:
        """Whether fewer of the downloader's requests go through download slot *slot* than its concurrency
        (one while the downloader has not made the slot yet). The downloader holds each request from its
        ``fetch`` to its answer or failure, whichever middleware ends it, robots.txt requests included.

        In a run ``CLOSESPIDER_TIMEOUT`` ends, a slot with a delay must also be able to start one more before
        then, a delay after each request waiting in it: requests still waiting there at the timeout go out while
        the crawl closes (found in a test with a host one second apart and a 4 s timeout: the visits a leftover
        round put in its slot doubled its four, past the timeout).
        """
        downloader = self.crawler.engine.downloader
        download_slot = downloader.slots.get(slot)
        concurrency = download_slot.concurrency if download_slot is not None else 1
        closes_at = self._closes_at
        delayed = download_slot if closes_at is not None and download_slot is not None and download_slot.delay > 0 \
            else None
        if len(downloader.active) < concurrency and delayed is None:
            return True
        key = downloader.get_slot_key
        held = sum(key(request) == slot for request in downloader.active)
        if held >= concurrency or delayed is None or closes_at is None:
            return held < concurrency
        waiting = held - len(delayed.transferring)
        return time.monotonic() + (waiting + 1) * delayed.delay <= closes_at

    def _overdrawn(self, request: Request) -> bool:
        """Whether *request*, a page's first attempt, is held back: the budget no longer pays for it and the
        requests sent before it as the run's latest answers price them (:meth:`Ledger.pays_to_send`).

        A top-up reserves its requests at the estimates of that moment, and they wait in the wrapped
        scheduler while the answers before them show what pages really cost; sent anyway, the last
        of them overspend by the sum of their estimates' errors. A page held back is kept for the leftovers,
        which go out if the budget turns out to pay for them: a new page is deferred, a planned one offered
        again once (:meth:`_reoffer_held_back`); held back again, a planned page waits for the next run.
        """
        meta = request.meta
        if (not self.budgeted or REASON_META not in meta or meta.get(SUBREQUEST_META) or "retry_times" in meta
                or "redirect_urls" in meta or self.tracker.ledger.pays_to_send(request)):
            return False
        self.tracker.ledger.release(request)
        self.stats.inc_value("costsched/skipped/budget")
        key = meta[PAGE_META]
        self._dispatched.discard(key)
        if key not in self._planned:
            self._defer(key, request)
        elif key not in self._reoffered:
            self._held_back.append(key)
        return True

    def _resumed(self, request: Request) -> Request | None:
        """A request a stopped run left in the wrapped scheduler's disk queue (``JOBDIR``), offered to this run
        as the spider's own requests are; ``None`` if it does not go out now.

        Its visit, reservation and place in the plan were that run's. A first attempt is planned again: a page
        the plan re-issued already, or left out, is dropped. A retry, a redirect or a sub-request belongs to a
        visit that ended with that run: dropped, its page is planned as any other.
        """
        meta = request.meta
        attempt = meta.get(SUBREQUEST_META) or "redirect_urls" in meta or "retry_times" in meta
        for name in RUN_META:
            meta.pop(name, None)
        self.stats.inc_value("costsched/resumed")
        if attempt:
            self.stats.inc_value("costsched/skipped/resumed_attempt")
            return None
        if self.budgeted:
            self.enqueue_request(request)
            return None
        # Shadow mode sends what plain Scrapy would, past a duplicate filter that saw it in that run.
        key = self.tracker.fingerprint(request)
        page, _ = self.tracker.sighting(request, key)
        self.tracker.admitted(request, key, "discovery" if page.last_visit is None else "refresh")
        return request

    def _top_up(self) -> bool:
        """Move the best new URLs, then the next planned pages, into the wrapped scheduler."""
        moved = 0
        while moved < TOP_UP and self._next_discovery_fits():
            _, _, key, new_request = heapq.heappop(self._discovery)
            if key in self._dispatched:
                continue
            cost = self.tracker.planned_cost(new_request.meta, key)
            self._discovery_spent += cost
            moved += self._admit(new_request, key, cost, "discovery")
        if self._session_pending():  # the planned pages need the session it sets up
            return moved > 0
        if self._next_planned_fits():
            upcoming = self._ranking.keys[self._cursor:min(self._cursor + TOP_UP, self._plan_end)]
            self.tracker.prefetch([key for key in upcoming if key not in self._dispatched
                                   and key not in self.tracker.yield_only])
        while moved < TOP_UP and self._next_planned_fits():
            position = self._cursor
            self._cursor += 1
            key = self._ranking.keys[position]
            request = self._reissue(key)
            if request is None:
                continue
            request.priority += REFRESH_PRIORITY_OFFSET
            reason = "discovery" if self._ranking.never_fetched[position] else "refresh"
            moved += self._admit(request, key, self._ranking.costs[position], reason)
        return moved > 0

    def _spider_idle(self, spider: Spider) -> None:
        """Leftovers: nothing else will come, so extend the plan over the ranking with what is left."""
        self._release_waiting()
        if not self.budgeted:
            return
        self._held = 0.0  # the spider yields nothing more on its own
        while self._discovery:
            _, _, key, waiting = heapq.heappop(self._discovery)
            self._defer(key, waiting)
        if self._deferred:
            self._ranking.tail += self.tracker.candidates(self.tracker.now(), self._deferred - self._dispatched)
            self._deferred = set()
        if self._reoffer_held_back():
            self.stats.inc_value("costsched/leftover_rounds")
            raise DontCloseSpider
        self._extend_plan()
        while self._next_planned_fits():
            position = self._cursor
            self._cursor += 1
            request = self._reissue(self._ranking.keys[position])
            if request is None:
                continue
            # Through the engine, so it wakes now rather than at its next heartbeat.
            self.stats.inc_value("costsched/leftover_rounds")
            assert self.crawler.engine is not None
            self.crawler.engine.crawl(request)
            raise DontCloseSpider

    def _release_waiting(self) -> None:
        """Requests whose host's pause outlasts what this run waits (``COSTSCHED_BLOCK_WAIT``): not sent,
        their budget back to the period; their pages stay known and are planned again next run."""
        for host, queue in list(self._waiting.items()):
            wait = self.tracker.health.blocked_for(queue[0])
            if wait <= self.config.block_wait:
                continue
            del self._waiting[host]
            for request in queue:
                self.tracker.paused(request)

    def _sank(self, request: Request) -> bool:
        """Whether *request*, a planned visit about to leave, fell out of the plan in this run: its host's
        health raised its cost so far that its index (value × gain / cost) is below that of the best visit
        the plan left out, each at its host's health now (the best of the next :data:`SINK_WINDOW`: a
        visit of the same sick host is worth no more in its place). Then it is not sent, and its budget
        goes on down the ranking (to other hosts' next-best visits)."""
        if not self.budgeted or request.meta.get(REASON_META) != "refresh" or SUBREQUEST_META in request.meta:
            return False
        position = self._planned.get(request.meta.get(PAGE_META, ""))
        if position is None:
            return False
        planned = self._ranking.costs[position]
        now = self.tracker.health.cost_now(urlparse_cached(request).hostname or "", planned)
        if now <= planned:  # the usual case, decided without looking further down the ranking
            return False
        if self._plan_end >= len(self._ranking) and (not self._rank_rest() or self._plan_end >= len(self._ranking)):
            return False  # nothing left to spend it on instead
        left_out = range(self._plan_end, min(self._plan_end + SINK_WINDOW, len(self._ranking)))
        if self._ranking.indices[position] * planned / now >= max(map(self._index_now, left_out)):
            return False
        self.tracker.ledger.release(request)
        self.stats.inc_value("costsched/skipped/unhealthy")
        self._sunk[urlparse_cached(request).hostname or ""] += 1
        return True

    def _index_now(self, position: int) -> float:
        """The index of the ranking's visit at *position* at its host's health now."""
        ranking = self._ranking
        host, planned = self.tracker.host_of(ranking.keys[position]), ranking.costs[position]
        now = self.tracker.health.cost_now(host, planned) if host is not None else planned
        return ranking.indices[position] * planned / now

    def _reissue(self, key: str) -> Request | None:
        """A planned page's request from its template; ``None`` when only the spider can yield it, or its host
        asked for a pause this run will not wait out (the request would be released unsent, see
        :meth:`_release_waiting`)."""
        if key in self.tracker.yield_only:
            return None
        page = self.tracker.page(key)
        if page is not None and self.tracker.health.pause_left(page.host) > self.config.block_wait:
            return None
        return self.tracker.request_for(key)

    def _reoffer_held_back(self) -> bool:
        """Offer the planned pages held back for the budget once more, through the engine (which wakes now
        rather than at its next heartbeat); whether any went out. Every answer is in by now, so the budget
        left is known: they rank above the pages a leftover round would add to the plan."""
        held_back, self._held_back = self._held_back, []
        offered = False
        for key in held_back:
            if key in self._dispatched:
                continue
            request = self._reissue(key)
            if request is None:
                continue
            self._reoffered.add(key)
            request.priority += REFRESH_PRIORITY_OFFSET
            assert self.crawler.engine is not None
            self.crawler.engine.crawl(request)
            offered = offered or key in self._dispatched
        return offered

    def _extend_plan(self) -> None:
        """Move the end of the plan down the ranking as far as the remaining budget pays, a hub's visit together
        with the new pages it is expected to reveal, as far as the budget reaches (the plan pays for both or
        neither, :func:`~.planning.make_plan`; a round spends what is left): discovery may spend that much
        (what hubs sent earlier revealed was admitted or deferred by the time the crawl went idle), and the
        hubs go first, so what they reveal is found while the budget lasts rather than after the rest of the
        round has spent it."""
        budget = self.tracker.ledger.spendable()
        end = self._cursor
        revealed = 0.0
        while True:
            if end == len(self._ranking) and (not self._rank_rest() or end == len(self._ranking)):
                break
            if self._ranking.keys[end] not in self._dispatched:
                cost = self._budgeted_cost(end)
                if cost > budget:
                    break
                reveals = min(self._ranking.reveals[end], budget - cost)  # what is left, at the end of a period
                budget -= cost + reveals
                revealed += reveals
            end += 1
        self._discovery_allowance = max(self._discovery_allowance, self._discovery_spent + revealed)
        self._order_round(self._cursor, end)
        self._set_plan_end(max(self._plan_end, end))

    def _order_round(self, start: int, end: int) -> None:
        """Order the ranking's part from *start* to *end*, not sent yet: hubs first (pages expected to reveal
        new ones; most pages link out and reveal next to nothing), so the pages they reveal are found while
        the budget lasts. When a host fell sick in this run, by each visit's index at its
        host's health now, the sick host's hubs with the rest: its visits go after the others (and the
        budget may run out before them)."""
        ranking = self._ranking
        if self.tracker.health.worsened():
            now = {position: self._index_now(position) for position in range(start, end)}
            order = sorted(range(start, end), key=lambda p: (not ranking.hubs[p] or now[p] < ranking.indices[p], -now[p]))
        else:
            order = sorted(range(start, end), key=lambda p: not ranking.hubs[p])
        if order == list(range(start, end)):
            return
        ranking.reorder(start, order)
        self._planned.update((key, position) for position, key in
                             enumerate(self._ranking.keys[start:start + len(order)], start) if key in self._planned)

    def _rank_rest(self) -> bool:
        """Append to the ranking the best of the candidates the plan left below it, as many as the budget
        left can reach (:func:`~.scoring.rank_head`, and of the pages it left unread only those whose bounds
        reach that far: the rest of a large site is not read and ranked on the reactor thread at once), then
        the new URLs discovery could not pay for; ``False`` if there are none."""
        ranking = self._ranking
        need = max(self.tracker.ledger.spendable(), 0.0)
        if ranking.unread:
            (head, ranking.rest), ranking.unread = self.tracker.rank_unread(
                ranking.rest, ranking.unread, need, ranking.read_at, self.config.objective, self.cycle)
        elif ranking.rest:
            head, ranking.rest = rank_head(ranking.rest, need, self.config.objective, cycle=self.cycle)
        elif ranking.tail:
            ranked = set(ranking.keys)
            head = rank([c for c in ranking.tail if c.key not in ranked], self.config.objective, cycle=self.cycle)
            ranking.tail = []
        else:
            return False
        ranking.extend(head)
        self.stats.inc_value("costsched/plan/ranked_rest")
        return True
