"""Planning a large crawl without reading every known page in full: bounds computed where the pages are stored.

A plan needs only the head of the ranking (:func:`~.model.scoring.rank_head`), and most known
pages are bounded below its threshold and never scored; but reading every page's summary into
Python to bound it was most of what a plan cost at scale (``bench/crawl_scale.py``, 200,000 known
pages: the read alone 1.0 s of 3.9 s under the profiler, building a candidate of each page most of
the rest). Here a store that answers SQL (:class:`~.storage.SummaryQueries`) computes the part of
each page's bound that its own fields decide, its value times the bound on its freshness gain
(:func:`~.model.scoring.rank_head`), in the scan that reads each page's key and profile for the
page index (:meth:`~.pagebook.PageBook.index`); the cost it is divided by is known per group.
Only the pages whose bound reaches the threshold the budget asks for, and those the bound does
not cover (never fetched, waiting out a backoff, ...), are
read in full and ranked. Every page left unread indexes below that threshold, so the part of
their ranking at or above it is the head that ranking every page would give. The pages left
unread are read when a leftover round walks past the head, if one does.
"""

from __future__ import annotations

import math
import sys
from array import array
from dataclasses import dataclass, field
from operator import itemgetter
from typing import TYPE_CHECKING, Any, NamedTuple

from scrapy_costsched.learner import DAY
from scrapy_costsched.model.discovery import expected_new
from scrapy_costsched.model.scoring import (
    BOUND_MARGIN,
    CENTRE_WEIGHT,
    HEAD_FACTOR,
    HEAD_MIN_PAGES,
    SIDE_WEIGHT,
    Candidate,
    Ranked,
    head_above,
    rank_head,
)
from scrapy_costsched.pages import Summary

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

    from scrapy_costsched.model.discovery import LinkPrior
    from scrapy_costsched.pagebook import PageBook
    from scrapy_costsched.storage import SummaryQueries

#: Each field of a summary as the column of the store's plan table that holds it.
_COLUMN = {name: f"c{position}" for position, name in enumerate(Summary._fields)}


@dataclass
class Unread:
    """Pages the bound covers that are not read yet: their keys, the rowids of their summaries when the plan read
    the bounds, and their bounds; and the mean cost the bounds were divided by."""

    keys: list[str] = field(default_factory=list)
    rowids: array[int] = field(default_factory=lambda: array("q"))
    bounds: array[float] = field(default_factory=lambda: array("d"))
    mean_cost: float = 1.0

    def __len__(self) -> int:
        return len(self.keys)

    def within(self, low: float, high: float) -> Unread:
        """The pages whose bounds are at least *low* and below *high*."""
        inside = [position for position, bound in enumerate(self.bounds) if low <= bound < high]
        return Unread([self.keys[p] for p in inside], array("q", [self.rowids[p] for p in inside]),
                      array("d", [self.bounds[p] for p in inside]), self.mean_cost)


@dataclass
class Preselection:
    """The pages a plan read in full (*candidates*), the head of their ranking and the rest of it (*ranked*:
    the head ranking every known page gives), and the pages left unread, all below that head."""

    candidates: list[Candidate]
    ranked: Ranked
    unread: Unread


@dataclass(frozen=True)
class BoundSql:
    """An SQL expression over a summary row: the page's value times the bound of its freshness gain
    (:func:`~.model.scoring.rank_head`), ``NULL`` for a page the bound does not cover (*covers* is ``false``);
    *hub*, four more: a hub's last visit and its link stats (``NULL`` for a page that is not one); and their
    parameters."""

    expression: str
    covers: str
    hub: str
    args: dict[str, Any]


class HubTerms(NamedTuple):
    """What the new pages a hub of a group reveals are worth (:func:`~.model.scoring.score`): the prior its new
    links a day are read with, a new page's gain (value × U) and its price."""

    prior: LinkPrior
    gain: float
    cost: float


def hub_bound(partial: float, cost: float, elapsed: float, links: Any, days: Any, cap: Any, terms: HubTerms) -> float:
    """The bound of a hub's index, from *partial* (its value times the bound of its own gain), the least *cost*
    of its visit, the days since its last visit (*elapsed*) and its link stats (:class:`~.discovery.NewLinkStats`'
    faded new *links* and *days*, and its *cap*, ``None`` for none), as SQL read them.

    The index of the bundle of a visit and the F new pages it is expected to reveal,
    ``(gain + F·new gain) / (cost + F·new cost)`` with ``F = min(rate·elapsed, cap)``, is increasing in the
    visit's gain and decreasing in its cost, so at most that of the bundle with the bound of the one and the
    floor of the other; and a weighted mean of the visit's own index and a new page's, so at most the larger of
    that and the visit's own bound for any F. Link stats that are not numbers are priced as a page, as planning
    prices them; a cap that is not a positive number is taken for none (a looser bound, still a bound).
    """
    own = partial / cost
    if type(links) not in (int, float) or type(days) not in (int, float) or not links >= 0.0 <= days:
        return own
    found = expected_new(terms.prior.rate(links, days), elapsed, cap if type(cap) in (int, float) and cap > 0 else math.inf)
    return max(own, (partial + found * terms.gain) / (cost + found * terms.cost)) if found > 0.0 else own


