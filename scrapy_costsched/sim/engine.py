"""Run policies on one workload with the same budget and score them exactly.

Time is in days; the planner acts at the start of every cycle (one day).  The
collection starts with copies 1..P cycles old (P: the revisit period the budget
allows), as if a uniform crawler had run before, and nothing is known about
change rates (``rates="learned"``) or the true mean rates are given
(``rates="known"``).  Each cycle every policy gets the budget plus what it left
unspent (or overspent, when validators made visits cheaper or dearer than
planned) in the previous cycle, within one cycle's budget either way.
Cycles before *warmup* are not scored.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from scrapy_costsched.model.grid import expected_freshness, grid_allocation
from scrapy_costsched.model.scoring import OBJECTIVES
from scrapy_costsched.model.validators import NotModifiedTrust, verify_every

from .metrics import Metrics, Scorer
from .policies import POLICIES, Context, KnownRates, LearnedRates, make_policy, policy_class
from .workloads import Workload, WorkloadOptions, make_workload

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["CYCLE", "PolicyResult", "RunResult", "SimConfig", "run_policy", "simulate"]

#: Length of a planning cycle, in days.
CYCLE = 1.0


@dataclass(frozen=True)
class SimConfig:
    """One simulator run (the command line's options)."""

    workload: str = "cho2000"
    pages: int = 2000
    cycles: int = 60
    budget: float = 0.2
    """Per cycle: at most 1, a fraction of the collection's full-fetch cost; above 1, cost units."""
    rates: str = "known"
    objective: str = "freshness"
    policies: tuple[str, ...] = POLICIES
    seed: int = 1
    warmup: int | None = None
    """Cycles left out of the scores; None: half of *cycles*."""
    cv: float = 1.0
    shape: float = 0.7
    values: str = "equal"
    costs: str = "equal"
    validators: float | None = None
    lying_hosts: float = 0.0
    new_pages: float = 0.0
    half_life: float = 180.0
    last_modified: float = 0.0
    """Share of hosts whose full answers carry Last-Modified (learners and Nutch use it; a lying host's is the
    time of the answer)."""
    audit: float = 0.0
    """Share of 304 answers verified with a full fetch, each host's first one included; a host caught
    answering 304 for a changed page loses its validators for a probation (every policy's crawler does
    this alike, with the crawler's own :class:`~scrapy_costsched.model.validators.NotModifiedTrust`)."""

    def __post_init__(self) -> None:
        if self.rates not in ("known", "learned"):
            raise ValueError(f"--rates ({self.rates!r}) must be 'known' or 'learned'")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"--objective ({self.objective!r}) must be one of {', '.join(OBJECTIVES)}")
        if not 0.0 < self.budget < math.inf:
            raise ValueError(f"--budget ({self.budget!r}) must be a positive number")
        if self.cycles < 2:
            raise ValueError(f"--cycles ({self.cycles!r}) must be at least 2")
        if not 0.0 <= self.audit <= 1.0:
            raise ValueError(f"--audit ({self.audit!r}) must be in [0, 1]")
        if not 0 <= self.scored_from < self.cycles:
            raise ValueError(f"--warmup ({self.warmup!r}) must leave at least one of the {self.cycles} cycles scored")
        unknown = [p for p in self.policies if p not in POLICIES]
        if unknown:
            raise ValueError(f"unknown policy {unknown[0]!r}; use one of {', '.join(POLICIES)} or 'all'")

    @property
    def scored_from(self) -> int:
        return self.cycles // 2 if self.warmup is None else self.warmup


