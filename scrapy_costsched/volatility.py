"""Item fields that change on nearly every visit, and so make every page look changed.

A crawl timestamp (``scraped_at``) or a session token in an item changes its
hash on each visit, so each visit counts as a change and the change-rate
estimates of the whole page type go to the top. Such a field shows as a field
whose hash differs on nearly every comparison, on most pages of the type.

The rule, per page type and field: each page remembers whether the field
changed on each of its last :data:`WINDOW` comparisons (a comparison needs the
field in both the previous and the current record, see :func:`field_changes`
for pages of several items). A page *counts* once it has
:data:`MIN_COMPARISONS` of them, and is *volatile* for the field when it changed
on at least :data:`NEARLY_EVERY` of them. The field is volatile for the page
type once at least :data:`MIN_PAGES` pages count and at least :data:`MOST_PAGES`
of those are volatile.

A comparison whose answer carried the page's previous ETag (or, without ETags,
its Last-Modified date) is *vouched*: the server says the page is as it was, so
a field that changed came from somewhere else, the spider's code or the clock.
One vouched comparison lets a page count, whatever its change rate, so a
timestamp is named after the first revisit of pages rather than the second
(found trying the add-on on a recipe site that sends ETags). A host whose ETag
never moves vouches for every answer; its pages' content fields still change on
only some of them, which the page and type shares above keep apart from a
timestamp that changes on all of them.

Memory is bounded: the first :data:`MAX_PAGES` pages of a type observed are the
sample, each with at most :data:`MAX_FIELDS` fields, and only sampled pages need
to keep their first :data:`MAX_ITEMS` items' field hashes for the next visit
(:meth:`VolatileFields.wants`).
Keeping the first pages rather than the most recent ones means a crawl that
cycles through many more pages than that still sees each sampled page again; and
the pages of a type with a volatile field look changed every time, so they are
revisited soon. The window lets a page's verdict follow a spider that starts
(or stops) putting a timestamp in a field.

The verdict is read at the end of a run (:meth:`VolatileFields.report`), over every page the sample
has: read mid-run, it would rest on the pages that happened to come first, which under a budget are
those that change most.

>>> fields = VolatileFields()
>>> for visit in range(3):
...     for page in range(MIN_PAGES):
...         before = [{"price": "9.99", "scraped_at": f"day {visit - 1}"}] if visit else None
...         after = [{"price": "9.99", "scraped_at": f"day {visit}"}]
...         fields.observe("Product", f"page {page}", before, after)
>>> fields.report()
[('Product', 'scraped_at')]
>>> fields.volatile("Product")
['scraped_at']
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

#: A record as the volatile-field rule sees it: each item's hash per field (:meth:`~.records.ItemDigest.field_hashes`).
FieldRecord = list[dict[str, str]]

#: Comparisons a page needs for its verdict on a field to count.
MIN_COMPARISONS = 2
#: Share of a page's comparisons in which the field changed for the page to be volatile for it.
NEARLY_EVERY = Fraction(9, 10)
#: Pages of a type with a verdict on the field before the type gets one.
MIN_PAGES = 5
#: Share of those pages that must be volatile for the field to be volatile for the type.
MOST_PAGES = Fraction(4, 5)
#: Last comparisons a page remembers per field: 9 changes in 10 are "nearly every".
WINDOW = 10
#: Pages sampled per type.
MAX_PAGES = 200
#: Fields followed per page; more is a spider with generated field names, not a record.
MAX_FIELDS = 64
#: Items of a record whose fields are compared: the first the page yields.
MAX_ITEMS = 50

#: A page's comparisons of a field, as stored: the field stayed or changed, and the same while the page's
#: validator vouched the page was as it was.
_SAME, _CHANGED, _SAME_VOUCHED, _CHANGED_VOUCHED = "0", "1", "2", "3"
_OUTCOMES = frozenset((_SAME, _CHANGED, _SAME_VOUCHED, _CHANGED_VOUCHED))


class VolatileFields:
    """Item fields that change on nearly every visit, per page type."""

    def __init__(self) -> None:
        #: page type -> page key -> field -> the last comparisons, oldest first (see :data:`_SAME`).
        self._history: dict[str, dict[str, dict[str, str]]] = {}
        #: page type -> field -> [pages that count, of those the volatile ones]; derived from ``_history``.
        self._tally: dict[str, dict[str, list[int]]] = {}
        #: page type -> fields the records of this run had, and those :meth:`report` returned.
        self._seen: dict[str, set[str]] = {}
        self._reported: dict[str, set[str]] = {}
        #: Whether the sample or its comparisons changed since :meth:`to_state` was last asked.
        self.unsaved = False

    def observe(self, page_type: str, page_key: str, previous: FieldRecord | None,
                current: FieldRecord, vouched: bool = False) -> None:
        """Compare a page's record with its last visit's (:func:`field_changes`); *vouched* if the answer carried
        the last visit's validator (:func:`~.model.validators.validator_stayed`)."""
        pages = self._history.setdefault(page_type, {})
        fields = pages.get(page_key)
        if fields is None and len(pages) < MAX_PAGES:
            fields = pages[page_key] = {}
            self.unsaved = True
        if fields is not None and previous is not None:
            self._compare(page_type, fields, previous, current, vouched)
        self._seen.setdefault(page_type, set()).update(name for item in current for name in item)

    def report(self) -> list[tuple[str, str]]:
        """The (page type, field) pairs volatile now and not reported before by this instance (this run), among
        the fields this run's records had: a field the user has since left out of the hash is not reported."""
        fresh = []
        for page_type, names in sorted(self._seen.items()):
            reported = self._reported.setdefault(page_type, set())
            for name in sorted(names - reported):
                if self._is_volatile(page_type, name):
                    reported.add(name)
                    fresh.append((page_type, name))
        return fresh

    def sampled(self, page_type: str, page_key: str) -> bool:
        """Whether the page, once observed, is in its type's sample: only then is its record worth keeping."""
        return page_key in self._history.get(page_type, {})

    def wants(self, page_type: str, page_key: str) -> bool:
        """Whether a visit of the page is worth its field hashes: the page is in its type's sample or may join it."""
        pages = self._history.get(page_type)
        return pages is None or page_key in pages or len(pages) < MAX_PAGES

    def counts(self, page_type: str, name: str) -> tuple[int, int]:
        """Sampled pages of *page_type* volatile for field *name*, and how many have a verdict: for messages."""
        counted, volatile = self._tally.get(page_type, {}).get(name, (0, 0))
        return volatile, counted

    def volatile(self, page_type: str) -> list[str]:
        """The fields volatile for *page_type* so far, sorted."""
        return sorted(name for name in self._tally.get(page_type, {}) if self._is_volatile(page_type, name))

    def to_state(self) -> dict[str, Any]:
        """``{page type: {page key: {field: "0110"}}}``, the last comparisons oldest first; JSON as it is."""
        self.unsaved = False
        return {page_type: {key: dict(fields) for key, fields in pages.items()}
                for page_type, pages in self._history.items()}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> VolatileFields:
        """The counts :meth:`to_state` saved (anything malformed is skipped); no field counts as reported."""
        self = cls()
        for page_type, pages in state.items():
            if not isinstance(pages, dict):
                continue
            sample = self._history.setdefault(str(page_type), {})
            for key, saved in [(key, saved) for key, saved in pages.items() if isinstance(saved, dict)][:MAX_PAGES]:
                fields = sample.setdefault(str(key), {})
                for name, history in list(saved.items())[:MAX_FIELDS]:
                    if isinstance(history, str) and history and set(history) <= _OUTCOMES:
                        self._set(str(page_type), fields, str(name), history[-WINDOW:])
        self.unsaved = False
        return self

    def _compare(self, page_type: str, fields: dict[str, str], previous: FieldRecord,
                 current: FieldRecord, vouched: bool) -> None:
        """Add one comparison to each field of a sampled page that the two records let :func:`field_changes` judge."""
        same, changed = (_SAME_VOUCHED, _CHANGED_VOUCHED) if vouched else (_SAME, _CHANGED)
        for name, moved in field_changes(previous, current).items():
            if name in fields or len(fields) < MAX_FIELDS:
                self._set(page_type, fields, name, (fields.get(name, "") + (changed if moved else same))[-WINDOW:])

    def _set(self, page_type: str, fields: dict[str, str], name: str, history: str) -> None:
        """Store a page's history of one field, moving the page between the tallies as its verdict changes."""
        tally = self._tally.setdefault(page_type, {}).setdefault(name, [0, 0])
        for verdict, sign in ((_verdict(fields.get(name, "")), -1), (_verdict(history), 1)):
            if verdict is not None:
                tally[0] += sign
                tally[1] += sign * verdict
        fields[name] = history
        self.unsaved = True

    def _is_volatile(self, page_type: str, name: str) -> bool:
        counted, volatile = self._tally.get(page_type, {}).get(name, (0, 0))
        return counted >= MIN_PAGES and volatile >= MOST_PAGES * counted


