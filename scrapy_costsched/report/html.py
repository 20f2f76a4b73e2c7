"""The report as one self-contained HTML page with charts (``scrapy costsched-report --html FILE``).

The page loads nothing: its styles are inline, its charts are SVG images in ``data:`` URIs, it has
no script, and its Content-Security-Policy forbids fetching anything else. Crawled names (URLs,
hosts, page types) are text: Jinja2 escapes them in the page, matplotlib's SVG writer in the charts,
and a browser runs no script from an SVG shown as an image. Jinja2 and matplotlib are the optional
``report`` extra, imported when a page is rendered, not when ``scrapy`` starts.
"""

from __future__ import annotations

import atexit
import base64
import io
import math
import os
import shutil
import statistics
import sys
import tempfile
from contextlib import contextmanager
from typing import TYPE_CHECKING

from scrapy_costsched.report.terminal import amount, rate_range, share

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from scrapy_costsched.report import PeriodRow, Report

INSTALL = "pip install 'scrapy-costsched[report]'"
#: Hosts and page types a chart shows at most, the most visited first (the tables list them all).
CHART_ROWS = 20
#: Characters of a host or page type a chart's label keeps.
LABEL_CHARS = 32
#: Period labels a chart's axis shows at most.
PERIOD_TICKS = 12
#: A cost per change above this many times the periods' median is cut at that height (labelled with its
#: value), so that one period of discovery does not flatten the others.
OUTLIER = 4.0
#: matplotlib's defaults (not the user's matplotlibrc), glyphs drawn as paths so that the charts look the
#: same without the fonts, text never read as mathtext (``$`` in a name), ids that do not change per run.
CHART_STYLE = {"svg.fonttype": "path", "text.parse_math": False, "svg.hashsalt": "scrapy-costsched",
               "font.size": 9.0, "axes.spines.top": False, "axes.spines.right": False}
SPENT, SHADOW, BUDGET, PER_CHANGE, NO_CHANGE, RATES = "#3569a8", "#b8c0cc", "#c8313e", "#23867a", "#d98b19", "#6a4c93"


class ReportDependencyError(ImportError):
    """The HTML report's libraries, the ``report`` extra, are not installed."""


def require_libraries() -> None:
    """Import Jinja2 and matplotlib, or raise :class:`ReportDependencyError` saying how to install them
    (a command can call it before it reads a state)."""
    try:
        import jinja2  # noqa: F401

        with _matplotlib_dirs():
            import matplotlib.font_manager  # noqa: F401 (finds the directories and lists the fonts)
    except ImportError as exc:
        raise ReportDependencyError(
            f"the HTML report needs {exc.name or 'Jinja2 and matplotlib'}, which is not installed: {INSTALL}"
        ) from exc


def render_html(report: Report) -> str:
    """The whole report as one HTML page, charts included."""
    require_libraries()
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("scrapy_costsched.report", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)

    def cost(value: float | None) -> str:
        return human_amount(value, report.unit)

    env.filters.update(cost=cost, share=share, rate_range=rate_range, count=count, number=number)
    template = env.get_template("report.html")
    return template.render(report=report, charts=charts(report), by_reason=by_reason,
                           cost_header="" if report.unit == "bytes" else f" ({report.unit})")


def human_amount(value: float | None, unit: str) -> str:
    """A cost as the page shows it: bytes in kB/MB/GB as the terminal report shows them, other units
    with thousands separated and at most two decimals."""
    if value is None or unit == "bytes":
        return amount(value, unit)
    return f"{value:,.2f}".rstrip("0").rstrip(".")


