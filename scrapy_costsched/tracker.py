"""The one object per crawl that scheduler, spider middleware and pipeline share.

It owns the state store, the change-rate estimates, the hashing of records and the
period's ledger; the components talk to it and to nothing else of each other.
"""

from __future__ import annotations

import logging
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from scrapy import signals
from scrapy.utils.misc import build_from_crawler, load_object
from scrapy.utils.project import data_path

from scrapy_costsched.billing import BillingModel
from scrapy_costsched.model import RatePrior, estimate_rate
from scrapy_costsched.model.learning import PRIOR_SAMPLE, observe, refit_prior
from scrapy_costsched.model.scoring import Candidate
from scrapy_costsched.model.trust import LastModifiedTrust, audit_date, http_date
from scrapy_costsched.pages import PageState, make_template, request_from_template
from scrapy_costsched.records import RecordHasher, item_type_name, record_hash
from scrapy_costsched.settings import BILLING_MODELS, Config, SettingError, resolve_value
from scrapy_costsched.storage import StateError, StateStorage, storage_from_uri

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)

DAY = 86400.0
_TRACKER_ATTR = "_costsched_tracker"


@dataclass
class Visit:
    """One fetch of a page, open from its response until its record is complete."""

    page_key: str
    time: float
    pending_outputs: int = 1
    pending_items: int = 0
    item_hashes: list[str] = field(default_factory=list)
    item_keys: dict[str, str] = field(default_factory=dict)
    outlinks: set[str] = field(default_factory=set)
    values: list[str | float] = field(default_factory=list)
    item_types: set[str] = field(default_factory=set)
    failed: bool = False
    last_modified: float | None = None
    """The response's ``Last-Modified`` (epoch seconds), if it sent a readable one."""
    modified_age: float | None = None
    """Seconds from that date to the response's ``Date`` (the server's clock), at least 0."""


