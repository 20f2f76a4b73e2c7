"""What ``scrapy costsched-report`` shows: where each period's budget went and what it found, read from a state.

The seed article argues with one metric, the cost per detected change, read per site and per page
type next to the fetches that found no change; :func:`build_report` gathers it from the period
accounts (:mod:`~scrapy_costsched.accounts`), the ledger, the host book and the pages. Renderers
(:mod:`.terminal`, :mod:`.html`) and ``--json`` (:meth:`Report.to_json`) only format it.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy_costsched.accounts import NO_CHANGE, PeriodAccounts, stored_periods
from scrapy_costsched.learner import DAY
from scrapy_costsched.ledger import Ledger
from scrapy_costsched.model import expected_freshness, grid_allocation, p_changed
from scrapy_costsched.model.discovery import expected_new
from scrapy_costsched.model.planning import Plan, leads_to_new_pages, make_plan
from scrapy_costsched.pages import PageState

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from scrapy_costsched.hosts import HostBook
    from scrapy_costsched.model.scoring import Candidate
    from scrapy_costsched.storage import StateStorage
    from scrapy_costsched.tracker import Tracker

#: Pages listed among those whose no-change fetches cost most.
WASTEFUL_PAGES = 10
#: A period's spend its accounts miss by less than this share of it is the sums' rounding, not a run that never closed.
UNATTRIBUTED_NOISE = 1e-9
#: Budgets, as shares of what a shadow period spent, at which the report prices what the optimum keeps.
SHADOW_SHARES = (0.25, 0.5, 0.75)
#: Pages of the next plan's head the report lists.
NEXT_PLAN_PAGES = 20
#: Rates kept per page type for the distribution chart (an even sample of the sorted rates beyond that).
RATE_SAMPLE = 500


def iso(epoch: float | None) -> str | None:
    """An epoch second as ISO 8601 in UTC, to the second."""
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, tz=timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass
class Figures:
    """Visits and their outcomes summed over a scope (a period, a host, a page type).

    *no_change* counts the fetches that found the page as it was: answered in full and unchanged,
    or 304 Not Modified; *no_change_share* is their share of the fetches that could compare
    (changed or not); *cost_per_change* is all that was spent over the changes detected. The
    outcomes add up to *visits*; *refused* counts the pages' requests refused before download,
    which are none.
    """

    visits: int = 0
    by_reason: dict[str, int] = field(default_factory=dict)
    attempts: int = 0
    spent: float = 0.0
    new: int = 0
    rebaselined: int = 0
    changed: int = 0
    unchanged: int = 0
    not_modified: int = 0
    failed: int = 0
    refused: int = 0
    cut_short: int = 0
    gone: int = 0
    redirected: int = 0
    no_change: int = 0
    no_change_cost: float = 0.0
    no_change_share: float | None = None
    not_modified_share: float | None = None
    cost_per_change: float | None = None

    @classmethod
    def of(cls, groups: Iterable[Mapping[str, float]]) -> Figures:
        total: defaultdict[str, float] = defaultdict(float)
        for counters in groups:
            for name, amount in counters.items():
                total[name] += amount
        figures = cls(
            visits=round(total["visits"]),
            by_reason={name.removeprefix("visits/"): round(amount) for name, amount in sorted(total.items())
                       if name.startswith("visits/")},
            attempts=round(total["attempts"]), spent=total["spent"],
            new=round(total["baseline"]), rebaselined=round(total["rebaseline"]), changed=round(total["changed"]),
            unchanged=round(total["unchanged"]), not_modified=round(total["not_modified"]),
            failed=round(total["failed"] + total["empty"]), refused=round(total["refused"]),
            cut_short=round(total["cut_short"]), gone=round(total["not_found"] + total["gone"]),
            redirected=round(total["redirected"]),
            no_change=round(sum(total[name] for name in NO_CHANGE)),
            no_change_cost=sum(total[f"{name}/cost"] for name in NO_CHANGE),
        )
        compared = figures.no_change + figures.changed
        figures.no_change_share = figures.no_change / compared if compared else None
        answered = compared + figures.new + figures.rebaselined
        figures.not_modified_share = figures.not_modified / answered if answered else None
        figures.cost_per_change = figures.spent / figures.changed if figures.changed else None
        return figures


@dataclass
class PeriodRow:
    """One budget period: its budget (``None`` in shadow mode), its runs' spend and what it bought.

    *spent* is the ledger's less what a change of billing unit or period length *carried* into it (the books'
    own when a later change of terms superseded them); *shadow_spent* is what of it runs without a budget spent;
    *unattributed* what of it no host or page type accounts for: what runs that never closed (``kill -9``, an
    out-of-memory kill) had drawn from the ledger for visits their accounts had not booked yet.
    """

    period: int
    start: str | None
    seconds: float
    budget: float | None
    spent: float
    carried: float
    shadow_spent: float
    shadow: bool
    runs: int
    figures: Figures
    unattributed: float = 0.0

    @property
    def label(self) -> str:
        """Its start: the date, and the time of day for periods shorter than a day."""
        start = self.start or str(self.period)
        return start[:10] if self.seconds >= DAY else start[:16].replace("T", " ")


@dataclass
class Rates:
    """Estimated change rates (per day) of a set of pages: median and the 10th and 90th percentiles."""

    pages: int = 0
    median: float | None = None
    p10: float | None = None
    p90: float | None = None

    @classmethod
    def of(cls, rates: list[float]) -> Rates:
        if not rates:
            return cls()
        if len(rates) == 1:
            return cls(1, rates[0], rates[0], rates[0])
        deciles = statistics.quantiles(rates, n=10, method="inclusive")
        return cls(len(rates), statistics.median(rates), deciles[0], deciles[-1])


@dataclass
class HostRow:
    """One host over the report's periods, with how it treats validators and how healthy it is now."""

    host: str
    pages: int
    figures: Figures
    rates: Rates
    etag: str | None = None
    last_modified: str | None = None
    not_modified_answers: str | None = None
    health: float | None = None
    latency: float | None = None
    blocked_until: str | None = None
    #: Why: ``"Retry-After"`` (the host asked) or ``"down"`` (its pages failed in a row).
    blocked_because: str | None = None