def count(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def number(value: float | None) -> str:
    """A rate, an index: three significant digits."""
    return "-" if value is None else f"{value:.3g}"


def by_reason(reasons: dict[str, int]) -> str:
    """Visits by what caused them, the most first: ``refresh 23, discovery 2``."""
    return ", ".join(f"{name} {n:,}" for name, n in sorted(reasons.items(), key=lambda item: (-item[1], item[0])))


@contextmanager
def _matplotlib_dirs() -> Iterator[None]:
    """Keep matplotlib, imported in this block, from writing to the user's home.

    matplotlib keeps its font list in a cache directory, ``~/.cache/matplotlib`` unless ``MPLCONFIGDIR``
    names another. When the user has not named one, matplotlib gets a scratch directory removed at exit:
    it lists the fonts once per run (a fraction of a second) instead of writing to the home directory.
    matplotlib looks its directories up once, on import, so the variable is restored after the block.
    """
    previous = os.environ.get("MPLCONFIGDIR")
    if "matplotlib" in sys.modules or previous:
        yield
        return
    scratch = tempfile.mkdtemp(prefix="costsched-matplotlib-")
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    os.environ["MPLCONFIGDIR"] = scratch
    try:
        yield
    finally:
        if previous is None:
            del os.environ["MPLCONFIGDIR"]
        else:
            os.environ["MPLCONFIGDIR"] = previous


def charts(report: Report) -> dict[str, str | None]:
    """Each chart as a ``data:`` URI of an SVG image, ``None`` when there is nothing to draw yet."""
    return {"spend": _spend_chart(report), "cost_per_change": _cost_per_change_chart(report),
            "rates": _rates_chart(report), "no_change": _no_change_chart(report)}


def _svg(draw: Callable[[Figure], None], height: float) -> str:
    import matplotlib.style
    from matplotlib.figure import Figure

    with matplotlib.style.context(["default", CHART_STYLE]):
        figure = Figure(figsize=(6.4, height), layout="constrained")
        draw(figure)
        buffer = io.BytesIO()
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    return "data:image/svg+xml;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _label(name: str) -> str:
    return name if len(name) <= LABEL_CHARS else name[: LABEL_CHARS - 1] + "…"


def _period_axis(axes: Axes, periods: list[PeriodRow]) -> None:
    """Periods along x, labelled by their start date (the year left out when they share it)."""
    starts = [p.label for p in periods]
    same_year = len({start[:4] for start in starts}) == 1
    labels = [start[5:] if same_year else start for start in starts]
    step = math.ceil(len(periods) / PERIOD_TICKS)
    axes.set_xticks(range(0, len(periods), step), labels[::step])
    axes.set_xlim(-0.6, len(periods) - 0.4)
    axes.set_xlabel("period start" + (f" ({starts[0][:4]})" if same_year and periods else ""))


def _cost_axis(axes: Axes, unit: str, label: str) -> None:
    from matplotlib.ticker import FuncFormatter

    axes.yaxis.set_major_formatter(FuncFormatter(lambda value, _: human_amount(value, unit)))
    axes.set_ylabel(label + ("" if unit == "bytes" else f" ({unit})"))
    axes.grid(axis="y", color="#e3e6ea")
    axes.set_axisbelow(True)


def _legend_above(axes: Axes) -> None:
    axes.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=3, fontsize=8, frameon=False)


def _split(periods: list[PeriodRow], value: Callable[[PeriodRow], float | None],
           ) -> Iterator[tuple[bool, list[int], list[float]]]:
    """Budgeted then shadow periods: their positions and values (those with a value)."""
    for shadow in (False, True):
        points = [(i, v) for i, p in enumerate(periods) if p.shadow == shadow and (v := value(p)) is not None]
        yield shadow, [i for i, _ in points], [v for _, v in points]


def _spend_chart(report: Report) -> str | None:
    periods = report.periods
    if not periods:
        return None

    def draw(figure: Figure) -> None:
        axes = figure.subplots()
        for shadow, xs, spent in _split(periods, lambda p: p.spent):
            if xs:
                axes.bar(xs, spent, width=0.7, color=SHADOW if shadow else SPENT, hatch="//" if shadow else None,
                         edgecolor="white", label="spent, shadow period (no budget)" if shadow else "spent")
        # A budget set mid-period starts from what the period's shadow runs left: their part of the bar.
        before = [(i, p.shadow_spent) for i, p in enumerate(periods) if not p.shadow and p.shadow_spent]
        if before:
            axes.bar([i for i, _ in before], [s for _, s in before], width=0.7, color=SHADOW, hatch="//",
                     edgecolor="white", label="of which shadow runs")
        budgeted = [(i, p.budget) for i, p in enumerate(periods) if p.budget is not None]
        if budgeted:
            axes.hlines([b for _, b in budgeted], [i - 0.45 for i, _ in budgeted], [i + 0.45 for i, _ in budgeted],
                        colors=BUDGET, linewidth=2.5, label="budget", zorder=3)
        _period_axis(axes, periods)
        _cost_axis(axes, report.unit, "spent")
        _legend_above(axes)

    return _svg(draw, 3.2)


