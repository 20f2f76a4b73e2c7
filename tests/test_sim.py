"""The policy simulator and the model code it added: oracle, metrics, policies, replay, CLI."""

from __future__ import annotations

import doctest
import importlib
import json
import math
import random
import subprocess
import sys
from array import array
from dataclasses import replace
from decimal import Decimal, getcontext
from pathlib import Path
from typing import Any

import pytest

from scrapy_costsched.model import ChangeStats, RatePrior, estimate_rate, mle_rate
from scrapy_costsched.model.freshness import _excess, cycle_utility, seed_priority, utility, utility_fraction
from scrapy_costsched.model.grid import (
    _period_index,
    _scaled_cycle_utility,
    expected_freshness,
    expected_spend,
    frequency_at,
    grid_allocation,
)
from scrapy_costsched.model.learning import observe
from scrapy_costsched.model.scoring import Candidate, affordable_prefix, rank, score
from scrapy_costsched.sim import (
    Page,
    SimConfig,
    harmonic,
    load_bing_history,
    load_jsonl,
    make_workload,
    page_metrics,
    simulate,
)
from scrapy_costsched.sim.metrics import Outcome, Scorer
from scrapy_costsched.sim.policies import Context, KnownRates, LearnedRates, make_policy, proportional_frequencies
from scrapy_costsched.sim.workloads import WorkloadOptions

DATA = Path(__file__).resolve().parent / "sim_data"
RESEARCH_RATES = [1.0, 2.0, 3.0, 4.0, 5.0]
RESEARCH_FREQUENCIES = [1.150, 1.358, 1.354, 1.138, 0.0]


def page(changes: list[float], last_visit: float | None = 0.0, **kwargs: object) -> Page:
    args: dict[str, object] = {"key": "a", "value": 1.0, "cost": 1.0, "rate": 1.0}
    args.update(kwargs)
    return Page(changes=array("d", changes), last_visit=last_visit, **args)  # type: ignore[arg-type]


# -- the oracle against the published example (research.md section 1) ---------------


def test_oracle_analytical_matches_published_example() -> None:
    result = grid_allocation(RESEARCH_RATES, 5.0)
    assert result.frequencies == pytest.approx(RESEARCH_FREQUENCIES, abs=1e-3)
    assert result.frequencies[4] == 0.0
    assert result.multiplier == pytest.approx(0.21643, rel=1e-4)
    assert frequency_at(result.multiplier, 1.0, 1.0, 1.0) == pytest.approx(1.150, abs=1e-3)


def test_oracle_policy_on_a_fine_grid_matches_published_example() -> None:
    cycle = 1e-4
    pages = [page([], rate=r, key=f"p{i}") for i, r in enumerate(RESEARCH_RATES)]
    truth = KnownRates(pages)
    ctx = Context(pages, 5.0 * cycle, cycle, "freshness", truth, truth, revisit_period=1.0)
    oracle = make_policy("oracle", ctx)
    oracle.add(range(5), 0.0)
    assert oracle.frequency == pytest.approx(RESEARCH_FREQUENCIES, abs=1e-3)  # type: ignore[attr-defined]


def test_grid_optimum_is_capped_and_spends_the_budget() -> None:
    rng = random.Random(4)
    rates = [rng.gammavariate(1.0, 1.0) for _ in range(200)]
    result = grid_allocation(rates, 50.0, cycle=1.0)
    assert max(result.frequencies) <= 1.0 + 1e-12
    assert math.fsum(result.frequencies) == pytest.approx(50.0, rel=1e-9)
    on_grid = math.fsum(expected_freshness(r, f, 1.0) for r, f in zip(rates, result.frequencies, strict=True))
    uncapped = grid_allocation(rates, 50.0)
    free = math.fsum(expected_freshness(r, f) for r, f in zip(rates, uncapped.frequencies, strict=True))
    assert on_grid <= free  # the grid can only lose
    # Any other plan on the grid with the same spend does worse: move budget between two pages' periods.
    for _ in range(20):
        i, j = rng.sample(range(200), 2)
        freqs = list(result.frequencies)
        step = 0.01
        if freqs[i] + step > 1.0 or freqs[j] - step < 0.0:
            continue
        freqs[i] += step
        freqs[j] -= step
        moved = math.fsum(expected_freshness(r, f, 1.0) for r, f in zip(rates, freqs, strict=True))
        assert moved <= on_grid + 1e-12