@dataclass
class PageTypeRow:
    page_type: str
    pages: int
    figures: Figures
    rates: Rates
    rate_sample: list[float] = field(default_factory=list)


@dataclass
class PageRow:
    url: str
    host: str
    page_type: str
    visits: int
    changes: int
    no_change_cost: float
    rate: float | None
    form: str | None = None
    """Method and body of a page that is not a plain GET of its URL (a form's pages share one URL)."""
    moved_to: str | None = None
    """Where the page moved permanently (it is retired, and its new URL visited as a page of its own)."""


@dataclass
class PlannedPage:
    """A page at the head of the next plan: the index the scheduler gave it (value × freshness gain / cost)."""

    url: str | None
    index: float
    cost: float
    value: float
    rate: float
    days_since_visit: float | None
    hub: bool
    """The visit is expected to reveal new pages (:func:`~.planning.leads_to_new_pages`)."""
    form: str | None = None
    """Method and body of a page that is not a plain GET of its URL (a form's pages share one URL)."""
    scout: bool = False
    """A hub the discovery reserve pays for, first in the run, because no other planned page is one
    (:func:`~.planning.make_plan`)."""
    planned: bool = False
    """The run's budget reaches it (the rows that are form a prefix of the plan's head)."""
    new_pages: float = 0.0
    """New pages its visit is expected to reveal, whose worth is part of its index (a page that links out
    is priced for them, a hub or not: a robots.txt naming a sitemap, ranked high with a change rate near 0)."""

    @property
    def reveals(self) -> bool:
        """Whether the report says what a page that is not a hub is expected to reveal: its index then
        owes enough to new pages that its rate and days since alone would not explain it."""
        return not self.hub and self.new_pages >= 0.01


