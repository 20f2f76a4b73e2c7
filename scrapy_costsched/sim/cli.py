"""Command line of the simulator: ``python -m scrapy_costsched.sim``.

Examples::

    python -m scrapy_costsched.sim --workload cho2000 --budget 20% --policy all
    python -m scrapy_costsched.sim --workload gamma --cv 2 --rates learned --json
    python -m scrapy_costsched.sim --workload replay:urlid_offset_history.txt --pages 10000 --cycles 98
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import TYPE_CHECKING, Any

from scrapy_costsched.model.scoring import OBJECTIVES

from .engine import SimConfig, simulate
from .policies import POLICIES
from .workloads import COSTS, VALUES, WORKLOADS

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .engine import RunResult

__all__ = ["format_table", "main", "parse_args"]


def _budget(text: str) -> float:
    """'0.2', '20%' (fractions of the collection per cycle) or '500' (cost units per cycle)."""
    try:
        value = float(text[:-1]) / 100.0 if text.endswith("%") else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a budget: use a fraction of the pages per cycle (0.2 or 20%) or cost units (> 1)"
        ) from None
    if not 0.0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"the budget ({text!r}) must be positive")
    return value


def _policies(values: Sequence[str] | None) -> tuple[str, ...]:
    names: list[str] = []
    for value in values or ["all"]:
        for name in value.split(","):
            name = name.strip()
            if name == "all":
                names.extend(POLICIES)
            elif name:
                names.append(name)
    return tuple(dict.fromkeys(names))


def parse_args(argv: Sequence[str] | None = None) -> tuple[SimConfig, argparse.Namespace]:
    parser = argparse.ArgumentParser(
        prog="python -m scrapy_costsched.sim",
        description="Simulate revisit policies on a workload at one budget and score them exactly.",
    )
    parser.add_argument("--workload", default="cho2000", help=f"one of {', '.join(WORKLOADS)} (default cho2000)")
    parser.add_argument("--pages", type=int, default=2000, help="pages in the collection (default 2000)")
    parser.add_argument("--cycles", type=int, default=60, help="planning cycles of one day (default 60)")
    parser.add_argument("--budget", type=_budget, default=0.2,
                        help="per cycle: a fraction of the pages (0.05, 20%%) or, above 1, cost units (default 0.2)")
    parser.add_argument("--rates", choices=("known", "learned"), default="known",
                        help="give policies the true mean rates, or let them learn from their visits")
    parser.add_argument("--objective", choices=OBJECTIVES, default="freshness")
    parser.add_argument("--policy", action="append", metavar="NAME[,NAME...]",
                        help=f"repeatable; 'all' (default) or any of {', '.join(POLICIES)}; the oracle always runs")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=None, metavar="K",
                        help="cycles left out of the scores (default: half of --cycles)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    workload = parser.add_argument_group("workload options")
    workload.add_argument("--cv", type=float, default=1.0, help="gamma: coefficient of variation of rates")
    workload.add_argument("--shape", type=float, default=0.7, help="weibull: shape of the mean change interval")
    workload.add_argument("--values", choices=VALUES, default="equal", help="page values (default equal)")
    workload.add_argument("--costs", choices=COSTS, default="equal",
                          help="per-visit costs: equal, or size (correlated with the change rate)")
    workload.add_argument("--validators", type=float, default=None, metavar="FRACTION",
                          help="hosts answer conditional requests; a 304 costs FRACTION of a full fetch")
    workload.add_argument("--lying-hosts", type=float, default=0.0, metavar="FRACTION",
                          help="share of hosts whose validators answer 304 although the page changed")
    workload.add_argument("--new-pages", type=float, default=0.0, metavar="FRACTION",
                          help="new pages per week, as a fraction of --pages (Ntoulas et al.: 0.08)")
    workload.add_argument("--last-modified", type=float, default=0.0, metavar="FRACTION",
                          help="share of hosts whose answers carry Last-Modified (default 0): the last change's "
                               "time, or on a lying host the time of the answer")
    workload.add_argument("--audit", type=float, default=0.0, metavar="FRACTION",
                          help="share of 304 answers verified by a full fetch; a host caught lying loses its "
                               "validators (default 0)")
    workload.add_argument("--half-life", type=float, default=180.0, metavar="DAYS",
                          help="learned rates: history half-life (COSTSCHED_HISTORY_HALF_LIFE)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    args = parser.parse_args(argv)
    try:
        config = SimConfig(
            workload=args.workload, pages=args.pages, cycles=args.cycles, budget=args.budget, rates=args.rates,
            objective=args.objective, policies=_policies(args.policy), seed=args.seed, warmup=args.warmup,
            cv=args.cv, shape=args.shape, values=args.values, costs=args.costs, validators=args.validators,
            lying_hosts=args.lying_hosts, new_pages=args.new_pages, half_life=args.half_life, audit=args.audit,
            last_modified=args.last_modified,
        )
    except ValueError as exc:
        parser.error(str(exc))
    return config, args


def _cell(value: Any, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def format_table(result: RunResult) -> str:
    """The run as a fixed-width table, best objective first."""
    data = result.as_dict()
    header = ("policy", "freshness", "/oracle", "age", "harmonic", "detected", "missed", "cost/change",
              "no-change", "never", "spend/cycle")
    rows = []
    for name, r in sorted(data["policies"].items(), key=lambda kv: -kv[1]["objective_value"]):
        rows.append((name, _cell(r["freshness"]), _cell(r["oracle_ratio"], 3), _cell(r["age"], 3),
                     _cell(r["harmonic_staleness"]), str(r["changes_detected"]), str(r["missed_changes"]),
                     _cell(r["cost_per_change"], 3), str(r["no_change_fetches"]), str(r["never_visited"]),
                     _cell(r["spend_per_cycle"], 1)))
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows, strict=True)]
    lines = [
        (f"{data['workload']}: {data['pages']} pages, {data['cycles']} cycles (scored from {data['warmup']}), "
         f"budget {data['budget_per_cycle']:.1f}/cycle, rates {data['rates']}, objective {data['objective']}, "
         f"seed {data['seed']}"),
        "  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(header, widths, strict=True))),
    ]
    for row in rows:
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(row, widths, strict=True))))
    optimum = data["analytical_optimum"]
    if optimum["freshness"] is not None:
        lines.append(f"expected optimum freshness: {optimum['freshness']:.4f} uncapped (continuous time), "
                     f"{optimum['grid_freshness']:.4f} on the grid of cycles")
    return "\n".join(lines)


def _progress_bar(total: int, enabled: bool) -> tuple[Callable[[int], None] | None, Callable[[], None]]:
    """A tqdm bar on stderr (left out when disabled, not a terminal, or tqdm is missing)."""
    if not enabled:
        return None, lambda: None
    try:
        from tqdm import tqdm  # type: ignore[import-untyped, unused-ignore]
    except ImportError:
        return None, lambda: None
    bar = tqdm(total=total, unit="cycle", file=sys.stderr, disable=None, leave=False)
    return bar.update, bar.close


def main(argv: Sequence[str] | None = None) -> int:
    config, args = parse_args(argv)
    runs = len(dict.fromkeys(["oracle", *config.policies])) * config.cycles
    update, close = _progress_bar(runs, not args.no_progress)
    try:
        result = simulate(config, progress=update)
    except (ValueError, OSError) as exc:
        close()
        print(f"error: {exc}", file=sys.stderr)
        return 2
    close()
    if args.json:
        print(json.dumps(result.as_dict(), indent=2, allow_nan=False))
    else:
        print(format_table(result))
    return 0
