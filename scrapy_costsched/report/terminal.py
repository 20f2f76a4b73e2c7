"""The report as plain-text tables that fit 100 columns (``scrapy costsched-report``'s default output)."""

from __future__ import annotations

import re
import textwrap
from typing import TYPE_CHECKING, Any

from tabulate import tabulate

if TYPE_CHECKING:
    from scrapy_costsched.report import Dataset, Figures, PlannedPage, Rates, Report

#: Columns the report fits in; its prose wraps there.
WIDTH = 100
#: Width at which a table's first column (a host, a page type) wraps, so that tables fit 100 columns.
FIRST_COLUMN = 30
#: The narrowest a table's first column gets when the table must give up width to fit (:func:`_fit`).
FIRST_COLUMN_MIN = 12
#: Spaces between two columns of a table.
GAP = 2
#: Where a cell may wrap before the others must: before a note in brackets.
_NOTE = re.compile(r" (?=\()")
#: URLs longer than this are shortened in the middle (``--json`` and ``--html`` have them whole).
URL_WIDTH = 56
#: The least a form's method and body keep of the URL column when both do not fit.
FORM_WIDTH = 20


def amount(value: float | None, unit: str) -> str:
    """A cost as people read it: bytes in kB/MB/GB (powers of 1000, as COSTSCHED_BUDGET reads them), else a
    number with at most two decimals."""
    if value is None:
        return "-"
    if unit == "bytes":
        for size, name in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
            if abs(value) >= size:
                return f"{value / size:.2f} {name}"
        return f"{value:.0f} B"
    return f"{value:.2f}".rstrip("0").rstrip(".")


def share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def rate_range(rates: Rates) -> str:
    """Median estimated change rate per day and its 10th-90th percentile spread."""
    if rates.median is None or rates.p10 is None or rates.p90 is None:
        return "-"
    return f"{rates.median:.3g} ({rates.p10:.2g}-{rates.p90:.2g})"


def _no_change(figures: Figures) -> str:
    return f"{figures.no_change} ({share(figures.no_change_share)})"


def _table(title: str, caption: str, headers: list[str], rows: list[list[Any]]) -> str:
    """A titled table within :data:`WIDTH` columns (:func:`_fit`); its first column (a host, a page type) wraps at
    :data:`FIRST_COLUMN` characters.

    The header goes in as the first rows: tabulate pads a header row two characters wider than
    its column, which would cost a table of nine columns 18 of its 100.
    """
    if not rows:
        return f"{title}\n{caption}\n\n(nothing yet)\n"
    rule = ["-" * len(header) for header in headers]
    cells, widths = _fit([[str(cell) for cell in row] for row in rows], headers)
    body = tabulate([headers, rule, *cells], tablefmt="plain", disable_numparse=True, maxcolwidths=widths)
    return f"{title}\n{caption}\n\n{body}\n"


def _fit(rows: list[list[str]], headers: list[str]) -> tuple[list[list[str]], list[int | None]]:
    """*rows*, and the widths their columns wrap at (``None``: as wide as their widest cell), for a table that fits
    :data:`WIDTH` (a host's long name beside a rate and its spread ran a table to 123 columns).

    Room is taken in three rounds, each until the table fits: the notes in brackets of the widest columns after the
    first go below their figures (a rate's spread below the rate, "(5 in shadow runs)" below what a period spent),
    then the first column narrows down to :data:`FIRST_COLUMN_MIN`, then the widest others wrap, none below its
    header.
    """
    columns = [[row[j] for row in rows] for j in range(len(headers))]
    widths = [max(len(headers[j]), *map(len, column)) for j, column in enumerate(columns)]
    natural = widths[0]
    widths[0] = min(widths[0], FIRST_COLUMN)
    excess = sum(widths) + GAP * (len(widths) - 1) - WIDTH
    for j in sorted(range(1, len(widths)), key=lambda j: -widths[j]):
        if excess <= 0:
            break
        split = [_NOTE.sub("\n", cell) for cell in columns[j]]
        narrower = max(len(headers[j]), *(len(line) for cell in split for line in cell.splitlines()))
        if narrower < widths[j]:
            columns[j], excess, widths[j] = split, excess - (widths[j] - narrower), narrower
    if excess > 0:
        given = min(excess, max(widths[0] - FIRST_COLUMN_MIN, 0))
        widths[0], excess = widths[0] - given, excess - given
    wrap: list[int | None] = [widths[0] if widths[0] < natural else None, *[None] * (len(widths) - 1)]
    while excess > 0:
        room, j = max((widths[j] - len(headers[j]), j) for j in range(1, len(widths)))
        if room <= 0:
            break  # as narrow as its headers allow
        widths[j] -= 1
        wrap[j] = widths[j]
        excess -= 1
    return [list(row) for row in zip(*columns, strict=True)], wrap


