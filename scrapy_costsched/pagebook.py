"""The known pages of a crawl over the state store: a bounded cache that writes only what changed.

A crawl may know millions of pages but touches them a few at a time, so only
the most recently used :data:`CACHE_PAGES` stay decoded in memory. A page is
written back (full record and planning row) only when it was marked changed,
at the next :meth:`PageBook.flush` or when it leaves the cache; both happen
before a commit, so a commit holds every change made before it.

Planning reads every page's summary once (:meth:`PageBook.summaries`); the
book keeps from it, for every known page, the little that decides whether a
page is known and whether a sighting would change how planning sees it
(:class:`Profile`), so those questions cost no read of the store.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from operator import itemgetter
from typing import TYPE_CHECKING, Any, NamedTuple

from scrapy_costsched.pages import PageState, Summary

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence

    from scrapy.statscollectors import StatsCollector

    from scrapy_costsched.storage import StateStorage

logger = logging.getLogger(__name__)

#: Decoded pages kept in memory (about 3.5 KB each).
CACHE_PAGES = 2048
#: A summary row's profile fields, in :class:`Profile`'s order (and its key in ``PageBook._numbers``).
_PROFILE_FIELDS = itemgetter(2, 5, 6, 4, 14)


class Profile(NamedTuple):
    """What planning sees of a page that a sighting may change (fields of :class:`Summary`).

    Pages share equal profiles, so the index of a large crawl holds few of them, by number.
    """

    value: Any
    group: str
    cost: float | None
    has_template: bool
    unlinked: float | None

    @classmethod
    def of(cls, summary: Summary) -> Profile:
        return cls(summary.value, summary.group, summary.cost, summary.has_template, summary.unlinked)


class PageBook:
    """Pages by request fingerprint: read through the cache, changes written back once."""

    def __init__(self, store: StateStorage, stats: StatsCollector, capacity: int = CACHE_PAGES) -> None:
        self.store = store
        self.stats = stats
        self.capacity = capacity
        self._cache: OrderedDict[str, PageState] = OrderedDict()
        self._dirty: set[str] = set()
        # Every known page's profile number, once summaries() read them all; kept current by _write.
        # Numbers rather than the profiles: a dict of strings and ints is not tracked by the cyclic
        # garbage collector, which would otherwise scan every entry at each full collection.
        self._index: dict[str, int] | None = None
        self._profiles: list[Profile] = []
        self._numbers: dict[tuple[Any, str, float | None, bool, float | None], int] = {}

    def get(self, key: str) -> PageState | None:
        page = self._cache.get(key)
        if page is not None:
            self._cache.move_to_end(key)
            return page
        if self._index is not None and key not in self._index:
            return None  # the index holds every stored page
        data = self.store.get_page(key)
        return None if data is None else self._decode(key, data)

    def prefetch(self, keys: list[str]) -> None:
        """Read the pages of *keys* that are not in the cache in one go (they are about to be used)."""
        missing = [key for key in keys if key not in self._cache and (self._index is None or key in self._index)]
        if len(missing) < 2:
            return
        for key, data in self.store.get_pages(missing):
            try:
                self._insert(key, PageState.from_json(data))
            except ValueError:
                continue  # reported when it is read for use

    def _decode(self, key: str, data: Any) -> PageState | None:
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
        summary = page.summary()
        self.store.put_page(key, page.to_json(), summary)
        if self._index is not None:
            self._index[key] = self._number(_PROFILE_FIELDS(Summary.from_row(summary)))

    def _number(self, fields: tuple[Any, ...]) -> int:
        """The number of the profile of *fields* (:class:`Profile`'s, a new one if no page had it)."""
        try:
            number = self._numbers.get(fields)
        except TypeError:  # an unhashable stored value: a profile of its own
            number = None
        else:
            if number is not None:
                return number
            self._numbers[fields] = len(self._profiles)
        self._profiles.append(Profile(*fields))
        return len(self._profiles) - 1

    def known(self, key: str) -> bool:
        """Whether page *key* is known (stored, or new in this run); without a read once planning indexed them."""
        if self._index is None:
            return self.get(key) is not None
        return key in self._cache or key in self._index

    def profile(self, key: str) -> Profile | None:
        """What planning sees of page *key* that a sighting may change; ``None`` if it is unknown or not
        indexed yet (then read the page)."""
        page = self._cache.get(key)
        if page is not None:
            return Profile.of(Summary.from_row(page.summary()))
        number = self._index.get(key) if self._index is not None else None
        return self._profiles[number] if number is not None else None

    def groups(self) -> Iterator[tuple[str, str]]:
        """Every known page's key and group as last written (after :meth:`summaries`)."""
        assert self._index is not None, "the known pages are not indexed"
        profiles = self._profiles
        for key, number in self._index.items():
            yield key, profiles[number].group

    @property
    def indexed(self) -> bool:
        return self._index is not None

    def flush(self) -> None:
        """Write every changed page (before a commit)."""
        for key in list(self._dirty):
            self._write(key, self._cache[key])

    def summaries_of(self, keys: Iterable[str]) -> Iterator[tuple[str, Summary]]:
        """The pages of *keys* that are known, as :meth:`summaries` would show them."""
        for key in keys:
            page = self.get(key)
            if page is not None:
                yield key, Summary.from_row(page.summary())

    def summaries(self) -> Iterator[tuple[str, Sequence[Any]]]:
        """Every page as planning sees it, read from the store's compact rows (flush first): the fields
        of :class:`Summary` in order, as the store's tuple or list (a named tuple per page costs more than the rest
        of the read); ``Summary._make`` gives them their names.

        Read to the end, it indexes every known page (:meth:`known`, :meth:`profile`).
        """
        self.flush()
        index: dict[str, int] = {}
        yield from self._indexed(self.store.iter_summaries(), index)
        self._index = index

    def index(self, rows: Sequence[Sequence[Any]], profile_of: Callable[[Sequence[Any]], tuple[Any, ...]]) -> None:
        """Index every known page from *rows* read from the store's columns without the rest of the summaries
        (flush first; :mod:`~.preselection`): each page's key first, and :class:`Profile`'s fields (*profile_of*).
        A summary stored as JSON has no columns to read them from: :meth:`reindexed` indexes such a page again as
        it reads its summary. Made in C loops (200,000 pages in about a quarter of a second here)."""
        numbers = self._numbers
        for fields in set(map(profile_of, rows)) - numbers.keys():
            self._number(fields)
        self._index = dict(zip(map(itemgetter(0), rows), map(numbers.__getitem__, map(profile_of, rows)), strict=True))

    def reindexed(self, summaries: Iterable[tuple[str, Sequence[Any]]]) -> Iterator[tuple[str, Sequence[Any]]]:
        """*summaries* (of an index made by :meth:`index`), as :meth:`summaries` shows them, each page indexed again."""
        assert self._index is not None
        return self._indexed(summaries, self._index)

    def _indexed(self, summaries: Iterable[tuple[str, Sequence[Any]]], index: dict[str, int]
                 ) -> Iterator[tuple[str, Sequence[Any]]]:
        """*summaries*, padded to every field of :class:`Summary`, each page's profile number put in *index*."""
        number, numbers, fields = self._number, self._numbers, len(Summary._fields)
        profile_of = _PROFILE_FIELDS
        for key, stored in summaries:
            # Shorter when written by an older version: padded with the defaults.
            row = stored if len(stored) == fields else Summary.from_row(stored)
            try:
                index[key] = numbers[profile_of(row)]
            except (KeyError, TypeError):  # a profile not seen yet, or an unhashable stored value
                index[key] = number(profile_of(row))
            yield key, row
