"""What belongs to which visit.

A visit is keyed by the request the scheduler sent for the page (meta
``costsched_visit``), never by URLs: a redirect, a retry or a downloader
middleware that rewrites the URL keeps the token, and a request the callback
chains with the page's meta is marked as a sub-request
(``costsched_subrequest``), so its response joins the visit instead of passing
for the page's own. Items are tied to their visit by the response every item
signal carries, so a pipeline that returns a new item object loses nothing.
"""

from __future__ import annotations

import secrets
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urldefrag

from scrapy.exceptions import IgnoreRequest

from scrapy_costsched.ledger import HOLD_META
from scrapy_costsched.sessions import SESSION_STEP_META

if TYPE_CHECKING:
    from scrapy.http import Response

#: Request meta keys the library sets: the page (fingerprint), the visit, and the sub-request mark.
PAGE_META = "costsched_page"
VISIT_META = "costsched_visit"
SUBREQUEST_META = "costsched_subrequest"
REASON_META = "costsched_reason"
#: Set by ConditionalRequestMiddleware: the validators it added (URL, headers, whether a verification's
#: canary), the page fetched again without validators after a 304 to a canary, and a 304 passed to the callback.
VALIDATORS_META = "costsched_validators"
REFETCH_META = "costsched_refetch"
NOT_MODIFIED_META = "costsched_not_modified"
#: Set by the scheduler on a retry, redirect or sub-request of a visit under way that it does not send (why, in
#: words): the request leaves the downloader with :exc:`AttemptRefused`, so the spider's errback hears of it.
REFUSED_META = "costsched_refused"
#: Request meta a spider sets to receive its 304s (``COSTSCHED_DELIVER_NOT_MODIFIED`` for every request).
DELIVER_META = "costsched_deliver_not_modified"
#: Every key the library sets on a request for one run's visit or session step (the ledger's reservation among
#: them): never part of a stored template, and stripped from a request a stopped run left in a disk queue
#: (``JOBDIR``).
RUN_META = frozenset({PAGE_META, VISIT_META, SUBREQUEST_META, REASON_META, HOLD_META, VALIDATORS_META, REFETCH_META,
                      NOT_MODIFIED_META, REFUSED_META, SESSION_STEP_META})


def same_resource(url: str, other: str) -> bool:
    """Whether *url* and *other* ask the server for the same thing: a fragment (``#reviews``) never leaves the
    client, and Scrapy's download handlers drop it from the response's URL too (found on a forum, whose "last post"
    links end in ``#post-N``: every such page passed for redirected and was never sent its validators)."""
    return url == other or urldefrag(url)[0] == urldefrag(other)[0]


class AttemptRefused(IgnoreRequest):
    """A retry, redirect or sub-request of a visit under way that the add-on did not send (the period's budget
    could not pay for it, or its host fell too sick for its visit to stay in the plan). It reaches the request's
    errback, as a robots.txt refusal does: RetryMiddleware already took the answer it retried."""


@dataclass
class Visit:
    """One fetch of a page, open from its response until its record is complete."""

    page_key: str
    token: int
    time: float
    pending_outputs: int = 1
    pending_items: int = 0
    item_hashes: list[str] = field(default_factory=list)
    item_keys: dict[str, str] = field(default_factory=dict)
    outlinks: set[str] = field(default_factory=set)
    linked_pages: set[str] = field(default_factory=set)
    """The fingerprints of the outlinks (kept with ``COSTSCHED_UNLINKED_PERIODS``): the pages this visit links to."""
    new_links: int = 0
    """Outlinks to pages the crawl did not know before this visit (what a hub reveals)."""
    outlinks_by_type: Counter[str | None] = field(default_factory=Counter)
    """Outlinks by the page type their request declares (``costsched_page_type``; ``None`` where none)."""
    new_link_types: set[str | None] = field(default_factory=set)
    """The declared page types of the new outlinks."""
    new_link_kinds: Counter[str] = field(default_factory=Counter)
    """The new outlinks by kind: declared, or their callback's (:mod:`.kinds`), else untyped."""
    values: list[str | float] = field(default_factory=list)
    item_types: set[str] = field(default_factory=set)
    item_fields: list[dict[str, str]] = field(default_factory=list)
    """Its first items' hashes per field (:data:`~.volatility.MAX_ITEMS`), when the page is in the volatile-field
    sample or may join it (:meth:`~.volatility.VolatileFields.wants`)."""
    field_names: set[str] = field(default_factory=set)
    """The names of the fields its items' hashes cover."""
    item_shapes: set[str] = field(default_factory=set)
    """The shapes of its items (:attr:`~.records.ItemDigest.shape`): type and hashed field names."""
    items_lost: int = 0
    """Items that left the pipelines dropped or failed, not scraped."""
    failed: bool = False
    refused: bool = False
    """Failed without being sent: refused before download (robots.txt, offsite rules, a middleware)."""
    last_modified: float | None = None
    """The response's ``Last-Modified`` (epoch seconds), if it sent a readable one."""
    modified_age: float | None = None
    """Seconds from that date to the response's ``Date`` (the server's clock), at least 0."""
    etag: str | None = None
    """The response's ``ETag`` (header form), if it sent a readable one."""
    validators_sent: dict[str, str] | None = None
    """The conditional headers ConditionalRequestMiddleware sent (name to value), answered in full."""
    canary: bool = False
    """Those headers were a verification's canary, which no honest host answers with a 304."""
    redirected: bool = False
    """The answer came from another URL than the page's (a redirect): its validators are not the page's."""
    not_modified: bool = False
    """The visit was answered 304: unchanged since the last one, nothing to compare."""

    @property
    def complete(self) -> bool:
        return self.pending_outputs <= 0 and self.pending_items <= 0

    @property
    def listed(self) -> int | None:
        """How many of the outlinks could have been new: those of the page types the new ones declare (a
        section's article links, not its links to other sections); ``None`` when none was new.

        Where every one of them was new, the list turned over since the last visit
        (:meth:`~.discovery.NewLinkStats.observe`): what slid off it was never seen.
        """
        if not self.new_links:
            return None
        return sum(self.outlinks_by_type[page_type] for page_type in self.new_link_types)


