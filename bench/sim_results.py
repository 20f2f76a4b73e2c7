"""Regenerate the simulator results: the tables of docs/results.md, the README's headline, a PNG plot.

Runs ``scrapy_costsched.sim`` for every policy on the Cho & Garcia-Molina 2000 and
gamma (CV 1 and 2) workloads at 5%, 20% and 50% of the pages per cycle, with known
and with learned rates (scored over cycles 31-60; from visit outcomes alone, and with
every host sending an honest Last-Modified), then the ``changes`` objective
(cost per detected change) and the non-Poisson workload, and plots freshness and
cost per detected change against the budget for every policy (``--plot``; needs
matplotlib, the ``bench`` extra).  Runs in parallel over ``--jobs`` processes.

The raw results go to ``--json FILE``; ``--from-json FILE`` renders them again without
simulating.  ``--write-docs docs/results.md`` replaces the text between
``<!-- sim_results:begin -->`` and ``<!-- sim_results:end -->`` there, and
``--write-headline README.md`` the one between ``<!-- sim_headline:begin/end -->``;
without either, the tables go to stdout.

    python bench/sim_results.py --json bench/sim_results.json --plot bench/sim_results.png \\
        --write-docs docs/results.md --write-headline README.md
    python bench/sim_results.py --from-json bench/sim_results.json --write-docs docs/results.md
    python bench/sim_results.py --quick            # small and fast, to try it out
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.docs_section import write_section
from scrapy_costsched.model.grid import grid_allocation
from scrapy_costsched.sim import POLICIES, SimConfig, simulate

WORKLOADS = (("cho2000", "cho2000", 1.0), ("gamma, CV 1", "gamma", 1.0), ("gamma, CV 2", "gamma", 2.0))
BUDGETS = (0.05, 0.2, 0.5)
PLOT_BUDGETS = (0.05, 0.1, 0.2, 0.35, 0.5)
PEERS = ("uniform", "proportional", "nutch", "nutch-nosync", "stormcrawler", "stormcrawler-ccnews", "seed-greedy",
         "seed-greedy-naive")


#: Nutch's and StormCrawler's adaptive intervals, the peers the README's headline names.
ADAPTIVE = ("nutch", "nutch-nosync", "stormcrawler", "stormcrawler-ccnews")
ROBUSTNESS_TITLES = (
    "Non-Poisson pages (bursty, weekly, rate shift), validators with 10% lying hosts; known rates, 20%",
    "The same, rates learned, 20%",
    "The same, rates learned, 5% of conditional visits sent as verifications (a canary validator, `--audit 0.05`), 20%",
    "cho2000, lognormal values, size-correlated costs, validators (304 = 5%), 8% new pages a week; known rates, 20%",
)


@dataclass(frozen=True)
class Plan:
    """Every configuration one invocation runs, and where each table finds its runs."""

    base: SimConfig
    grid: list[tuple[str, float, SimConfig]]
    robustness: list[SimConfig]
    configs: list[SimConfig]
    learned: bool

    @classmethod
    def make(cls, pages: int, cycles: int, seed: int, learned: bool) -> Plan:
        base = SimConfig(pages=pages, cycles=cycles, seed=seed, policies=POLICIES)
        grid = [(label, budget, replace(base, workload=name, cv=cv, budget=budget))
                for label, name, cv in WORKLOADS for budget in BUDGETS]
        configs = [c for _, _, c in grid]
        configs += [replace(c, objective="changes") for c in configs]
        if learned:
            configs += [replace(c, rates="learned", last_modified=lm) for _, _, c in grid for lm in (0.0, 1.0)]
        plot_known = [replace(base, budget=b) for b in PLOT_BUDGETS if b not in BUDGETS]
        configs += plot_known + [replace(c, objective="changes") for c in plot_known]
        robustness = [
            replace(base, workload="nonpoisson", budget=0.2),
            replace(base, workload="nonpoisson", budget=0.2, rates="learned"),
            replace(base, workload="nonpoisson", budget=0.2, rates="learned", audit=0.05),
            replace(base, workload="cho2000", budget=0.2, values="lognormal", costs="size", validators=0.05,
                    new_pages=0.08),
        ]
        return cls(base, grid, robustness, configs + robustness, learned)


def run_one(config: SimConfig) -> dict[str, Any]:
    """One policy (plus the oracle) on one configuration: its JSON result."""
    return simulate(config).as_dict()


def run_all(configs: list[SimConfig], jobs: int) -> list[dict[str, Any]]:
    """Every configuration, one process per (configuration, policy) so that slow learners spread out."""
    tasks = [replace(c, policies=(p,)) for c in configs for p in c.policies]
    results: list[dict[str, Any]] = []
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for done, result in enumerate(pool.map(run_one, tasks), 1):
            results.append(result)
            print(f"\r{done}/{len(tasks)} runs", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    merged: list[dict[str, Any]] = []
    for config in configs:
        data: dict[str, Any] | None = None
        for task, result in zip(tasks, results, strict=True):
            if replace(task, policies=config.policies) != config:
                continue
            if data is None:
                data = result
            else:
                data["policies"].update(result["policies"])
        assert data is not None
        data["config"]["policies"] = list(config.policies)
        merged.append(data)
    return merged


def ratio_table(title: str, results: dict[tuple[str, float], dict[str, Any]], policies: tuple[str, ...]) -> str:
    """Freshness over the oracle's, one row per policy, one column per workload and budget."""
    columns = [(label, budget) for label, _, _ in WORKLOADS for budget in BUDGETS]
    header = "| policy | " + " | ".join(f"{label} {budget:.0%}" for label, budget in columns) + " |"
    lines = [f"**{title}** (value-weighted freshness / oracle's; oracle's freshness in the last row)", "",
             header, "|---" * (len(columns) + 1) + "|"]
    for policy in policies:
        cells = []
        for column in columns:
            ratios = {p: r["oracle_ratio"] for p, r in results[column]["policies"].items() if p != "oracle"}
            value = ratios[policy]
            best = max(ratios.values())
            cells.append(f"**{value:.3f}**" if value == best else f"{value:.3f}")
        lines.append(f"| {policy} | " + " | ".join(cells) + " |")
    lines.append("| *oracle freshness* | " + " | ".join(
        f"{results[c]['policies']['oracle']['freshness']:.4f}" for c in columns) + " |")
    lines.append("| *grid optimum (expected)* | " + " | ".join(
        f"{results[c]['analytical_optimum']['grid_freshness']:.4f}" for c in columns) + " |")
    return "\n".join(lines)


