"""Per-host state: what each host's validators have earned, which to send, what its visits cost in bytes,
and how healthy it is.

Kept in the state's meta and saved at every safe point: ``last_modified_trust``
(audits of each host's Last-Modified dates), ``host_validators`` (its ETag
audits, its 304 answers, how often it sends each validator), ``host_bytes``
(the mean bytes of a full fetch and of a 304 per host and page type) and
``host_health`` (recent attempts, failures, latency, Retry-After block;
:mod:`~.model.health`). An unreadable entry restarts that host's learning only.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy_costsched.headers import format_http_date
from scrapy_costsched.model.health import HostHealth
from scrapy_costsched.model.trust import SignalTrust
from scrapy_costsched.model.validators import CANARY_ETAG, HostValidators
from scrapy_costsched.pages import MeanBytes

if TYPE_CHECKING:
    from scrapy.statscollectors import StatsCollector

    from scrapy_costsched.pages import PageState
    from scrapy_costsched.storage import StateStorage

logger = logging.getLogger(__name__)

class HostBook:
    """The hosts a crawl has seen and what their signals and answers are worth."""

    def __init__(self, store: StateStorage, stats: StatsCollector) -> None:
        self.store = store
        self.stats = stats
        self.last_modified: dict[str, SignalTrust] = self._load(
            "last_modified_trust", SignalTrust.from_json)
        self.validators: dict[str, HostValidators] = self._load(
            "host_validators", lambda data: HostValidators.from_json(data, SignalTrust()))
        for host, validators in self.validators.items():
            validators.last_modified = self.last_modified_trust(host)  # one object, audited by the learner
        self.bytes: dict[str, MeanBytes] = self._load("host_bytes", MeanBytes.from_json)
        self.health: dict[str, HostHealth] = self._load("host_health", HostHealth.from_json)
        self._first_verifications: set[str] = set()  # hosts never verified whose first verification is in flight

    def _load(self, name: str, parse: Any) -> dict[str, Any]:
        entries = {}
        stored = self.store.get_meta(name) or {}
        for key, data in (stored.items() if isinstance(stored, dict) else ()):
            try:
                entries[key] = parse(data)
            except ValueError as exc:  # that host learns again; the others keep what they learned
                logger.warning("costsched: ignoring the stored %s of %s: %s", name.replace("_", " "), key, exc)
                self.stats.inc_value("costsched/storage/unreadable_trust")
        return entries

    def last_modified_trust(self, host: str) -> SignalTrust:
        return self.last_modified.setdefault(host, SignalTrust())

    def of(self, host: str) -> HostValidators:
        """The validators of *host* (its Last-Modified audits are :meth:`last_modified_trust`'s)."""
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
        self.bytes.setdefault(f"{group}|304" if not_modified else group, MeanBytes()).add(size)

    def mean_bytes(self, group: str | None, not_modified: bool) -> float | None:
        """The mean bytes of one kind of answer for pages of *group*, or over every group (``None``)."""
        if group is not None:
            mean = self.bytes.get(f"{group}|304" if not_modified else group)
            return mean.mean if mean is not None and mean.count else None
        means = [m for g, m in self.bytes.items() if g.endswith("|304") == not_modified and m.count]
        count = sum(m.count for m in means)
        return sum(m.mean * m.count for m in means) / count if count else None

    def health_of(self, host: str) -> HostHealth:
        health = self.health.get(host)
        if health is None:
            health = self.health[host] = HostHealth()
        return health

    def attempt(self, host: str, outcome: str, today: float, size: float, latency: float | None) -> None:
        """One attempt at *host* came to *outcome* (:data:`~.model.health.OUTCOMES`)."""
        self.health_of(host).observe(outcome, today, size, latency)
        if outcome != "ok":
            self.stats.inc_value(f"costsched/hosts/{host}/failures/{outcome}")

    def block(self, host: str, until: float) -> bool:
        """*host* asked for no request before epoch second *until*; ``True`` if that is a new or longer block."""
        if not self.health_of(host).block(until):
            return False
        self.stats.inc_value(f"costsched/hosts/{host}/retry_after")
        return True

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
            for signal, verdict in validators.verdicts().items():
                self.stats.set_value(f"costsched/hosts/{host}/{signal}", verdict)
            answers = validators.answers.answered + validators.responses
            if answers:
                self.stats.set_value(f"costsched/hosts/{host}/not_modified_share",
                                     round(validators.answers.answered / answers, 4))

    def save(self) -> None:
        if self.last_modified:
            self.store.set_meta("last_modified_trust",
                                {host: trust.to_json() for host, trust in self.last_modified.items()})
        if self.validators:
            self.store.set_meta("host_validators", {host: v.to_json() for host, v in self.validators.items()})
        if self.bytes:
            self.store.set_meta("host_bytes", {group: mean.to_json() for group, mean in self.bytes.items()})
        if self.health:
            self.store.set_meta("host_health", {host: health.to_json() for host, health in self.health.items()})