@dataclass
class _ResponseItems:
    """Items one response's callback produced that are still in the item pipelines."""

    response: Response  # held so its id() is not reused while items are in flight
    visit: Visit
    items: list[Any] = field(default_factory=list)


class VisitBook:
    """Open visits by token, and the items in flight of each."""

    def __init__(self) -> None:
        # From a random number: a request a stopped run left in a disk queue (JOBDIR) carries that run's
        # token, which this run must not take for one of its own (:meth:`issued`).
        self._first_token = self._next_token = secrets.randbits(48)
        self._open: dict[int, Visit] = {}
        self._opened_pages: set[str] = set()
        self._responses: dict[int, _ResponseItems] = {}
        self._items: dict[int, int] = {}  # id(item) -> id(response), for the objects the spider yielded

    def new_token(self) -> int:
        self._next_token += 1
        return self._next_token - 1

    def issued(self, token: Any) -> bool:
        """Whether this run gave out *token*."""
        return isinstance(token, int) and self._first_token <= token < self._next_token

    def start(self, key: str, token: int, time: float) -> Visit | None:
        """Open the visit of page *key*; ``None`` if the page was already visited in this run."""
        if key in self._opened_pages:
            return None
        self._opened_pages.add(key)
        visit = Visit(page_key=key, token=token, time=time)
        self._open[token] = visit
        return visit

    def visited(self, key: str) -> bool:
        return key in self._opened_pages

    def get(self, token: Any) -> Visit | None:
        return self._open.get(token) if isinstance(token, int) else None

    def close(self, visit: Visit) -> bool:
        """Close *visit* if it is complete and still open; ``True`` if it closed now."""
        if visit.complete and self._open.get(visit.token) is visit:
            del self._open[visit.token]
            return True
        return False

    def abandon(self, visit: Visit) -> None:
        """*visit* ends without a record (its page answered 404 or 410); the page stays visited."""
        self._open.pop(visit.token, None)

    def abandon_all(self) -> list[Visit]:
        """The run ends: visits still waiting for a sub-request or an item are incomplete."""
        visits = list(self._open.values())
        self._open.clear()
        self._responses.clear()
        self._items.clear()
        return visits

    # -- items --------------------------------------------------------------

    def item_emitted(self, visit: Visit, response: Response, item: Any) -> None:
        visit.pending_items += 1
        entry = self._responses.get(id(response))
        if entry is None:
            entry = self._responses[id(response)] = _ResponseItems(response, visit)
        entry.items.append(item)
        self._items[id(item)] = id(response)

    def pipeline_visit(self, item: Any) -> Visit | None:
        """The visit of an item a pipeline holds: the object the spider yielded, or the only item in flight."""
        response_id = self._items.get(id(item))
        if response_id is None and len(self._items) == 1:
            response_id = next(iter(self._items.values()))
        entry = self._responses.get(response_id) if response_id is not None else None
        return entry.visit if entry is not None else None

    def item_finished(self, item: Any, response: Response | None) -> Visit | None:
        """An item left the pipelines (scraped, dropped or failed); its visit, if it had one."""
        entry = self._responses.get(id(response)) if response is not None else None
        if entry is None or not entry.items:
            return None
        # The object that finished may be a pipeline's new one: then the oldest of the response's items.
        position = next((i for i, held in enumerate(entry.items) if held is item), 0)
        self._items.pop(id(entry.items.pop(position)), None)
        if not entry.items:
            del self._responses[id(response)]
        entry.visit.pending_items -= 1
        return entry.visit
