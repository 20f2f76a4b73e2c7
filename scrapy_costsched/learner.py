"""Observations into estimates: each visit's outcome into its page's rate, and group priors refitted.

The per-visit step is :func:`~.model.learning.observe` (the loop the simulator
runs); the end-of-run refit of each group's prior reads the store directly, so
it can run off the reactor thread once the crawl's pages are flushed.
"""

from __future__ import annotations

import heapq
import logging
from typing import TYPE_CHECKING

import xxhash

from scrapy_costsched.model import ChangeStats, RatePrior, estimate_rate
from scrapy_costsched.model.discovery import LinkPrior, NewLinkStats, pooled_prior
from scrapy_costsched.model.learning import PRIOR_SAMPLE, observe, refit_host_prior, refit_prior
from scrapy_costsched.model.trust import CONTRADICTS, audit_date
from scrapy_costsched.model.validators import audit_etag
from scrapy_costsched.pages import UNTYPED, PageState, Summary
from scrapy_costsched.records import record_hash
from scrapy_costsched.volatility import changed_fields

if TYPE_CHECKING:
    from collections.abc import Iterable

    from scrapy.statscollectors import StatsCollector

    from scrapy_costsched.hosts import HostBook
    from scrapy_costsched.storage import StateStorage
    from scrapy_costsched.visits import Visit

logger = logging.getLogger(__name__)

DAY = 86400.0


def _fields_changed(fields: list[str]) -> str:
    """The changed fields as a message names them (``, whose fields 'a' and 'b' changed``), or nothing."""
    if not fields:
        return ""
    names = ", ".join(map(repr, fields[:-1])) + f" and {fields[-1]!r}" if len(fields) > 1 else repr(fields[0])
    return f", whose field{'s' if len(fields) > 1 else ''} {names} changed"


def _say_if_volatile(header: str, stat: str, page: PageState, was: str, now: str) -> None:
    """Say when a host's *header* is found volatile (it moves without the records, a dynamic page's date of each
    answer): it then neither dates changes nor goes out as a validator, which only the stats showed before (a
    trial's site dated every answer at its own time)."""
    if now == "volatile" and was != "volatile":
        logger.info("costsched: %s's %s moves without the records (as at %s), so it is not used to date changes or "
                    "sent back as a validator (costsched/hosts/%s/%s)", page.host, header, page.url, page.host, stat)