def test_grid_period_is_the_smallest_that_reaches_the_threshold() -> None:
    rng = random.Random(7)
    for _ in range(300):
        a, y = math.exp(rng.uniform(-6.0, 2.0)), rng.uniform(1e-4, 0.999)
        h = _excess(a)
        k = _period_index(a, h, y)
        assert _scaled_cycle_utility(a, h, k) >= y
        assert k == 1 or _scaled_cycle_utility(a, h, k - 1) < y
    # A nearly static page: periods of ~1e13 cycles, where the first guess is millions of steps off.
    a, y = 1.3e-13, 0.3
    k = _period_index(a, _excess(a), y)
    assert _scaled_cycle_utility(a, _excess(a), k) >= y > _scaled_cycle_utility(a, _excess(a), k - 1)
    allocation = grid_allocation([1.3e-13, 0.5, 2.0, 30.0], 2.0, cycle=1.0, objective="changes")
    assert math.fsum(allocation.frequencies) == pytest.approx(2.0, rel=1e-9)  # the budget, spent


def test_validator_optimum_satisfies_its_kkt_condition() -> None:
    rates, weights = [0.5, 1.0, 2.0, 4.0], [1.0, 2.0, 1.0, 3.0]
    c304 = [0.05, 0.05, 0.2, 0.05]
    result = grid_allocation(rates, 2.0, weights=weights, revalidation_costs=c304)
    mu = result.multiplier
    assert math.fsum(expected_spend(r, f, 1.0, c) for r, f, c in zip(rates, result.frequencies, c304, strict=True)) \
        == pytest.approx(2.0, rel=1e-9)
    for r, w, c, f in zip(rates, weights, c304, result.frequencies, strict=True):
        if f > 0.0:  # g(x) = mu·c304 / (w/rate - mu·(c - c304)), x = rate / f
            assert utility_fraction(r / f) == pytest.approx(mu * c / (w / r - mu * (1.0 - c)), rel=1e-6)


# -- discrete-cycle utility and the faster series -----------------------------------


def test_cycle_utility_is_the_chord_and_lies_between_utilities() -> None:
    rng = random.Random(7)

    def fresh_time(rate: float, t: float) -> float:
        return -math.expm1(-rate * t) / rate

    for _ in range(200):
        rate, t, c = math.exp(rng.uniform(-4, 3)), math.exp(rng.uniform(-2, 3)), math.exp(rng.uniform(-2, 1))
        chord = fresh_time(rate, t) - t * (fresh_time(rate, t + c) - fresh_time(rate, t)) / c
        value = cycle_utility(rate, t, c)
        assert value == pytest.approx(chord, rel=1e-9, abs=1e-15)
        assert utility(rate, t) <= value * (1 + 1e-12)
        assert value <= utility(rate, t + c) * (1 + 1e-12)
    assert cycle_utility(1.0, 2.0, 1e-9) == pytest.approx(utility(1.0, 2.0), rel=1e-8)


def test_series_are_exact_to_rounding() -> None:
    getcontext().prec = 40
    rng = random.Random(3)
    for _ in range(300):
        x = math.exp(rng.uniform(math.log(1e-9), math.log(0.5)))
        d = Decimal(x)
        g = 1 - (1 + d) * (-d).exp()
        h = d - (1 - (-d).exp())
        assert utility_fraction(x) == pytest.approx(float(g), rel=1e-15)
        assert _excess(x) == pytest.approx(float(h), rel=1e-15)


# -- the ranking: validators, posteriors, speed-up kept the semantics ----------------


def test_rank_orders_by_score_with_ties_by_key_and_drops_nothing_to_gain() -> None:
    rng = random.Random(11)
    candidates = []
    for i in range(300):
        rate = math.exp(rng.uniform(-3, 2))
        bounds: tuple[float | None, float | None] = (rate / 2, rate * 3) if i % 3 == 0 else (None, None)
        candidates.append(Candidate(f"k{rng.randrange(10**6):06d}", rng.choice([0.0, 1.0, 2.0]), rate,
                                    rng.choice([0.0, 1.0, 2.0, math.inf]), rng.choice([1.0, 2.0]),
                                    rng.choice([None, 0.1]), *bounds))
    for cycle in (0.0, 1.0):
        for objective in ("freshness", "changes"):
            ranked = rank(candidates, objective, cycle=cycle)
            expected = sorted(((score(c, objective, cycle), c) for c in candidates), key=lambda sc: (-sc[0], sc[1].key))
            assert ranked == [(s, c) for s, c in expected if s > 0.0]