def _prose(text: str) -> str:
    """*text* wrapped within :data:`WIDTH` columns, between words (a URL or a path longer than a line stays whole)."""
    return textwrap.fill(text, width=WIDTH, break_long_words=False, break_on_hyphens=False)


def _budget_reach(plan: list[PlannedPage]) -> str:
    """Where the run's budget ends in *plan*'s rows, when it ends before the last."""
    reached = sum(page.planned for page in plan)
    return f"\nthe run's budget reaches the first {reached} rows" if reached < len(plan) else ""


def render_terminal(report: Report) -> str:
    unit = report.unit
    sections = [
        f"costsched report for {report.state}\n"
        + _prose(f"{len(report.periods)} budget periods, costs in {unit}, at {report.generated_at}"
                 + (f"; hosts: {', '.join(report.host_filter)}" if report.host_filter else "")) + "\n",
        _table(
            "Budget periods",
            "no-change: fetches that found the page as it was (their share of compared fetches, their cost)",
            ["period", "budget", "spent", "visits", "new", "changed", "per change", "no-change", "its cost", "304s"],
            [[p.label, "shadow" if p.budget is None else amount(p.budget, unit),
              amount(p.spent, unit) + (f" (+{amount(p.carried, unit)} carried)" if p.carried else "")
              + (f" ({amount(p.shadow_spent, unit)} in shadow runs)" if p.shadow_spent and not p.shadow else "")
              + (f" ({amount(p.unattributed, unit)} by runs that never closed)" if p.unattributed else ""),
              p.figures.visits, p.figures.new, p.figures.changed, amount(p.figures.cost_per_change, unit),
              _no_change(p.figures), amount(p.figures.no_change_cost, unit), p.figures.not_modified]
             for p in report.periods],
        ) + _prose("visits by reason: " + (", ".join(f"{reason} {count}" for reason, count
                                                     in report.totals.by_reason.items()) or "none yet")
                   + (f"; {report.totals.rebaselined} re-baselined (not new, not comparable with their last record: the "
                      "hash configuration changed, or a redirect began or ended)" if report.totals.rebaselined else ""))
        + "\n",
        _table(
            "Hosts",
            "over the periods above; 304s: share of answers; rate: changes a day, median (10th-90th pct.)",
            ["host", "pages", "visits", "spent", "changed", "per change", "no-change", "its cost", "304s", "rate"],
            [[h.host, h.pages, h.figures.visits, amount(h.figures.spent, unit), h.figures.changed,
              amount(h.figures.cost_per_change, unit), _no_change(h.figures), amount(h.figures.no_change_cost, unit),
              share(h.figures.not_modified_share), rate_range(h.rates)]
             for h in report.hosts],
        ),
        _table(
            "Host signals",
            "validator verdicts (trusted, learning, volatile, lies, none; 304s: false, ignored; Last-Modified\n"
            "also batched: trusted, dates bunch at one time of the day, so they tell the day); health now",
            ["host", "ETag", "Last-Modified", "304 answers", "health", "latency s", "blocked until"],
            [[h.host, h.etag or "-", h.last_modified or "-", h.not_modified_answers or "-", share(h.health),
              "-" if h.latency is None else f"{h.latency:.2f}",
              f"{h.blocked_until} ({h.blocked_because})" if h.blocked_until else "-"] for h in report.hosts],
        ),
        _table(
            "Page types",
            "'-': requests that belong to no page (robots.txt, session steps)",
            ["page type", "pages", "visits", "spent", "changed", "per change", "no-change", "rate"],
            [[t.page_type, t.pages, t.figures.visits, amount(t.figures.spent, unit), t.figures.changed,
              amount(t.figures.cost_per_change, unit),
              _no_change(t.figures), rate_range(t.rates)] for t in report.page_types],
        ),
        _dataset(report),
        _table(
            "Most spent on no-change fetches",
            "pages whose fetches most often found nothing new, by what those fetches cost",
            ["visits", "changes", "no-change cost", "rate", "url"],
            [[p.visits, p.changes, amount(p.no_change_cost, unit), "-" if p.rate is None else f"{p.rate:.3g}",
              _page_url(p.url, p.form) + (f" (moved to {_url(p.moved_to)})" if p.moved_to else "")]
             for p in report.wasteful_pages],
        ),
        _table(
            "Next plan",
            f"the head of the next run's ranking ({report.next_plan_at or 'no budgeted run yet'}): "
            "index = value x freshness gain / cost\n(a page that links out also earns the new pages it should reveal, "
            "counted after its URL)" + _budget_reach(report.next_plan)
            + ("\nscout: a hub the discovery reserve pays for, with the new pages it leads to, first in the run"
               if any(p.scout for p in report.next_plan) else ""),
            ["index", "cost", "value", "rate", "days since", "url"],
            [[f"{p.index:.3g}", amount(p.cost, unit), f"{p.value:g}", f"{p.rate:.3g}",
              "never" if p.days_since_visit is None else f"{p.days_since_visit:.1f}",
              _page_url(p.url or "?", p.form, URL_WIDTH - len(_hub_tag(p))) + _hub_tag(p)]
             for p in report.next_plan],
        ),
    ]
    if report.shadow_savings:
        sections.append(_table(
            "What a budget would have saved (from the shadow periods)",
            "model freshness of a full crawl each period against the optimal schedule at a smaller budget",
            ["budget", "share", "saved", "freshness full", "at budget"],
            [[amount(s.budget, unit), share(s.share), amount(s.saved, unit), share(s.freshness_full),
              share(s.freshness_at_budget)] for s in report.shadow_savings],
        ))
    return "\n".join(sections)