def changes_table(results: dict[tuple[str, float], dict[str, Any]], policies: tuple[str, ...]) -> str:
    columns = [(label, budget) for label, _, _ in WORKLOADS for budget in BUDGETS]
    header = "| policy | " + " | ".join(f"{label} {budget:.0%}" for label, budget in columns) + " |"
    lines = ["**Cost per detected change, `--objective changes`** (lower is better; known rates)", "",
             header, "|---" * (len(columns) + 1) + "|"]
    for policy in ("oracle", *policies):
        cells = []
        for column in columns:
            costs = {p: r["cost_per_change"] for p, r in results[column]["policies"].items()}
            value = costs[policy]
            best = min(v for p, v in costs.items() if p != "oracle" and v is not None)
            text = "-" if value is None else f"{value:.3f}"
            cells.append(f"**{text}**" if value == best and policy != "oracle" else text)
        lines.append(f"| {policy} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def detail_table(title: str, data: dict[str, Any]) -> str:
    kinds = sorted({k for r in data["policies"].values() for k in r.get("freshness_by_kind", {})})
    lines = [f"**{title}**", "",
             "| policy | freshness | /oracle | age (days) | harmonic | detected | missed | cost/change | "
             "no-change | 304 on change | never visited |" + "".join(f" {k} |" for k in kinds),
             "|---" * (11 + len(kinds)) + "|"]
    rows = sorted(data["policies"].items(), key=lambda kv: -kv[1]["freshness"])
    for name, r in rows:
        cost = "-" if r["cost_per_change"] is None else f"{r['cost_per_change']:.3f}"
        by_kind = r.get("freshness_by_kind", {})
        lines.append(f"| {name} | {r['freshness']:.4f} | {r['oracle_ratio']:.3f} | {r['age']:.2f} | "
                     f"{r['harmonic_staleness']:.4f} | {r['changes_detected']} | {r['missed_changes']} | {cost} | "
                     f"{r['no_change_fetches']} | {r['false_not_modified']} | {r['never_visited']} |"
                     + "".join(f" {by_kind[k]:.3f} |" if k in by_kind else " - |" for k in kinds))
    return "\n".join(lines)


def plot(path: Path, freshness: dict[float, dict[str, Any]], changes: dict[float, dict[str, Any]],
         title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    budgets = sorted(freshness)
    for policy in ("oracle", "costsched", *PEERS):
        style = {"linewidth": 2.5} if policy in ("oracle", "costsched") else {"linewidth": 1.2, "alpha": 0.8}
        left.plot([100 * b for b in budgets], [freshness[b]["policies"][policy]["freshness"] for b in budgets],
                  marker="o", label=policy, linestyle="--" if policy == "oracle" else "-", **style)
        costs = [changes[b]["policies"][policy]["cost_per_change"] for b in budgets]
        right.plot([100 * b for b in budgets], [math.nan if c is None else c for c in costs], marker="o",
                   label=policy, linestyle="--" if policy == "oracle" else "-", **style)
    left.set(xlabel="budget (% of pages per cycle)", ylabel="value-weighted freshness",
             title="freshness (--objective freshness)")
    right.set(xlabel="budget (% of pages per cycle)", ylabel="cost per detected change",
              title="cost per detected change (--objective changes)")
    left.grid(alpha=0.3)
    right.grid(alpha=0.3)
    right.legend(fontsize=8, loc="upper left")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def research_vector() -> str:
    freqs = grid_allocation([1, 2, 3, 4, 5], 5.0).frequencies
    return ("Oracle on the published example (λ = 1..5/day, 5 syncs/day): f = "
            + " ".join(f"{f:.3f}" for f in freqs) + " (expected 1.150 1.358 1.354 1.138 0.000)")


def config_of(result: dict[str, Any]) -> SimConfig:
    """The configuration a stored result was run with (as the script's plan spells it)."""
    return SimConfig(**{**result["config"], "policies": tuple(result["config"]["policies"])})


@dataclass(frozen=True)
class Document:
    """One invocation's results as ``--json`` stores them: enough to render every table again."""

    pages: int
    cycles: int
    seed: int
    learned: bool
    seconds: float
    jobs: int
    cpus: int
    plot: str | None
    runs: list[dict[str, Any]]

    @classmethod
    def load(cls, path: Path) -> Document:
        return cls(**json.loads(path.read_text(encoding="utf-8")))

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1, sort_keys=True) + "\n", encoding="utf-8")

    @property
    def plan(self) -> Plan:
        return Plan.make(self.pages, self.cycles, self.seed, self.learned)

    def results(self) -> dict[SimConfig, dict[str, Any]]:
        return {config_of(r): r for r in self.runs}

    def command(self) -> str:
        return (f"python bench/sim_results.py --pages {self.pages} --cycles {self.cycles} --seed {self.seed}"
                + ("" if self.learned else " --skip-learned"))


