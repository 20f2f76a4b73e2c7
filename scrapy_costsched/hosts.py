"""Per-host state: what each host's validators have earned, which to send, what its visits cost in bytes,
and how healthy it is.

Kept in the state's meta, one row per host (``host:<name>``): its Last-Modified audits
(``last_modified``) and when in the day its dates fall (``date_timing``), its ETag audits, 304
answers and how often it sends each validator (``validators``), the mean bytes of a full fetch
and of a 304 per page type (``bytes``), the redirects (``hops``) and media downloads (``media``) its visits
bring, and its recent attempts, failures, latency and
Retry-After block (``health``; :mod:`~.model.health`). A safe point rewrites only the rows of
the hosts touched since the last one, so a crawl of many hosts does not rewrite all of them at
every commit. States written before kept each kind in one row for every host
(``last_modified_trust``, ``host_validators``, ``host_bytes``, ``host_health``); those are read
and moved into the per-host rows at the next save. An unreadable entry restarts that host's learning only.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy_costsched.headers import format_http_date
from scrapy_costsched.model.health import HostHealth
from scrapy_costsched.model.trust import DateTiming, SignalTrust
from scrapy_costsched.model.validators import CANARY_ETAG, HostValidators
from scrapy_costsched.pages import Hops, MeanBytes

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from scrapy.statscollectors import StatsCollector

    from scrapy_costsched.pages import PageState
    from scrapy_costsched.storage import StateStorage

logger = logging.getLogger(__name__)

#: A host's row in the state's meta: ``{kind: entry}``, and under ``bytes`` and ``hops`` its groups' means.
HOST_PREFIX = "host:"
#: The group under which a host's robots.txt answers are measured (no page type has a '/'-led name).
ROBOTS_TYPE = "/robots.txt"
#: Kinds of entry a host's row keeps per group of its pages (host|page type), not one for the host.
_BY_GROUP = frozenset({"bytes", "hops", "media"})
#: The rows that held one kind of entry for every host before a row per host, and that kind.
_SHARED_ROWS = {"last_modified_trust": "last_modified", "host_validators": "validators", "host_bytes": "bytes",
                "host_health": "health"}


class HostBook:
    """The hosts a crawl has seen and what their signals and answers are worth."""

    def __init__(self, store: StateStorage, stats: StatsCollector) -> None:
        self.store = store
        self.stats = stats
        self.last_modified: dict[str, SignalTrust] = {}
        self.date_timing: dict[str, DateTiming] = {}
        self.validators: dict[str, HostValidators] = {}
        self.bytes: dict[str, MeanBytes] = {}  # by group (host|page type), and group|304; host|/robots.txt too
        self._groups: dict[str, set[str]] = {}  # each host's keys of bytes
        self.hops: dict[str, Hops] = {}  # by group (host|page type)
        self._hop_groups: dict[str, set[str]] = {}  # each host's keys of hops
        # The media pipelines' downloads a visit brings (scrapy_costsched.media), by group, and group|new for the
        # first visits of its pages (which download every file their items list).
        self.media: dict[str, Hops] = {}
        self._media_groups: dict[str, set[str]] = {}  # each host's keys of media
        self.health: dict[str, HostHealth] = {}
        self._first_verifications: set[str] = set()  # hosts never verified whose first verification is in flight
        self._touched: set[str] = set()  # hosts whose entries may have changed since the last save
        #: Each kind of entry's book, and how a stored entry of it is parsed.
        self._books: dict[str, tuple[dict[str, Any], Callable[[Any], Any]]] = {
            "last_modified": (self.last_modified, SignalTrust.from_json),
            "date_timing": (self.date_timing, DateTiming.from_json),
            "validators": (self.validators, lambda data: HostValidators.from_json(data, SignalTrust())),
            "bytes": (self.bytes, MeanBytes.from_json),
            "hops": (self.hops, Hops.from_json),
            "media": (self.media, Hops.from_json),
            "health": (self.health, HostHealth.from_json),
        }
        self._shared_rows: list[str] = []
        for row, kind in _SHARED_ROWS.items():
            stored = store.get_meta(row)
            if stored:
                self._shared_rows.append(row)
                self._load(kind, stored if isinstance(stored, dict) else self._unreadable(row, stored))
        for key, entries in store.iter_meta(HOST_PREFIX):
            host = key[len(HOST_PREFIX):]
            if not isinstance(entries, dict):
                self._touched.add(host)  # rewritten at the next save from what this run learns
                entries = self._unreadable(key, entries)
            for kind, entry in entries.items():
                self._load(kind, entry if kind in _BY_GROUP and isinstance(entry, dict) else {host: entry})
        for host, validators in self.validators.items():
            validators.last_modified = self.last_modified.setdefault(host, SignalTrust())  # one object, audited
        for group in self.bytes:
            self._groups.setdefault(group.partition("|")[0], set()).add(group)
        for group in self.hops:
            self._hop_groups.setdefault(group.partition("|")[0], set()).add(group)
        for key in self.media:
            self._media_groups.setdefault(key.partition("|")[0], set()).add(key)
        if self._shared_rows:  # moved into rows of their own at the next save
            self._touched.update(self.last_modified, self.validators, self.health, self._groups)

    def _unreadable(self, row: str, stored: Any) -> dict[str, Any]:
        """A stored row that is not an object: warned about, counted, and read as empty."""
        logger.warning("costsched: ignoring the stored row %s, not an object: %.60r", row, stored)
        self.stats.inc_value("costsched/storage/unreadable_trust")
        return {}

    def _load(self, kind: str, stored: dict[str, Any]) -> None:
        """Parse *stored* entries of one *kind* into their book (an unknown kind is skipped)."""
        if kind not in self._books:
            return
        entries, parse = self._books[kind]
        for key, data in stored.items():
            try:
                entries[key] = parse(data)
            except ValueError as exc:  # that host learns again; the others keep what they learned
                logger.warning("costsched: ignoring the stored %s of %s: %s", kind.replace("_", " "), key, exc)
                self.stats.inc_value("costsched/storage/unreadable_trust")

    def last_modified_trust(self, host: str) -> SignalTrust:
        """*host*'s Last-Modified audits, to read or to audit (so it is saved at the next safe point)."""
        self._touched.add(host)
        return self.last_modified.setdefault(host, SignalTrust())

    def timing_of(self, host: str) -> DateTiming:
        """When in the day *host*'s dates fall, to read or to count a date into (saved at the next safe point)."""
        self._touched.add(host)
        return self.date_timing.setdefault(host, DateTiming())

    def date_resolution(self, host: str) -> float:
        """How closely *host*'s Last-Modified dates its changes, in days: to the second, or to the day where its
        dates bunch at one time of the day (:class:`~.model.trust.DateTiming`)."""
        return self.date_timing.get(host, DateTiming()).resolution

    def of(self, host: str) -> HostValidators:
        """The validators of *host* (its Last-Modified audits are :meth:`last_modified_trust`'s), to read or
        to change (so they are saved at the next safe point)."""
        self._touched.add(host)
        validators = self.validators.get(host)
        if validators is None:
            validators = self.validators[host] = HostValidators(last_modified=self.last_modified_trust(host))
        return validators

    def conditional_headers(self, page: PageState, today: float, verify_every: int) -> tuple[dict[str, str], bool] | None:
        """The conditional headers a visit of *page* sends as its host has earned them, and whether a verification.

        A verification (the host's first conditional visit and every *verify_every*-th) sends a
        canary no honest host answers 304 to; until a host passed one, its other visits go without.
        """
        host = self.of(page.host)
        send_etag, send_date = host.to_send(page.etag is not None, page.last_modified is not None, today)
        if not (send_etag or send_date) or page.host in self._first_verifications:
            return None
        canary = host.answers.due(verify_every)
        if canary and not host.answers.verified:
            self._first_verifications.add(page.host)
        # A server that has If-None-Match ignores If-Modified-Since (RFC 9110 section 13.2.2): one is enough.
        if send_etag and page.etag is not None:
            return {"If-None-Match": CANARY_ETAG if canary else page.etag}, canary
        assert page.last_modified is not None
        since = page.last_modified - 1.0 if canary else page.last_modified
        return {"If-Modified-Since": format_http_date(since).decode("ascii")}, canary

    def verification_answered(self, host: str) -> None:
        """A verification of *host* came back (or failed): its other visits may carry validators again."""
        self._first_verifications.discard(host)

    def add_bytes(self, group: str, not_modified: bool, size: float) -> None:
        """One answer's bytes for pages of *group* (host and page type); 304s apart from full answers."""
        host, key = group.partition("|")[0], f"{group}|304" if not_modified else group
        self._touched.add(host)
        self._groups.setdefault(host, set()).add(key)
        self.bytes.setdefault(key, MeanBytes()).add(size)

    def add_hops(self, group: str, sizes: Sequence[float]) -> None:
        """A visit of a page of *group* reached its answer through redirects that moved *sizes* bytes each."""
        host = group.partition("|")[0]
        self._touched.add(host)
        self._hop_groups.setdefault(host, set()).add(group)
        hops = self.hops.get(group)
        if hops is None:
            hops = self.hops[group] = Hops()
        hops.add(sizes)

    def add_media(self, group: str, first: bool, sizes: Sequence[float]) -> None:
        """A visit of a page of *group* (its *first*, or a later one) brought media downloads of *sizes* bytes."""
        host, key = group.partition("|")[0], f"{group}|new" if first else group
        self._touched.add(host)
        self._media_groups.setdefault(host, set()).add(key)
        self.media.setdefault(key, Hops()).add(sizes)

    def media_per_visit(self, group: str | None, first: bool) -> tuple[float, float] | None:
        """The media downloads a *first* (or later) visit of a page of *group* brings, and their mean bytes; of every
        group's visits of that kind when *group* (``None``: a kind of page not known yet) has none measured."""
        media = self.media.get(f"{group}|new" if first else group) if group is not None else None
        if media is not None and media.visits:
            return media.per_visit, media.bytes.mean
        kind = [media for key, media in self.media.items() if key.endswith("|new") == first and media.visits]
        visits = sum(media.visits for media in kind)
        downloads = sum(media.per_visit * media.visits for media in kind)
        if not downloads:
            return None
        mean = sum(media.bytes.mean * media.per_visit * media.visits for media in kind) / downloads
        return downloads / visits, mean

    def mean_bytes(self, group: str | None, not_modified: bool) -> float | None:
        """The mean bytes of one kind of answer for pages of *group*, or over every group of pages (``None``)."""
        if group is not None:
            mean = self.bytes.get(f"{group}|304" if not_modified else group)
            return mean.mean if mean is not None and mean.count else None
        return self._pooled(g for g in self.bytes if g.endswith("|304") == not_modified and not g.endswith(ROBOTS_TYPE))

    def _pooled(self, groups: Iterable[str]) -> float | None:
        """The mean bytes over every answer of *groups* (``None`` if none was measured)."""
        means = [mean for mean in map(self.bytes.__getitem__, groups) if mean.count]
        count = sum(mean.count for mean in means)
        return sum(mean.mean * mean.count for mean in means) / count if count else None

    def health_of(self, host: str) -> HostHealth:
        health = self.health.get(host)
        if health is None:
            health = self.health[host] = HostHealth()
        return health

    def attempt(self, host: str, outcome: str, today: float, size: float, latency: float | None,
                page: bool = True) -> None:
        """One attempt at *host* came to *outcome* (:data:`~.model.health.OUTCOMES`); *page*: a page's, not
        robots.txt's."""
        self._touched.add(host)
        self.health_of(host).observe(outcome, today, size, latency, page)
        if outcome != "ok":
            self.stats.inc_value(f"costsched/hosts/{host}/failures/{outcome}")

    def block(self, host: str, until: float, outage: bool = False) -> bool:
        """*host* asked for no request before epoch second *until* (with *outage*, failed so that it is taken
        for down); ``True`` if that is a new or longer block."""
        self._touched.add(host)
        if not self.health_of(host).block(until, outage):
            return False
        self.stats.inc_value(f"costsched/hosts/{host}/{'outages' if outage else 'retry_after'}")
        return True

    def add_robots_bytes(self, host: str, size: float) -> None:
        """One answer's bytes for *host*'s robots.txt: what RobotsTxtMiddleware's request to it is planned at."""
        self.add_bytes(f"{host}|{ROBOTS_TYPE}", False, size)

    def robots_bytes(self, host: str) -> float | None:
        """The mean bytes of *host*'s robots.txt answers, else of every host's (``None`` before any was measured)."""
        key = f"{host}|{ROBOTS_TYPE}"
        own = self._pooled([key]) if key in self.bytes else None
        return own if own is not None else self._pooled(g for g in self.bytes if g.endswith(ROBOTS_TYPE))

    def blocked_for(self, host: str, now: float) -> float:
        """Seconds from epoch second *now* before *host* may be sent a request."""
        health = self.health.get(host)
        return health.blocked_for(now) if health is not None else 0.0

    def report(self, today: float) -> None:
        """Each host's verdicts, 304 share (of its answers ever) and health into the stats (``costsched/hosts/<host>/…``)."""
        for host, health in self.health.items():
            self.stats.set_value(f"costsched/hosts/{host}/health", round(health.p_success(today), 4))
            if health.latency is not None:
                self.stats.set_value(f"costsched/hosts/{host}/latency", round(health.latency, 4))
        for host, validators in self.validators.items():
            for signal, verdict in self.verdicts(host).items():
                self.stats.set_value(f"costsched/hosts/{host}/{signal}", verdict)
            answers = validators.answers.answered + validators.responses
            if answers:
                self.stats.set_value(f"costsched/hosts/{host}/not_modified_share",
                                     round(validators.answers.answered / answers, 4))

    def verdicts(self, host: str) -> dict[str, str]:
        """*host*'s verdict per signal (it has validators); trusted dates that bunch at one time of the day, which
        date changes to the day, are ``"batched"`` (:class:`~.model.trust.DateTiming`)."""
        verdicts = self.validators[host].verdicts()
        timing = self.date_timing.get(host)
        if verdicts["last_modified"] == "trusted" and timing is not None and timing.batched:
            verdicts["last_modified"] = "batched"
        return verdicts

    def save(self) -> None:
        """Write the rows of the hosts touched since the last save (and retire the former shared rows)."""
        for host in self._touched:
            self.store.set_meta(f"{HOST_PREFIX}{host}", self._row(host))
        self._touched.clear()
        for row in self._shared_rows:
            self.store.set_meta(row, None)
        self._shared_rows = []

    def _row(self, host: str) -> dict[str, Any]:
        row: dict[str, Any] = {}
        if host in self.last_modified:
            row["last_modified"] = self.last_modified[host].to_json()
        if host in self.date_timing:
            row["date_timing"] = self.date_timing[host].to_json()
        if host in self.validators:
            row["validators"] = self.validators[host].to_json()
        if host in self.health:
            row["health"] = self.health[host].to_json()
        groups = self._groups.get(host)
        if groups:
            row["bytes"] = {group: self.bytes[group].to_json() for group in sorted(groups)}
        hop_groups = self._hop_groups.get(host)
        if hop_groups:
            row["hops"] = {group: self.hops[group].to_json() for group in sorted(hop_groups)}
        media_groups = self._media_groups.get(host)
        if media_groups:
            row["media"] = {key: self.media[key].to_json() for key in sorted(media_groups)}
        return row