class Tracker:
    """Pages, ledger, estimates and records of one crawl."""

    def __init__(self, crawler: Crawler, config: Config) -> None:
        self.crawler = crawler
        self.config = config
        self.stats: StatsCollector = crawler.stats
        self.hasher = RecordHasher(config.hash_fields, config.ignore_fields, config.item_key)
        billing_path = BILLING_MODELS.get(config.billing, config.billing)
        self.billing: BillingModel = build_from_crawler(load_object(billing_path), crawler)
        if not isinstance(self.billing, BillingModel):
            raise ValueError(f"COSTSCHED_BILLING ({config.billing!r}) does not implement the BillingModel interface "
                             "(unit, expected_cost, attempt_cost).")
        self.store: StateStorage | None = None
        self.pipeline_enabled = False
        self.pages: dict[str, PageState] = {}
        self.priors: dict[str, RatePrior] = {}
        self.last_modified_trust: dict[str, LastModifiedTrust] = {}
        self.visits: dict[str, Visit] = {}
        self._visited: set[str] = set()  # pages whose visit this run opened, closed or not
        self._item_visits: dict[int, tuple[Visit, Any, bool]] = {}
        self._statuses: dict[int, int] = {}
        self._failed_attempts: set[str] = set()
        self._observed_groups: set[str] = set()
        self._since_commit = 0
        self.period = 0
        self.spent = 0.0
        self.reserved = 0.0
        for handler, signal in (
            (self._spider_opened, signals.spider_opened),
            (self._spider_closed, signals.spider_closed),
            (self._response_downloaded, signals.response_downloaded),
            (self._request_left_downloader, signals.request_left_downloader),
            (self._item_scraped, signals.item_scraped),
            (self._item_discarded, signals.item_dropped),
            (self._item_discarded, signals.item_error),
        ):
            crawler.signals.connect(handler, signal=signal)

    @classmethod
    def of(cls, crawler: Crawler) -> Tracker:
        """The tracker of *crawler*, created on first use."""
        tracker: Tracker | None = getattr(crawler, _TRACKER_ATTR, None)
        try:
            if tracker is None:
                tracker = cls(crawler, Config.from_settings(crawler.settings))
                setattr(crawler, _TRACKER_ATTR, tracker)
            if tracker.config.enabled and crawler.spider is not None:
                tracker.open()  # refuse a bad state file before anything else starts
        except (SettingError, StateError) as exc:
            logger.critical("%s", exc)
            raise
        return tracker

    # -- lifecycle -------------------------------------------------------

    @property
    def spider(self) -> Spider:
        spider = self.crawler.spider
        assert spider is not None
        return spider

    def now(self) -> float:
        return float(self.config.clock())

    def open(self) -> None:
        """Open the store once; later calls do nothing."""
        if self.store is not None:
            return
        state = self.config.state or str(Path(data_path("costsched", createdir=True)) / f"{self.spider.name}.sqlite")
        store = storage_from_uri(state)
        store.open()
        self.store = store
        fingerprinter = type(self.crawler.request_fingerprinter)
        fingerprinter_name = f"{fingerprinter.__module__}.{fingerprinter.__qualname__}"
        stored = store.get_meta("fingerprinter")
        if stored is None:
            store.set_meta("fingerprinter", fingerprinter_name)
        elif stored != fingerprinter_name:
            store.close()
            self.store = None
            raise StateError(
                f"The costsched state {state!r} keys pages with {stored}, but this crawl uses "
                f"{fingerprinter_name} (REQUEST_FINGERPRINTER_CLASS); use the same fingerprinter or another "
                "COSTSCHED_STATE."
            )
        self.priors = {group: RatePrior(*value) for group, value in (store.get_meta("priors") or {}).items()}
        self.last_modified_trust = self._load_trust(store.get_meta("last_modified_trust") or {})
        self.period = int(self.now() // self.config.budget_period)
        self.spent = float(store.get_meta(f"ledger:{self.period}") or 0.0)
        self.stats.set_value("costsched/period_spent_at_start", self.spent)
        if self.config.shadow:
            self.stats.set_value("costsched/shadow", True)

    def _spider_opened(self, spider: Spider) -> None:
        self.open()

    def _spider_closed(self, spider: Spider, reason: str) -> None:
        if self.store is None:
            return
        for key in list(self.visits):
            # Still waiting for a chained sub-request or an item: the record is incomplete.
            visit = self.visits.pop(key)
            visit.failed = True
            self._observe(visit)
        for key in self._failed_attempts:
            self._observe(Visit(page_key=key, time=self.now(), failed=True))
        self._refit_priors()
        self._save_trust()
        self.store.close()
        self.store = None

    def _update_spend_stats(self) -> None:
        spent_this_run = self.spent - float(self.stats.get_value("costsched/period_spent_at_start", 0.0))
        self.stats.set_value("costsched/spent", spent_this_run)
        self.stats.set_value("costsched/period_spent", self.spent)
        changed = self.stats.get_value("costsched/changed", 0)
        if changed:
            self.stats.set_value("costsched/cost_per_change", spent_this_run / changed)

    # -- pages -----------------------------------------------------------

    def fingerprint(self, request: Request) -> str:
        return self.crawler.request_fingerprinter.fingerprint(request).hex()

    def page(self, key: str) -> PageState | None:
        page = self.pages.get(key)
        if page is None and self.store is not None:
            data = self.store.get_page(key)
            if data is not None:
                try:
                    page = PageState.from_json(data)
                except ValueError as exc:
                    logger.error("costsched: skipping unreadable stored page %s: %s", key, exc)
                    self.stats.inc_value("costsched/storage/unreadable_page")
                    return None
                self.pages[key] = page
        return page

    def _save(self, key: str, page: PageState) -> None:
        assert self.store is not None
        self.store.put_page(key, page.to_json(), page.summary())

    def _value_from(self, source: Any, meta_value: Any) -> float | None:
        """The value the spider gives *source* (a request or an item): its hook first, then meta."""
        hook = getattr(self.spider, "costsched_value", None)
        raw = hook(source) if callable(hook) else None
        if raw is None:
            raw = meta_value
        if raw is None:
            return None
        if resolve_value(raw, self.config.value_tiers) is None:
            logger.warning("costsched: ignoring invalid costsched_value %r (use a positive number or one of %s)",
                           raw, sorted(self.config.value_tiers))
            self.stats.inc_value("costsched/invalid/costsched_value")
            return None
        return raw  # type: ignore[no-any-return]

    def value_of(self, page: PageState) -> float:
        value = resolve_value(page.value, self.config.value_tiers)
        if value is None:  # a tier that was renamed since the page was stored
            value = resolve_value(self.config.default_value, self.config.value_tiers)
        assert value is not None
        return value

    def _raise_value(self, page: PageState, raw: Any) -> None:
        """A page reached from several parents keeps the highest value."""
        if raw is not None and resolve_value(raw, self.config.value_tiers) > self.value_of(page):  # type: ignore[operator]
            page.value = raw

    def sighting(self, request: Request, key: str) -> tuple[PageState, bool]:
        """Record that the spider asked for *request*; returns the page and whether it is new."""
        page = self.page(key)
        new = page is None
        meta_type = request.meta.get("costsched_page_type")
        if meta_type is not None and not isinstance(meta_type, str):
            self.stats.inc_value("costsched/invalid/costsched_page_type")
            meta_type = None
        raw_value = self._value_from(request, request.meta.get("costsched_value"))
        template = make_template(request, self.spider)
        if template is None:
            self.stats.inc_value("costsched/template/unstorable")
        elif self._cost_override(template["meta"]) is None:
            template["meta"].pop("costsched_cost", None)  # an invalid override is warned about, never stored
        if page is None:
            host = urlparse(request.url).hostname or ""
            page = PageState(url=request.url, host=host, page_type=meta_type or "default",
                             value=raw_value if raw_value is not None else self.config.default_value,
                             first_seen=self.now(), template=template)
            self.pages[key] = page
        else:
            if template is not None:
                page.template = template
            if meta_type is not None:
                page.page_type = meta_type
            self._raise_value(page, raw_value)
        self._save(key, page)
        return page, new

    def request_for(self, key: str) -> Request | None:
        """Re-issue a known page from its stored template (the spider's value hook is asked again)."""
        page = self.page(key)
        if page is None or page.template is None:
            return None
        try:
            request = request_from_template(page.template, self.spider)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            logger.warning("costsched: cannot re-issue %s from its template: %s", page.url, exc)
            self.stats.inc_value("costsched/template/broken")
            return None
        self._raise_value(page, self._value_from(request, request.meta.get("costsched_value")))
        return request

    def _cost_override(self, meta: dict[str, Any]) -> float | None:
        override = meta.get("costsched_cost")
        if override is None:
            return None
        if not isinstance(override, bool) and isinstance(override, (int, float)) and 0 < override < math.inf:
            return float(override)
        logger.warning("costsched: ignoring invalid costsched_cost %r (use a positive number)", override)
        self.stats.inc_value("costsched/invalid/costsched_cost")
        return None

    def planned_cost(self, meta: dict[str, Any]) -> float:
        """What a visit is expected to cost: the ``costsched_cost`` override, else the billing model's."""
        override = self._cost_override(meta)
        return override if override is not None else self.billing.expected_cost(None)

    def prior_of(self, group: str) -> RatePrior:
        return self.priors.get(group) or RatePrior()

    def prior_rate(self, group: str) -> float:
        """The rate planning assumes for a page with no estimate yet: its group prior's median."""
        return math.exp(self.prior_of(group).mean_log)

    def _load_trust(self, stored: Any) -> dict[str, LastModifiedTrust]:
        trust = {}
        for host, counts in (stored.items() if isinstance(stored, dict) else ()):
            try:
                trust[host] = LastModifiedTrust.from_json(counts)
            except ValueError as exc:  # that host starts its audits again; the others keep theirs
                logger.error("costsched: ignoring the stored Last-Modified audits of %s: %s", host, exc)
                self.stats.inc_value("costsched/storage/unreadable_trust")
        return trust

    def _save_trust(self) -> None:
        if self.store is not None and self.last_modified_trust:
            self.store.set_meta("last_modified_trust",
                                {host: trust.to_json() for host, trust in self.last_modified_trust.items()})

    def candidates(self, now: float) -> list[Candidate]:
        """Every known, live page that can be re-issued, as planning sees it."""
        assert self.store is not None
        result = []
        for key, (last_visit, rate, raw_value, gone, _, group, cost, low, high) in self.store.iter_summaries():
            if gone:
                continue
            value = resolve_value(raw_value, self.config.value_tiers)
            if value is None:
                value = resolve_value(self.config.default_value, self.config.value_tiers)
            if rate is None:
                rate = self.prior_rate(group)
            elapsed = math.inf if last_visit is None else max(now - last_visit, 0.0) / DAY
            cost = cost if cost is not None else self.billing.expected_cost(None)
            result.append(Candidate(key, value, rate, elapsed, cost, None, low, high))  # type: ignore[arg-type]
        return result

    # -- ledger ----------------------------------------------------------

    def remaining_budget(self) -> float:
        assert self.config.budget is not None
        return self.config.budget.amount - self.spent - self.reserved

    def reserve(self, request: Request, cost: float) -> None:
        request.meta["costsched_reserved"] = request.meta.get("costsched_reserved", 0.0) + cost
        self.reserved += cost

    def _response_downloaded(self, response: Response, request: Request, spider: Spider) -> None:
        self._statuses[id(request)] = response.status

    def _request_left_downloader(self, request: Request, spider: Spider) -> None:
        status = self._statuses.pop(id(request), None)
        cost = self.billing.attempt_cost(status, 0)
        self.reserved = max(self.reserved - request.meta.pop("costsched_reserved", 0.0), 0.0)
        self.spent += cost
        self.stats.inc_value(f"costsched/attempts/{'response' if status is not None else 'failed'}")
        key = request.meta.get("costsched_page")
        if status is None and key is not None and key not in self.visits:
            self._failed_attempts.add(key)
        self._update_spend_stats()
        if self.store is not None:
            self.store.set_meta(f"ledger:{self.period}", self.spent)

    # -- visits and records ----------------------------------------------

    def open_visit(self, response: Response) -> Visit | None:
        """Start the visit *response* belongs to, or join it for a chained sub-request."""
        key = response.meta.get("costsched_page")
        if key is None or self.store is None:
            return None
        page_request = self.fingerprint(response.request) == key or "redirect_urls" in response.meta  # type: ignore[arg-type]
        if not page_request:
            return self.visits.get(key)  # a chained sub-request, counted when the callback yielded it
        if key in self._visited:  # the page fetched twice in one run (shadow mode, dont_filter): one visit counts
            self.stats.inc_value("costsched/duplicate_fetch")
            return None
        self._visited.add(key)
        page = self.page(key)
        if page is None:
            return None
        self._failed_attempts.discard(key)
        if response.status in (404, 410):
            page.gone = True
            page.last_attempt = self.now()
            self.stats.inc_value("costsched/gone")
            self._save(key, page)
            return None
        visit = Visit(page_key=key, time=self.now(), failed=response.status >= 400)
        if not visit.failed:
            self._read_dates(visit, response)
        self.visits[key] = visit
        return visit

    def _read_dates(self, visit: Visit, response: Response) -> None:
        """The response's Last-Modified and its age by the server's own Date (a bad header is counted, not used)."""
        try:
            visit.last_modified = http_date(response.headers.get("Last-Modified"))
            served = http_date(response.headers.get("Date"))
        except ValueError as exc:
            logger.debug("costsched: %s: %s", response.url, exc)
            self.stats.inc_value("costsched/invalid/date_header")
            visit.last_modified = None
            return
        if visit.last_modified is not None and served is not None:
            visit.modified_age = max(served - visit.last_modified, 0.0)

    def add_outlink(self, visit: Visit, request: Request) -> None:
        visit.outlinks.add(request.url)

    def add_subrequest(self, visit: Visit) -> None:
        """A request the callback chained for the same page: the record waits for its output too."""
        visit.pending_outputs += 1

    def item_emitted(self, visit: Visit, item: Any) -> None:
        visit.pending_items += 1
        self._item_visits[id(item)] = (visit, item, False)
        raw = self._value_from(item, None) if callable(getattr(self.spider, "costsched_value", None)) else None
        if raw is not None:
            visit.values.append(raw)

    def hash_item(self, item: Any) -> bool | None:
        """Hash *item* into its page's record; ``True`` if the page's last record already had it.

        ``None`` when the item is not tied to a visit (no spider middleware) or the
        page has no comparable previous record.
        """
        entry = self._item_visits.get(id(item))
        if entry is None:
            self.stats.inc_value("costsched/items/untracked")
            return None
        visit, _, hashed = entry
        if hashed:
            return None
        self._item_visits[id(item)] = (visit, item, True)
        item_hash = self.hasher.item_hash(item)
        visit.item_hashes.append(item_hash)
        visit.item_types.add(item_type_name(item))
        item_key = self.hasher.item_key_of(item)
        if item_key is not None:
            visit.item_keys[item_key] = item_hash
        page = self.page(visit.page_key)
        if page is None or page.hash_config != self.hasher.config_id or page.record_kind != "items":
            return None
        unchanged = page.item_keys.get(item_key) == item_hash if item_key is not None else item_hash in page.item_hashes
        self.stats.inc_value(f"costsched/items/{'unchanged' if unchanged else 'changed'}")
        return unchanged

    def _item_scraped(self, item: Any, spider: Spider, **kwargs: Any) -> None:
        if not self.pipeline_enabled:  # without ChangeDetectionPipeline, records are made of scraped items
            self.hash_item(item)
        self._item_discarded(item, spider)

    def _item_discarded(self, item: Any, spider: Spider, **kwargs: Any) -> None:
        entry = self._item_visits.pop(id(item), None)
        if entry is not None:
            visit = entry[0]
            visit.pending_items -= 1
            self._maybe_close(visit)

    def output_done(self, visit: Visit, failed: bool = False) -> None:
        """The callback's output (for the page or a chained sub-request) is exhausted."""
        visit.failed = visit.failed or failed
        visit.pending_outputs -= 1
        self._maybe_close(visit)

    def _maybe_close(self, visit: Visit) -> None:
        if visit.pending_outputs <= 0 and visit.pending_items <= 0 and self.visits.get(visit.page_key) is visit:
            del self.visits[visit.page_key]
            self._observe(visit)

    def _observe(self, visit: Visit) -> None:
        """Turn a finished visit into exactly one observation of its page."""
        key = visit.page_key
        page = self.page(key)
        if page is None or self.store is None:
            return
        page.last_attempt = visit.time
        for raw in visit.values:
            self._raise_value(page, raw)
        if page.page_type == "default" and len(visit.item_types) == 1 and "dict" not in visit.item_types:
            page.page_type = next(iter(visit.item_types))
        if visit.failed:
            page.failures += 1
            self.stats.inc_value("costsched/failed")
        elif not visit.item_hashes and page.record_kind == "items":
            # Items used to come from this page and none did now: broken extraction or a
            # vanished page, not a change.
            logger.warning("costsched: %s yielded no items this time (it used to); not counted as a change",
                           page.url)
            self.stats.inc_value("costsched/extraction_empty")
        else:
            self._record(key, page, visit)
        self._save(key, page)
        self._since_commit += 1
        if self._since_commit >= self.config.commit_every:
            self.commit()

    def _record(self, key: str, page: PageState, visit: Visit) -> None:
        kind = "items" if visit.item_hashes else "links"
        record = record_hash(visit.item_hashes if visit.item_hashes else visit.outlinks)
        if page.record is None:
            outcome = "baseline"
        elif page.hash_config != self.hasher.config_id or page.record_kind != kind:
            outcome = "rebaseline"
        else:
            changed = record != page.record
            interval_days = max(visit.time - (page.last_visit or visit.time), 0.0) / DAY
            modified_ago = self._audit_last_modified(page, visit, changed, interval_days)
            observe(page.stats, interval_days, changed, self.config.history_half_life / DAY, modified_ago,
                    resolution=1.0 / DAY)
            page.estimate = estimate_rate(page.stats, self.prior_of(page.group))
            page.changes += changed
            outcome = "changed" if changed else "unchanged"
            self._observed_groups.add(page.group)
        self.stats.inc_value(f"costsched/{outcome}")
        if outcome == "changed":
            self._update_spend_stats()
        page.record, page.record_kind = record, kind
        page.last_modified = visit.last_modified
        page.item_hashes = sorted(visit.item_hashes)
        page.item_keys = dict(visit.item_keys)
        page.hash_config = self.hasher.config_id
        page.last_visit = visit.time
        page.visits += 1

    def _audit_last_modified(self, page: PageState, visit: Visit, changed: bool, interval_days: float) -> float | None:
        """Audit the host's Last-Modified with this visit; the change's age in days if it may date the change."""
        if visit.last_modified is None or visit.modified_age is None:
            return None
        trust = self.last_modified_trust.setdefault(page.host, LastModifiedTrust())
        was_trusted = trust.trusted
        verdict, age_days = audit_date(trust, page.last_modified, visit.last_modified, visit.modified_age / DAY,
                                       changed, interval_days)
        if verdict is not None:
            self.stats.inc_value(f"costsched/last_modified/{verdict}")
            if was_trusted and not trust.trusted:
                logger.warning("costsched: %s's Last-Modified no longer dates changes (%s audit: %s)",
                               page.host, verdict, page.url)
        if age_days is not None:
            self.stats.inc_value("costsched/last_modified/dated_changes")
        return age_days

    def commit(self) -> None:
        """A safe point: everything observed so far survives a crash from here on."""
        if self.store is None:
            return
        self._save_trust()
        self.store.commit()
        self._since_commit = 0
        self.stats.inc_value("costsched/commits")
        logger.debug("costsched: committed; %d observations in this run",
                     sum(self.stats.get_value(f"costsched/{o}", 0)
                         for o in ("baseline", "rebaseline", "changed", "unchanged")))

    def _refit_priors(self) -> None:
        """Refit each observed group's prior by marginal likelihood on a sample of its pages."""
        assert self.store is not None
        if not self._observed_groups:
            return
        members: dict[str, list[str]] = {group: [] for group in self._observed_groups}
        for key, summary in self.store.iter_summaries():
            if summary[5] in members:
                members[summary[5]].append(key)
        rng = random.Random(self.period)
        for group, keys in members.items():
            sample = keys if len(keys) <= PRIOR_SAMPLE else rng.sample(keys, PRIOR_SAMPLE)
            pages = [(key, page) for key in sample if (page := self.page(key)) is not None and page.stats.visits > 0]
            prior = refit_prior([page.stats for _, page in pages], start=self.prior_of(group))
            if prior is None:
                continue
            self.priors[group] = prior
            self.store.set_meta("priors", {name: [p.mean_log, p.sd_log] for name, p in self.priors.items()})
            for key, page in pages:
                page.estimate = estimate_rate(page.stats, prior)
                self._save(key, page)
