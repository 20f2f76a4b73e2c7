"""Exact metrics of a policy from the simulated change times.

A copy is fresh from the download that made it until the page's next change
(Cho & Garcia-Molina, SIGMOD 2000); its age is the time since that first
change.  Both are integrated exactly over the scored window and weighted by
page value.  A visit answered by a 304 keeps the copy, which stays fresh only
when the page really was unchanged: a lying validator leaves it stale.

- *changes detected*: visits that saw a change; *missed changes*: changes in
  the window that no visit captured (overwritten before a visit, or pending
  at the end); *no-change fetches*: visits to an unchanged page.
- *harmonic staleness* (Kolobov et al., NeurIPS 2019): each download that
  captures n changes of the window costs H(n) = 1 + 1/2 + ... + 1/n, so is the
  end of the window for the changes still pending; divided by the
  value-weighted page-days.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .workloads import Page

__all__ = ["Metrics", "Outcome", "Scorer", "harmonic", "page_metrics"]

_EULER_GAMMA = 0.5772156649015329


def harmonic(n: int) -> float:
    """H(n) = 1 + 1/2 + ... + 1/n (0 for n = 0).

    >>> harmonic(0), harmonic(1), harmonic(3)
    (0.0, 1.0, 1.8333333333333333)
    """
    if n < 50:
        return math.fsum(1.0 / k for k in range(1, n + 1))
    return math.log(n) + _EULER_GAMMA + 1.0 / (2 * n) - 1.0 / (12 * n * n)


@dataclass(frozen=True)
class Outcome:
    """What one visit found: *status* 200 or 304, its cost, and whether the crawler saw a change.

    *first* marks the first download of a new page (a discovery, not a change);
    *modified*, on a 200 from a host that sends Last-Modified, the time of the
    page's latest change.
    """

    status: int
    cost: float
    changed: bool
    truly_changed: bool
    first: bool = False
    modified: float | None = None


@dataclass
class Metrics:
    """Totals of one policy over the scored window (see the module docstring)."""

    freshness: float = 0.0
    age: float = 0.0
    harmonic_staleness: float = 0.0
    changes_detected: int = 0
    value_changes_detected: float = 0.0
    missed_changes: int = 0
    no_change_fetches: int = 0
    false_not_modified: int = 0
    visits: int = 0
    discoveries: int = 0
    cost: float = 0.0
    never_visited: int = 0
    pages: int = 0
    freshness_by_kind: dict[str, float] = field(default_factory=dict)
    """Freshness of each kind of page (``poisson``, ``bursty``, ...) and of pages on hosts that lie."""

    @property
    def cost_per_change(self) -> float:
        return self.cost / self.changes_detected if self.changes_detected else math.inf


class Scorer:
    """Tracks every page's copy for one policy and integrates the metrics over [start, end).

    Call :meth:`visit` for each visit in time order and :meth:`finish` once.
    """

    def __init__(self, pages: Sequence[Page], start: float, end: float) -> None:
        if not start < end:
            raise ValueError("the scored window must not be empty")
        self.pages = pages
        self.start, self.end = start, end
        n = len(pages)
        #: Time of the download the copy comes from (None: no copy yet) and the number of changes before it.
        self.copied_at: list[float | None] = [p.last_visit for p in pages]
        self.copied_changes = [0 if p.last_visit is None else bisect_right(p.changes, p.last_visit) for p in pages]
        self.seen = [False] * n
        self._fresh = self._age = self._harmonic = self._weight_time = 0.0
        self._page_fresh = [0.0] * n
        self.totals = Metrics()

    def outcome(self, i: int, time: float, validators: bool) -> Outcome:
        """What a visit to page *i* at *time* gets, when conditional requests are sent if *validators*."""
        page = self.pages[i]
        modified = page.modified_at(time)
        if self.copied_at[i] is None:
            return Outcome(200, page.cost, changed=False, truly_changed=False, first=True, modified=modified)
        truly = bisect_right(page.changes, time) > self.copied_changes[i]
        if validators and page.revalidation_cost is not None and (not truly or page.lies):
            return Outcome(304, page.revalidation_cost, changed=False, truly_changed=truly)
        return Outcome(200, page.cost, changed=truly, truly_changed=truly, modified=modified)

    def record(self, i: int, time: float, outcome: Outcome) -> None:
        """Account for a visit to page *i* at *time* with *outcome* (visits must come in time order)."""
        page = self.pages[i]
        totals = self.totals
        scored = self.start <= time < self.end
        if scored:
            self.seen[i] = True
            totals.visits += 1
            totals.cost += outcome.cost
            if outcome.first:
                totals.discoveries += 1
            elif outcome.changed:
                totals.changes_detected += 1
                totals.value_changes_detected += page.value
            elif not outcome.truly_changed:
                totals.no_change_fetches += 1
            else:
                totals.false_not_modified += 1
        if outcome.status == 304 and outcome.truly_changed:
            return  # the copy stays as it was
        self._close(i, time)
        self.copied_at[i] = time
        self.copied_changes[i] = bisect_right(page.changes, time)

    def _close(self, i: int, time: float) -> None:
        """Integrate page *i*'s copy from its download until *time*, and charge the changes it missed."""
        page = self.pages[i]
        copied = self.copied_at[i]
        a = page.birth if copied is None else copied
        first_change = page.birth if copied is None else (
            page.changes[self.copied_changes[i]] if self.copied_changes[i] < len(page.changes) else math.inf)
        lo, hi = max(a, self.start), min(time, self.end)
        if hi > lo:
            fresh = page.value * max(0.0, min(first_change, hi) - lo)
            self._fresh += fresh
            self._page_fresh[i] += fresh
            s = max(first_change, lo)
            if hi > s:
                self._age += page.value * 0.5 * ((hi - first_change) ** 2 - (s - first_change) ** 2)
        if copied is None or time < self.start:
            return
        # Changes of the window since the copy: the last one is captured (unless this is the window's end).
        window_changes = bisect_right(page.changes, min(time, self.end)) - bisect_right(
            page.changes, max(copied, self.start))
        if window_changes:
            self._harmonic += page.value * harmonic(window_changes)
            self.totals.missed_changes += window_changes - (1 if time < self.end else 0)

    def finish(self) -> Metrics:
        """Close every copy at the end of the window and return the totals."""
        totals = self.totals
        kinds: dict[str, list[float]] = {}
        for i, page in enumerate(self.pages):
            alive = self.end - max(page.birth, self.start)
            if alive <= 0.0:
                continue
            self._close(i, self.end)
            self._weight_time += page.value * alive
            totals.pages += 1
            totals.never_visited += not self.seen[i]
            for kind in (page.kind, "lying-host") if page.lies else (page.kind,):
                sums = kinds.setdefault(kind, [0.0, 0.0])
                sums[0] += self._page_fresh[i]
                sums[1] += page.value * alive
        if len(kinds) > 1:
            totals.freshness_by_kind = {k: f / w for k, (f, w) in sorted(kinds.items()) if w > 0.0}
        if self._weight_time > 0.0:
            totals.freshness = self._fresh / self._weight_time
            totals.age = self._age / self._weight_time
            totals.harmonic_staleness = self._harmonic / self._weight_time
        return totals


def page_metrics(page: Page, visits: Sequence[float], start: float, end: float, validators: bool = False) -> Metrics:
    """Metrics of one page visited at *visits* (times), scored over [start, end).

    A page whose copy dates from time 0, changing at times 1 and 3, visited at 2
    and scored over [0, 4): fresh during [0, 1) and [2, 3), age 1/2 + 1/2.

    >>> from array import array
    >>> from .workloads import Page
    >>> m = page_metrics(Page("a", 1.0, 1.0, 0.5, array("d", [1.0, 3.0])), [2.0], 0.0, 4.0)
    >>> m.freshness, m.age, m.changes_detected, m.missed_changes
    (0.5, 0.25, 1, 1)
    """
    scorer = Scorer([page], start, end)
    for time in visits:
        scorer.record(0, time, scorer.outcome(0, time, validators))
    return scorer.finish()