@dataclass
class Dataset:
    """The dataset as the learned rates see it now.

    *freshness* is the value-weighted probability that a visited page's record is still current,
    ``Σ v·e^(−λt) / Σ v`` (t: time since its last visit; λ: its estimate, or its group prior);
    *expected_stale_pages* is ``Σ (1 − e^(−λt))``, the visited pages expected to have changed since, and
    *expected_missed_changes* is ``Σ λt``, the changes expected to have happened since the last
    visits, several on a fast page (Cho & Garcia-Molina, TODS 2003: changes are a Poisson process).
    """

    pages: int = 0
    live: int = 0
    never_visited: int = 0
    refused_or_failed: int = 0
    """Of the pages never visited, those whose attempts so far were refused before download (robots.txt, offsite
    rules, a downloader middleware) or failed: they wait out a backoff, and are retired after three refusals in a
    row (a spider that follows links robots.txt forbids leaves many)."""
    gone: int = 0
    moved: int = 0
    """Of the pages gone, those retired because they moved permanently to a page the crawl knows."""
    refused: int = 0
    """Of the pages gone, those retired because their attempts were refused before download (robots.txt, offsite
    rules or a downloader middleware)."""
    unlinked: int = 0
    """Of the pages gone, those plans leave out because no page links to them any more (``COSTSCHED_UNLINKED_PERIODS``)."""
    missing: int = 0
    """Of the live pages, those not found since their last visit (a 404, or a visit without the items they used to
    yield) and not retired yet: their records are out of date, stale whatever their rate."""
    freshness: float | None = None
    expected_stale_pages: float = 0.0
    expected_missed_changes: float = 0.0


@dataclass
class ShadowSaving:
    """What the optimal schedule keeps at a smaller budget than a shadow period's full crawl.

    The full crawl visits every page once per period; the optimum spreads *budget* over pages by
    their learned rates, values and costs, at most one visit per page and period, as the scheduler
    plans (Cho & Garcia-Molina, TODS 2003, on the grid of :func:`~scrapy_costsched.model.grid_allocation`).
    Both freshness figures are the model's, value-weighted, over the pages the shadow periods visited.
    """

    share: float
    budget: float
    saved: float
    freshness_full: float
    freshness_at_budget: float


@dataclass
class Report:
    state: str
    unit: str
    generated_at: str | None
    periods: list[PeriodRow]
    totals: Figures
    hosts: list[HostRow]
    page_types: list[PageTypeRow]
    dataset: Dataset
    wasteful_pages: list[PageRow]
    next_plan: list[PlannedPage]
    next_plan_at: str | None
    shadow_savings: list[ShadowSaving]
    host_filter: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _scoped(accounts: PeriodAccounts, hosts: set[str] | None) -> list[tuple[str, str, dict[str, float]]]:
    return [row for row in accounts.rows() if hosts is None or row[0] in hosts]


def build_report(tracker: Tracker, state: str, *, last_periods: int | None = None,
                 hosts: Iterable[str] = ()) -> Report:
    """Everything the report shows, from the state *tracker* reads (:func:`~scrapy_costsched.commands.reading_tracker`),
    at the time of its clock: its rooms price and rank pages as the crawl's do."""
    store, now = tracker.store, tracker.now()
    assert store is not None
    host_filter = set(hosts) or None
    # Amounts of another unit (periods before COSTSCHED_BILLING changed) do not add to this one's.
    stored = [accounts for accounts in stored_periods(store) if accounts.unit == tracker.billing.unit]
    periods = stored[-last_periods:] if last_periods is not None and last_periods > 0 else stored
    rows = []
    for accounts in periods:
        figures = Figures.of(c for _, _, c in _scoped(accounts, host_filter))
        whole = host_filter is None and not accounts.superseded
        spent = Ledger.stored_spend(store, accounts.period) - accounts.carried if whole else figures.spent
        unattributed = spent - figures.spent
        rows.append(PeriodRow(accounts.period, iso(accounts.period * accounts.period_seconds), accounts.period_seconds,
                              accounts.budget, spent, accounts.carried if host_filter is None else 0.0,
                              accounts.shadow_spent if host_filter is None else 0.0, accounts.shadow, accounts.runs,
                              figures, unattributed if unattributed > UNATTRIBUTED_NOISE * max(spent, 1.0) else 0.0))
    groups = [row for a in periods for row in _scoped(a, host_filter)]
    pages = [page for page in _pages(store) if host_filter is None or page.host in host_filter]

    rate_of = tracker.rate_of
    # The budget the settings give, else the last crawl's (a budget given on the command line, as cron jobs do).
    budget = tracker.config.budget.amount if tracker.config.budget is not None else \
        next((a.budget for a in reversed(stored) if a.budget is not None), None)
    planned_at, planned = plan_ahead(tracker, budget)
    return Report(
        state=state, unit=tracker.billing.unit, generated_at=iso(now), periods=rows,
        totals=Figures.of(c for _, _, c in groups),
        hosts=_hosts(tracker.hosts, groups, pages, now),
        page_types=_page_types(groups, pages),
        dataset=_dataset(pages, tracker.value_of, rate_of, tracker.left_unlinked, now),
        wasteful_pages=[
            PageRow(p.url, p.host, p.page_type, p.visits, p.changes, p.no_change_cost,
                    p.estimate.rate if p.estimate else None, p.form, p.moved_to)
            for p in sorted(pages, key=lambda p: (-p.no_change_cost, p.url))[:WASTEFUL_PAGES] if p.no_change_cost > 0
        ],
        next_plan=[p for p in planned if host_filter is None or _host_of(p.url or "") in host_filter],
        next_plan_at=iso(planned_at),
        shadow_savings=_shadow_savings([a for a in periods if a.shadow], pages, tracker.value_of, rate_of,
                                       host_filter),
        host_filter=sorted(host_filter or ()),
    )


