"""The known pages of a crawl over the state store: a bounded cache that writes only what changed.

A crawl may know millions of pages but touches them a few at a time, so only
the most recently used :data:`CACHE_PAGES` stay decoded in memory. A page is
written back (full record and planning row) only when it was marked changed,
at the next :meth:`PageBook.flush` or when it leaves the cache; both happen
before a commit, so a commit holds every change made before it.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import TYPE_CHECKING

from scrapy_costsched.pages import PageState, Summary

if TYPE_CHECKING:
    from collections.abc import Iterator

    from scrapy.statscollectors import StatsCollector

    from scrapy_costsched.storage import StateStorage

logger = logging.getLogger(__name__)

#: Decoded pages kept in memory (about 3.5 KB each).
CACHE_PAGES = 2048


class PageBook:
    """Pages by request fingerprint: read through the cache, changes written back once."""

    def __init__(self, store: StateStorage, stats: StatsCollector, capacity: int = CACHE_PAGES) -> None:
        self.store = store
        self.stats = stats
        self.capacity = capacity
        self._cache: OrderedDict[str, PageState] = OrderedDict()
        self._dirty: set[str] = set()

    def get(self, key: str) -> PageState | None:
        page = self._cache.get(key)
        if page is not None:
            self._cache.move_to_end(key)
            return page
        data = self.store.get_page(key)
        if data is None:
            return None
        try:
            page = PageState.from_json(data)
        except ValueError as exc:
            logger.error("costsched: skipping unreadable stored page %s: %s", key, exc)
            self.stats.inc_value("costsched/storage/unreadable_page")
            return None
        self._insert(key, page)
        return page

    def changed(self, key: str, page: PageState) -> None:
        """*page* (new or modified) must be written back."""
        self._insert(key, page)
        self._dirty.add(key)

    def _insert(self, key: str, page: PageState) -> None:
        self._cache[key] = page
        self._cache.move_to_end(key)
        while len(self._cache) > self.capacity:
            old_key, old_page = self._cache.popitem(last=False)
            if old_key in self._dirty:
                self._write(old_key, old_page)

    def _write(self, key: str, page: PageState) -> None:
        self._dirty.discard(key)
        self.store.put_page(key, page.to_json(), page.summary())

    def flush(self) -> None:
        """Write every changed page (before a commit)."""
        for key in list(self._dirty):
            self._write(key, self._cache[key])

    def summaries(self) -> Iterator[tuple[str, Summary]]:
        """Every page as planning sees it, read from the store's compact rows (flush first)."""
        self.flush()
        for key, row in self.store.iter_summaries():
            yield key, Summary.from_row(row)