class Learner:
    """Group priors, and what each completed visit teaches about its page."""

    def __init__(self, store: StateStorage, stats: StatsCollector, hosts: HostBook, history_half_life: float,
                 hash_config: str) -> None:
        self.store = store
        self.stats = stats
        self.hosts = hosts
        self.half_life_days = history_half_life / DAY
        self.hash_config = hash_config
        self.priors = {group: RatePrior(*value) for group, value in (store.get_meta("priors") or {}).items()}
        self.link_priors = {group: LinkPrior(*value) for group, value in (store.get_meta("link_priors") or {}).items()}
        #: Priors fitted on all of a host's pages, for its groups without one of their own (:meth:`prior_of`).
        self.host_priors = {host: RatePrior(*value) for host, value in (store.get_meta("host_priors") or {}).items()}
        self.observed_groups: set[str] = set()
        #: Groups whose prior was dropped this run with their pages' histories (:meth:`record`).
        self.forgotten_groups: set[str] = set()
        self._reshaped_types: set[str] = set()  # page types whose reshaped records were said this run

    def prior_of(self, group: str) -> RatePrior:
        """The group's prior; for a group too new or too small to have one, its host's, else the default.

        A page of a kind the crawl has not learned yet changes more like the other pages of its site than
        like pages anywhere (the hierarchy one level up; Gelman et al. 2013, chapter 5). That matters
        most for the new pages a hub reveals, whose kind is not known before the spider parses them
        (:meth:`prior_rate` prices them at their host's prior): at
        the default prior's median (one change in ten days) each was priced as ten days of freshness
        (``U_new = 1/rate``), so on a site whose pages change thrice as often, sitemaps that had revealed
        nothing for two weeks still outranked the pages' refreshes (a trial's sitemap index and robots.txt).
        """
        return self.priors.get(group) or self.host_priors.get(group.partition("|")[0]) or RatePrior()

    def link_prior_of(self, group: str) -> LinkPrior:
        """The prior on a page's new links a day: its group's pooled rate once the group has shown one."""
        return self.link_priors.get(group) or LinkPrior()

    def prior_rate(self, group: str) -> float:
        """The rate planning assumes for a page with no estimate yet: its group prior's median, but its host's for
        an untyped page (:data:`~scrapy_costsched.pages.UNTYPED`).

        A page stays untyped until its spider shows its kind, so the untyped pages with histories are those
        whose visits yield no items (lists, hubs), and their prior says nothing of a new URL, which is as likely
        as any page of the site to be one of its items' pages. Found in a trial: once 20 of a jobs board's list
        pages, each changed at every visit, had histories, the untyped group had a prior of its own (median 29
        to 56 changes a day in three runs); the new job pages a list reveals, priced at it, were each worth a
        thirtieth of a day's freshness or less, and from that day on the plans spent the budget on refreshes
        and found 6 of the 20 new jobs a day. The host's prior weighs each kind by its number of pages.
        """
        host, _, page_type = group.partition("|")
        if page_type == UNTYPED and host in self.host_priors:
            return self.host_priors[host].median
        return self.prior_of(group).median

    def record(self, page: PageState, visit: Visit, forget_history: bool = False) -> str:
        """Compare *visit*'s record with the page's last one and learn from it; returns the outcome.

        *forget_history*: the page's history counted the changes of a field the hash configuration
        now leaves out (a timestamp named as volatile), so a re-baseline drops it.
        """
        kind = "items" if visit.item_hashes else "links"
        record = record_hash(visit.item_hashes if visit.item_hashes else visit.outlinks)
        shape = record_hash(visit.item_shapes) if visit.item_shapes else None
        if page.record is None:
            outcome = "baseline"
        elif page.hash_config != self.hash_config or page.record_kind != kind or visit.redirected != page.redirected:
            # Not comparable: another hash configuration, or the answer now comes from another URL than the last
            # one did (a redirect began or ended), whose record and validators are not the page's history.
            outcome = "rebaseline"
            if forget_history:
                self._forget(page)
        else:
            changed = record != page.record
            interval_days = max(visit.time - (page.last_visit or visit.time), 0.0) / DAY
            modified_ago = None
            # A redirected answer's validators are its target's, and the target may not be the last visit's
            # (a "deal of the day"): they neither date the change nor say anything of the host's. Nor do they
            # when the items' fields changed (:meth:`_reshaped`).
            if not visit.redirected and not (changed and self._reshaped(page, shape)):
                modified_ago = self._audit_last_modified(page, visit, changed, interval_days)
                self._audit_validators(page, visit, changed)
            observe(page.stats, interval_days, changed, self.half_life_days, modified_ago,
                    resolution=self.hosts.date_resolution(page.host))
            page.estimate = estimate_rate(page.stats, self.prior_of(page.group))
            page.changes += changed
            outcome = "changed" if changed else "unchanged"
            self.observed_groups.add(page.group)
        self._record_links(page, visit)
        self.hosts.of(page.host).saw(visit.etag is not None, visit.last_modified is not None)
        page.record, page.record_kind = record, kind
        if visit.last_modified is not None and visit.last_modified != page.last_modified and not visit.redirected:
            self._time_date(page.host, visit.last_modified)
        page.last_modified, page.etag, page.redirected = visit.last_modified, visit.etag, visit.redirected
        page.item_hashes = sorted(visit.item_hashes)
        page.item_keys = dict(visit.item_keys)
        page.hash_config, page.record_shape = self.hash_config, shape
        page.last_visit = visit.time
        page.visits += 1
        return outcome

    def _reshaped(self, page: PageState, shape: str | None) -> bool:
        """Whether the page's items have other fields (or types) than its last record's, said once per page type.

        That is the spider's code more often than the page: a field added to the items makes every page's next
        full answer differ while its validator stays, which read as a contradiction took each host's ETags and
        Last-Modified dates for false (a trial's JSON API lost its 304s for days, with a warning that its ETags
        lied). The visit still counts as a change, but audits neither.
        """
        if shape is None or page.record_shape is None or shape == page.record_shape:
            return False
        self.stats.inc_value("costsched/items/reshaped")
        if page.page_type not in self._reshaped_types:
            self._reshaped_types.add(page.page_type)
            logger.info("costsched: the items of %r pages have other fields than at their last visits (as at %s: did "
                        "the spider change?); each such visit counts as a change, but says nothing of its host's ETags "
                        "or Last-Modified dates (costsched/items/reshaped counts them; COSTSCHED_HASH_FIELDS keeps such "
                        "changes out of the pages' histories)", page.page_type, page.url)
        return True

    def _forget(self, page: PageState) -> None:
        """Drop the page's change history, and its group's prior, fitted to such histories: every visit looked
        like a change, so the rates were those of the field, and the plan passed the pages over as changing too
        often to be worth a visit. Both are learned again from the record as it is now hashed, and so is the
        host's prior, which pooled those histories."""
        page.stats, page.estimate, page.changes = ChangeStats(), None, 0
        self.priors.pop(page.group, None)
        self.host_priors.pop(page.host, None)
        self.forgotten_groups.add(page.group)
        self.stats.inc_value("costsched/history_forgotten")

    def not_modified(self, page: PageState, visit: Visit) -> None:
        """A 304: the page is unchanged since its last visit; its validators are refreshed when the 304 sent them."""
        interval_days = max(visit.time - (page.last_visit or visit.time), 0.0) / DAY
        observe(page.stats, interval_days, False, self.half_life_days, None, resolution=1.0 / DAY)
        page.estimate = estimate_rate(page.stats, self.prior_of(page.group))
        self.observed_groups.add(page.group)
        page.etag = visit.etag or page.etag
        page.last_modified = visit.last_modified or page.last_modified
        page.last_visit = visit.time
        page.visits += 1

    def _audit_validators(self, page: PageState, visit: Visit, changed: bool) -> None:
        """What a full answer says of its host's ETags and 304s (:mod:`~.model.validators`)."""
        host = self.hosts.of(page.host)
        if page.etag is not None and visit.etag is not None:
            believed, was = not host.etag.probation, host.etag.verdict
            verdict = audit_etag(host.etag, page.etag, visit.etag, changed)
            self.stats.inc_value(f"costsched/etag/{verdict}")
            if verdict == CONTRADICTS and believed:
                # Said when trust ends: a host whose ETag never moves contradicts at every changed page. So does a
                # field the spider's code fills at each visit, which the fields that changed show.
                fields = changed_fields(page.field_hashes, visit.item_fields)
                logger.warning("costsched: %s sent the same ETag for a changed record (%s%s): its ETags are not "
                               "trusted for a while (costsched/etag/contradicts counts each such answer)%s",
                               page.host, page.url, _fields_changed(fields),
                               f"; if {'that field' if len(fields) == 1 else 'one of those fields'} is filled by your "
                               "code at each visit (a time, a token), the server is right: leave it out with "
                               "COSTSCHED_IGNORE_FIELDS" if fields else "")
            else:
                _say_if_volatile("ETag", "etag", page, was, host.etag.verdict)
        if visit.canary:
            self.stats.inc_value(f"costsched/not_modified/{host.answers.verified_by(False, visit.time / DAY)}")
        elif visit.validators_sent:
            etag_sent = visit.validators_sent.get("If-None-Match")
            matched = (visit.etag == etag_sent) if etag_sent is not None else \
                visit.last_modified is not None and visit.last_modified == page.last_modified
            if host.answers.answered_in_full(matched, visit.time / DAY):
                self.stats.inc_value("costsched/not_modified/ignored")
                logger.info("costsched: %s answers conditional requests in full although its validators match; "
                            "it is sent none for a while", page.host)

    def _record_links(self, page: PageState, visit: Visit) -> None:
        """Count the new pages this visit revealed, from the page's second visit that links out on.

        A first visit's outlinks are all new to the page's history, so it only starts the count.
        """
        if not visit.outlinks:
            return
        if page.links is None or page.last_visit is None:
            page.links = page.links or NewLinkStats()
            return
        interval_days = max(visit.time - page.last_visit, 0.0) / DAY
        page.links.observe(visit.new_links, interval_days, self.half_life_days, listed=visit.listed,
                           prior=self.link_prior_of(page.group))

    def _estimate_again(self, pages: list[tuple[str, PageState]], prior: RatePrior) -> None:
        """Estimate *pages* again under a refitted *prior*, and store them."""
        for key, page in pages:
            page.estimate = estimate_rate(page.stats, prior)
            self.store.put_page(key, page.to_json(), page.summary())

    def _refit_host_priors(self, pools: dict[str, list[tuple[str, int, list[ChangeStats]]]]) -> set[str]:
        """Refit each host's prior on its groups' samples (:func:`~.model.learning.refit_host_prior`); a host of one
        kind of page has that kind's prior. The hosts whose prior changed."""
        refitted = set()
        for host, groups in pools.items():
            if len(groups) == 1:
                prior = self.priors.get(groups[0][0])
            else:
                prior = refit_host_prior([(size, histories) for _, size, histories in groups],
                                         start=self.host_priors.get(host) or RatePrior())
            if prior is not None and prior != self.host_priors.get(host):
                self.host_priors[host] = prior
                refitted.add(host)
        return refitted

    def _audit_last_modified(self, page: PageState, visit: Visit, changed: bool, interval_days: float) -> float | None:
        """Audit the host's Last-Modified with this visit; the change's age in days if it may date the change."""
        if visit.last_modified is None or visit.modified_age is None:
            return None
        trust = self.hosts.last_modified_trust(page.host)
        was_trusted, was = trust.trusted, trust.verdict
        verdict, age_days = audit_date(trust, page.last_modified, visit.last_modified, visit.modified_age / DAY,
                                       changed, interval_days)
        if verdict is not None:
            self.stats.inc_value(f"costsched/last_modified/{verdict}")
            if was_trusted and not trust.trusted:
                logger.warning("costsched: %s's Last-Modified no longer dates changes (%s audit: %s)",
                               page.host, verdict, page.url)
            else:
                _say_if_volatile("Last-Modified", "last_modified", page, was, trust.verdict)
        if age_days is not None:
            self.stats.inc_value("costsched/last_modified/dated_changes")
        return age_days

    def _time_date(self, host: str, date: float) -> None:
        """Count a new Last-Modified *date* of *host* by its time of day, and say when its dates turn out to bunch."""
        timing = self.hosts.timing_of(host)
        was = timing.batched
        timing.saw(date % DAY / DAY)
        if timing.batched and not was:
            logger.info("costsched: %s's Last-Modified dates bunch at one time of the day, as an update run daily "
                        "dates them: they date its pages' changes to the day (costsched/hosts/%s/last_modified)",
                        host, host)

    def refit_priors(self, seed: int, groups: Iterable[tuple[str, str]] | None = None) -> int:
        """Refit each observed group's prior by marginal likelihood on a sample of its pages, and its prior on
        new links from the same sample (:func:`~.model.discovery.pooled_prior`).

        *groups* are every known page's key and group, if the caller has them (else they
        are read from the store). Reads and writes the store only (the caller
        flushed its page cache), so it may run in a worker thread. Returns the number of
        priors refitted.
        """
        if not self.observed_groups and not self.forgotten_groups:
            return 0
        if groups is None:
            groups = ((key, Summary.from_row(row).group) for key, row in self.store.iter_summaries())
        observed = self.observed_groups | self.forgotten_groups
        hosts = {group.partition("|")[0] for group in observed}
        members: dict[str, list[str]] = {group: [] for group in observed}
        for key, group in groups:
            if group in members:
                members[group].append(key)
            elif group.partition("|")[0] in hosts:  # sampled for its host's prior only
                members[group] = [key]
        refitted = 0
        salt = seed % 2**64
        # Per host, each group with its size and its sampled pages' histories (in the sample's random order).
        pools: dict[str, list[tuple[str, int, list[ChangeStats]]]] = {}
        samples: dict[str, list[tuple[str, PageState]]] = {}
        for group, keys in members.items():
            # The pages whose keys hash lowest under the seed: a sample that depends on neither the order
            # the keys came in nor on sorting all of them (a group may hold millions).
            sample = heapq.nsmallest(PRIOR_SAMPLE, keys, key=lambda key: xxhash.xxh64_intdigest(key.encode(), salt))
            stored = dict(self.store.get_pages(sample))  # one read, not a round trip per page
            pages = []
            for key in sample:
                try:
                    page = PageState.from_json(stored.get(key))
                except ValueError:
                    continue  # counted when the crawl read it
                # A forgotten group's pages not re-baselined yet still hold the histories it dropped.
                current = group not in self.forgotten_groups or page.hash_config == self.hash_config
                if page.stats.visits > 0 and current:
                    pages.append((key, page))
            pools.setdefault(group.partition("|")[0], []).append((group, len(keys), [page.stats for _, page in pages]))
            samples[group] = pages
            if group not in observed:
                continue
            link_prior = pooled_prior(page.links for _, page in pages if page.links is not None)
            if link_prior is not None:
                self.link_priors[group] = link_prior
            prior = refit_prior([page.stats for _, page in pages], start=self.prior_of(group))
            if prior is None:
                continue
            self.priors[group] = prior
            refitted += 1
            self._estimate_again(pages, prior)
        if refitted or self.forgotten_groups:
            self.store.set_meta("priors", {name: [p.mean_log, p.sd_log] for name, p in self.priors.items()})
        hosts_refitted = self._refit_host_priors(pools)
        if hosts_refitted or self.forgotten_groups:
            self.store.set_meta("host_priors", {host: [p.mean_log, p.sd_log] for host, p in self.host_priors.items()})
        # Groups too small for a prior of their own are estimated with their host's: found in a trial, where
        # eight company pages kept the estimates (3 changes a day, none seen in four days) that the host's prior
        # gave them while the host's job pages seemed to change at every visit.
        for group, pages in samples.items():
            if group not in self.priors and group.partition("|")[0] in hosts_refitted:
                self._estimate_again(pages, self.prior_of(group))
        if self.link_priors:
            self.store.set_meta("link_priors", {name: [p.shape, p.days] for name, p in self.link_priors.items()})
        return refitted