def _cost_per_change_chart(report: Report) -> str | None:
    periods = report.periods
    costs = [p.figures.cost_per_change for p in periods if p.figures.cost_per_change is not None]
    if not costs:
        return None
    top = OUTLIER * statistics.median(costs) or math.inf  # a median of 0: nothing is cut

    def draw(figure: Figure) -> None:
        axes = figure.subplots()
        for shadow, xs, values in _split(periods, lambda p: p.figures.cost_per_change):
            if xs:
                axes.bar(xs, values, width=0.7, color=SHADOW if shadow else PER_CHANGE, hatch="//" if shadow else None,
                         edgecolor="white", label="shadow period" if shadow else "budgeted period")
        for i, period in enumerate(periods):
            cost = period.figures.cost_per_change
            if cost is None:
                axes.annotate("no change", (i, 0), xytext=(0, 3), textcoords="offset points", ha="center",
                              rotation=90, va="bottom", fontsize=7, color="#6b7280")
            elif cost > top:
                axes.annotate(f"{human_amount(cost, report.unit)} ↑", (i, top), xytext=(0, -4),
                              textcoords="offset points", ha="center", va="top", rotation=90, fontsize=8,
                              fontweight="bold", color="white")
        if max(costs) > top:
            axes.set_ylim(0, top)
        _period_axis(axes, periods)
        _cost_axis(axes, report.unit, "cost per detected change")
        _legend_above(axes)

    return _svg(draw, 3.2)


def _rates_chart(report: Report) -> str | None:
    rows = sorted((t for t in report.page_types if t.rate_sample), key=lambda t: (-t.pages, t.page_type))[:CHART_ROWS]
    if not rows:
        return None
    rows.reverse()  # the first row on top

    def draw(figure: Figure) -> None:
        from matplotlib.ticker import FuncFormatter, NullFormatter

        axes = figure.subplots()
        for y, row in enumerate(rows):
            jitter = [((k * 0.618034) % 1.0 - 0.5) * 0.5 for k in range(len(row.rate_sample))]
            axes.scatter(row.rate_sample, [y + j for j in jitter], s=9, color=RATES, alpha=0.45, linewidths=0,
                         label="a page's estimate" if y == 0 else "_nolegend_")
            rates = row.rates
            if rates.p10 is not None and rates.p90 is not None and rates.median is not None:
                axes.hlines(y, rates.p10, rates.p90, colors="#222222", linewidth=2,
                            label="10th-90th percentile" if y == 0 else "_nolegend_")
                axes.plot([rates.median], [y], marker="|", markersize=16, markeredgewidth=3, color=BUDGET,
                          label="median" if y == 0 else "_nolegend_")
        axes.set_xscale("log")
        axes.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        axes.xaxis.set_minor_formatter(NullFormatter())
        axes.set_yticks(range(len(rows)), [_label(row.page_type) for row in rows])
        axes.set_ylim(-0.7, len(rows) - 0.3)
        axes.set_xlabel("estimated changes per day (log scale)")
        axes.grid(axis="x", color="#e3e6ea")
        axes.set_axisbelow(True)
        _legend_above(axes)

    return _svg(draw, 1.6 + 0.45 * len(rows))


def _no_change_chart(report: Report) -> str | None:
    hosts = sorted((h for h in report.hosts if h.figures.no_change_share is not None),
                   key=lambda h: (-h.figures.visits, h.host))[:CHART_ROWS]
    if not hosts:
        return None
    hosts.reverse()

    def draw(figure: Figure) -> None:
        from matplotlib.ticker import PercentFormatter

        axes = figure.subplots()
        shares = [h.figures.no_change_share or 0.0 for h in hosts]
        axes.barh(range(len(hosts)), shares, height=0.6, color=NO_CHANGE)
        for y, host in enumerate(hosts):
            figures = host.figures
            axes.annotate(f"{share(figures.no_change_share)}: {count(figures.no_change)} fetches, "
                          f"{human_amount(figures.no_change_cost, report.unit)}{_unit_suffix(report.unit)}",
                          (shares[y], y), xytext=(4, 0), textcoords="offset points", va="center", fontsize=8)
        axes.set_yticks(range(len(hosts)), [_label(h.host) for h in hosts])
        axes.set_xlim(0, 1.45)
        axes.set_xticks([0, 0.25, 0.5, 0.75, 1.0])
        axes.xaxis.set_major_formatter(PercentFormatter(1.0))
        axes.set_xlabel("share of compared fetches that found no change")
        axes.grid(axis="x", color="#e3e6ea")
        axes.set_axisbelow(True)

    return _svg(draw, 1.2 + 0.4 * len(hosts))


def _unit_suffix(unit: str) -> str:
    return "" if unit == "bytes" else f" {unit}"