def test_rank_rejects_what_score_rejects() -> None:
    with pytest.raises(ValueError, match="cost must be positive"):
        rank([Candidate("a", 1.0, 1.0, 1.0, 0.0)])
    with pytest.raises(ValueError, match="rate_low and rate_high"):
        rank([Candidate("a", 1.0, 1.0, 1.0, 1.0, None, 2.0, 1.0)])
    with pytest.raises(ValueError, match="revalidation_cost"):
        rank([Candidate("a", 1.0, 1.0, 1.0, 1.0, 2.0)])


def test_validators_price_by_marginal_and_expected_cost() -> None:
    c = Candidate("a", 1.0, 1.0, 1.0, 1.0, 0.05)
    u = utility(1.0, 1.0)
    assert score(c) == pytest.approx(u / (0.05 + 0.95 * u), rel=1e-14)
    assert c.expected_cost == pytest.approx(0.05 + 0.95 * (1.0 - math.exp(-1.0)), rel=1e-14)
    cheap = Candidate("b", 1.0, 0.01, 1.0, 1.0, 0.05)
    assert [x.key for x in affordable_prefix(rank([c, cheap]), 0.71)] == ["a", "b"]  # 0.650 + 0.060


# -- metrics, exact on handmade change sequences ------------------------------------


def test_metrics_freshness_age_and_changes() -> None:
    m = page_metrics(page([1.0, 3.0]), [2.0], 0.0, 4.0)
    assert (m.freshness, m.age, m.changes_detected, m.missed_changes) == (0.5, 0.25, 1, 1)
    assert m.harmonic_staleness == 0.5  # H(1) at the visit, H(1) pending at the end, over 4 page-days
    assert (m.visits, m.cost, m.cost_per_change, m.no_change_fetches, m.never_visited) == (1, 1.0, 1.0, 0, 0)


def test_metrics_several_changes_in_one_interval() -> None:
    m = page_metrics(page([0.5, 1.0, 1.5]), [2.0], 0.0, 3.0)
    assert m.freshness == 0.5  # [0, 0.5) and [2, 3)
    assert m.age == 1.125 / 3.0  # stale from 0.5 to 2
    assert (m.changes_detected, m.missed_changes) == (1, 2)
    assert m.harmonic_staleness == pytest.approx(harmonic(3) / 3.0, rel=1e-15)
    assert harmonic(3) == pytest.approx(11.0 / 6.0, rel=1e-15)


def test_metrics_lying_validators_keep_the_copy_stale() -> None:
    m = page_metrics(page([1.0], revalidation_cost=0.1, lies=True), [2.0, 3.0], 0.0, 4.0, validators=True)
    assert m.freshness == 0.25
    assert m.age == 4.5 / 4.0
    assert (m.changes_detected, m.false_not_modified, m.missed_changes, m.no_change_fetches) == (0, 2, 1, 0)
    assert m.cost == pytest.approx(0.2)


def test_metrics_honest_validators() -> None:
    m = page_metrics(page([1.0], revalidation_cost=0.1), [0.5, 2.0], 0.0, 3.0, validators=True)
    assert (m.no_change_fetches, m.changes_detected) == (1, 1)
    assert m.cost == pytest.approx(1.1)
    assert m.cost_per_change == pytest.approx(1.1)
    assert m.freshness == 2.0 / 3.0  # stale during [1, 2)


def test_metrics_window_and_new_pages() -> None:
    before = page_metrics(page([1.0]), [2.0], 3.0, 5.0)
    assert (before.freshness, before.visits, before.never_visited, before.missed_changes) == (1.0, 0, 1, 0)
    new = page_metrics(page([], last_visit=None, birth=1.0), [3.0], 0.0, 4.0)
    assert new.freshness == 1.0 / 3.0  # alive 3 days, fresh from the first download
    assert new.age == 2.0 / 3.0  # no copy from birth to 3
    assert (new.discoveries, new.changes_detected) == (1, 0)


# -- the policies' update rules -----------------------------------------------------