def field_changes(previous: Sequence[dict[str, str]], current: Sequence[dict[str, str]]) -> dict[str, bool]:
    """Whether each field changed between two records of a page (each item's hash per field), for the fields the
    comparison can judge.

    A record of one item is compared with one of one item field by field. Otherwise a field is compared on the
    items that pair up across the records by all their other fields (the same post, the same listed product), and
    counts as changed when it changed on more than half of them: a clock in every item (a scrape time, a "3 days
    ago") changes it on all of them, a price that moved on a few does not; a field no item pairs for is not judged
    (while a clock changes every item, nor are the items' other fields). Where no field can be judged that way (two
    clocks in every item), each item pairs with the one of the last record it is most like, if it agrees with it on
    at least half of its fields. Found in a trial on a forum, whose thread pages yield a post item each and show
    "N days ago" in every post: with pages of one item compared only, the field made every page a change a day and
    was never named.

    >>> field_changes([{"id": "1", "at": "a"}], [{"id": "2", "at": "b"}])
    {'id': True, 'at': True}
    >>> before = [{"post": str(n), "ago": "2 days", "text": str(n)} for n in range(4)]
    >>> after = [{**item, "ago": "3 days"} for item in before] + [{"post": "4", "ago": "now", "text": "4"}]
    >>> field_changes(before, after)
    {'ago': True}
    >>> field_changes(before, [{**before[0], "text": "edited"}, *before[1:]])
    {'ago': False, 'post': False, 'text': False}
    >>> field_changes([{**item, "at": "9:00"} for item in before], [{**item, "at": "9:05"} for item in after])
    {'ago': True, 'at': True, 'post': False, 'text': False}
    """
    if len(previous) == 1 and len(current) == 1:
        before, after = previous[0], current[0]
        return {name: before[name] != value for name, value in after.items() if name in before}
    return _changes_by_other_fields(previous, current) or _changes_of_likest(previous, current)