def _dataset(report: Report) -> str:
    data = report.dataset
    waiting = f", {data.refused_or_failed} of them refused before download or failed so far" \
        if data.refused_or_failed else ""
    text = (
        f"{data.pages} known pages: {data.live} live ({data.never_visited} never visited{waiting}"
        f"{f', {data.missing} not found since their last visit' if data.missing else ''}), {data.gone} gone"
        f"{_gone_causes(data)}; estimated freshness {share(data.freshness)} (value-weighted); "
        f"since their last visits, {data.expected_stale_pages:.1f} pages are expected to have changed, "
        f"{data.expected_missed_changes:.1f} times in all"
    )
    return f"The dataset now\n{_prose(text)}\n"


def _gone_causes(data: Dataset) -> str:
    causes = [f"{data.moved} of them moved"] if data.moved else []
    if data.refused:
        causes.append(f"{data.refused} of them refused before download by robots.txt, offsite rules or a downloader "
                      "middleware")
    if data.unlinked:
        causes.append(f"{data.unlinked} of them no longer linked (COSTSCHED_UNLINKED_PERIODS)")
    return f" ({'; '.join(causes)})" if causes else ""


def _page_url(url: str, form: str | None, width: int = URL_WIDTH) -> str:
    """*url* and, for a form's page, what tells it apart from the form's other pages (its method and body, in
    brackets), within *width*: the body is cut before the URL is, which says where the form goes."""
    if not form:
        return _url(url, width)
    bracketed = len(form) + 3
    if len(url) + bracketed <= width:
        return f"{url} [{form}]"
    shown = _url(url, max(width - bracketed, min(len(url), width - FORM_WIDTH)))
    return f"{shown} [{_url(form, width - len(shown) - 3)}]"


def _url(url: str, width: int = URL_WIDTH) -> str:
    """*url* cut in the middle to *width* characters (less than :data:`URL_WIDTH` where a tag follows it)."""
    if len(url) <= width:
        return url
    half = (width - 3) // 2
    return f"{url[:half]}...{url[-(width - 3 - half):]}"


def _hub_tag(page: PlannedPage) -> str:
    """What a planned page's visit is expected to reveal, when that is part of its index."""
    if page.scout:
        return " (hub, scout)"
    if page.hub:
        return " (hub)"
    return f" ({page.new_pages:.2g} new pages)" if page.reveals else ""