def by_key(plan: Plan, results: dict[SimConfig, dict[str, Any]], objective: str, rates: str,
           last_modified: float = 0.0) -> dict[tuple[str, float], dict[str, Any]]:
    return {(label, budget): results[replace(c, objective=objective, rates=rates, last_modified=last_modified)]
            for label, budget, c in plan.grid}


def ratios(results: dict[tuple[str, float], dict[str, Any]], policy: str) -> list[float]:
    return [float(r["policies"][policy]["oracle_ratio"]) for r in results.values()]


def summary_line(results: dict[tuple[str, float], dict[str, Any]]) -> str:
    """costsched's range, how often it leads, and the adaptive peers' range: the figures the prose quotes."""
    own = ratios(results, "costsched")
    first = sum(
        r["policies"]["costsched"]["oracle_ratio"]
        >= max(v["oracle_ratio"] for p, v in r["policies"].items() if p != "oracle")
        for r in results.values())
    adaptive = [x for p in ADAPTIVE for x in ratios(results, p)]
    return (f"costsched keeps {min(own):.3f}–{max(own):.3f} of the oracle's freshness and is first (or tied) in "
            f"{first} of {len(results)} columns; Nutch's and StormCrawler's adaptive intervals keep "
            f"{min(adaptive):.3f}–{max(adaptive):.3f}.")


def render(document: Document, image: str | None = None) -> str:
    """Every table, as Markdown; *image* is the plot's path relative to the file the tables go in."""
    plan, results = document.plan, document.results()
    policies = tuple(p for p in POLICIES if p != "oracle")
    parts = [
        (f"{document.pages} pages, {document.cycles} one-day cycles, scored over cycles "
         f"{document.cycles // 2 + 1}–{document.cycles}, seed {document.seed}; generated by `{document.command()}` "
         f"(it ran for {document.seconds:.0f} s with --jobs {document.jobs} on {document.cpus} CPUs)."),
        research_vector(),
    ]
    known = by_key(plan, results, "freshness", "known")
    parts += [ratio_table("Known rates", known, policies), summary_line(known)]
    if plan.learned:
        outcomes = by_key(plan, results, "freshness", "learned")
        parts += [ratio_table("Rates learned from scratch, from visit outcomes", outcomes, policies),
                  summary_line(outcomes)]
        dated = by_key(plan, results, "freshness", "learned", 1.0)
        parts += [ratio_table("Rates learned from scratch, every host sending an honest Last-Modified "
                              "(`--last-modified 1`)", dated, policies), summary_line(dated)]
    parts.append(changes_table(by_key(plan, results, "changes", "known"), policies))
    parts += [detail_table(title, results[config])
              for title, config in zip(ROBUSTNESS_TITLES, plan.robustness, strict=True)]
    if image:
        parts.append(f"![freshness and cost per change against budget, cho2000, known rates]({image})")
    return "\n\n".join(parts) + "\n"