@dataclass
class PolicyResult:
    """A policy's metrics plus its spend and its freshness over the oracle's."""

    metrics: Metrics
    spend_per_cycle: float
    oracle_ratio: float | None = None
    objective_ratio: float | None = None
    seconds: float = 0.0

    def as_dict(self, objective: str, scored_cycles: int) -> dict[str, Any]:
        m = self.metrics
        data: dict[str, Any] = {
            "freshness": m.freshness,
            "age": m.age,
            "harmonic_staleness": m.harmonic_staleness,
            "changes_detected": m.changes_detected,
            "missed_changes": m.missed_changes,
            "cost_per_change": None if m.cost_per_change == math.inf else m.cost_per_change,
            "no_change_fetches": m.no_change_fetches,
            "false_not_modified": m.false_not_modified,
            "never_visited": m.never_visited,
            "visits": m.visits,
            "discoveries": m.discoveries,
            "cost": m.cost,
            "spend_per_cycle": self.spend_per_cycle,
            "objective_value": objective_value(m, objective, scored_cycles),
            "oracle_ratio": self.oracle_ratio,
            "objective_ratio": self.objective_ratio,
            "seconds": round(self.seconds, 3),
        }
        if m.freshness_by_kind:
            data["freshness_by_kind"] = m.freshness_by_kind
        return data


def objective_value(metrics: Metrics, objective: str, scored_cycles: int) -> float:
    """Freshness, or value-weighted changes detected per scored cycle."""
    if objective == "changes":
        return metrics.value_changes_detected / scored_cycles
    return metrics.freshness


@dataclass
class RunResult:
    """Every policy's result on one workload, plus the analytical optima for reference."""

    config: SimConfig
    workload: Workload
    budget_per_cycle: float
    revisit_period: int
    policies: dict[str, PolicyResult] = field(default_factory=dict)
    analytical_optimum: float | None = None
    grid_optimum: float | None = None

    def as_dict(self) -> dict[str, Any]:
        config = asdict(self.config)
        config["policies"] = list(self.config.policies)
        scored = self.config.cycles - self.config.scored_from
        return {
            "workload": self.workload.name,
            "workload_params": self.workload.params,
            "pages": len(self.workload.pages),
            "cycles": self.config.cycles,
            "warmup": self.config.scored_from,
            "cycle_days": CYCLE,
            "budget_per_cycle": self.budget_per_cycle,
            "revisit_period": self.revisit_period,
            "rates": self.config.rates,
            "objective": self.config.objective,
            "seed": self.config.seed,
            "config": config,
            "analytical_optimum": {
                "freshness": self.analytical_optimum,
                "grid_freshness": self.grid_optimum,
                "note": "expected value-weighted freshness of the optimal evenly spaced plan for the initial pages' "
                        "mean rates: uncapped in continuous time, and on the grid of cycles (at most one visit per "
                        "cycle) that the oracle realises",
            },
            "policies": {name: r.as_dict(self.config.objective, scored) for name, r in self.policies.items()},
        }


def _budget(config: SimConfig, workload: Workload) -> float:
    total = math.fsum(p.cost for p in workload.pages if p.birth == -math.inf)
    return config.budget * total if config.budget <= 1.0 else config.budget


