"""The one object per crawl that scheduler, middlewares and pipeline share.

A thin coordinator over rooms with one job each: the page book (pages and
templates over the store), the ledger (budget period, reservations, charges),
the visit book (what belongs to which visit), the host book (per-host trust)
and the learner (observations into estimates). The components talk to the
tracker and to nothing else of each other.
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import sqlite3
import time
import weakref
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypeVar
from urllib.parse import urlparse

from itemadapter import ItemAdapter
from scrapy import Request, signals
from scrapy.http import HtmlResponse
from scrapy.utils.defer import maybe_deferred_to_future
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.misc import build_from_crawler, load_object
from scrapy.utils.response import get_meta_refresh
from w3lib.url import safe_url_string

from scrapy_costsched.accounts import NO_CHANGE, Accounts
from scrapy_costsched.billing import BILLS_EXPLICIT_PRICES, BillingModel
from scrapy_costsched.commands import spider_state, state_attributes
from scrapy_costsched.errors import stop_crawl
from scrapy_costsched.headers import InvalidHeader, parse_etag, parse_http_date, parse_last_modified, parse_retry_after
from scrapy_costsched.health import Health
from scrapy_costsched.hosts import HostBook
from scrapy_costsched.invocation import debug_command
from scrapy_costsched.kinds import KindCounts, callback_of, request_callback
from scrapy_costsched.learner import DAY, Learner
from scrapy_costsched.ledger import Basis, Carried, Ledger, amount, number, per_change
from scrapy_costsched.loop import Ticker, in_thread, running_loop
from scrapy_costsched.media import media_fields
from scrapy_costsched.metering import compression_gaps, request_size, response_size
from scrapy_costsched.model.discovery import Discovery, NewLinkStats
from scrapy_costsched.model.scoring import Candidate, Ranked
from scrapy_costsched.model.validators import validator_stayed, verify_every
from scrapy_costsched.pagebook import PageBook
from scrapy_costsched.pages import (
    MAX_TRACKED_OUTLINKS,
    UNTYPED,
    MeanBytes,
    PageState,
    Summary,
    group_of,
    make_template,
    moved_template,
    request_from_template,
    stored_item,
)
from scrapy_costsched.preselection import (
    HubTerms,
    Preselection,
    Unread,
    bound_sql,
    preselect,
    rank_above,
    unread_summaries,
)
from scrapy_costsched.records import ItemDigest, RecordHasher, UnhashableItem, item_type_name
from scrapy_costsched.sessions import SESSION_META, SessionSteps
from scrapy_costsched.settings import BILLING_MODELS, Config, SettingError, format_duration, resolve_value
from scrapy_costsched.slots import HostPaused
from scrapy_costsched.storage import StateError, StateStorage, SummaryQueries, storage_from_uri
from scrapy_costsched.visits import (
    NOT_MODIFIED_META,
    PAGE_META,
    REASON_META,
    SUBREQUEST_META,
    VALIDATORS_META,
    VISIT_META,
    AttemptRefused,
    Visit,
    VisitBook,
    same_resource,
)
from scrapy_costsched.volatility import MAX_ITEMS, MIN_COMPARISONS, VolatileFields

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Iterable, Sequence

    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.statscollectors import StatsCollector
    from twisted.internet.defer import Deferred

logger = logging.getLogger(__name__)
#: Trackers whose store is open in this process: crawls that run side by side (``CrawlerProcess.crawl``
#: called twice) write their lines into one log, where each names its spider (:attr:`Tracker.who`).
_OPEN_TRACKERS: weakref.WeakSet[Tracker] = weakref.WeakSet()

_T = TypeVar("_T")

__all__ = ["DAY", "Tracker"]

_TRACKER_ATTR = "_costsched_tracker"
#: Redirects that say the page now lives at the new URL (RFC 9110, sections 15.4.2 and 15.4.9).
PERMANENT_REDIRECTS = frozenset({301, 308})
#: A meta refresh sooner than this many seconds moves the page for good, as Nutch takes it (its fetcher's
#: ``PERM_REFRESH_TIME``); a slower one (an interstitial) is a temporary redirect.
PERMANENT_REFRESH_SECONDS = 5.0
#: 404 answers in a row (a 410 counts for all), visits without a page's items, or attempts refused before download,
#: before a page is retired.
GONE_AFTER = 3
#: A retired page is checked again after this many budget periods.
GONE_RECHECK_PERIODS = 30
#: The chance a page is still there after each 404 or 410 (or refusal) in a row, which a visit's worth is planned
#: at: a page that answered 404 once is re-checked (a 404 can be temporary) without ranking ahead of pages known to
#: be there.
LIVE_AFTER_STRIKE = 0.5
#: The wait after a failed visit doubles with each failure in a row, up to this many periods.
MAX_BACKOFF_PERIODS = 32
#: New links whose sighting is awaited, to count their values for the hubs that revealed them; one a filter dropped
#: (offsite, a duplicate) is never sighted, so the pending ones are forgotten at this many.
MAX_REVEALED_PENDING = 10_000


#: What a permanent redirect made of a page (:meth:`Tracker.moved`).
Move = Literal["moved", "away"]


def _parsed_otherwise(request: Request, landing: PageState) -> bool:
    """Whether the spider parses *landing* with another callback (or ``CrawlSpider`` rule) than *request*'s."""
    if landing.template is None:
        return False
    callback = getattr(request.callback, "__name__", None) or "parse"
    return (callback, request.meta.get("rule")) != (landing.template.get("callback") or "parse",
                                                   landing.template["meta"].get("rule"))


async def _finished(closed: Deferred[None]) -> None:
    await maybe_deferred_to_future(closed)


class _GroupCosts(NamedTuple):
    """A visit's price for the pages of one group: in *full*, answered 304 (*revalidation*, ``None`` when not
    planned so), the part of each that pays for the failed attempts its host's health expects first, the
    part that pays for the redirects its pages' visits go through, and the part that pays for the media downloads
    a later visit brings (*media*), where a page's first visit brings *new_media* instead."""

    full: float
    revalidation: float | None
    failures: float
    hops: float
    media: float
    new_media: float


def _robots_holder(netloc: str) -> str:
    return f"robots.txt:{netloc}"


def _own_page(request: Request) -> str | None:
    """The page whose own request *request* is (a sub-request's failure is its visit's, not a failed attempt)."""
    key = request.meta.get(PAGE_META)
    return key if isinstance(key, str) and not request.meta.get(SUBREQUEST_META) else None


def _media_holder(key: str) -> str:
    return f"media:{key}"


#: The size a media download was capped at, under byte billing: what the period's budget had left for it.
_MEDIA_CAP_META = "costsched_media_cap"


def _over_maxsize(exception: Exception) -> bool:
    """Whether *exception* is Scrapy cancelling a download larger than its ``download_maxsize`` (``DOWNLOAD_MAXSIZE``):
    its words for it from 2.13 on."""
    return "larger than download max size" in str(exception)


def _hand_over(pending: dict[str, list[_T]], key: str, target: str) -> None:
    """What *pending* holds for page *key*, now page *target*'s."""
    if key in pending:
        pending.setdefault(target, []).extend(pending.pop(key))


def _through_redirects(last_visit: float | None, redirected: bool) -> bool:
    """Whether a page's next visit is expected to go through the redirects its group's visits went through: its
    first visit, or one after an answer that came from another URL. A page that answered at its own URL (one
    that moved permanently, at its new URL) is expected to do so again."""
    return last_visit is None or redirected


def _valid_cost(value: Any) -> float | None:
    """*value* as a ``costsched_cost``: a positive, finite number, else ``None``."""
    if not isinstance(value, bool) and isinstance(value, (int, float)) and 0 < value < math.inf:
        return float(value)
    return None