def plan_ahead(tracker: Tracker, budget: float | None) -> tuple[float | None, list[PlannedPage]]:
    """The head of the next run's ranking for a period *budget*, as the scheduler's plan
    (:func:`~.planning.make_plan`) ranks it: now, on what is left of this period's budget, or at the next
    period's start when what is left pays for no visit (a byte budget is seldom spent to the last byte).
    ``(None, [])`` without a budget (shadow mode plans nothing)."""
    if budget is None:
        return None, []
    config, ledger = tracker.config, tracker.ledger

    def plan_at(when: float, budget: float) -> Plan:
        return make_plan(tracker.candidates(when), budget, reserve_share=config.reserve_discovery,
                         host_of=tracker.host_of, capacity_of=tracker.health.capacity, robots_cost=tracker.robots_cost,
                         objective=config.objective, cycle=config.budget_period / DAY)

    remaining = budget - ledger.spent
    when = tracker.now()
    plan = plan_at(when, remaining) if remaining > 0 else None
    if plan is None or (not plan.planned and remaining < budget):
        when = (ledger.period + 1) * config.budget_period
        plan = plan_at(when, budget)
    planned, paid = [], {candidate.key for candidate in plan.planned}
    for index, candidate in plan.head[:NEXT_PLAN_PAGES]:
        page = tracker.page(candidate.key)
        planned.append(PlannedPage(page.url if page else None, index, candidate.cost, candidate.value, candidate.rate,
                                   None if math.isinf(candidate.elapsed) else candidate.elapsed,
                                   leads_to_new_pages(candidate), page.form if page else None, candidate in plan.scouts,
                                   candidate.key in paid, _new_pages(candidate)))
    return when, planned


def _new_pages(candidate: Candidate) -> float:
    """The new pages *candidate*'s visit is expected to reveal (none for a page never visited: not a hub yet)."""
    hub = candidate.hub
    if hub is None or math.isinf(candidate.elapsed):
        return 0.0
    return expected_new(hub.rate, candidate.elapsed, hub.cap)


def _pages(store: StateStorage) -> list[PageState]:
    pages = []
    for _, data in store.iter_pages():
        try:
            pages.append(PageState.from_json(data))
        except ValueError:
            continue  # the crawl counts and skips it too (costsched/storage/unreadable_page)
    return pages


def _estimated_rates(pages: Iterable[PageState]) -> list[float]:
    return sorted(p.estimate.rate for p in pages if p.estimate is not None and not p.gone)


def _hosts(book: HostBook, groups: list[tuple[str, str, dict[str, float]]], pages: list[PageState],
           now: float) -> list[HostRow]:
    by_host: defaultdict[str, list[PageState]] = defaultdict(list)
    for page in pages:
        by_host[page.host].append(page)
    names = sorted({host for host, _, _ in groups if host} | by_host.keys())
    rows = []
    for host in names:
        row = HostRow(host, len(by_host[host]), Figures.of(c for h, _, c in groups if h == host),
                      Rates.of(_estimated_rates(by_host[host])))
        if host in book.validators:
            verdicts = book.verdicts(host)
            row.etag, row.last_modified = verdicts["etag"], verdicts["last_modified"]
            row.not_modified_answers = verdicts["not_modified"]
        health = book.health.get(host)
        if health is not None:
            row.health = health.p_success(now / DAY)
            row.latency = health.latency
            # A Retry-After pause runs on the wall clock (servers' time), not on COSTSCHED_CLOCK.
            if health.blocked_for(time.time()) > 0:
                row.blocked_until = iso(health.blocked_until)
                row.blocked_because = "down" if health.outage else "Retry-After"
        rows.append(row)
    return rows


