"""What kind of page a new URL is likely to be, so it is planned as its kind before it is fetched.

A spider that tags no request with ``costsched_page_type`` shows a page's kind by its items' class at the page's
first visit, so a new URL is untyped until then, and planned at its host's prior
(:meth:`.Learner.prior_rate`): a mix of every kind on the host, weighted by pages. Two things say more, each counted
in a :class:`KindCounts`:

* Its callback. On a jobs board every page ``parse_job`` parsed yielded a ``Job``, so a job just listed is one too,
  and its kind's prior (jobs change a few times a month) prices it better than the host's (lists change several
  times a day). A new URL sent to a callback whose pages showed a kind is typed as that kind when the spider yields
  it; its first visit types it again from its items, as any page's. A CrawlSpider parses every page of its rules
  with one method (``_callback``); the rule's index in the request's meta tells them apart.
* The hub that reveals it. A hub's visit is planned with the new pages it is expected to reveal, each priced as a
  new page (:meth:`.Tracker._new_pages`), and the kinds of the new links a group of hubs yielded (as their requests
  declare them, or their callbacks show them) price the next ones: a jobs board's lists reveal jobs. So do the values
  those new pages were given (``costsched_value`` or the spider's hook), counted by value in another
  :class:`KindCounts` and priced at their mean (:meth:`KindCounts.mean`): a shop's lists reveal products its spider
  tags ``"high"``, and priced at the default value, lists ranked below known products that change about daily
  (on a trial of five shops adding 15 products a day under 30% of a full crawl, 31 of 120 new products were fetched
  within 2 days, and 103 with their value).

A key (a callback, a hub group) names a kind once at least :data:`MIN_PAGES` of its pages (or links) were of it and
:data:`SHARE` of all; one whose pages are of several kinds (or yield no items: lists, hubs) names none. A run that
counted at least :data:`MIN_PAGES` for a key replaces what earlier runs counted for it (a spider whose callback
changed is followed from then on), and a run that counted fewer adds to it.

>>> kinds = KindCounts()
>>> for _ in range(MIN_PAGES):
...     kinds.observe("parse_job", "Job")
>>> kinds.kind_of("parse_job"), kinds.kind_of("parse_list")
('Job', None)
>>> kinds.observe("parse_job", "default")
>>> kinds.kind_of("parse_job") is None  # one page in six yielded no job
True
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from scrapy_costsched.pages import UNTYPED

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from scrapy import Request, Spider

__all__ = ["MIN_PAGES", "SHARE", "KindCounts", "callback_of", "request_callback"]

#: Pages (or links) of one kind a key must have counted before it names that kind.
MIN_PAGES = 5
#: The share of a key's pages that must be of that kind.
SHARE = 0.9


def callback_of(name: str | None, meta: Mapping[str, Any]) -> str:
    """The name a request's callback goes by, from its method's *name* (as a stored template keeps it) and its
    *meta*: ``parse`` when it names none, and for a CrawlSpider's rule-driven requests, all parsed by
    ``_callback``, the rule's index."""
    rule = meta.get("rule")
    if name == "_callback" and type(rule) is int:
        return f"rule {rule}"
    return name or "parse"


def request_callback(request: Request, spider: Spider) -> str | None:
    """:func:`callback_of` a request about to be scheduled; ``None`` when its callback is not a method of *spider* (a
    lambda, a plain function), whose pages cannot be stored and are never counted."""
    callback = request.callback
    if callback is None:
        return callback_of(None, request.meta)
    if getattr(callback, "__self__", None) is not spider:
        return None
    return callback_of(callback.__name__, request.meta)


class KindCounts:
    """The kinds of the pages seen under each key: what earlier runs counted and what this one did."""

    def __init__(self, stored: Mapping[str, Mapping[str, int]] | None = None) -> None:
        self._stored: dict[str, Counter[str]] = {key: Counter(kinds) for key, kinds in (stored or {}).items()}
        self._run: dict[str, Counter[str]] = {}
        #: Whether a page was counted since :meth:`to_state` was last asked.
        self.unsaved = False

    @classmethod
    def from_state(cls, stored: Any) -> KindCounts:
        """As :meth:`to_state` wrote it; a malformed entry is left out (the counts come back as pages are visited)."""
        if not isinstance(stored, dict):
            return cls()
        return cls({key: {kind: count for kind, count in kinds.items()
                               if isinstance(kind, str) and type(count) is int and count > 0}
                    for key, kinds in stored.items() if isinstance(key, str) and isinstance(kinds, dict)})

    def to_state(self) -> dict[str, dict[str, int]]:
        """Every key's counts for the next run: this run's, where it saw enough of the key's pages."""
        self.unsaved = False
        return {key: dict(self._counts(key)) for key in self._stored.keys() | self._run.keys()}

    def observe(self, key: str, kind: str, count: int = 1) -> None:
        """*count* pages (or links) of *key* turned out to be of *kind* (:data:`~.pages.UNTYPED`: no items)."""
        self._run.setdefault(key, Counter())[kind] += count
        self.unsaved = True

    def mean(self, key: str, weigh: Callable[[str], float | None]) -> float | None:
        """The mean of *weigh* over the kinds of the pages (or links) of *key*, once at least :data:`MIN_PAGES` were
        counted, leaving out the kinds it weighs ``None``; ``None`` before, or where it weighs none.

        >>> values = KindCounts()
        >>> for value in ("4", "4", "4", "1", "x"):
        ...     values.observe("lists", value)
        >>> values.mean("lists", lambda kind: float(kind) if kind.isdigit() else None)
        3.25
        """
        counts = self._counts(key)
        if counts.total() < MIN_PAGES:
            return None
        weighed = [(weight, count) for kind, count in counts.items() if (weight := weigh(kind)) is not None]
        total = sum(count for _, count in weighed)
        return sum(weight * count for weight, count in weighed) / total if total else None

    def kind_of(self, key: str) -> str | None:
        """The kind a new page of *key* is, if its pages so far say so."""
        counts = self._counts(key)
        if not counts:
            return None
        kind, count = counts.most_common(1)[0]
        if kind == UNTYPED or count < MIN_PAGES or count < SHARE * counts.total():
            return None
        return kind

    def _counts(self, key: str) -> Counter[str]:
        run = self._run.get(key, Counter())
        if run.total() >= MIN_PAGES:
            return run
        return self._stored.get(key, Counter()) + run