def context(pages: list[Page], budget: float = 1.0, period: float = 4.0, rates: str = "known") -> Context:
    truth = KnownRates(pages)
    learned = truth if rates == "known" else LearnedRates(pages)
    return Context(pages, budget, 1.0, "freshness", learned, truth, revisit_period=period)


CHANGED = Outcome(200, 1.0, changed=True, truly_changed=True)
UNCHANGED = Outcome(200, 1.0, changed=False, truly_changed=False)


def test_nutch_adaptive_fetch_schedule() -> None:
    for name, next_after_unchanged in (("nutch", 7.0 - 0.3 * 4.0 + 4.48), ("nutch-nosync", 7.0 + 4.48)):
        policy = make_policy(name, context([page([], last_visit=-1.0)]))
        policy.add([0], 0.0)
        assert policy.next_fetch[0] == 3.0  # type: ignore[attr-defined]
        policy.observe(0, 3.0, CHANGED)
        assert policy.interval[0] == pytest.approx(3.2)  # type: ignore[attr-defined]
        assert policy.next_fetch[0] == pytest.approx(6.2)  # type: ignore[attr-defined]
        policy.observe(0, 7.0, UNCHANGED)
        assert policy.interval[0] == pytest.approx(4.48)  # type: ignore[attr-defined]
        assert policy.next_fetch[0] == pytest.approx(next_after_unchanged)  # type: ignore[attr-defined]
    policy = make_policy("nutch", context([page([], last_visit=-1.0)]))
    policy.add([0], 0.0)
    for day in range(1, 200):
        policy.observe(0, float(day), CHANGED)
    assert policy.interval[0] == pytest.approx(60.0 / 86400.0)  # type: ignore[attr-defined]


def test_stormcrawler_adaptive_scheduler() -> None:
    policy = make_policy("stormcrawler", context([page([], last_visit=-1.0)]))
    policy.add([0], 0.0)
    policy.observe(0, 3.0, CHANGED)
    assert policy.interval[0] == pytest.approx(0.5 * 4.0 + 0.5 / 24.0)  # type: ignore[attr-defined]
    assert policy.next_fetch[0] == pytest.approx(3.0 + 0.5 * 4.0 + 0.5 / 24.0)  # type: ignore[attr-defined]
    for day in range(4, 20):
        policy.observe(0, float(day), UNCHANGED)
    assert policy.interval[0] == 14.0  # type: ignore[attr-defined]
    news = make_policy("stormcrawler-ccnews", context([page([], last_visit=-1.0)]))
    news.add([0], 0.0)
    news.observe(0, 3.0, CHANGED)
    assert news.interval[0] == pytest.approx(0.8 * 4.0 + 0.2 * 1.5 / 24.0)  # type: ignore[attr-defined]


def test_uniform_visits_least_recently_visited_first() -> None:
    pages = [page([], last_visit=v, key=f"p{i}") for i, v in enumerate([-3.0, -1.0, -2.0])]
    policy = make_policy("uniform", context(pages, budget=2.0))
    policy.add(range(3), 0.0)
    assert policy.plan(0.0, 2.0) == [0, 2]


def test_proportional_water_fills_and_uses_credits() -> None:
    assert proportional_frequencies([1.0, 2.0, 8.0], [1.0, 1.0, 1.0], 2.0, 1.0) == pytest.approx([1 / 3, 2 / 3, 1.0])
    assert proportional_frequencies([1.0, 0.0], [1.0, 1.0], 5.0, 1.0) == [1.0, 0.0]
    pages = [page([], rate=r, last_visit=-2.0, key=f"p{i}") for i, r in enumerate([0.1, 1.0, 0.5])]
    policy = make_policy("proportional", context(pages, budget=1.0))
    policy.add(range(3), 0.0)
    assert policy.plan(0.0, 1.0) == [1]  # the fastest page has the most credit


def test_seed_greedy_fair_and_naive_intervals() -> None:
    pages = [page([], rate=2.0, last_visit=-3.0, key="fast"), page([], rate=0.05, last_visit=-3.0, key="slow")]
    ctx = context(pages, budget=1.0, period=10.0)
    for name, interval, first in (("seed-greedy", 10.0, 1), ("seed-greedy-naive", 1.0, 0)):
        policy = make_policy(name, ctx)
        policy.add(range(2), 0.0)
        priorities = [seed_priority(1.0, p.rate, 3.0, 1.0, interval) for p in pages]
        assert max(range(2), key=priorities.__getitem__) == first
        assert policy.plan(0.0, 1.0) == [first]