class Tracker:
    """Pages, ledger, visits, hosts and estimates of one crawl."""

    def __init__(self, crawler: Crawler, config: Config) -> None:
        self.crawler = crawler
        self.config = config
        self.stats: StatsCollector = crawler.stats
        self.hasher = RecordHasher(config.hash_fields, config.ignore_fields, config.item_key)
        #: The tags MetaRefreshMiddleware reads a page's meta refresh outside of, if it follows them.
        self._refresh_tags: list[str] | None = (crawler.settings.getlist("METAREFRESH_IGNORE_TAGS")
                                                if crawler.settings.getbool("METAREFRESH_ENABLED") else None)
        billing_path = BILLING_MODELS.get(config.billing, config.billing)
        self.billing: BillingModel = build_from_crawler(load_object(billing_path), crawler)
        if not isinstance(self.billing, BillingModel):
            raise ValueError(f"COSTSCHED_BILLING ({config.billing!r}) does not implement the BillingModel interface "
                             "(unit, expected_cost, attempt_cost).")
        self.store: StateStorage | None = None
        self.pages: PageBook
        self.hosts: HostBook
        self.health: Health
        self.learner: Learner
        self.accounts: Accounts
        self._ledger: Ledger | None = None
        self._closing: Deferred[None] | None = None
        self._progress: Ticker | None = None
        self.visits = VisitBook()
        self._downloaded: set[int] = set()  # requests a download handler took, until their answer is back
        self._paused_hosts: set[str] = set()  # hosts whose visits a long Retry-After kept out of this run
        self._revalidated: set[int] = set()  # requests whose cached copy the server confirmed (HTTP cache)
        self._answers: dict[int, tuple[int, int]] = {}  # id(request) -> status and size of the response downloaded
        self._reached: set[int] = set()  # visit tokens whose first attempt reached the downloader
        # Pages whose last attempt failed with no response yet, and whether it was refused before download.
        self._failed_attempts: dict[str, bool] = {}
        #: Why each page's visit in this run failed, as far as an answer or an exception said.
        self._failure_reasons: dict[str, str] = {}
        #: Pages whose download was cancelled in this run for being larger than the request's ``download_maxsize``.
        self._too_large: set[str] = set()
        # Pages that used to yield items and the spider yielded none for in this run, by page type, with the visit's
        # time; and how many visits of each page type recorded items: judged together at close (_judge_emptied).
        self._emptied: dict[str, list[tuple[str, float]]] = {}
        self._yielded: dict[str, int] = {}
        # This run's item records by host, each with the first page that recorded it (:meth:`_note_same_record`).
        self._records: dict[tuple[str, str], str] = {}
        # The hash() of every page the spider yielded a request for in this run (:meth:`linked`).
        self._linked: set[int] = set()
        self._said: set[tuple[str, str]] = set()  # what _log_once said in this run
        # Bytes of answers whose visit is not observed yet, by page: recorded with the observation.
        self._unrecorded_bytes: dict[str, list[tuple[bool, float]]] = {}
        # Billed bytes of each redirect a page's visit went through, until its answer is measured.
        self._hops: dict[str, list[float]] = {}
        #: URLs that answered this run with a meta refresh quick enough to be a permanent redirect.
        self._instant_refreshes: set[str] = set()
        # Media pipelines' downloads (scrapy_costsched.media): the item fields listing them, the page whose item
        # listed each URL (and each page's URLs), what they moved by page and the pages some of whose downloads the
        # budget refused, until the visit is observed.
        self._media_url_fields: tuple[str, ...] = ()
        self._media_pages: dict[str, str] = {}
        self._media_urls_of: dict[str, list[str]] = {}
        self._media_sizes: dict[str, list[float]] = {}
        self._media_refused: set[str] = set()
        self._unstorable: set[str] = set()
        self.sessions = SessionSteps()
        self._empty_state: str | None = None  # the state's path, when open() found it an empty file
        self._broken_templates: set[str] = set()  # why stored templates failed to build a request in this run
        self._valued: set[str] = set()  # pages the spider gave a value in this run (costsched_value or its hook)
        self._revealed_by: dict[str, str] = {}  # a new link's page -> the page whose visit yielded it
        self.yield_only: set[str] = set()
        #: Known pages the plan left out as found deeper than ``DEPTH_LIMIT`` (:meth:`candidates`).
        self.too_deep: set[str] = set()
        #: Candidates never fetched whose attempts so far were refused before download (robots.txt, offsite rules) or
        #: answered 404 (:meth:`candidates`): what the plan's line tells apart from the pages found and not tried yet.
        self.tried_unfetched: set[str] = set()
        self.depth_limit = crawler.settings.getint("DEPTH_LIMIT") or math.inf
        self.scheduled = False  # whether CostAwareScheduler runs this crawl: without it no visit is tracked
        self._side_by_side = False  # whether another crawl of this process had its state open with this one's
        self._obey_robots = crawler.settings.getbool("ROBOTSTXT_OBEY")
        self._robots_hosts: set[str] = set()
        self._since_commit = 0
        self._committed_at = time.monotonic()
        self.volatile = VolatileFields()
        self._stored_items: dict[int, list[dict[str, Any]]] = {}  # visit token -> its items (COSTSCHED_STORE_RECORDS)
        for handler, signal in (
            (self._spider_opened, signals.spider_opened),
            (self._spider_closed, signals.spider_closed),
            (self._request_reached_downloader, signals.request_reached_downloader),
            (self._response_downloaded, signals.response_downloaded),
            (self._request_left_downloader, signals.request_left_downloader),
            (self._item_scraped, signals.item_scraped),
            (self._item_left, signals.item_dropped),
            (self._item_left, signals.item_error),
        ):
            crawler.signals.connect(handler, signal=signal)

    @classmethod
    def of(cls, crawler: Crawler) -> Tracker:
        """The tracker of *crawler*, created on first use."""
        tracker: Tracker | None = getattr(crawler, _TRACKER_ATTR, None)
        try:
            if tracker is None:
                config = Config.from_settings(crawler.settings)
                command = debug_command()
                if command is not None and config.enabled:
                    # Components enabled by hand, not through the add-on: still no spending.
                    logger.info("costsched: off for `scrapy %s` (only crawl and runspider use the budget)",
                                command)
                    config = replace(config, enabled=False)
                tracker = cls(crawler, config)
                setattr(crawler, _TRACKER_ATTR, tracker)
            if tracker.config.enabled and crawler.spider is not None:
                tracker.open()  # refuse a bad state file before anything else starts
        except (SettingError, StateError) as exc:
            stop_crawl(exc)
        return tracker

    # -- lifecycle -------------------------------------------------------

    @property
    def spider(self) -> Spider:
        spider = self.crawler.spider
        assert spider is not None
        return spider

    @property
    def who(self) -> str:
        """What the run's lines start with: ``costsched``, and the spider's name once another crawl of this
        process has opened its state beside this one (their lines share one log)."""
        return f"costsched ({self.spider.name})" if self._side_by_side else "costsched"

    def now(self) -> float:
        return float(self.config.clock())

    @property
    def ledger(self) -> Ledger:
        assert self._ledger is not None, "the tracker is not open"
        return self._ledger

    def open(self) -> None:
        """Open the store and the rooms over it once; later calls do nothing."""
        if self.store is not None:
            return
        started = time.perf_counter()
        state = spider_state(self.config.state, self.spider.name, createdir=True,
                             attributes=state_attributes(self.config.state, self.spider))
        store = storage_from_uri(state)
        new = not Path(state.removeprefix("sqlite:///")).exists()
        store.open()
        self._empty_state = state if store.found_empty else None
        new = new or store.found_empty
        try:
            self._check_fingerprinter(store, state)
            self._check_owner(store, state)
        except StateError:
            store.close()
            raise
        self.attach(store)
        atexit.register(self._commit_at_exit)
        _OPEN_TRACKERS.add(self)
        if len(_OPEN_TRACKERS) > 1:
            for tracker in _OPEN_TRACKERS:
                tracker._side_by_side = True
        carried = self.ledger.rebase(self.now())
        budget = self.ledger.budget
        self.accounts = Accounts(store, self.ledger.period, self.config.budget_period, budget, self.billing.unit)
        if carried is not None:
            self.accounts.current.carried += carried.amount
        self._unstorable = set(store.get_meta("unstorable_callbacks") or ())
        self.sessions = SessionSteps.from_state(store.get_meta("session_steps"))
        self.volatile = VolatileFields.from_state(store.get_meta("volatile_fields") or {})
        self.stats.set_value("costsched/period_spent_at_start", self.ledger.spent_at_start)
        self.stats.set_value("costsched/open_seconds", time.perf_counter() - started)
        if self.config.shadow:
            self.stats.set_value("costsched/shadow", True)
        if budget is None:
            mode = "shadow mode (no COSTSCHED_BUDGET: every request goes out, observations are recorded)"
        else:
            mode = f"budget {amount(budget, self.billing.unit)} per period, {self.ledger.left()}"
        logger.info("%s: %s state %s; %s", self.who, "new" if new else "continuing", state, mode)
        if store.found_unclosed:
            logger.info("%s: the state was not closed by the run that last wrote it (killed or crashed, stopped "
                        "by a second Ctrl-C, or the file is a copy): checked in full, it continues from that run's "
                        "last commit, and what that run drew from the budget counts as spent", self.who)
        if carried is not None:
            self._log_carried(carried)

    def _take_media_pipelines(self) -> None:
        """Leave the media pipelines' result fields out of records, and charge their downloads to the page whose
        item listed them (:mod:`~scrapy_costsched.media`). Once the spider is open: the engine builds the item
        pipelines after the downloader middleware that opens the state, and items come after."""
        found = media_fields(self.crawler)
        if not found:
            return
        self.hasher = replace(self.hasher, pipeline_fields=tuple(fields.result for fields in found))
        self.learner.hash_config = self.hasher.config_id
        self._media_url_fields = tuple(fields.urls for fields in found)
        for fields in found:
            logger.info("%s: %s's downloads (the URLs in an item's %r) are charged to the item's page; records leave "
                        "out its %r, which says what it stored rather than what the page shows", self.who,
                        fields.pipeline, fields.urls, fields.result)

    def _log_carried(self, carried: Carried) -> None:
        previous, unit = carried.previous, self.billing.unit
        changes = [f"{name} changed from {was} to {now}" for name, was, now in (
            ("COSTSCHED_BUDGET_PERIOD", format_duration(previous.period_seconds),
             format_duration(self.config.budget_period)),
            ("the billing unit (COSTSCHED_BILLING)", previous.unit, unit)) if was != now]
        if carried.share is None or self.ledger.budget is None or previous.budget is None:
            counted = "nothing of it counts against this run's budget, as one of them had none"
        else:
            counted = (f"it had spent {number(carried.previous_spent)} of {number(previous.budget)} {previous.unit}, so "
                       f"{carried.share:.0%} of this budget counts as spent ({self.ledger.left()})")
        logger.info("%s: %s while the period it was counting was still running: %s", self.who, " and ".join(changes),
                    counted)

    def attach(self, store: StateStorage) -> None:
        """The rooms planning reads, over an open *store*: what :meth:`open` sets up for a crawl, and what the
        commands set up over a read-only store to see a page, or the next plan, as the scheduler would."""
        self.store = store
        self.pages = PageBook(store, self.stats)
        self.hosts = HostBook(store, self.stats)
        self.health = Health(self.crawler, self.config, self.billing, self.hosts, self.now)
        self.learner = Learner(store, self.stats, self.hosts, self.config.history_half_life, self.hasher.config_id)
        self.kinds = KindCounts.from_state(store.get_meta("callback_kinds"))
        self.revealed_kinds = KindCounts.from_state(store.get_meta("revealed_kinds"))
        self.revealed_values = KindCounts.from_state(store.get_meta("revealed_values"))
        period = int(self.now() // self.config.budget_period)
        budget = self.config.budget.amount if self.config.budget is not None else None
        self._ledger = Ledger(store, Basis(period, self.config.budget_period, self.billing.unit, budget),
                              self._commit_grant)

    def _check_owner(self, store: StateStorage, state: str) -> None:
        """A state holds one spider's pages: another spider would re-issue them with callbacks it lacks and spend
        the same budget. A state of no spider yet (new, or from before states had owners) becomes this one's."""
        owner = store.get_meta("spider")
        if owner is None:
            store.set_meta("spider", self.spider.name)
        elif owner != self.spider.name:
            raise StateError(
                f"The costsched state {state!r} holds the pages of the spider {owner!r}, not of {self.spider.name!r}: "
                "give each spider its own state (leave COSTSCHED_STATE unset for .scrapy/costsched/<spider>.sqlite, "
                "put %(name)s in its path, or set it in each spider's custom_settings); for a renamed spider, export "
                "the state with `scrapy costsched-state export`, change its \"spider\" row to the new name and import "
                "it."
            )

    def _check_fingerprinter(self, store: StateStorage, state: str) -> None:
        fingerprinter = type(self.crawler.request_fingerprinter)
        fingerprinter_name = f"{fingerprinter.__module__}.{fingerprinter.__qualname__}"
        stored = store.get_meta("fingerprinter")
        if stored is None:
            store.set_meta("fingerprinter", fingerprinter_name)
        elif stored != fingerprinter_name:
            raise StateError(
                f"The costsched state {state!r} keys pages with {stored}, but this crawl uses "
                f"{fingerprinter_name} (REQUEST_FINGERPRINTER_CLASS); use the same fingerprinter or another "
                "COSTSCHED_STATE."
            )

    def _spider_opened(self, spider: Spider) -> None:
        self.open()
        if self.store is not None:
            self._take_media_pipelines()
            self._warn_about_setup()
        if self.store is not None and self.config.log_interval and running_loop():
            self._progress = Ticker(self._log_progress, self.config.log_interval)

    def _warn_about_setup(self) -> None:
        """What the crawl's set-up keeps from working, said once the spider is open rather than when the state
        opens: Scrapy 2.14 and later count ``log_count/WARNING`` from then on, and monitoring reads that count."""
        if not self.scheduled:  # the engine opens its scheduler first
            logger.warning("costsched: SCHEDULER is %s, not scrapy_costsched.CostAwareScheduler: no visit is recorded "
                           "and no budget applies; enable the add-on (ADDONS) or set SCHEDULER as docs/usage.md shows",
                           self.crawler.settings.get("SCHEDULER"))
        if self.billing.unit == "bytes":
            for gap in compression_gaps(self.crawler.settings):
                logger.warning("costsched: billing by the byte, but %s", gap)
        if self._empty_state is not None:
            logger.warning("costsched: the state %s was an empty file (a crash before its first commit, or a touch); "
                           "initialised as a new state", self._empty_state)
        if self._unstorable:
            self._warn_unstorable(sorted(self._unstorable))

    def _log_progress(self) -> None:
        """A line every ``COSTSCHED_LOG_INTERVAL``, as Scrapy's LogStats writes its own: the spend so far and
        what it found."""
        if self.store is None:
            return
        get = self.stats.get_value
        unit, spent, changed = self.billing.unit, self.ledger.spent_this_run, get("costsched/changed", 0)
        logger.info(
            "%s: %s; this run: %d visits, %d changed, %d unchanged (%d of them 304s), spent %s%s", self.who,
            "shadow mode" if self.config.budget is None else
            f"{number(self.ledger.spent)} of {amount(self.config.budget.amount, unit)} spent this period",
            get("costsched/visits", 0), changed, get("costsched/unchanged", 0), self._not_modified_observed(),
            amount(spent, unit), per_change(spent, changed, unit))

    def _spider_closed(self, spider: Spider, reason: str) -> Coroutine[Any, Any, None] | None:
        closed = self.close(reason)
        # What is left to wait for as a coroutine, not a Deferred: Scrapy 2.14 deprecates signal handlers that
        # return one. Nothing when nothing is left (components driven by hand send the signal synchronously).
        return None if closed is None else _finished(closed)

    def close(self, reason: str) -> Deferred[None] | None:
        """Record what the run left open, store the ledger and summary, refit priors, close the store.

        Called by the scheduler's ``close()`` and by ``spider_closed``, whichever comes
        first; the second call does nothing. The refit runs in a worker thread when a
        loop is running, else (components driven by hand) before returning.
        """
        if self._closing is not None or self.store is None:
            return None
        if self._progress is not None:
            self._progress.stop()
        for visit in self.visits.abandon_all():
            # Still waiting for a chained sub-request or an item: the record is incomplete.
            visit.failed = True
            self._observe(visit)
        for key, refused in self._failed_attempts.items():
            self._observe(Visit(page_key=key, token=0, time=self.now(), failed=True, refused=refused))
        self._failed_attempts.clear()
        self._failure_reasons.clear()
        self._too_large.clear()
        for key in list(self._unrecorded_bytes):  # answers whose visit was never observed
            page = self.page(key)
            if page is not None:
                self._record_bytes(key, page)
                self.pages.changed(key, page)
        self._unrecorded_bytes.clear()
        self._hops.clear()
        self._instant_refreshes.clear()
        self._records.clear()
        self._linked.clear()
        self._media_pages.clear()
        self._media_urls_of.clear()
        self._media_sizes.clear()
        self._media_refused.clear()
        self._judge_emptied()
        self._warn_volatile()
        self.accounts.close(self._group_of)
        unsent = self.ledger.release_all()
        if unsent:
            self.stats.set_value("costsched/unsent_at_close", unsent)
        self.ledger.close()
        self.hosts.report(self.now() / DAY)
        self.store.set_meta("session_steps", self.sessions.to_state())
        self._save()
        self._summarise(reason)
        if not running_loop():
            self._finish()
            return None
        # Refitting reads every page of the observed groups: off the loop's thread.
        self._closing = in_thread(self._finish)
        return self._closing

    def _finish(self) -> None:
        assert self.store is not None
        try:
            # Planning indexed every known page with its group: no need to read them all again.
            groups = self.pages.groups() if self.pages.indexed else None
            refitted = self.learner.refit_priors(seed=self.ledger.period, groups=groups)
            self.stats.set_value("costsched/priors_refitted", refitted)
        finally:
            self.store.close()
            self.store = None
            atexit.unregister(self._commit_at_exit)
            _OPEN_TRACKERS.discard(self)

    def _summarise(self, reason: str) -> None:
        self._update_spend_stats()
        get = self.stats.get_value
        period_end = (self.ledger.period + 1) * self.config.budget_period
        spent = self.ledger.spent_this_run
        changed = get("costsched/changed", 0)
        ignored = get("costsched/ignored", 0)  # failed visits too, but never sent: apart, and why
        cached = get("costsched/cached", 0)  # answers the spider parsed that are not visits: say why
        # The other ends of a visit, said when they happened, so the outcomes add up to the visits.
        others = "".join(f", {count} {what}" for count, what in (
            (get("costsched/rebaseline", 0), "re-baselined (not comparable with their last record)"),
            (get("costsched/extraction_empty", 0), "without the items they used to yield"),
            (get("costsched/not_found", 0) + get("costsched/gone", 0), "answered 404 or 410"),
            (get("costsched/redirected_to_fetched", 0), "redirected to a page this run fetched already"),
            (get("costsched/redirected_away", 0), "gone, redirected for good to a page of another kind"),
            (get("costsched/cut_short", 0),
             "cut short (a redirect or retry the budget, its host's health or its host's pause kept back)"),
            (get("costsched/duplicate_fetch", 0), "fetched again in this run (learned from once)"),
        ) if count)
        logger.info(
            "%s: run finished (%s): %d visits%s: %d new pages, %d changed, %d unchanged (%d of them 304s)%s, "
            "%d failed%s%s; spent %s%s%s; %s",
            self.who, reason, get("costsched/visits", 0),
            f" ({cached} more answers came from the HTTP cache: free, and not learned from)" if cached else "",
            get("costsched/baseline", 0), changed, get("costsched/unchanged", 0),
            self._not_modified_observed(), others, get("costsched/failed", 0) - ignored,
            f" ({get('costsched/too_large')} of them larger than their download may be: retired)"
            if get("costsched/too_large") else "",
            f"; {ignored} more refused before download (robots.txt, offsite rules or a downloader middleware)"
            if ignored else "",
            amount(spent, self.billing.unit),
            f", {amount(self.sessions.spent, self.billing.unit)} of them on session steps" if self.sessions.spent else "",
            per_change(spent, changed, self.billing.unit),
            self._period_left(period_end))

    def _period_left(self, period_end: float) -> str:
        """What is left of the budget period and when the next starts, as the run's last line says it. A run that
        went on past its period's end (a daily crawl across midnight) spent that period's budget to the end."""
        shadow = "shadow mode, nothing skipped"
        until_next = period_end - self.now()
        if until_next >= 0.0:
            return f"{shadow if self.config.shadow else self.ledger.left()}; next period starts in {until_next / 3600:.1f} h"
        ended = (f"the budget period this run began in ended {-until_next / 3600:.1f} h ago, during the run (what it "
                 "spent counts there); the next run spends the new period's budget")
        return f"{shadow}; {ended}" if self.config.shadow else ended

    def _not_modified_observed(self) -> int:
        """304s taken as "unchanged" (not those to a verification's canary, nor those discarded)."""
        get = self.stats.get_value
        return int(get("costsched/not_modified", 0) - get("costsched/not_modified/false", 0)
                   - get("costsched/not_modified/discarded", 0))

    def _update_spend_stats(self) -> None:
        """The spend stats, brought up to date at each commit and at close rather than at each attempt
        (a stats call costs more than the bookkeeping it reports)."""
        spent = self.ledger.spent_this_run
        self.stats.set_value("costsched/spent", spent)
        self.stats.set_value("costsched/period_spent", self.ledger.spent)
        changed = self.stats.get_value("costsched/changed", 0)
        if changed:
            self.stats.set_value("costsched/cost_per_change", spent / changed)

    def _save(self) -> None:
        """Write what the rooms hold in memory into the store (committed by the caller)."""
        assert self.store is not None
        self.pages.flush()
        self.hosts.save()
        self.accounts.save()
        if self.volatile.unsaved:  # a sample of a few hundred pages, rewritten only when it changed
            self.store.set_meta("volatile_fields", self.volatile.to_state())
        if self.kinds.unsaved:
            self.store.set_meta("callback_kinds", self.kinds.to_state())
        if self.revealed_kinds.unsaved:
            self.store.set_meta("revealed_kinds", self.revealed_kinds.to_state())
        if self.revealed_values.unsaved:
            self.store.set_meta("revealed_values", self.revealed_values.to_state())

    def commit(self) -> None:
        """A safe point: everything observed so far survives a crash from here on."""
        if self.store is None:
            return
        self._save()
        self.store.commit()
        self._since_commit = 0
        self._committed_at = time.monotonic()
        self._update_spend_stats()
        self.stats.inc_value("costsched/commits")
        logger.debug("%s: committed; %d observations in this run", self.who,
                     sum(self.stats.get_value(f"costsched/{o}", 0)
                         for o in ("baseline", "rebaseline", "changed", "unchanged")))

    def _commit_at_exit(self) -> None:
        """Commit what a process that exits with the state open observed since the last commit.

        Scrapy's second Ctrl-C ("forcing unclean shutdown") stops the loop at once, before the spider closes;
        the process then exits, and nothing runs on the loop any more. The state stays unclosed, so the next
        run checks it in full, as after a kill, but it loses none of the visits already observed.
        """
        if self.store is None or self._closing is not None:
            return
        try:
            self.commit()
        except (sqlite3.Error, OSError, RuntimeError) as exc:  # RuntimeError: sqlitedict refusing a closed connection
            logger.warning("%s: could not commit the state at exit: %s", self.who, exc)

    def _commit_grant(self) -> None:
        """The ledger's safe point: its grant reaches the disk before the requests it covers leave.

        Changed pages are not flushed for it: a grant is due every 64 requests sent, and writing
        every page changed since the last one would write pages whose visits are under way, and
        again when they are observed. They are committed with the observations (:meth:`commit`),
        which is what ``COSTSCHED_COMMIT_EVERY`` promises.
        """
        if self.store is None:
            return
        self.store.commit()
        self.stats.inc_value("costsched/commits")

    # -- pages -----------------------------------------------------------

    def _group_of(self, key: str) -> tuple[str, str] | None:
        page = self.page(key)
        return (page.host, page.page_type) if page is not None else None

    def fingerprint(self, request: Request) -> str:
        return self.crawler.request_fingerprinter.fingerprint(request).hex()

    def page(self, key: str) -> PageState | None:
        return self.pages.get(key)

    def _value_from(self, source: Any, meta_value: Any) -> float | None:
        """The value the spider gives *source* (a request or an item): its hook first, then meta."""
        hook = getattr(self.spider, "costsched_value", None)
        raw = self._call_value_hook(hook, source) if callable(hook) else None
        if raw is None:
            raw = meta_value
        if raw is None:
            return None
        if resolve_value(raw, self.config.value_tiers) is None:
            self._invalid("costsched_value", raw, f"use a positive number or one of {sorted(self.config.value_tiers)}")
            return None
        return raw  # type: ignore[no-any-return]

    def _call_value_hook(self, hook: Callable[[Any], Any], source: Any) -> Any:
        """The spider's ``costsched_value()`` of *source*; ``None`` when it raises, so that the item or request it was
        asked about goes on as if the hook had no opinion (a scheduling hint must not cost the user an item)."""
        try:
            return hook(source)
        except Exception as exc:  # noqa: BLE001 - the user's code: anything it raises is reported, not passed on
            self.stats.inc_value("costsched/value_hook/errors")
            what = f"request {source.url}" if isinstance(source, Request) else f"item of type {type(source).__qualname__}"
            self._log_once(("value_hook", type(exc).__qualname__),
                           "costsched: the spider's costsched_value() raised %s on %s; it passes through with the value "
                           "its meta gives, if any (each failure is counted in costsched/value_hook/errors, this is "
                           "said once per exception type)", type(exc).__qualname__, what, exc_info=True)
            return None

    def value_of(self, page: PageState) -> float:
        return self.resolve_value(page.value)

    def resolve_value(self, raw: Any) -> float:
        value = resolve_value(raw, self.config.value_tiers)
        if value is None:  # a tier that was renamed since the page was stored
            value = resolve_value(self.config.default_value, self.config.value_tiers)
        assert value is not None
        return value

    def _raise_value(self, page: PageState, raw: Any) -> bool:
        """A page reached from several parents keeps the highest value; ``True`` if it rose."""
        if raw is not None and resolve_value(raw, self.config.value_tiers) > self.value_of(page):  # type: ignore[operator]
            page.value = raw
            return True
        return False

    def _take_value(self, key: str, page: PageState, raw: Any) -> bool:
        """The value the spider gives a known page as it yields it (*raw*, ``None`` for none); ``True`` if it changed.

        The first in a run replaces the stored one, so a tag changed in the spider takes effect at the next run,
        lowered as well as raised (found on a shop trial: listing pages tagged ``"low"`` as the docs advise kept
        the ``"normal"`` of their first runs); later ones in the run only raise it, as a page reached from several
        parents keeps the highest.
        """
        if raw is None:
            return False
        if key in self._valued:
            return self._raise_value(page, raw)
        self._valued.add(key)
        if self.resolve_value(raw) == self.value_of(page):
            return False
        page.value = raw
        return True

    def sighting(self, request: Request, key: str) -> tuple[PageState, bool]:
        """Record that the spider asked for *request*; returns the page and whether it is new."""
        page = self.page(key)
        new = page is None
        meta_type = request.meta.get("costsched_page_type")
        if meta_type is not None and not isinstance(meta_type, str):
            self._invalid("costsched_page_type", meta_type, "use a string")
            meta_type = None
        raw_value = self._value_from(request, request.meta.get("costsched_value"))
        template = make_template(request, self.spider)
        if template is None:
            self.stats.inc_value("costsched/template/unstorable")
            self._note_unstorable(request)
        elif self._cost_override(template["meta"]) is None:
            template["meta"].pop("costsched_cost", None)  # an invalid override is warned about, never stored
        if page is None:
            host = urlparse(request.url).hostname or ""
            page = PageState(url=request.url, host=host, page_type=meta_type or self._kind_of_new(template),
                             value=raw_value if raw_value is not None else self.config.default_value,
                             first_seen=self.now(), template=template)
            if raw_value is not None:
                self._valued.add(key)
            self.pages.changed(key, page)
            self._count_revealed_value(key, page)
            return page, True
        changed = self._take_value(key, page, raw_value)
        if template is not None and template != page.template:
            page.template, changed = template, True
        if meta_type is not None and meta_type != page.page_type:
            page.page_type, changed = meta_type, True
        if changed:
            self.pages.changed(key, page)
        return page, new

    def _kind_of_new(self, template: dict[str, Any] | None) -> str:
        """The type a new page the spider tags none for starts with: its callback's pages' kind, once they show one
        (:mod:`.kinds`), so it is planned at that kind's prior before its first visit; else untyped."""
        if template is None:
            return UNTYPED
        kind = self.kinds.kind_of(callback_of(template.get("callback"), template["meta"]))
        if kind is None:
            return UNTYPED
        self.stats.inc_value("costsched/pages/typed_by_callback")
        return kind

    def _type_from_items(self, page: PageState, visit: Visit) -> None:
        """Type *page* by the items *visit* yielded when they are of one class (pipelines often pass dicts on, so
        ``dict`` names none): an untyped page at any visit, and at its first visit a page its callback typed (a
        guess, :meth:`_kind_of_new`), which yielding no items leaves untyped. A page tagged with
        ``costsched_page_type`` keeps its tag."""
        types = visit.item_types
        shown = next(iter(types)) if len(types) == 1 and "dict" not in types else None
        guessed = (page.visits == 0 and page.page_type != UNTYPED and page.template is not None
                   and "costsched_page_type" not in page.template["meta"])
        if shown is not None and page.page_type == UNTYPED:
            page.page_type = shown
        elif guessed and not visit.failed and page.page_type != (shown or UNTYPED):
            page.page_type = shown or UNTYPED
            self.stats.inc_value("costsched/pages/retyped")

    def _count_kinds(self, page: PageState, visit: Visit) -> None:
        """Count *page*'s kind for its callback, and the kinds of the new pages *visit* linked to for its group
        (:mod:`.kinds`)."""
        if page.template is not None:
            self.kinds.observe(callback_of(page.template.get("callback"), page.template["meta"]), page.page_type)
        for kind, count in visit.new_link_kinds.items():
            self.revealed_kinds.observe(page.group, kind, count)

    def _count_revealed_value(self, key: str, page: PageState) -> None:
        """Count the value new page *page* was given for the group of the hub whose visit yielded it (:mod:`.kinds`),
        as its sighting took it (``costsched_value`` or the spider's hook): by then the scheduler has its request, so
        one a filter dropped is never counted."""
        hub_key = self._revealed_by.pop(key, None)
        hub = self.page(hub_key) if hub_key is not None else None
        if hub is not None:
            self.revealed_values.observe(hub.group, json.dumps(page.value))

    def sighting_changes_nothing(self, request: Request, key: str) -> bool:
        """Whether *request* is of a known page whose :meth:`sighting` would leave it as planning sees it.

        Its value would stay (:meth:`_take_value`), and its type, its cost override and whether it
        has a template, so a known page outside the plan can be skipped without reading it (which
        costs more than the rest of a crawl's work for the page). Its stored template is then
        not rebuilt: it is refreshed when the spider yields the page in a run that plans it, or within
        ``DEPTH_LIMIT`` after a plan left it out as found deeper (else no plan would take it again).
        """
        profile = self.pages.profile(key)
        if profile is None or not profile.has_template:
            return False
        if key in self.too_deep and request.meta.get("depth", 0) <= self.depth_limit:
            return False  # found within DEPTH_LIMIT now: its template takes that depth, and the next plan the page
        meta_type = request.meta.get("costsched_page_type")
        if meta_type is not None and meta_type != profile.group.partition("|")[2]:  # no "|" in a host name
            return False
        cost = request.meta.get("costsched_cost")
        if cost != profile.cost or isinstance(cost, bool):  # a stored override is a valid one
            return False
        raw_value = self._value_from(request, request.meta.get("costsched_value"))
        if raw_value is None:
            return True
        value, stored = self.resolve_value(raw_value), self.resolve_value(profile.value)
        if key in self._valued:
            return value <= stored
        if value != stored:
            return False
        self._valued.add(key)  # the run's first value for the page is the one it has
        return True

    def _note_unstorable(self, request: Request) -> None:
        callback = request.callback
        name = getattr(callback, "__qualname__", None) or repr(callback)
        if name in self._unstorable:
            return
        self._unstorable.add(name)
        assert self.store is not None
        self.store.set_meta("unstorable_callbacks", sorted(self._unstorable))
        self._warn_unstorable([name])

    def _warn_unstorable(self, names: list[str]) -> None:
        logger.warning(
            "costsched: requests for callbacks %s cannot be stored (a callback or errback that is not a method of "
            "the spider, or meta, cb_kwargs or cookies that JSON cannot hold), so their pages cannot be re-issued from "
            "the state: they are visited only when the spider yields them. Make them spider methods with JSON "
            "arguments to let the scheduler revisit those pages on its own.", ", ".join(repr(n) for n in names))

    def prefetch(self, keys: list[str]) -> None:
        """Read the known pages of *keys* in one go: :meth:`request_for` is about to re-issue them."""
        self.pages.prefetch(keys)

    def request_for(self, key: str) -> Request | None:
        """Re-issue a known page from its stored template (the spider's value hook is asked again); ``None``, counted
        by cause, when it cannot be."""
        page = self.page(key)
        if page is None or page.template is None:
            self.stats.inc_value("costsched/skipped/no_template")
            return None
        try:
            request = request_from_template(page.template, self.spider)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            # Once per cause: a renamed callback breaks the template of every page it parsed.
            reason = str(exc)
            log = logger.debug if reason in self._broken_templates else logger.warning
            self._broken_templates.add(reason)
            log("costsched: cannot re-issue %s from its template: %s; it is visited when the spider yields it again "
                "(pages skipped for this reason or another are counted in costsched/template/broken)", page.url, exc)
            self.stats.inc_value("costsched/template/broken")
            return None
        if request.meta.get("depth", 0) > self.depth_limit:
            self.stats.inc_value("costsched/skipped/depth_limit")
            self.pages.changed(key, page)  # its summary, if older than the depth it now holds, leaves it out of plans
            return None
        if self.sessions.shapes and request in self.sessions:
            # Recorded before the spider marked such requests session steps: not a page, so not replayed (it
            # waits as a retired page does, and is left out again then).
            self.stats.inc_value("costsched/skipped/session_step")
            page.not_before = self._periods_after(self.now(), GONE_RECHECK_PERIODS)
            self.pages.changed(key, page)
            return None
        if self._raise_value(page, self._value_from(request, request.meta.get("costsched_value"))):
            self.pages.changed(key, page)
        return request

    def _cost_override(self, meta: dict[str, Any]) -> float | None:
        override = meta.get("costsched_cost")
        if override is None:
            return None
        valid = _valid_cost(override)
        if valid is None:
            self._invalid("costsched_cost", override, "use a positive number")
        return valid

    def _invalid(self, meta_key: str, raw: Any, hint: str) -> None:
        """An unusable meta value (or hook result), ignored: counted each time, logged once per value and run."""
        self.stats.inc_value(f"costsched/invalid/{meta_key}")
        self._log_once((meta_key, repr(raw) if isinstance(raw, (str, int, float)) else type(raw).__qualname__),
                       "costsched: ignoring invalid %s %r (%s; each use is counted in costsched/invalid/%s, this is "
                       "said once)", meta_key, raw, hint, meta_key)

    def _log_once(self, what: tuple[str, str], message: str, *args: Any, level: int = logging.WARNING,
                  exc_info: bool = False) -> bool:
        """Log the first time *what* happens in this run (``True`` if this was it): a spider repeats a mistake
        on every request or item of a kind, and thousands of identical lines would bury the log (the stats
        count each one)."""
        if what in self._said:
            return False
        self._said.add(what)
        logger.log(level, message, *args, exc_info=exc_info)
        return True

    def planned_cost(self, meta: dict[str, Any], key: str | None = None, *, attempt: bool = False) -> float:
        """What a visit is expected to cost: the ``costsched_cost`` override, else a full fetch of its page (under
        byte billing at its own mean, where it has one) or of its kind of page.

        *key* is the page's, when the caller knows it (else the page in *meta*, if any). With *attempt*, what one
        more attempt of a visit under way (a retry, a redirect's target, a sub-request) is held at: one answer,
        without the redirects its kind of page goes through, which are charged as they happen.
        """
        override = self._cost_override(meta)
        if override is not None:
            return override
        page = self.page(key or meta.get(PAGE_META) or "")
        if page is None:
            return self._prior_cost()
        costs = self._group_costs(page.group, self.now())
        own = page.own_full_bytes
        full = self._own_costs(costs, own)[0] if self.billing.unit == "bytes" and own is not None else costs.full
        if page.last_visit is None:
            full += costs.new_media - costs.media
        return full - costs.hops if attempt or not _through_redirects(page.last_visit, page.redirected) else full

    def prior_rate(self, group: str) -> float:
        return self.learner.prior_rate(group)

    def rate_of(self, page: PageState) -> float:
        """*page*'s change rate a day as planning assumes it: its estimate, else :meth:`prior_rate`."""
        return page.estimate.rate if page.estimate is not None else self.prior_rate(page.group)

    def candidates(self, now: float, keys: Iterable[str] | None = None) -> list[Candidate]:
        """Every known, live page (or those of *keys*) that may be visited now, as planning sees it.

        Pages waiting out a failure backoff are left out; a retired page comes back
        for its rare re-check. A page that answered 404 or 410 since its last visit
        is worth :data:`LIVE_AFTER_STRIKE` of itself per answer in a row, and what it
        may have changed is counted from the last of them (it went missing then). Each
        attempt in a row refused before download halves a page's worth too (a robots.txt
        ``Disallow`` is the site's standing word: found on a shop trial, a spider that
        followed cart links filled most of a plan with them as their backoffs ran out).
        Pages without a stored template (their callback is not a spider method) are
        noted in :attr:`yield_only`: only the spider can yield them. Pages found deeper
        than ``DEPTH_LIMIT`` are left out: re-issued, they would be dropped (a lowered
        limit had them fill plans that leftover rounds then made up for). So are pages
        no request was seen for in ``COSTSCHED_UNLINKED_PERIODS`` since a page stopped
        linking to them (:meth:`_note_unlinked`).
        """
        return self.candidates_of(self.pages.summaries() if keys is None else self.pages.summaries_of(keys), now)

    def preselect(self, now: float, need: float, objective: str, cycle: float) -> Preselection | None:
        """The plan's candidates as :meth:`candidates` gives them, but only as many as give the head of their
        ranking that covers *need* (:mod:`~.preselection`); ``None`` when the store cannot compute bounds or they cover
        too few of the pages (then :meth:`candidates` reads them all)."""
        if not isinstance(self.store, SummaryQueries):
            return None
        bound = bound_sql(now=now, cycle=cycle, objective=objective, tiers=self.config.value_tiers,
                          default_value=self.resolve_value(self.config.default_value), depth_limit=self.depth_limit,
                          json_functions=self.store.json_functions)
        return preselect(self.store, self.pages, bound, need,
                         group_cost=lambda group, least_bytes: self._cost_floor(group, now, least_bytes),
                         hub_terms=lambda group: self._hub_terms(group, objective),
                         candidates_of=lambda rows: self.candidates_of(rows, now), objective=objective, cycle=cycle)

    def rank_unread(self, rest: list[Candidate], unread: Unread, need: float, now: float, objective: str,
                    cycle: float) -> tuple[Ranked, Unread]:
        """The head of the ranking of the *rest* and of the pages a plan made at *now* left *unread* (:meth:`preselect`)
        that covers *need*, the rest of it, and the pages still unread (:func:`~.preselection.rank_above`). They need
        no indexing again: the bound covers only summaries with every field in a column, which the plan's scan
        indexed, and each write since kept the index current."""
        assert isinstance(self.store, SummaryQueries)
        store = self.store
        self.pages.flush()
        _, ranked, left = rank_above(rest, unread, need,
                                     lambda pages: self.candidates_of(unread_summaries(store, pages), now), objective, cycle)
        return ranked, left

    def _cost_floor(self, group: str, now: float, least_bytes: float | None) -> float | None:
        """The least a visit of a page of *group* is planned at, where its bound is its group's (:mod:`~.preselection`):
        its full price, under byte billing the least of that and the price of its smallest page (*least_bytes*, the
        least size of its own a page of the group has), or where the group's pages are sent validators its 304's, which
        the marginal expected cost ``c304 + (cost − c304)·P(changed)`` they are ranked by never falls below; less the
        redirects a page that answered at its own URL is planned without. ``None`` where that is not positive."""
        costs = self._group_costs(group, now)
        full = costs.full
        if least_bytes is not None and self.billing.unit == "bytes":
            full = min(full, self._own_costs(costs, least_bytes)[0])
        floor = (full if costs.revalidation is None else min(full, costs.revalidation)) - costs.hops
        return floor if floor > 0.0 else None

    def candidates_of(self, summaries: Iterable[tuple[str, Sequence[Any]]], now: float) -> list[Candidate]:
        """The candidates of the pages of *summaries* (keys and summary rows) that may be visited now, as
        :meth:`candidates` makes them."""
        result: list[Candidate] = []
        append = result.append
        # Looked up once per plan rather than once per page: tiers by name, priors and costs by group.
        tiers: dict[str, float] = {}
        priors: dict[str, float] = {}
        costs: dict[str, _GroupCosts] = {}
        new_pages: dict[str, Discovery] = {}
        by_size = self.billing.unit == "bytes"
        too_deep = unlinked_out = 0
        for key, row in summaries:
            (last_seen, rate, raw_value, strikes, has_template, group, cost, rate_low, rate_high, not_before, links,
             full_bytes, redirected, depth, unlinked) = row
            if not_before is not None and not_before > now:
                continue
            if unlinked is not None and self.left_unlinked(unlinked, now):
                unlinked_out += 1
                continue
            if depth is not None and depth > self.depth_limit:
                self.too_deep.add(key)
                too_deep += 1
                continue
            if not has_template:
                self.yield_only.add(key)
            if rate is None:
                if group not in priors:
                    priors[group] = self.prior_rate(group)
                rate = priors[group]
            if group not in costs:
                costs[group] = self._group_costs(group, now)
            revalidation_cost = None
            if cost is None:
                if by_size and full_bytes is not None:
                    cost, revalidation_cost = self._own_costs(costs[group], full_bytes)
                else:
                    cost, revalidation_cost = costs[group].full, costs[group].revalidation
                hops = costs[group].hops
                if hops and not _through_redirects(last_seen, redirected):
                    cost -= hops
                    revalidation_cost = None if revalidation_cost is None else revalidation_cost - hops
                if last_seen is None:
                    cost += costs[group].new_media - costs[group].media
            value = tiers.get(raw_value) if isinstance(raw_value, str) else None
            if value is None:
                value = self.resolve_value(raw_value)
                if isinstance(raw_value, str):
                    tiers[raw_value] = value
            if strikes:
                value *= LIVE_AFTER_STRIKE ** strikes
                if last_seen is None:
                    self.tried_unfetched.add(key)
            elapsed = math.inf if last_seen is None else max(now - last_seen, 0.0) / DAY
            hub = None
            if links is not None:
                if group not in new_pages:
                    new_pages[group] = self._new_pages(group)
                hub = self._hub(Summary._make(row), new_pages[group])
            append(Candidate(key, value, rate, elapsed, cost, revalidation_cost if last_seen is not None else None,
                             rate_low, rate_high, hub))
        if too_deep:
            self.stats.inc_value("costsched/plan/depth_limit", too_deep)
        if unlinked_out:
            self.stats.inc_value("costsched/plan/unlinked", unlinked_out)
        return result

    def _own_costs(self, costs: _GroupCosts, full_bytes: float) -> tuple[float, float | None]:
        """Under byte billing, a visit of a page whose own mean full fetch is *full_bytes*, of a group priced at
        *costs*: pages of one kind differ in size (a category of 10 products, one of 200), their 304s hardly."""
        full = self._full_fetch(full_bytes) + costs.failures + costs.hops + costs.media
        return full, costs.revalidation if costs.revalidation is not None and costs.revalidation < full else None

    def _group_costs(self, group: str, now: float) -> _GroupCosts:
        """What a visit of a page of *group* (host and page type) costs in full, and answered 304.

        Priced by the billing model from the group's mean bytes of each kind of answer; the 304
        price only while the host is sent validators and it is the cheaper: the planner then prices
        the visit by its marginal expected cost ``c304 + (cfull − c304)·P(changed)`` (research.md
        section 1, :func:`~.model.freshness.visit_index`). Each includes the failed attempts the
        host's health expects before a success (:meth:`Health.priced`), which are the same for
        every visit of the host, and the redirects the group's visits went through (priced as 301s), which a
        page that answered at its own URL last time is planned without (:func:`_through_redirects`).
        """
        full = self.hosts.mean_bytes(group, not_modified=False)
        if full is None:
            full = self.hosts.mean_bytes(None, not_modified=False)  # a kind of page never fetched: the crawl's mean
        cost = self._full_fetch(full)
        host_name = group.partition("|")[0]
        host = self.hosts.of(host_name)
        not_modified = self.hosts.mean_bytes(group, not_modified=True)
        revalidation: float | None = None
        if not_modified is not None and any(host.to_send(True, True, now / DAY)) and self.config.conditional:
            revalidation = self.billing.attempt_cost(304, round(not_modified))
            revalidation = revalidation if revalidation < cost else None
        priced = self.health.priced(host_name, cost)
        hops = self._hops_cost(group)
        media = self._media_cost(group, first=False)
        return _GroupCosts(priced + hops + media,
                           None if revalidation is None else self.health.priced(host_name, revalidation) + hops + media,
                           priced - cost, hops, media, self._media_cost(group, first=True))

    def _hops_cost(self, group: str) -> float:
        """What the redirects a visit of a page of *group* goes through cost, as measured on its visits so far."""
        hops = self.hosts.hops.get(group)
        if hops is None or not hops.per_visit:
            return 0.0
        return hops.per_visit * self.billing.attempt_cost(301, round(hops.bytes.mean))

    def _media_cost(self, group: str | None, first: bool) -> float:
        """What the media pipelines' downloads a *first* (or later) visit of a page of *group* brings cost, as
        measured so far (:meth:`HostBook.media_per_visit`); nothing in a crawl that has none."""
        media = self.hosts.media_per_visit(group, first)
        if media is None:
            return 0.0
        per_visit, size = media
        return per_visit * self.billing.attempt_cost(200, round(size))

    def _prior_cost(self) -> float:
        """What a visit is planned at before anything of its kind was measured: the billing model's prior, but
        under byte billing at most a quarter of the period's budget, so a budget smaller than the prior page
        (64 kB) still fetches the first pages and learns what they really cost."""
        prior = self.billing.expected_cost(None)
        if self.billing.unit == "bytes" and self.config.budget is not None:
            return min(prior, self.config.budget.amount / 4)
        return prior

    def robots_cost(self, hosts: set[str | None]) -> float:
        """What the robots.txt requests RobotsTxtMiddleware sends this run to *hosts* will cost (one each, at the
        price their reservations hold), when ``ROBOTSTXT_OBEY`` is on: a plan that leaves it out has its last
        pages, or its new ones, crowded out by them."""
        return sum(self._robots_price(host) for host in hosts) if self._obey_robots else 0.0

    def _robots_price(self, host: str | None) -> float:
        """What a request for *host*'s robots.txt is expected to cost: by its measured bytes (a robots.txt is
        small, and a byte budget reserved at the prior page's 64 kB for it starves discovery), else the prior."""
        return self._full_fetch(self.hosts.robots_bytes(host or ""))

    def _full_fetch(self, size: float | None) -> float:
        """A full answer of *size* bytes as the billing model prices it; the prior when no size was measured."""
        if size is None:
            return self._prior_cost()
        return self.billing.expected_cost(self.billing.attempt_cost(200, round(size)))

    def host_of(self, key: str) -> str | None:
        """The host of known page *key* as planning indexed it (``None`` if it is not indexed)."""
        profile = self.pages.profile(key)
        return profile.group.partition("|")[0] if profile is not None else None

    def _new_page_cost(self, host: str) -> float:
        """What a page of *host* that a hub reveals is expected to cost: its kind is not known before the spider
        yields it, so a full fetch of the crawl's mean size, as a kind never fetched is planned (:meth:`_group_costs`),
        not the prior page, which under byte billing held most of a budget for a hub's few small pages."""
        return (self.health.priced(host, self._full_fetch(self.hosts.mean_bytes(None, not_modified=False)))
                + self._media_cost(None, first=True))

    def _new_pages(self, group: str) -> Discovery:
        """What a new page a hub of *group* reveals is worth and costs, as a hub's :class:`Discovery` without
        its own link stats (:meth:`_hub` adds them): planned at the prior rate of :meth:`revealed_kind`
        (:meth:`.Learner.prior_rate`), as a new URL is ranked."""
        host = group.partition("|")[0]
        return Discovery(0.0, self.revealed_value(group), self._new_page_cost(host),
                         self.prior_rate(group_of(host, self.revealed_kind(group))))

    def revealed_value(self, group: str) -> float:
        """The value the new pages a hub of *group* reveals are priced at: the mean of those the new links its pages
        yielded were given (:mod:`.kinds`), else the default value."""
        mean = self.revealed_values.mean(group, self._value_of_label)
        return self.resolve_value(self.config.default_value) if mean is None else mean

    def _value_of_label(self, label: str) -> float | None:
        """The weight of a value as :meth:`_count_revealed_value` counted it (JSON); ``None`` for a tier no longer set."""
        try:
            return resolve_value(json.loads(label), self.config.value_tiers)
        except ValueError:
            return None

    def revealed_kind(self, group: str) -> str:
        """The kind the new pages a hub of *group* reveals are priced as: the one the new links its pages yielded
        were, declared or shown by their callbacks (:mod:`.kinds`), or untyped (its host's prior) where they showed
        none."""
        return self.revealed_kinds.kind_of(group) or UNTYPED

    def _hub_terms(self, group: str, objective: str) -> HubTerms:
        """What a new page a hub of *group* reveals is worth, as :meth:`_hub` and the ranking price it."""
        new_pages = self._new_pages(group)
        return HubTerms(self.learner.link_prior_of(group), new_pages.new_gain(objective == "changes"), new_pages.cost)

    def _hub(self, row: Summary, new_pages: Discovery) -> Discovery | None:
        """What a page that links out reveals: its learned new links a day, each worth and costing *new_pages*'."""
        if row.links is None:
            return None
        try:
            links = NewLinkStats.from_json(row.links)
        except ValueError:
            self.stats.inc_value("costsched/invalid/link_stats")
            return None
        return new_pages._replace(rate=links.rate(self.learner.link_prior_of(row.group)), cap=links.cap)

    def session_from(self, response: Response) -> None:
        """A callback of *response*, a page's, yielded a session step. A start URL that does is the log-in page of a
        spider that lists it in ``start_urls``, whose request it cannot mark: from the next run on, a start request
        of its shape is a session step too (sent first, and not a page), and the page is not re-issued."""
        request = response.request
        if request is None or not request.meta.get("is_start_request") or request in self.sessions:
            return
        self.sessions.saw(request)
        logger.info("%s: start URL %s leads to session steps (costsched_session): from the next run on it is taken "
                    "for one (sent first, and not a page)", self.who, request.url)

    # -- the ledger's signals ----------------------------------------------

    def admitted(self, request: Request, key: str, reason: str) -> None:
        """The scheduler lets *request* go out as the visit of page *key*."""
        request.meta[PAGE_META] = key
        request.meta[VISIT_META] = self.visits.new_token()
        request.meta[REASON_META] = reason

    def reserve(self, request: Request, cost: float) -> None:
        """Hold *cost* for *request*, and for its host's robots.txt when RobotsTxtMiddleware will fetch it first."""
        self.ledger.reserve(request, cost)
        if self._obey_robots and not request.meta.get("dont_obey_robotstxt"):
            netloc = urlparse_cached(request).netloc
            if netloc not in self._robots_hosts:
                self._robots_hosts.add(netloc)
                self.ledger.reserve(_robots_holder(netloc), self._robots_price(urlparse_cached(request).hostname))

    def _request_reached_downloader(self, request: Request, spider: Spider) -> None:
        if self.store is None:  # a crawl this tracker does not take part in
            return
        token = request.meta.get(VISIT_META)
        self._downloaded.add(id(request))
        self.health.reached(request)
        if token is None or request.meta.get(SUBREQUEST_META) or token in self._reached:
            return
        self._reached.add(token)  # the visit's first attempt: a visit, counted once whatever retries follow
        reason = request.meta.get(REASON_META, "refresh")
        self.stats.inc_value("costsched/visits")
        self.stats.inc_value(f"costsched/visits/{reason}")
        key = request.meta.get(PAGE_META)
        if isinstance(key, str):
            self.accounts.reached(key, reason)

    def _uncount_visit(self, key: str, request: Request) -> None:
        """Page *key*'s visit, counted when *request*, its first attempt, reached the downloader, never went out."""
        self._reached.discard(request.meta.get(VISIT_META))
        self.stats.inc_value("costsched/visits", -1)
        self.stats.inc_value(f"costsched/visits/{request.meta.get(REASON_META, 'refresh')}", -1)
        self.accounts.unreached(key)

    def _response_downloaded(self, response: Response, request: Request, spider: Spider) -> None:
        """Sent before the download slot is freed for the next request: the moment to obey a Retry-After."""
        if self.store is None:
            return
        self._answers[id(request)] = (response.status, response_size(response))
        if (self._refresh_tags is not None and isinstance(response, HtmlResponse) and PAGE_META in request.meta
                and not request.meta.get("dont_redirect") and request.method != "HEAD"):
            # Read before MetaRefreshMiddleware reads it, for the answers it reads: Scrapy keeps the result for the
            # response, so it is read once.
            interval, target = get_meta_refresh(response, ignore_tags=self._refresh_tags)
            if target is not None and interval is not None and interval < PERMANENT_REFRESH_SECONDS:
                self._instant_refreshes.add(request.url)  # as the redirect's meta lists it, fragment and all
        if response.status in (429, 503):
            # A date is read against the server's own clock (its Date header) where it gives one: clocks differ.
            served = self._header(response, lambda: parse_http_date(response.headers.get("Date")))
            now = served if served is not None else time.time()
            self.health.pause(request, response.status, self._header(
                response, lambda: parse_retry_after(response.headers.get("Retry-After"), now)))

    def paused(self, request: Request) -> None:
        """*request* is not sent in this run (its host's pause outlasts ``COSTSCHED_BLOCK_WAIT``): its budget goes
        back to the period and its page, untouched, is planned again in a later run.

        A retry of a page whose attempt failed ends its visit: cut short where the host asked for the pause (the
        429 is no failure of the page's), failed where the host is taken for down (the page backs off as any
        failed page does, so a host that stays dead is not probed through the same pages run after run)."""
        self.ledger.release(request)
        self._release_robots(request)
        own = _own_page(request)
        entered = id(request) in self._downloaded  # released from its download slot's queue, never sent
        self._downloaded.discard(id(request))
        host = urlparse_cached(request).hostname or ""
        failure_stands = own in self._failed_attempts and self.health.down(host)
        if own is not None and not failure_stands:
            if self._failed_attempts.pop(own, None) is not None or "redirect_urls" in request.meta:
                self._cut_short(own)
            elif entered and request.meta.get(VISIT_META) in self._reached:  # counted as it entered: no visit
                self._uncount_visit(own, request)
        self.stats.inc_value("costsched/retry_after/released")
        if host not in self._paused_hosts:
            self._paused_hosts.add(host)
            logger.info("costsched: %s %s of %.0f s more than this run waits (COSTSCHED_BLOCK_WAIT = %g s): its "
                        "visits are not sent in this run and are planned again in a later one", host,
                        self.health.pause_reason(host), self.health.blocked_for(request) - self.config.block_wait,
                        self.config.block_wait)

    def _request_left_downloader(self, request: Request, spider: Spider) -> None:
        if self.store is None:
            return
        status, received = self._answers.pop(id(request), (None, 0))
        sent = request_size(request)
        billed = self._billed_bytes(request, sent + received)
        self.health.attempt(request, status, billed)
        if self._release_robots(request) and status is not None:
            self.hosts.add_robots_bytes(urlparse_cached(request).hostname or "", billed)
        validators = request.meta.get(VALIDATORS_META)
        if isinstance(validators, dict) and validators.get("canary") and status != 304:
            # answered in full (judged with the record) or failed: either way no longer in flight
            self.hosts.verification_answered(urlparse_cached(request).hostname or "")
        cost = self.billing.attempt_cost(status, round(billed))
        price = _valid_cost(request.meta.get("costsched_cost"))
        if price is not None and cost > 0.0 and getattr(self.billing, BILLS_EXPLICIT_PRICES, False):
            # What an API bills for this kind of call (a rendered page, a premium proxy) is what the spider says,
            # as it was planned: the crawler cannot see it. Requests are counted and bytes measured instead.
            cost = price
        self.ledger.charge(request, cost)
        if request.meta.get(SESSION_META):
            self.sessions.spent += cost
        self.stats.inc_value(f"costsched/attempts/{'response' if status is not None else 'failed'}")
        self.stats.inc_value("costsched/bytes/sent", sent)
        self.stats.inc_value("costsched/bytes/received", received)
        key = request.meta.get(PAGE_META)
        media_of = self._media_pages.get(request.url) if key is None and self._media_pages else None
        if media_of is not None:
            key = media_of
            self._media_sizes.setdefault(key, []).append(billed)
        self.accounts.charged(key if isinstance(key, str) else None, urlparse_cached(request).hostname or "", cost)
        self._count_bytes(key, billed)
        if key is not None and media_of is None and not request.meta.get(SUBREQUEST_META):
            # No usable answer: a failed visit unless a later attempt (a retry) reaches the spider, also
            # when that retry never goes out (the budget refused it): the page then backs off.
            if (status is None or status == 429 or status >= 500) and not self.visits.visited(key):
                self._failed_attempts[key] = False
                if status is not None:
                    self._failure_reasons[key] = f"HTTP {status}"
            elif status is not None and (status == 304 or 200 <= status < 300):
                self._measured(key, status == 304, billed)
                if status != 304 and self._media_url_fields:
                    self._hold_for_media(key)
            elif status is not None and 300 <= status < 400:
                self._hops.setdefault(key, []).append(billed)
            elif status is not None:  # 404, 410: the visit ended without an answer to measure
                self._hops.pop(key, None)

    def _record_media(self, key: str, page: PageState, answered: bool) -> None:
        """*page*'s visit is over, and with it what its items' media downloads cost: an answered visit teaches its
        group's media means (a visit that downloaded nothing too), unless the budget refused some of them: those
        would teach that its kind of page brings fewer files than it does, and price the next ones too low."""
        sizes = self._media_sizes.pop(key, ())
        self.ledger.release(_media_holder(key))
        for url in self._media_urls_of.pop(key, ()):
            if self._media_pages.get(url) == key:
                del self._media_pages[url]
        refused = key in self._media_refused
        self._media_refused.discard(key)
        if answered and not refused:
            self.hosts.add_media(page.group, page.last_visit is None, sizes)

    def admit_media(self, request: Request) -> str | None:
        """Why a media pipeline's download of a file a page's item lists may not go out, else ``None``.

        As every request, it goes out only if the period's budget pays for it: at what files of its page's kind
        were measured to cost (before any was, at the prior a first page is planned at), out of what the page's
        answer left held for its files first. Under byte billing the download is also capped at what is left, so
        a file larger than its estimate cannot take the period over its budget alone.
        """
        key = self._media_pages.get(request.url) if self._media_pages and PAGE_META not in request.meta else None
        page = self.page(key) if key is not None and not self.config.shadow else None
        if key is None or page is None or self.ledger.budget is None:
            return None
        measured = self.hosts.media_per_visit(page.group, first=page.last_visit is None)
        cost = self.billing.attempt_cost(200, round(measured[1])) if measured else self._prior_cost()
        holder = _media_holder(key)
        held = self.ledger.held(holder)
        taken = min(held, cost)
        headroom = self.ledger.headroom() + taken
        if cost > headroom:
            self._refuse_media(key, request)
            return "the period's budget cannot pay for it"
        if taken:
            self.ledger.reserve(holder, held - taken)
        self.ledger.reserve(request, cost)
        self.ledger.dispatch(request)
        if self.billing.unit == "bytes":
            left = max(round(headroom), 1)
            if left < (request.meta.get("download_maxsize") or math.inf):
                request.meta["download_maxsize"] = request.meta[_MEDIA_CAP_META] = left
        return None

    def media_cut(self, request: Request, exception: Exception) -> bool:
        """Whether *exception* is Scrapy cancelling a media download at the size :meth:`admit_media` capped it at
        (``True``): a file the budget cannot pay for, as one refused before it went out."""
        cap = request.meta.get(_MEDIA_CAP_META)
        key = self._media_pages.get(request.url)
        if key is None or cap is None or cap != request.meta.get("download_maxsize") or not _over_maxsize(exception):
            return False
        self._refuse_media(key, request)
        return True

    def _refuse_media(self, key: str, request: Request) -> None:
        self._media_refused.add(key)
        self.stats.inc_value("costsched/media/refused")
        self._log_once(("media_refused", ""), "%s: %s, a file an item lists, not downloaded: the period's budget "
                       "cannot pay for it (such files are counted in costsched/media/refused)", self.who, request.url,
                       level=logging.INFO)

    def _hold_for_media(self, key: str) -> None:
        """A page's answer is charged, which releases its visit's reservation, but the media its items list are
        downloaded after: what they are expected to cost stays held until they are (or the visit is observed)."""
        page = self.page(key)
        if page is None:
            return
        expected = self._media_cost(page.group, first=page.last_visit is None)
        if expected:
            self.ledger.reserve(_media_holder(key), expected)

    def _billed_bytes(self, request: Request, size: int) -> float:
        """The bytes an attempt is billed for: those measured on the wire, times ``COSTSCHED_RENDER_FACTOR`` for a
        rendered page (``costsched_render``: the browser also loads what the page pulls in), plus
        ``COSTSCHED_REQUEST_OVERHEAD`` for what the crawler cannot see (proxy CONNECT, TLS handshakes)."""
        if request.meta.get("costsched_render"):
            size = round(size * self.config.render_factor)
        if self.config.request_overhead:
            self.stats.inc_value("costsched/bytes/overhead", round(self.config.request_overhead))
        return size + self.config.request_overhead

    def _count_bytes(self, key: Any, billed: float) -> None:
        """Every attempt's billed bytes, by the type of the page it belongs to (answered or not, retries,
        sub-requests and media downloads too), else as ``other`` (robots.txt): under byte billing they add up to
        what was spent."""
        page = self.page(key) if isinstance(key, str) else None
        self.stats.inc_value("costsched/bytes/other" if page is None else f"costsched/bytes/type/{page.page_type}",
                             round(billed))

    def _measured(self, key: str, not_modified: bool, size: float) -> None:
        """A page's answer moved *size* bytes: into its host and page type's mean now, 304s apart, and into the
        page's own with its observation (so a commit between the two does not write the page twice)."""
        page = self.page(key)
        hops = self._hops.pop(key, ())
        if page is None:
            return
        self.hosts.add_bytes(page.group, not_modified, size)
        if _through_redirects(page.last_visit, page.redirected):  # the visits priced with them teach the mean
            self.hosts.add_hops(page.group, hops)
        self._unrecorded_bytes.setdefault(key, []).append((not_modified, size))

    def _record_bytes(self, key: str, page: PageState) -> None:
        """Add the bytes of *page*'s answers measured since its last observation to its means (and, in a crawl with
        media pipelines, what its items' files cost to its group's)."""
        answers = self._unrecorded_bytes.pop(key, ())
        if self._media_url_fields:
            self._record_media(key, page, answered=bool(answers))
        for not_modified, size in answers:
            name = "not_modified_bytes" if not_modified else "full_bytes"
            mean = getattr(page, name) or MeanBytes()
            mean.add(size)
            setattr(page, name, mean)

    def settle(self, request: Request, response: Response | None = None, exception: Exception | None = None) -> None:
        """*request* is answered (*response*) or failed: settle what a download did not already.

        A request no download handler took (robots.txt or offsite rules, the HTTP cache,
        a middleware that answered it) costs nothing and releases its reservation; a
        page's own request that was refused counts as a failed attempt, so the page
        waits before it is planned again.
        """
        if isinstance(exception, HostPaused):
            self.paused(request)
            return
        key = request.meta.get(PAGE_META)
        own = _own_page(request)
        if isinstance(exception, AttemptRefused):  # counted, and its reservation released, when it was refused
            # A visit that ends here, unless an answer that failed already counts it (a retry's).
            if own is not None and own not in self._failed_attempts:
                self._cut_short(own)
            return
        if exception is not None:
            self.note_failure(key, exception)
            if own is not None and _over_maxsize(exception):
                self._too_large.add(own)
        if id(request) in self._downloaded:  # it was downloaded, and charged when it left the downloader
            self._downloaded.discard(id(request))
            if response is not None and "cached" in response.flags:  # the server confirmed the cached copy
                self._revalidated.add(id(request))
            return
        self.ledger.release(request)
        self._release_robots(request)
        if response is not None:
            if "cached" in response.flags:
                self.stats.inc_value("costsched/cached")
            return
        if own is not None:
            self.stats.inc_value("costsched/ignored")
            self._failed_attempts.setdefault(own, True)

    def _cut_short(self, key: str) -> None:
        """Page *key*'s visit ended before its page answered: an outcome of its own, so the summary's outcomes add
        up to its visits, and the report's visits are the summary's."""
        self.stats.inc_value("costsched/cut_short")
        group = self._group_of(key)
        if group is not None:
            self.accounts.observed(key, *group, "cut_short")

    def _release_robots(self, request: Request) -> bool:
        """Release the reservation for robots.txt if *request* is RobotsTxtMiddleware's for it (``True`` if so)."""
        if request.meta.get("dont_obey_robotstxt") and urlparse_cached(request).path == "/robots.txt":
            self.ledger.release(_robots_holder(urlparse_cached(request).netloc))
            return True
        return False

    # -- visits and records ----------------------------------------------

    def open_visit(self, response: Response) -> Visit | None:
        """Start the visit *response* belongs to, or join it for a chained sub-request."""
        key = response.meta.get(PAGE_META)
        if key is None or self.store is None:
            return None
        token = response.meta.get(VISIT_META)
        if response.meta.get(SUBREQUEST_META):
            return self.visits.get(token)
        if response.meta.get(NOT_MODIFIED_META):  # a 304, observed when it arrived
            return None
        if "cached" in response.flags and id(response.request) not in self._revalidated:
            return None  # the HTTP cache's copy says nothing about the page now
        self._revalidated.discard(id(response.request))
        page = self.page(key)
        if page is None:
            return None
        visit = self.visits.start(key, token if isinstance(token, int) else self.visits.new_token(), self.now())
        if visit is None:  # the page fetched twice in one run (shadow mode, dont_filter): one visit counts
            self.stats.inc_value("costsched/duplicate_fetch")
            return None
        self._failed_attempts.pop(key, None)
        if response.status in (404, 410):
            self.visits.abandon(visit)
            self._gone(key, page, visit.time, for_good=response.status == 410)
            return None
        visit.failed = response.status >= 400
        visit.redirected = not same_resource(response.url, page.url)
        if not visit.failed:
            self._read_validators(visit, response)
            sent = response.meta.get(VALIDATORS_META)
            if isinstance(sent, dict) and same_resource(sent.get("url") or "", response.url):
                visit.validators_sent, visit.canary = sent.get("headers"), bool(sent.get("canary"))
        return visit

    def _header(self, response: Response, parse: Callable[[], Any]) -> Any:
        """*parse* one of *response*'s headers; a hostile one is counted and logged, never raised."""
        try:
            return parse()
        except InvalidHeader as exc:
            self.stats.inc_value(f"costsched/invalid/{exc.kind}")
            if not self._log_once(("invalid", exc.kind), "costsched: %s: %s; such headers are ignored (counted in "
                                  "costsched/invalid/%s and listed at DEBUG)", response.url, exc, exc.kind,
                                  level=logging.INFO):
                logger.debug("costsched: %s: %s", response.url, exc)
            return None

    def _read_validators(self, visit: Visit, response: Response) -> None:
        """The response's ETag, its Last-Modified and that date's age by the server's own ``Date``."""
        etag = self._header(response, lambda: parse_etag(response.headers.getlist("ETag")))
        visit.etag = etag.to_json() if etag is not None else None
        served = self._header(response, lambda: parse_http_date(response.headers.get("Date")))
        visit.last_modified = self._header(
            response, lambda: parse_last_modified(response.headers.get("Last-Modified"), served))
        if visit.last_modified is not None and served is not None:
            visit.modified_age = max(served - visit.last_modified, 0.0)

    # -- conditional requests --------------------------------------------

    def validators_for(self, request: Request) -> tuple[dict[str, str], bool] | None:
        """The conditional headers a visit of a known page sends, as its host has earned them, or ``None``.

        Never on a first visit, nor on a request for another URL than the one the validators came from,
        nor in shadow mode: a shadow crawl gets exactly what plain Scrapy gets (trust is still learned
        from its full answers).
        Every k-th conditional visit of a host (``COSTSCHED_VERIFY_SHARE``) is a verification: its
        headers are a canary no honest host answers 304 to (then the second value is ``True``).
        """
        key = request.meta.get(PAGE_META)
        page = self.page(key) if isinstance(key, str) and self.config.conditional and not self.config.shadow else None
        if page is None or page.record is None or page.redirected or not same_resource(page.url, request.url):
            return None  # validators belong to the URL that answered
        return self.hosts.conditional_headers(page, self.now() / DAY, verify_every(self.config.verify_share))

    def not_modified(self, request: Request, response: Response) -> bool:
        """A 304 answered the validators the middleware sent; ``True`` when the page is to be fetched again in full.

        A 304 to a verification's canary convicts the host, and the visit needs the page
        itself; any other 304 is the visit's observation at once: "unchanged since the last visit".
        """
        key = request.meta[PAGE_META]
        page = self.page(key)
        if page is None:
            return False
        host = self.hosts.of(page.host)
        self.stats.inc_value("costsched/not_modified")
        self.stats.inc_value(f"costsched/not_modified/{page.host}")
        if request.meta[VALIDATORS_META].get("canary"):
            self.hosts.verification_answered(page.host)
            host.answers.verified_by(True, self.now() / DAY)
            self.stats.inc_value("costsched/not_modified/false")
            logger.warning("costsched: %s answered 304 to a validator it never sent (%s), so its 304s say nothing: "
                           "it gets no conditional request for %g days", page.host, page.url,
                           host.answers.blocked_until - self.now() / DAY)
            return True
        if not host.answers.usable(self.now() / DAY):  # sent before the host was convicted: worth nothing
            self.stats.inc_value("costsched/not_modified/discarded")
            return True
        host.answers.not_modified()
        token = request.meta.get(VISIT_META)
        visit = self.visits.start(key, token if isinstance(token, int) else self.visits.new_token(), self.now())
        if visit is None:
            self.stats.inc_value("costsched/duplicate_fetch")
            return False
        self._failed_attempts.pop(key, None)
        visit.not_modified = True
        self._read_validators(visit, response)
        visit.pending_outputs = 0
        self._maybe_close(visit)
        return False

    def add_outlink(self, visit: Visit, request: Request) -> None:
        if request.url in visit.outlinks:
            return
        visit.outlinks.add(request.url)
        key = self.fingerprint(request)
        if self.config.unlinked_periods:
            visit.linked_pages.add(key)
        page_type = request.meta.get("costsched_page_type")
        visit.outlinks_by_type[page_type] += 1
        if not self.pages.known(key):
            visit.new_links += 1
            if len(self._revealed_by) >= MAX_REVEALED_PENDING:  # links filters dropped: never sighted
                self._revealed_by.clear()
            self._revealed_by[key] = visit.page_key
            visit.new_link_types.add(page_type)
            callback = request_callback(request, self.spider) if page_type is None else None
            visit.new_link_kinds[page_type or (self.kinds.kind_of(callback) if callback else None) or UNTYPED] += 1

    def add_subrequest(self, visit: Visit, request: Request) -> None:
        """A request the callback chained for the same page: marked, and the record waits for its output."""
        request.meta[SUBREQUEST_META] = True
        request.meta[VISIT_META] = visit.token
        visit.pending_outputs += 1

    def item_emitted(self, visit: Visit, response: Response, item: Any) -> None:
        """The spider yielded *item*: its class, as yielded, may name the page's type (pipelines often pass dicts on)."""
        self.visits.item_emitted(visit, response, item)
        visit.item_types.add(item_type_name(item))
        if self._media_url_fields:
            self._note_media(visit.page_key, item)
        raw = self._value_from(item, None) if callable(getattr(self.spider, "costsched_value", None)) else None
        if raw is not None:
            visit.values.append(raw)

    def _note_media(self, key: str, item: Any) -> None:
        """The URLs *item* lists for the media pipelines, as their requests will have them: downloads of *key*'s."""
        adapter = ItemAdapter(item)
        for name in self._media_url_fields:
            urls = adapter.get(name)
            if not isinstance(urls, list):
                continue
            for url in urls:
                if isinstance(url, str):
                    url = safe_url_string(url)
                    self._media_pages[url] = key
                    self._media_urls_of.setdefault(key, []).append(url)

    def _digest(self, item: Any) -> ItemDigest | None:
        """The item's hash, shape and field hashes (:meth:`~.records.RecordHasher.digest`); ``None`` if unhashable."""
        try:
            return self.hasher.digest(item)
        except UnhashableItem as exc:
            self.stats.inc_value("costsched/items/unhashable")
            self._log_once(("unhashable", f"{exc.item_type}.{exc.field}"),
                           "costsched: %s; the item passes through but is left out of its page's record (each such "
                           "item is counted in costsched/items/unhashable, this is said once per field)", exc)
            return None

    def is_unchanged(self, item: Any) -> bool:
        """Whether *item*, as a pipeline holds it, was already in its page's last record.

        ``False`` when the item cannot be tied to a visit (no spider middleware, or a
        pipeline before this one returned a new object while other items were in
        flight) or the page has no comparable previous record.
        """
        visit = self.visits.pipeline_visit(item)
        if visit is None:
            self.stats.inc_value("costsched/items/untracked")
            return False
        page = self.page(visit.page_key)
        if page is None or page.hash_config != self.hasher.config_id or page.record_kind != "items":
            return False
        digest = self._digest(item)
        if digest is None:
            return False
        item_hash = digest.hash
        item_key = self.hasher.item_key_of(item)
        if item_key is not None:
            return page.item_keys.get(item_key) == item_hash
        return item_hash in page.item_hashes

    def item_dropped_unchanged(self, item: Any) -> None:
        """ChangeDetectionPipeline drops *item*: it still belongs to its page's record."""
        visit = self.visits.pipeline_visit(item)
        if visit is not None:
            self._add_to_record(visit, item)

    def _add_to_record(self, visit: Visit, item: Any) -> None:
        if self.config.store_records:
            self._store_item(visit, item)
        digest = self._digest(item)
        if digest is None:
            return
        item_hash = digest.hash
        visit.item_hashes.append(item_hash)
        visit.item_shapes.add(digest.shape)
        visit.field_names.update(digest.field_names)
        item_key = self.hasher.item_key_of(item)
        if item_key is not None:
            visit.item_keys[item_key] = item_hash
        page = self.page(visit.page_key)
        if len(visit.item_fields) < MAX_ITEMS and (page is None or self.volatile.wants(page.page_type, visit.page_key)):
            visit.item_fields.append(digest.field_hashes())
        if page is not None and page.hash_config == self.hasher.config_id and page.record_kind == "items":
            unchanged = page.item_keys.get(item_key) == item_hash if item_key is not None \
                else item_hash in page.item_hashes
            self.stats.inc_value(f"costsched/items/{'unchanged' if unchanged else 'changed'}")

    def _store_item(self, visit: Visit, item: Any) -> None:
        """Keep *item* as it left the pipelines, for the page's stored record; one that cannot be kept is skipped."""
        try:
            stored = stored_item(item)
        except Exception as exc:  # noqa: BLE001 - an item's adapter or a value's str() may raise anything
            logger.debug("costsched: an item of %s is left out of its stored record: %r", visit.page_key, exc)
            self.stats.inc_value("costsched/items/unstorable")
            return
        self._stored_items.setdefault(visit.token, []).append(stored)

    def _item_scraped(self, item: Any, response: Response | None, spider: Spider) -> None:
        """The item as it left the pipelines: that is what its page's record holds."""
        visit = self.visits.item_finished(item, response)
        if visit is not None:
            self._add_to_record(visit, item)
            self._maybe_close(visit)

    def _item_left(self, item: Any, response: Response | None, spider: Spider, **kwargs: Any) -> None:
        visit = self.visits.item_finished(item, response)
        if visit is not None:
            visit.items_lost += 1
            self._maybe_close(visit)

    def note_failure(self, key: Any, exception: BaseException) -> None:
        """Page *key*'s attempt failed with *exception*: the page's :attr:`~.PageState.last_failure` if its visit
        fails. An ``HttpError`` is its status; anything else its class and first line, as Scrapy logs it."""
        if not isinstance(key, str):
            return
        response = getattr(exception, "response", None)
        status = getattr(response, "status", None)
        text = str(exception).strip().partition("\n")[0]
        reason = f"HTTP {status}" if isinstance(status, int) else f"{type(exception).__name__}: {text}" if text else \
            type(exception).__name__
        self._failure_reasons[key] = reason[:300]

    def output_done(self, visit: Visit, failed: bool = False) -> None:
        """The callback's output (for the page or a chained sub-request) is exhausted."""
        visit.failed = visit.failed or failed
        visit.pending_outputs -= 1
        self._maybe_close(visit)

    def _maybe_close(self, visit: Visit) -> None:
        if self.visits.close(visit):
            self._observe(visit)

    def _observe(self, visit: Visit) -> None:
        """Turn a finished visit into exactly one observation of its page."""
        key = visit.page_key
        stored_items = self._stored_items.pop(visit.token, None)
        page = self.page(key)
        if page is None or self.store is None:
            return
        self._record_bytes(key, page)
        page.last_attempt = visit.time
        for raw in visit.values:
            self._take_value(key, page, raw)
        self._type_from_items(page, visit)
        if not visit.failed:
            self._count_kinds(page, visit)
        page.refusals = page.refusals + 1 if visit.refused else 0
        if visit.failed:
            self._failed(page, visit.time, too_large=key in self._too_large)
            page.last_failure = self._failure_reasons.pop(key, None) or "no usable answer"
            outcome = "refused" if visit.refused else "failed"
        else:
            page.last_failure = None
            page.consecutive_failures = page.gone_strikes = 0
            page.gone, page.not_before, page.moved_to = False, None, None
            if visit.item_hashes:
                page.empty_strikes = 0
            # A 304 of a page whose items stand says it still has them as surely: on a host with validators, most
            # visits of a type that kept its items are 304s.
            if visit.item_hashes or (visit.not_modified and page.record_kind == "items" and not page.empty_strikes):
                self._yielded[page.page_type] = self._yielded.get(page.page_type, 0) + 1
            if visit.not_modified:
                outcome = "not_modified"
                self.learner.not_modified(page, visit)
                self.stats.inc_value("costsched/unchanged")
                # Every field as it was: with 304s, only changed pages come back in full, and counting
                # those alone would call every field volatile. Fields hashed under another configuration
                # are not this run's (a field since left out of the hash would be named again).
                if page.hash_config == self.hasher.config_id and page.field_hashes:
                    visit.item_fields = page.field_hashes
                    self._check_fields(key, page, visit, page.field_hashes)
            elif not visit.item_hashes and page.record_kind == "items":
                # Items used to come from this page and none did now: broken extraction or a
                # vanished page, not a change.
                outcome = "empty"
                self.stats.inc_value("costsched/extraction_empty")
                if visit.items_lost:
                    # Items the spider yielded that the pipelines dropped or failed on are no selector's fault
                    # (found in a trial: a pipeline that raised for every item was taken for one), nor the page's.
                    if not self._log_once(("empty", page.page_type),
                                          "costsched: %s had every item it yielded dropped or failed in the item "
                                          "pipelines this time (it used to record items); not counted as a change. A "
                                          "pipeline that drops or fails on every item (its errors are logged above) "
                                          "does this to every page of a kind: such pages are counted in "
                                          "costsched/extraction_empty and listed at DEBUG, this is said once per page "
                                          "type (%r)", page.url, page.page_type):
                        logger.debug("costsched: %s had every item it yielded dropped or failed in the item pipelines "
                                     "(it used to record items)", page.url)
                else:
                    self._emptied.setdefault(page.page_type, []).append((key, visit.time))
                    logger.debug("costsched: %s yielded no items this time (it used to record items)", page.url)
            else:
                previous_fields = page.field_hashes
                vouched = not visit.redirected and validator_stayed(page.etag, visit.etag, page.last_modified,
                                                                    visit.last_modified)
                outcome = self.learner.record(page, visit, forget_history=self._counted_a_left_out_field(page, visit))
                if page.record_kind == "items" and page.record is not None and not visit.redirected:
                    self._note_same_record(key, page)
                page.items = stored_items  # replaced by full visits only: a 304 confirms the stored items
                if not visit.redirected:
                    self._note_unlinked(page, visit)
                self.stats.inc_value(f"costsched/{outcome}")
                # A baseline or re-baseline compares nothing: its fields may differ by configuration.
                self._check_fields(key, page, visit, previous_fields if outcome in ("changed", "unchanged") else None,
                                   vouched)
        cost = self.accounts.observed(key, page.host, page.page_type, outcome)
        if outcome in NO_CHANGE:
            page.no_change_cost += cost
        self.pages.changed(key, page)
        self._since_commit += 1
        if self._since_commit >= self.config.commit_every or (
                self.config.commit_interval and time.monotonic() - self._committed_at >= self.config.commit_interval):
            self.commit()

    def linked(self, key: str) -> None:
        """The spider yielded a request for page *key* (a link, a start request): if the page was marked unlinked,
        it is linked again.

        Cheap for the other pages: a known page's profile says whether it is marked, so it is not read.
        """
        if not self.config.unlinked_periods:
            return
        # hash() rather than the fingerprint: half the memory, and a collision only spares a page its mark.
        self._linked.add(hash(key))
        profile = self.pages.profile(key)
        if profile.unlinked is None if profile is not None else self.pages.indexed:
            return  # not marked, or not known (every known page has a profile once indexed)
        page = self.pages.get(key)
        if page is not None and page.unlinked_since is not None:
            page.unlinked_since = None
            self.pages.changed(key, page)
            self.stats.inc_value("costsched/relinked")

    def left_unlinked(self, unlinked_since: float | None, now: float) -> bool:
        """Whether a page unlinked since *unlinked_since* (:attr:`PageState.unlinked_since`) is out of plans at *now*:
        gone, as the design counts "unlinked for N periods" (``COSTSCHED_UNLINKED_PERIODS``)."""
        periods = self.config.unlinked_periods
        return unlinked_since is not None and periods > 0 and now >= self._periods_after(unlinked_since, periods)

    def _note_unlinked(self, page: PageState, visit: Visit) -> None:
        """Mark the pages *page* linked to at its last full visit and no longer does, unless a request for them was
        seen in this run: ``COSTSCHED_UNLINKED_PERIODS`` later, plans leave them out (a page "unlinked for N periods"
        is gone, as Nutch's scoring-orphan plugin marks a page gone 30 days after its last inlink). Nutch sees every
        inlink at each update; a crawl under a budget visits few of a page's linkers, so a page that other, unvisited
        pages still link to is marked too, and their next visit clears the mark, as any request for it does."""
        if not self.config.unlinked_periods:
            page.outlinks = None
            return
        previous, linked = page.outlinks, visit.linked_pages
        page.outlinks = sorted(linked) if len(linked) <= MAX_TRACKED_OUTLINKS else None
        for key in previous or ():
            if key in linked or hash(key) in self._linked:
                continue
            dropped = self.pages.get(key)
            if dropped is not None and dropped.unlinked_since is None:
                dropped.unlinked_since = visit.time
                self.pages.changed(key, dropped)
                self.stats.inc_value("costsched/unlinked")

    def _note_same_record(self, key: str, page: PageState) -> None:
        """Say so when another page of the host recorded the very same items in this run: one page under two URLs,
        each visited and paid for. Found on a forum trial, where a thread was linked as ``/t/5`` and as
        ``/t/5?page=1``: both changed with every post, and the copies took 8 of a day's 40 requests. Only
        the spider's author can tell whether the URLs are one page, so the add-on says it and fetches both."""
        first = self._records.setdefault((page.host, page.record or ""), key)
        if first == key:
            return
        self.stats.inc_value("costsched/duplicate_records")
        other = self.page(first)
        other_url = first if other is None else other.url
        if not self._log_once(("same record", page.page_type),
                              "costsched: %s and %s yielded the same items: one page under two URLs? Each is visited "
                              "and paid for; if they are one page, have the spider yield one of them (normalise its "
                              "links, e.g. with a Rule's process_links, or set a REQUEST_FINGERPRINTER_CLASS that "
                              "takes them for one). Such pages are counted in costsched/duplicate_records and listed "
                              "at DEBUG; this is said once per page type (%r)", other_url, page.url, page.page_type):
            logger.debug("costsched: %s and %s yielded the same items", other_url, page.url)

    def _counted_a_left_out_field(self, page: PageState, visit: Visit) -> bool:
        """Whether the page's history counted the changes of a field named as volatile for its type that the hash
        configuration, changed since the page's last record, now leaves out (the user did as the warning said)."""
        if page.hash_config in (None, self.hasher.config_id) or not visit.field_names:
            return False
        left_out = [name for name in self.volatile.volatile(page.page_type) if name not in visit.field_names]
        if left_out:
            self._log_once(("forgotten", page.page_type),
                           "costsched: %r pages lose their change history at this re-baseline: it counted the changes "
                           "of %s, which the record no longer holds, and their rates are learned again "
                           "(costsched/history_forgotten counts the pages)", page.page_type,
                           " and ".join(map(repr, left_out)), level=logging.INFO)
        return bool(left_out)

    def _check_fields(self, key: str, page: PageState, visit: Visit, previous: list[dict[str, str]] | None,
                      vouched: bool = False) -> None:
        """Compare the items' fields with the last visit's, for the volatile-field verdict (:meth:`_warn_volatile`);
        *vouched* if the answer carried the last visit's validator."""
        current = visit.item_fields
        if not current:  # no item, or the page is not in the sample
            page.field_hashes = None
            return
        self.volatile.observe(page.page_type, key, previous, current, vouched)
        page.field_hashes = current if self.volatile.sampled(page.page_type, key) else None

    def _warn_volatile(self) -> None:
        """Warn, once per run and at its end, about each item field that changes on nearly every visit of most
        pages of a type (:mod:`~.volatility`)."""
        for page_type, name in self.volatile.report():
            volatile, counted = self.volatile.counts(page_type, name)
            # The field's history cannot tell a timestamp from content that changes at every visit (under a
            # budget the pages revisited are those that change most): the user can, so both readings are given.
            logger.warning(
                "costsched: item field %r changes on nearly every visit of %r pages (%d of %d sampled pages "
                "compared at least %d times, or once while the page's ETag or Last-Modified stayed). If it is a "
                "timestamp or a token, every visit counts as a change and the change rates are overestimated: leave "
                "it out of the record with COSTSCHED_IGNORE_FIELDS = [%r] (or list the fields that matter in "
                "COSTSCHED_HASH_FIELDS). If it is content that really changes that often, keep it.",
                name, page_type, volatile, counted, MIN_COMPARISONS, name)
            self.stats.inc_value("costsched/items/volatile_fields")

    def _judge_emptied(self) -> None:
        """Judge the run's visits that yielded none of the items their pages used to, page type by page type.

        Where at least as many visits of the type recorded items, the extraction works and those pages are gone
        while still answering 200 ("sold", "this job has been filled"): each empty visit in a row counts as a 404
        does (:meth:`_strike`). Found in a trial: on a classifieds site, filled jobs were planned again every day,
        as a visit without items never moved their last visit. Where most came back empty, a selector that
        stopped matching is the likelier cause, and the pages keep their place in the plan until it is fixed.
        """
        for page_type, emptied in self._emptied.items():
            yielded = self._yielded.get(page_type, 0)
            first = self.page(emptied[0][0])
            first_url = emptied[0][0] if first is None else first.url
            if yielded < len(emptied):
                logger.warning("costsched: %r pages that yielded no items this time, though they used to: %d (%s "
                               "first), and %d of the type yielded any; not counted as changes. A selector that "
                               "stopped matching does this to every page of a kind: such pages are counted in "
                               "costsched/extraction_empty and listed at DEBUG",
                               page_type, len(emptied), first_url, yielded)
                continue
            retired = 0
            for key, when in emptied:
                page = self.page(key)
                if page is None:
                    continue
                page.empty_strikes += 1
                retired += self._strike(page, page.empty_strikes, when)
                self.pages.changed(key, page)
            if retired:
                self.stats.inc_value("costsched/empty_gone", retired)
            logger.info("costsched: %r pages that yielded none of the items they used to: %d (%s first), while %d of "
                        "the type yielded theirs: taken for pages gone that still answer 200 (\"sold\", \"no longer "
                        "available\"); each such visit in a row halves a page's worth and doubles its wait, and %d in "
                        "a row retire it (re-checked every %d periods; %d retired now, costsched/empty_gone). If they "
                        "still show their items, the spider's selectors miss them.",
                        page_type, len(emptied), first_url, yielded, GONE_AFTER, GONE_RECHECK_PERIODS, retired)
        self._emptied.clear()
        self._yielded.clear()

    def _strike(self, page: PageState, strikes: int, when: float) -> bool:
        """One more answer in a row that says *page* is not there (*strikes* of them): retired after
        :data:`GONE_AFTER`, re-checked rarely; until then its next attempt waits, twice as long each time."""
        if strikes >= GONE_AFTER:
            self._retire(page, when)
            return True
        page.not_before = self._periods_after(when, min(2 ** (strikes - 1), MAX_BACKOFF_PERIODS))
        return False

    def _retire(self, page: PageState, when: float) -> None:
        """Retire *page* as a page gone at *when*: it is checked again once every :data:`GONE_RECHECK_PERIODS`."""
        page.gone = True
        page.not_before = self._periods_after(when, GONE_RECHECK_PERIODS)

    def _periods_after(self, when: float, periods: int) -> float:
        """When a page that failed at *when* may be tried again: as the budget period *periods* after *when*'s
        begins. Counted from *when* itself, a daily crawl that failed a page ten minutes into its run planned
        the next day's run ten minutes too early to include it, and a wait of one period lasted two runs."""
        return (int(when // self.config.budget_period) + periods) * self.config.budget_period

    def _failed(self, page: PageState, when: float, *, too_large: bool = False) -> None:
        """A visit that got no usable answer: the next attempt waits, twice as long after each failure in a row.

        A page refused before download :data:`GONE_AFTER` times in a row is retired as a page gone, re-checked
        as rarely: robots.txt and offsite rules are the site's and the crawl's standing word (Nutch's FetcherThread
        marks a URL robots.txt denies ``STATUS_FETCH_GONE`` at once; a refusal could pass, so it needs repeated
        evidence here, as a 404 does). A page whose answer was *too_large* for its download (``DOWNLOAD_MAXSIZE``,
        ``COSTSCHED_MAXSIZE``; Scrapy cancelled it after the headers) is retired at once: the crawl's own limit is
        its standing word, and the server said the size. Found in a blog trial, where gallery posts tried again
        after 1, 2, 4, ... periods took up to a third of a day's requests.
        """
        page.failures += 1
        page.consecutive_failures += 1
        page.not_before = self._periods_after(when, min(2 ** (page.consecutive_failures - 1), MAX_BACKOFF_PERIODS))
        if page.refusals >= GONE_AFTER or too_large:
            self._retire(page, when)
        if too_large:
            self.stats.inc_value("costsched/too_large")
            if not self._log_once(("too_large", ""), "costsched: %s is larger than its download may be "
                                  "(DOWNLOAD_MAXSIZE, COSTSCHED_MAXSIZE or the request's download_maxsize): retired, "
                                  "and re-checked every %d periods (such pages are counted in costsched/too_large "
                                  "and listed at DEBUG)", page.url, GONE_RECHECK_PERIODS, level=logging.INFO):
                logger.debug("costsched: %s is larger than its download may be: retired", page.url)
        self.stats.inc_value("costsched/failed")

    def moved(self, key: str, request: Request, target: str) -> Move | None:
        """Whether page *key* moved: it answered with a permanent redirect (301 or 308, or a meta refresh of under
        :data:`PERMANENT_REFRESH_SECONDS`) to *request*, page *target*. Then *key* is retired as a page gone
        (re-checked as rarely) and the visit under way is the target's (``"moved"``), as Nutch and StormCrawler
        crawl a redirect's target as a URL of its own: later visits cost one request, not two, and earn validators
        of their own. A target the crawl does not know yet
        takes the page's history (:meth:`_moved_page`), on any host: OffsiteMiddleware dropped a redirect that
        ``allowed_domains`` leave out when it was scheduled, before it came here, and lets through what it would
        let through re-issued (``dont_filter`` goes with the template). The target of any other redirect (a
        "deal of the day") is reached through the old URL.

        A known target that the spider parses with another callback (a sold listing sent to its category) is not
        where the page went but where its site sends pages that are gone: *key* is retired all the same, and under
        a budget the visit ends there (``"away"``): the redirect is not followed, as when the target was fetched
        already in the run, so the target is not recorded from what another callback made of it and keeps its
        own visit. Found in a classifieds trial, where an expired car's redirect took its category's visit.
        """
        reasons = request.meta.get("redirect_reasons") or ()
        urls = request.meta.get("redirect_urls") or ()
        # Each hop's reason with the URL that gave it, as Scrapy's redirect middlewares append both.
        hops = zip(urls, reasons, strict=True) if len(urls) == len(reasons) else ((None, r) for r in reasons)
        if not reasons or not all(reason in PERMANENT_REDIRECTS or (reason == "meta refresh" and url in
                                                                    self._instant_refreshes) for url, reason in hops):
            return None
        page = self.page(key)
        if target == key or page is None:
            return None
        known = self.pages.known(target)
        if not known:
            self.pages.changed(target, self._moved_page(page, request))
        page.moved_to = request.url
        page.last_visit = page.last_attempt = self.now()  # its answer was seen: it moved (a page never visited too)
        self._retire(page, page.last_attempt)
        self.pages.changed(key, page)
        landing = self.page(target) if known else None
        if landing is not None and not self.config.shadow and _parsed_otherwise(request, landing):
            self.accounts.observed(key, page.host, page.page_type, "gone")
            self.stats.inc_value("costsched/redirected_away")
            if not self._log_once(("away", ""), "costsched: %s redirects permanently to %s, a page the crawl knows that "
                                  "the spider parses with another callback: taken for a page gone rather than moved, "
                                  "the old URL is retired (re-checked every %d periods) and the redirect is not "
                                  "followed (such redirects are counted in costsched/redirected_away and listed at "
                                  "DEBUG)", page.url, request.url, GONE_RECHECK_PERIODS, level=logging.INFO):
                logger.debug("costsched: %s redirects permanently to %s, parsed with another callback", page.url,
                             request.url)
            return "away"
        self.accounts.moved(key, target)
        _hand_over(self._unrecorded_bytes, key, target)  # the visit's bytes and redirects are the target's
        _hand_over(self._hops, key, target)
        self.stats.inc_value("costsched/moved")
        how = ("a page the crawl knows: the old URL is retired (re-checked every %d periods) and its visit counts for "
               "the new one" if known else "the page's history goes with it, and the old URL is retired (re-checked "
               "every %d periods)")
        if not self._log_once(("moved", ""), f"costsched: %s moved permanently to %s, {how} (such moves are counted in "
                              "costsched/moved and listed at DEBUG)",
                              page.url, request.url, GONE_RECHECK_PERIODS, level=logging.INFO):
            logger.debug("costsched: %s moved permanently to %s", page.url, request.url)
        return "moved"

    def _moved_page(self, page: PageState, request: Request) -> PageState:
        """*page* at the URL of *request*, the redirect to where it moved (on its host or another): its history
        and value. Its record and validators came from another URL (``redirected``), so the first answer at the
        new one re-baselines it rather than counting as a change (an item that holds its URL changed with the
        move) or auditing the new URL's dates and ETags against the old URL's."""
        moved = PageState.from_json(page.to_json())  # a copy: the retired page keeps its own
        template = moved_template(page.template, request) if page.template is not None else None
        return replace(moved, url=request.url, host=urlparse(request.url).hostname or "", template=template,
                       etag=None, redirected=True, gone=False, gone_strikes=0, empty_strikes=0, not_before=None,
                       moved_to=None, consecutive_failures=0, refusals=0)

    def redirected_to_fetched(self, key: str | None) -> None:
        """Page *key*'s visit ended in a redirect to a page this run fetched already, which is not followed (as
        Scrapy's duplicate filter drops it): a login wall, a "deal of the day". The page was visited now and
        its content is that page's; nothing was seen of its own changes. Its last visit moves on, so it is not
        planned again as a page never visited. *key* is ``None`` for a page that moved there (:meth:`moved`
        retired it already)."""
        self.stats.inc_value("costsched/redirected_to_fetched")
        page = None if key is None else self.page(key)
        if key is None or page is None or self.store is None:
            return
        page.last_visit = page.last_attempt = self.now()
        page.visits += 1
        page.consecutive_failures = page.gone_strikes = page.refusals = 0
        page.gone, page.not_before, page.moved_to = False, None, None
        self.accounts.observed(key, page.host, page.page_type, "redirected")
        self.pages.changed(key, page)

    def _gone(self, key: str, page: PageState, when: float, *, for_good: bool = False) -> None:
        """A 404 or 410: retired after several in a row, then re-checked rarely; until then a failure.

        A 410 (*for_good*) retires the page at once: the server says the page is gone and will stay gone (RFC 9110,
        section 15.5.11), where a 404 may be a passing fault. Found in a classifieds trial: expired listings answered
        410, and counted as live pages until three visits in a row had said so, which their halved worth put off.
        """
        page.last_attempt = when
        page.gone_strikes = max(page.gone_strikes + 1, GONE_AFTER if for_good else 0)
        page.refusals = 0
        outcome = "gone" if self._strike(page, page.gone_strikes, when) else "not_found"
        self.stats.inc_value(f"costsched/{outcome}")
        self.accounts.observed(key, page.host, page.page_type, outcome)
        self.pages.changed(key, page)