def _changes_by_other_fields(previous: Sequence[dict[str, str]], current: Sequence[dict[str, str]]) -> dict[str, bool]:
    """:func:`field_changes` on the items that pair up by all their fields but the one judged."""
    earlier = [sorted(item.items()) for item in previous]
    later = [sorted(item.items()) for item in current]
    changes = {}
    for name in sorted({name for item in current for name in item}):
        values_by_others: dict[tuple[tuple[str, str], ...], set[str]] = {}
        for pairs in earlier:
            others, value = _split(pairs, name)
            if value is not None:
                values_by_others.setdefault(others, set()).add(value)
        paired = moved = 0
        for pairs in later:
            others, value = _split(pairs, name)
            values = values_by_others.get(others) if value is not None else None
            if values is not None:
                paired += 1
                moved += value not in values
        if paired:
            changes[name] = 2 * moved > paired
    return changes


def _split(pairs: list[tuple[str, str]], name: str) -> tuple[tuple[tuple[str, str], ...], str | None]:
    """An item's (field, hash) pairs other than *name*'s, and *name*'s hash (``None`` if it has no such field)."""
    return tuple(pair for pair in pairs if pair[0] != name), next((value for key, value in pairs if key == name), None)


def _changes_of_likest(previous: Sequence[dict[str, str]], current: Sequence[dict[str, str]]) -> dict[str, bool]:
    """:func:`field_changes` on the items that pair with the item of the last record they are most like (the only
    one that agrees with them on the most fields, at least half of theirs)."""
    pairs = []
    for item in current:
        best, best_score, tied = None, 0, False
        for old in previous:
            score = sum(old.get(name) == value for name, value in item.items())
            if score > best_score:
                best, best_score, tied = old, score, False
            elif score == best_score:
                tied = True
        if best is not None and not tied and 2 * best_score >= len(item):
            pairs.append((best, item))
    changes = {}
    for name in sorted({name for item in current for name in item}):
        judged = [old[name] != new[name] for old, new in pairs if name in old and name in new]
        if judged:
            changes[name] = 2 * sum(judged) > len(judged)
    return changes


def changed_fields(previous: FieldRecord | None, current: FieldRecord | None) -> list[str]:
    """The fields that changed between two records of a page (:func:`field_changes`), sorted (none if either is
    unknown).

    >>> changed_fields([{"price": "a", "at": "b"}], [{"price": "a", "at": "c", "new": "d"}]), changed_fields(None, [])
    (['at'], [])
    """
    if not previous or not current:
        return []
    return sorted(name for name, moved in field_changes(previous, current).items() if moved)


def _verdict(history: str) -> int | None:
    """1 if a page with these comparisons is volatile for the field, 0 if not, ``None`` before it counts."""
    if len(history) < MIN_COMPARISONS and _SAME_VOUCHED not in history and _CHANGED_VOUCHED not in history:
        return None
    changed = history.count(_CHANGED) + history.count(_CHANGED_VOUCHED)
    return int(changed >= NEARLY_EVERY * len(history))