def test_costsched_plans_with_rank_and_affordable_prefix() -> None:
    rng = random.Random(2)
    pages = [page([], rate=math.exp(rng.uniform(-3, 1)), value=rng.uniform(0.5, 2), last_visit=-float(rng.randint(1, 9)),
                  key=f"p{i:02d}") for i in range(40)]
    policy = make_policy("costsched", context(pages, budget=7.0))
    policy.add(range(40), 0.0)
    candidates = [Candidate(p.key, p.value, p.rate, -(p.last_visit or 0.0), p.cost) for p in pages]
    expected = [int(c.key[1:]) for c in affordable_prefix(rank(candidates, cycle=1.0), 7.0)]
    assert policy.plan(0.0, 7.0) == expected


def test_learned_rates_mirror_the_tracker() -> None:
    stats, mirror = ChangeStats(), ChangeStats()
    for interval, changed in [(1.0, True), (3.0, False), (2.5, True)]:
        observe(stats, interval, changed, 180.0)
        mirror.add(interval, changed, decay=0.5 ** (interval / 180.0))
    assert stats == mirror
    learned = LearnedRates([page([])])
    prior_median = learned.rate(0, 0.0)
    assert prior_median == pytest.approx(0.1)
    learned.observe(0, 1.0, 1.0, True, None)
    assert learned.rate(0, 0.0) > prior_median
    low, high = learned.bounds(0)
    assert low < learned.rate(0, 0.0) < high


def test_a_dated_change_tells_the_rate() -> None:
    # Changed within 20 days says little about a fast page; Last-Modified 2 days ago says about 1/2 per day.
    prior = RatePrior(0.0, 2.0)
    undated, dated = ChangeStats(), ChangeStats()
    observe(undated, 20.0, True, math.inf)
    observe(dated, 20.0, True, math.inf, modified_ago=2.0, resolution=1.0 / 86400.0)
    assert dated.unchanged_time == 2.0
    loose, sharp = estimate_rate(undated, prior), estimate_rate(dated, prior)
    assert sharp.low < 0.5 < sharp.high
    assert sharp.high / sharp.low < loose.high / loose.low / 5.0
    # A date before the previous visit contradicts the history and is not used; one ahead of the clock is now.
    odd, ahead = ChangeStats(), ChangeStats()
    observe(odd, 20.0, True, math.inf, modified_ago=25.0)
    assert odd == undated
    observe(ahead, 20.0, True, math.inf, modified_ago=-3.0, resolution=1.0 / 86400.0)
    assert (ahead.unchanged_time, ahead.changed) == (0.0, {1.157e-05: 1.0})  # bins keep 4 digits