def _page_types(groups: list[tuple[str, str, dict[str, float]]], pages: list[PageState]) -> list[PageTypeRow]:
    by_type: defaultdict[str, list[PageState]] = defaultdict(list)
    for page in pages:
        by_type[page.page_type].append(page)
    rows = []
    for page_type in sorted({t for _, t, _ in groups} | by_type.keys()):
        rates = _estimated_rates(by_type[page_type])
        step = max(len(rates) / RATE_SAMPLE, 1.0)
        sample = [rates[int(i * step)] for i in range(min(len(rates), RATE_SAMPLE))]
        rows.append(PageTypeRow(page_type, len(by_type[page_type]),
                                Figures.of(c for _, t, c in groups if t == page_type), Rates.of(rates), sample))
    return rows


def _dataset(pages: list[PageState], value_of: Callable[[PageState], float], rate_of: Callable[[PageState], float],
             left_unlinked: Callable[[float | None, float], bool], now: float) -> Dataset:
    dataset = Dataset(pages=len(pages))
    weighted = total_value = 0.0
    for page in pages:
        if page.gone:
            dataset.gone += 1
            dataset.moved += page.moved_to is not None
            dataset.refused += page.moved_to is None and page.refusals > 0
            continue
        if left_unlinked(page.unlinked_since, now):
            dataset.gone += 1
            dataset.unlinked += 1
            continue
        dataset.live += 1
        if page.last_visit is None:
            dataset.never_visited += 1
            dataset.refused_or_failed += bool(page.refusals or page.consecutive_failures)
            continue
        value = value_of(page)
        elapsed = max(now - page.last_visit, 0.0) / DAY
        rate = rate_of(page)
        missing = bool(page.gone_strikes or page.empty_strikes)
        dataset.missing += missing
        stale = 1.0 if missing else p_changed(rate, elapsed)
        weighted += value * (1.0 - stale)
        total_value += value
        dataset.expected_stale_pages += stale
        dataset.expected_missed_changes += rate * elapsed
    dataset.freshness = weighted / total_value if total_value else None
    return dataset


def _host_of(url: str) -> str:
    return urlsplit(url).hostname or ""


def _shadow_savings(shadow: list[PeriodAccounts], pages: list[PageState], value_of: Callable[[PageState], float],
                    rate_of: Callable[[PageState], float], host_filter: set[str] | None) -> list[ShadowSaving]:
    """What budgets below a shadow period's full crawl would have kept, by the model (shadow history is
    the unbiased sample: every page was fetched)."""
    if not shadow:
        return []
    spent = statistics.fmean(sum(c["spent"] for _, _, c in _scoped(a, host_filter)) for a in shadow)
    cost_per_visit: dict[tuple[str, str], float] = {}
    for accounts in shadow:
        for host, page_type, counters in _scoped(accounts, host_filter):
            if counters.get("visits"):
                cost_per_visit[host, page_type] = counters["spent"] / counters["visits"]
    visited = [p for p in pages if p.last_visit is not None and not p.gone]
    if not visited or spent <= 0:
        return []
    period_days = shadow[-1].period_seconds / DAY
    rates = [rate_of(p) for p in visited]
    values = [value_of(p) for p in visited]
    mean_cost = spent / len(visited)
    costs = [cost_per_visit.get((p.host, p.page_type), mean_cost) for p in visited]
    total_value = sum(values)

    def freshness(frequencies: list[float]) -> float:
        return sum(v * expected_freshness(r, f, period_days)
                   for v, r, f in zip(values, rates, frequencies, strict=True)) / total_value

    full = freshness([1.0 / period_days] * len(visited))
    savings = []
    for share in SHADOW_SHARES:
        budget = share * spent
        allocation = grid_allocation(rates, budget / period_days, values, costs, cycle=period_days)
        savings.append(ShadowSaving(share, budget, spent - budget, full, freshness(allocation.frequencies)))
    return savings