def run_policy(
    name: str,
    config: SimConfig,
    workload: Workload,
    budget: float,
    revisit_period: float,
    progress: Callable[[int], None] | None = None,
) -> PolicyResult:
    """Run policy *name* on *workload* with *budget* cost units per cycle and score it."""
    import time as clock

    started = clock.perf_counter()
    pages = workload.pages
    truth = KnownRates(pages)
    learn = config.rates == "learned" and policy_class(name).uses_rates
    rates: KnownRates | LearnedRates = LearnedRates(pages, config.half_life) if learn else truth
    ctx = Context(pages, budget, CYCLE, config.objective, rates, truth, revisit_period)
    policy = make_policy(name, ctx)
    scorer = Scorer(pages, config.scored_from * CYCLE, config.cycles * CYCLE)
    births = sorted(range(len(pages)), key=lambda i: pages[i].birth)
    next_birth = 0
    carry = spent_scored = 0.0
    answers: dict[str, NotModifiedTrust] = {}
    every = verify_every(config.audit)
    for cycle in range(config.cycles):
        time = cycle * CYCLE
        born = []
        while next_birth < len(births) and pages[births[next_birth]].birth <= time:
            born.append(births[next_birth])
            next_birth += 1
        if born:
            policy.add(born, time)
        available = budget + carry
        spent = 0.0
        for i in policy.plan(time, available):
            page = pages[i]
            trust = answers.setdefault(page.host, NotModifiedTrust())
            revalidation = page.revalidation_cost
            conditional = revalidation is not None and trust.usable(time)
            if revalidation is not None and conditional and trust.due(every):
                # A verification: a canary validator, answered 304 only by a host that answers 304 to anything.
                outcome = scorer.outcome(i, time, validators=False)
                if trust.verified_by(page.lies, time) == "false":
                    outcome = replace(outcome, cost=outcome.cost + revalidation)
            else:
                outcome = scorer.outcome(i, time, validators=conditional)
            scorer.record(i, time, outcome)
            policy.observe(i, time, outcome)
            spent += outcome.cost
        policy.end_cycle(cycle, time)
        carry = min(max(available - spent, -budget), budget)
        if cycle >= config.scored_from:
            spent_scored += spent
        if progress is not None:
            progress(1)
    metrics = scorer.finish()
    scored_cycles = config.cycles - config.scored_from
    return PolicyResult(metrics, spent_scored / scored_cycles, seconds=clock.perf_counter() - started)


def _analytical(config: SimConfig, workload: Workload, budget: float) -> tuple[float, float]:
    """Expected weighted freshness of the optimal plans (continuous and on the grid) for the initial pages."""
    pages = [p for p in workload.pages if p.birth == -math.inf]
    rates = [p.rate for p in pages]
    weights = [p.value for p in pages]
    costs = [p.cost for p in pages]
    revalidation = [p.revalidation_cost for p in pages]
    total = math.fsum(weights)
    out = []
    for cycle in (0.0, CYCLE):
        freqs = grid_allocation(rates, budget / CYCLE, weights, costs, revalidation, cycle, config.objective).frequencies
        out.append(math.fsum(w * expected_freshness(r, f, cycle)
                             for w, r, f in zip(weights, rates, freqs, strict=True)) / total)
    return out[0], out[1]


def simulate(config: SimConfig, progress: Callable[[int], None] | None = None) -> RunResult:
    """Run every policy of *config* (and the oracle) on its workload.

    *progress* is called with 1 after each simulated cycle of each policy.
    """
    # The initial copies are spread over the revisit period the budget allows, which a budget in cost
    # units only gives once the pages' costs are drawn.
    period = max(1, round(1.0 / config.budget)) if config.budget <= 1.0 else 1
    options = WorkloadOptions(
        pages=config.pages, cycles=config.cycles, seed=config.seed, cv=config.cv, shape=config.shape,
        values=config.values, costs=config.costs, validators=config.validators, lying_hosts=config.lying_hosts,
        new_pages=config.new_pages, last_modified=config.last_modified, revisit_period=period,
    )
    workload = make_workload(config.workload, options)
    budget = _budget(config, workload)
    initial_cost = math.fsum(p.cost for p in workload.pages if p.birth == -math.inf)
    if config.budget > 1.0:
        period = max(1, round(initial_cost / budget))
        workload = make_workload(config.workload, replace(options, revisit_period=period))
    revisit_period = initial_cost / budget * CYCLE
    result = RunResult(config, workload, budget, period)
    names = list(dict.fromkeys(["oracle", *config.policies]))
    for name in names:
        result.policies[name] = run_policy(name, config, workload, budget, revisit_period, progress)
    oracle = result.policies["oracle"]
    scored = config.cycles - config.scored_from
    best = objective_value(oracle.metrics, config.objective, scored)
    for r in result.policies.values():
        r.oracle_ratio = r.metrics.freshness / oracle.metrics.freshness if oracle.metrics.freshness else None
        r.objective_ratio = objective_value(r.metrics, config.objective, scored) / best if best else None
    result.analytical_optimum, result.grid_optimum = _analytical(config, workload, budget)
    return result