def test_last_modified_in_outcomes_and_for_learners() -> None:
    options = WorkloadOptions(pages=200, cycles=10, seed=2)
    plain = make_workload("gamma", options).pages
    dated = make_workload("gamma", replace(options, last_modified=0.5)).pages
    assert [(p.rate, list(p.changes)) for p in plain] == [(p.rate, list(p.changes)) for p in dated]
    hosts = {p.host: p.last_modified for p in dated}
    assert sum(hosts.values()) == round(0.5 * len(hosts))
    scorer = Scorer([page([1.0, 3.0], last_modified=True), page([1.0, 3.0])], 0.0, 10.0)
    assert [scorer.outcome(i, 4.0, validators=False).modified for i in (0, 1)] == [3.0, None]
    # Nutch's sync_delta pulls toward Last-Modified; learners take the dated change.
    nutch = make_policy("nutch", context([page([], last_visit=-1.0)]))
    nutch.add([0], 0.0)
    nutch.observe(0, 3.0, replace(CHANGED, modified=2.0))
    assert nutch.modified[0] == 2.0  # type: ignore[attr-defined]
    # A lying host stamps every answer with its time: audited volatile, its changes are never dated.
    liar = LearnedRates([page([2.5 * k for k in range(1, 40)], last_visit=0.0, last_modified=True, lies=True)])
    for visit in range(1, 60, 3):
        liar.observe(0, float(visit), 3.0 if visit > 1 else 1.0, True, liar.pages[0].modified_at(float(visit)))
    assert liar.stats[0] is not None
    assert liar.stats[0].unchanged_time == 0.0
    assert not liar.trust[""].trusted
    # An initial copy keeps the date its fetch saw, so the first visit can already audit the host.
    copies = LearnedRates([page([-5.0, -2.0, 3.0], last_visit=-1.0, last_modified=True), page([-5.0], last_visit=-1.0),
                           page([3.0], last_visit=-1.0, last_modified=True)])
    assert copies.dates == [-2.0, None, None]
    # ... once the host's dates have agreed with what its pages' visits found (as the tracker does).
    learner = make_policy("costsched", context([page([], last_visit=0.0) for _ in range(2)], rates="learned"))
    rates = learner.ctx.rates
    assert isinstance(rates, LearnedRates)
    learner.observe(0, 20.0, replace(CHANGED, modified=18.0))  # no date to audit against yet: not dated
    assert rates.stats[0] is not None
    assert rates.stats[0].unchanged_time == 0.0
    for day in (21.0, 22.0, 23.0):
        learner.observe(0, day, replace(UNCHANGED, modified=18.0))  # the same date, the same record: agrees
    assert rates.trust[""].trusted
    learner.observe(1, 5.0, replace(CHANGED, modified=4.0))  # the host is trusted: dated 1 day ago
    assert rates.stats[1] is not None
    assert rates.stats[1].unchanged_time == pytest.approx(1.0)
    learner.observe(1, 9.0, replace(CHANGED, modified=7.0))
    dated_days = rates.stats[1].unchanged_time
    assert dated_days == pytest.approx(3.0, rel=0.02)  # 1 day (faded by the half-life) + 2 days
    learner.observe(1, 12.0, replace(CHANGED, modified=7.0))  # changed under the same date: trust ends
    assert not rates.trust[""].trusted
    assert rates.stats[1].unchanged_time <= dated_days


def test_learning_from_last_modified_beats_learning_from_outcomes() -> None:
    ratios = [simulate(SimConfig(workload="gamma", pages=200, cycles=30, budget=0.1, policies=("costsched",),
                                 rates="learned", last_modified=share)).policies["costsched"].oracle_ratio or 0.0
              for share in (0.0, 1.0)]
    assert ratios[1] > ratios[0] + 0.05


# -- runs: reproducible, JSON shape, and the quality bar on a small workload ---------


def without_timing(data: dict[str, Any]) -> dict[str, Any]:
    for result in data["policies"].values():
        result.pop("seconds")
    return data


def test_runs_are_reproducible_with_a_seed() -> None:
    config = SimConfig(workload="nonpoisson", pages=60, cycles=6, rates="learned", seed=5, new_pages=0.1,
                       policies=("costsched", "nutch", "proportional"))
    first, second = simulate(config).as_dict(), simulate(config).as_dict()
    assert without_timing(first) == without_timing(second)
    other = simulate(SimConfig(workload="nonpoisson", pages=60, cycles=6, rates="learned", seed=6, new_pages=0.1,
                               policies=("costsched", "nutch", "proportional")))
    assert without_timing(other.as_dict())["policies"] != first["policies"]


def test_every_workload_builds() -> None:
    for name in ("cho2000", "cho2000-com", "cho2000-domains", "gamma", "weibull", "nonpoisson"):
        workload = make_workload(name, WorkloadOptions(pages=40, cycles=10, values="tiers", costs="size"))
        assert len(workload.pages) == 40
        assert all(list(p.changes) == sorted(p.changes) for p in workload.pages)
    kinds = {p.kind for p in make_workload("nonpoisson", WorkloadOptions(pages=200, cycles=10)).pages}
    assert kinds == {"poisson", "bursty", "weekly", "shift"}
    with pytest.raises(ValueError, match="unknown workload"):
        make_workload("nope", WorkloadOptions())


def test_json_output_shape() -> None:
    cmd = [sys.executable, "-m", "scrapy_costsched.sim", "--workload", "gamma", "--cv", "2", "--pages", "60",
           "--cycles", "6", "--budget", "20%", "--policy", "costsched,uniform", "--json", "--no-progress"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True)
    data = json.loads(result.stdout)
    assert set(data["policies"]) == {"oracle", "costsched", "uniform"}
    for fields in data["policies"].values():
        for key in ("freshness", "age", "changes_detected", "cost_per_change", "no_change_fetches", "oracle_ratio",
                    "missed_changes", "harmonic_staleness", "never_visited"):
            assert key in fields
    assert data["policies"]["oracle"]["oracle_ratio"] == 1.0
    assert (data["warmup"], data["pages"], data["rates"]) == (3, 60, "known")