def bound_sql(*, now: float, cycle: float, objective: str, tiers: Mapping[str, float], default_value: float,
              depth_limit: float, json_functions: bool = True) -> BoundSql:
    """The bound of pages visited before *now* with a rate estimate, a stored template and the plan's other fields
    plain (no backoff, not unlinked, within *depth_limit*), as :func:`~.model.scoring.rank_head` bounds
    them: ``min(1/r, r·(t + c)²/2)`` (or ``min(1, (r·(t + c))²/2)`` for the ``changes`` objective), at the 90%
    interval's ends too where the estimate has one, weighed as its nodes are. (A looser bound in one ``min``,
    ``min(1/a, b·(t + c)²/2)`` over the interval, took half the SQL's time, but the benchmark's plan then found
    too few pages above its threshold and read four times as many again.) Strikes only lower a page's value, so
    its bound holds for it. A hub's link stats are read from its JSON text, and without SQLite's JSON functions
    (*json_functions*) hubs are not covered."""
    c = _COLUMN
    args: dict[str, Any] = {"now": now, "cycle": cycle, "depth_limit": depth_limit, "default_value": default_value,
                            "largest": sys.float_info.max}
    age = f"((:now - {c['last_seen']}) / {DAY!r} + :cycle)"  # in days, a cycle on: as candidates and rank_head count it
    reach = f"{age} * {age} * 0.5"

    def number(column: str, low: str = "0") -> str:  # a text compares above every number in SQL
        return f"{column} > {low} AND {column} <= :largest"

    rate, low, high, value, cost = c["rate"], c["rate_low"], c["rate_high"], c["value"], c["cost"]

    def node(rate: str) -> str:
        return f"min(1.0, {rate} * {rate} * {reach})" if objective == "changes" else \
            f"min(1.0 / {rate}, {rate} * {reach})"

    gain = (f"CASE WHEN {low} IS NULL AND {high} IS NULL THEN {node(rate)} WHEN {number(low)} AND {number(high, low)} "
            f"THEN {SIDE_WEIGHT!r} * ({node(low)} + {node(high)}) + {CENTRE_WEIGHT!r} * {node(rate)} END")
    for position, (tier, weight) in enumerate(tiers.items()):
        args[f"tier{position}"], args[f"weight{position}"] = tier, weight
    named = "".join(f"WHEN :tier{position} THEN :weight{position} " for position in range(len(tiers)))
    page_value = f"CASE {value} {named}ELSE CASE WHEN {number(value)} THEN {value} ELSE :default_value END END"
    covered = [
        *([] if json_functions else ["json IS NULL"]),
        f"n = {len(Summary._fields)}", f"{c['has_template']} = 1", f"{c['not_before']} IS NULL",
        f"{c['unlinked']} IS NULL", f"({c['depth']} IS NULL OR {c['depth']} <= :depth_limit)",
        f"{c['last_seen']} < :now", number(rate), f"({cost} IS NULL OR {number(cost)})",
    ]
    covers = " AND ".join(covered)
    links = f"$[{Summary._fields.index('links')}]"  # NewLinkStats.to_json: links, days, most, saturated
    hub = (f"CASE WHEN json IS NOT NULL THEN {c['last_seen']} END, json_extract(json, '{links}[0]'), "
           f"json_extract(json, '{links}[1]'), "
           f"CASE json_extract(json, '{links}[3]') WHEN 1 THEN json_extract(json, '{links}[2]') END"
           if json_functions else "NULL, NULL, NULL, NULL")
    return BoundSql(f"CASE WHEN {covers} THEN ({page_value}) * ({gain}) END", covers, hub, args)


