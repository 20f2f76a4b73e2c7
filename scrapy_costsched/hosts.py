"""Per-host state: what each host's signals have earned (today its Last-Modified dates).

Kept in the state's meta (``meta:last_modified_trust``) and saved at every safe
point; an unreadable entry restarts that host's audits only.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy_costsched.model.trust import LastModifiedTrust

if TYPE_CHECKING:
    from scrapy.statscollectors import StatsCollector

    from scrapy_costsched.storage import StateStorage

logger = logging.getLogger(__name__)


class HostBook:
    """The hosts a crawl has seen and what their signals are worth."""

    def __init__(self, store: StateStorage, stats: StatsCollector) -> None:
        self.store = store
        self.stats = stats
        self.last_modified: dict[str, LastModifiedTrust] = self._load(store.get_meta("last_modified_trust") or {})

    def _load(self, stored: Any) -> dict[str, LastModifiedTrust]:
        trust = {}
        for host, counts in (stored.items() if isinstance(stored, dict) else ()):
            try:
                trust[host] = LastModifiedTrust.from_json(counts)
            except ValueError as exc:  # that host starts its audits again; the others keep theirs
                logger.warning("costsched: ignoring the stored Last-Modified audits of %s: %s", host, exc)
                self.stats.inc_value("costsched/storage/unreadable_trust")
        return trust

    def last_modified_trust(self, host: str) -> LastModifiedTrust:
        return self.last_modified.setdefault(host, LastModifiedTrust())

    def save(self) -> None:
        if self.last_modified:
            self.store.set_meta("last_modified_trust",
                                {host: trust.to_json() for host, trust in self.last_modified.items()})