def test_cli_rejects_bad_options() -> None:
    cmd = [sys.executable, "-m", "scrapy_costsched.sim", "--policy", "nope", "--no-progress"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert "unknown policy 'nope'" in result.stderr


def test_costsched_reaches_the_oracle_with_known_rates() -> None:
    result = simulate(SimConfig(workload="gamma", cv=1.0, pages=600, cycles=30, budget=0.2,
                                policies=("costsched", "uniform")))
    ratio = result.policies["costsched"].oracle_ratio
    assert ratio is not None
    assert ratio >= 0.98
    assert ratio > (result.policies["uniform"].oracle_ratio or 0.0)


# -- replay -------------------------------------------------------------------------


def test_bing_history_loader() -> None:
    rows = load_bing_history(DATA / "urlid_offset_history.txt")
    assert [r.key for r in rows] == ["5", "7", "9"]
    assert rows[0].first == pytest.approx(5.5143055555555556)
    assert rows[0].history[:2] == ((1.10396990740741, False), (1.47311342592593, True))
    assert rows[0].crawl_times()[1] == pytest.approx(5.5143055555555556 + 1.10396990740741)
    assert [r.value for r in rows] == [2.5, 10.0, 1.0]  # urlid_imp.txt, where listed
    assert rows[1].rate() == pytest.approx(mle_rate([1.0] * 6, [True] * 6, pseudo_interval=0.5))
    assert rows[1].rate() > rows[0].rate() > rows[2].rate()
    assert len(load_bing_history(DATA / "urlid_offset_history.txt", limit=2)) == 2


def test_bing_history_rejects_malformed_rows(tmp_path: Path) -> None:
    bad = tmp_path / "history.txt"
    bad.write_text("1\t0.5\t[[1.0, 1]]\n2\t0.5\t[[1.0,\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"history.txt:2: cannot parse"):
        load_bing_history(bad)
    bad.write_text("1\t0.5\t[[1.0, 1]]\n", encoding="utf-8")
    (tmp_path / "urlid_imp.txt").write_text("1\thigh\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"urlid_imp.txt:1: importance 'high' is not a number"):
        load_bing_history(bad)


def test_replay_keeps_every_recorded_fact() -> None:
    path = str(DATA / "urlid_offset_history.txt")
    for seed in range(5):
        workload = make_workload(f"replay:{path}", WorkloadOptions(cycles=20, seed=seed))
        rows = load_bing_history(path)
        for row, p in zip(rows, workload.pages, strict=True):
            crawls = row.crawl_times()
            for (_, changed), start, end in zip(row.history, crawls, crawls[1:], strict=False):
                inside = [t for t in p.changes if start < t <= end]
                assert bool(inside) == changed, (row.key, start, end)
    result = simulate(SimConfig(workload=f"replay:{path}", cycles=12, policies=("costsched", "uniform")))
    assert set(result.policies) == {"oracle", "costsched", "uniform"}


def test_jsonl_replay(tmp_path: Path) -> None:
    path = tmp_path / "pages.jsonl"
    path.write_text('{"key": "a", "changes": [0.5, 1.5, 2.5], "value": 2}\n'
                    '{"key": "b", "first": 0, "history": [[1, 0], [2, 1]]}\n', encoding="utf-8")
    rows = load_jsonl(path)
    assert rows[0].changes == (0.5, 1.5, 2.5)
    assert rows[0].value == 2.0
    assert rows[1].history == ((1.0, False), (2.0, True))
    workload = make_workload(f"replay:{path}", WorkloadOptions(cycles=4))
    assert list(workload.pages[0].changes) == [0.5, 1.5, 2.5]


@pytest.mark.parametrize("module", ["workloads", "metrics", "replay", "policies", "engine", "cli"])
def test_simulator_doctests(module: str) -> None:
    # The simulator is outside the doctest paths of the suite; its examples run here.
    result = doctest.testmod(importlib.import_module(f"scrapy_costsched.sim.{module}"))
    assert result.failed == 0