def headline(document: Document, results_page: str) -> str:
    """The README's one result: known rates, costsched against the adaptive re-crawl intervals."""
    known = by_key(document.plan, document.results(), "freshness", "known")
    own = ratios(known, "costsched")
    adaptive = [x for p in ADAPTIVE for x in ratios(known, p)]
    return (f"In the bundled simulator ({document.pages} pages whose change rates follow Cho & Garcia-Molina's "
            f"measurements or gamma distributions, budgets of "
            f"{', '.join(f'{b:.0%}' for b in BUDGETS[:-1])} and {BUDGETS[-1]:.0%} of the pages a day), at the same budget and with known change rates, costsched's ranking keeps "
            f"**{min(own):.3f}–{max(own):.3f}** of the optimum's freshness, where Nutch's and StormCrawler's "
            f"adaptive intervals keep {min(adaptive):.2f}–{max(adaptive):.2f} "
            f"(`{document.command()}`; [all results, rates learned from scratch, where it falls short]"
            f"({results_page}#the-simulator)).")


def docs_image(document: Document, docs: Path) -> str | None:
    """The plot's path as a link from *docs* (both relative to the repository root)."""
    if document.plot is None:
        return None
    return Path(os.path.relpath(ROOT / document.plot, (ROOT / docs).resolve().parent)).as_posix()


def results_link(readme: Path, docs: Path = Path("docs/results.md")) -> str:
    return Path(os.path.relpath(ROOT / docs, (ROOT / readme).resolve().parent)).as_posix()


def simulate_all(args: argparse.Namespace) -> Document:
    plan = Plan.make(args.pages, args.cycles, args.seed, not args.skip_learned)
    started = time.perf_counter()
    runs = run_all(plan.configs, args.jobs)
    return Document(pages=args.pages, cycles=args.cycles, seed=args.seed, learned=not args.skip_learned,
                    seconds=round(time.perf_counter() - started), jobs=args.jobs, cpus=os.cpu_count() or 1,
                    plot=None if args.plot is None else Path(os.path.relpath(args.plot.resolve(), ROOT)).as_posix(),
                    runs=runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--cycles", type=int, default=60)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--plot", type=Path, default=None, help="write the PNG plot here")
    parser.add_argument("--skip-learned", action="store_true", help="known rates only (much faster)")
    parser.add_argument("--quick", action="store_true", help="300 pages, 20 cycles: a smoke run")
    parser.add_argument("--json", type=Path, metavar="FILE", help="store the raw results here")
    parser.add_argument("--from-json", type=Path, metavar="FILE",
                        help="render the results stored in FILE instead of simulating")
    parser.add_argument("--write-docs", type=Path, metavar="FILE",
                        help="replace the sim_results section of FILE (docs/results.md) with the tables")
    parser.add_argument("--write-headline", type=Path, metavar="FILE",
                        help="replace the sim_headline section of FILE (README.md) with the headline")
    args = parser.parse_args()
    if args.quick:
        args.pages, args.cycles = 300, 20
    if args.from_json:
        document = Document.load(args.from_json)
        if args.plot is not None:
            document = replace(document, plot=Path(os.path.relpath(args.plot.resolve(), ROOT)).as_posix())
    else:
        document = simulate_all(args)
    if args.json:
        document.save(args.json)
    if args.plot:
        plan, results = document.plan, document.results()
        cho = replace(plan.base, workload="cho2000")
        fresh = {b: results[replace(cho, budget=b)] for b in PLOT_BUDGETS}
        caught = {b: results[replace(cho, budget=b, objective="changes")] for b in PLOT_BUDGETS}
        plot(args.plot, fresh, caught, f"cho2000, {document.pages} pages, known rates, cycles "
                                       f"{document.cycles // 2 + 1}-{document.cycles}")
    if args.write_docs:
        write_section(args.write_docs, "sim_results", render(document, docs_image(document, args.write_docs)))
    if args.write_headline:
        write_section(args.write_headline, "sim_headline", headline(document, results_link(args.write_headline)))
    if not (args.write_docs or args.write_headline):
        print(render(document, document.plot))
    print(f"({document.seconds:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