def preselect(store: SummaryQueries, pages: PageBook, bound: BoundSql, need: float, *,
              group_cost: Callable[[str, float | None], float | None], hub_terms: Callable[[str], HubTerms],
              candidates_of: Callable[[Iterable[tuple[str, Sequence[Any]]]], list[Candidate]], objective: str,
              cycle: float) -> Preselection | None:
    """Index every known page of *store*, then read and rank as few of them as give the head of the ranking that
    covers *need*; ``None`` where the bound covers at most half the pages (read every page then).

    A page that links out is a hub, priced with the new pages it may reveal (:func:`hub_bound`, from its group's
    *hub_terms*). Where the bound covers few pages (most never fetched, say), reading the rest by rowid after the
    scan that bounds them takes longer than reading them all at once: a count of the pages covered, by group, in
    SQL (about a tenth of a second at 200,000 pages) decides first.

    A page's bound is *bound*'s expression divided by its planned cost, its own override or at least its group's
    (*group_cost* of the group and the least size of its own a page of it has, for byte billing; ``None`` where
    the bound does not cover the group's pages); *candidates_of* makes the candidates of summaries. The first
    read takes the pages whose bounds reach the threshold :func:`~.model.scoring.rank_head` would start from;
    when their head above it does not cover *need*, four times as many are read, and so on.
    """
    pages.flush()
    floors: dict[str, float | None] = {}
    size = _COLUMN["full_bytes"]
    by_group = list(store.scan_plan(f"{_COLUMN['group']}, count(*), min(CASE WHEN {size} >= 0 AND {size} <= :largest "
                                    f"THEN {size} END)", bound.args, f"WHERE {bound.covers} GROUP BY {_COLUMN['group']}"))
    for group, _, least_bytes in by_group:
        floors[group] = group_cost(group, least_bytes)
    (known,) = next(store.scan_plan("count(*)", {}))
    if 2 * sum(count for group, count, _ in by_group if floors[group] is not None) <= known:
        return None
    rows = list(store.scan_plan(f"key, rowid, {bound.expression}, {_PROFILE_COLUMNS}, {bound.hub}", bound.args))
    pages.index(rows, _PROFILE)
    covered = Unread()
    uncovered = array("q")
    costs = 0.0
    now = bound.args["now"]
    terms: dict[str, HubTerms] = {}
    # Each row: key, rowid, the bound's expression, the profile's columns (group at 4, cost at 5), and a hub's last
    # visit and link stats (at 8 to 11).
    for row in rows:
        partial = row[2]
        if partial is not None:
            cost = row[5]
            if cost is None:
                cost = floors[row[4]]  # counted above: the bound covers its page
            if cost is not None:
                if row[8] is None:
                    page_bound = partial / cost
                else:
                    group = row[4]
                    if group not in terms:
                        terms[group] = hub_terms(group)
                    page_bound = hub_bound(partial, cost, (now - row[8]) / DAY, row[9], row[10], row[11], terms[group])
                covered.keys.append(row[0])
                covered.rowids.append(row[1])
                covered.bounds.append(page_bound * BOUND_MARGIN)
                costs += cost
                continue
        uncovered.append(row[1])
    del rows
    if covered:
        covered.mean_cost = costs / len(covered)
    candidates = candidates_of(pages.reindexed(store.summaries_at(uncovered)))  # summaries stored as JSON too
    return Preselection(*rank_above(candidates, covered, need, lambda read: candidates_of(unread_summaries(store, read)),
                                    objective, cycle))


def rank_above(candidates: list[Candidate], unread: Unread, need: float, read: Callable[[Unread], list[Candidate]],
               objective: str, cycle: float) -> tuple[list[Candidate], Ranked, Unread]:
    """*candidates* and those of the *unread* pages it read (*read*), the head of their ranking that covers *need*
    and the rest of it, and the pages still unread (all below the head). It reads the unread pages whose bounds reach
    the threshold :func:`~.model.scoring.rank_head` would start from, then, while their head above it does not
    cover *need*, four times as many."""
    ascending = sorted(unread.bounds)
    count = max(HEAD_MIN_PAGES, math.ceil(HEAD_FACTOR * need / unread.mean_cost)) if need < math.inf \
        else len(ascending)
    candidates = list(candidates)
    upper = math.inf
    while True:
        threshold = ascending[-count] if count < len(ascending) else -math.inf
        candidates += read(unread.within(threshold, upper))
        if threshold == -math.inf:
            return candidates, rank_head(candidates, need, objective, cycle), Unread()
        ranked = head_above(candidates, need, threshold, objective, cycle)
        if ranked is not None:
            return candidates, ranked, unread.within(-math.inf, threshold)
        upper, count = threshold, count * 4


def unread_summaries(store: SummaryQueries, unread: Unread) -> Iterator[tuple[str, Sequence[Any]]]:
    """The summaries of the pages a plan left unread, as they are now: read by rowid (a third of the time by key,
    for a leftover round that waits for them), then by key those whose rows moved since (rewritten by an SQLite
    older than 3.24, which has no upsert)."""
    missing = set(unread.keys)
    for key, row in store.summaries_at(unread.rowids):
        if key in missing:
            missing.remove(key)
            yield key, row
    yield from store.summaries_of(list(missing))


#: The columns of a page's :class:`~.pagebook.Profile`, in its order, after the key, rowid and bound; and where
#: they are in such a row.
_PROFILE_COLUMNS = ", ".join(_COLUMN[name] for name in ("value", "group", "cost", "has_template", "unlinked"))
_PROFILE = itemgetter(3, 4, 5, 6, 7)
