"""Discovery (issue 8 item 2): a hub's rate of new links, and the ranking of a hub visit as a bundle."""

from __future__ import annotations

import math
import random
from itertools import pairwise

import pytest

from scrapy_costsched.model.discovery import Discovery, LinkPrior, NewLinkStats, _mean_at_least, expected_new
from scrapy_costsched.model.freshness import cycle_utility, utility
from scrapy_costsched.model.scoring import Candidate, affordable_prefix, discovery_spend, rank, score


def simpson(fn, a: float, b: float, n: int = 4000) -> float:
    h = (b - a) / n
    total = fn(a) + fn(b)
    total += 4.0 * math.fsum(fn(a + (2 * k - 1) * h) for k in range(1, n // 2 + 1))
    total += 2.0 * math.fsum(fn(a + 2 * k * h) for k in range(1, n // 2))
    return total * h / 3.0


def poisson(rng: random.Random, mean: float) -> int:
    """Arrivals of a unit-rate Poisson process within *mean*."""
    n, t = 0, rng.expovariate(1.0)
    while t < mean:
        n, t = n + 1, t + rng.expovariate(1.0)
    return n


# -- the rate of new links ----------------------------------------------------


def test_rate_is_the_gamma_poisson_posterior_mean() -> None:
    visits = [(3, 1.0), (0, 0.5), (5, 2.0), (1, 0.25)]
    prior = LinkPrior(shape=2.0, days=3.0)
    s = NewLinkStats()
    for n, t in visits:
        s.observe(n, t, math.inf)
    links, days = sum(n for n, _ in visits), sum(t for _, t in visits)
    assert s.rate(prior) == (2.0 + links) / (3.0 + days)

    # Independent check: the posterior mean by quadrature of mu·L(mu)·prior(mu).
    def density(mu: float, k: int) -> float:
        if mu == 0.0:
            return 0.0
        log = (prior.shape - 1.0) * math.log(mu) - prior.days * mu
        log += sum(n * math.log(mu * t) - mu * t for n, t in visits)
        return mu**k * math.exp(log)

    mean = simpson(lambda mu: density(mu, 1), 0.0, 20.0) / simpson(lambda mu: density(mu, 0), 0.0, 20.0)
    assert s.rate(prior) == pytest.approx(mean, rel=1e-9)


def test_history_fades_by_half_life() -> None:
    s = NewLinkStats()
    s.observe(4, 2.0, 2.0)
    s.observe(1, 1.0, 2.0)
    s.observe(0, 3.0, 2.0)
    half = 0.5 ** 0.5
    assert s.links == pytest.approx((4 * half + 1) * 0.5**1.5, rel=1e-15)
    assert s.days == pytest.approx((2 * half + 1) * 0.5**1.5 + 3.0, rel=1e-15)


def test_a_hub_that_reveals_nothing_sinks_but_is_never_written_off() -> None:
    prior = LinkPrior()
    s = NewLinkStats()
    rates = [s.rate(prior)]
    for _ in range(400):
        s.observe(0, 1.0, 30.0)
        rates.append(s.rate(prior))
    assert all(b < a for a, b in pairwise(rates))
    floor = prior.shape / (prior.days + 1.0 / (1.0 - 0.5 ** (1 / 30)))  # exposure levels off near 30 / ln 2
    assert rates[-1] == pytest.approx(floor, rel=1e-3)
    assert rates[-1] > 0.01
    # Without fading, it sinks towards zero.
    forever = NewLinkStats()
    for _ in range(400):
        forever.observe(0, 1.0, math.inf)
    assert forever.rate(prior) == 0.5 / 401.0


def test_a_hub_that_starts_revealing_again_recovers() -> None:
    s = NewLinkStats()
    for _ in range(100):
        s.observe(0, 1.0, 30.0)
    for _ in range(60):
        s.observe(3, 1.0, 30.0)
    assert s.rate() == pytest.approx(3.0, rel=0.3)


def test_estimate_converges_on_a_steady_hub() -> None:
    rng = random.Random(8)
    s = NewLinkStats()
    for _ in range(300):
        s.observe(poisson(rng, 2.0 * 0.7), 0.7, 180.0)
    assert s.rate() == pytest.approx(2.0, rel=0.1)
    assert not s.saturated
    assert s.cap == math.inf


# -- capacity: a list of the newest K -------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 5, 10, 40])
@pytest.mark.parametrize("share", [1e-6, 0.1, 0.9, 1.0, 1.1, 3.0, 50.0])
def test_mean_at_least_matches_the_truncated_sum(n: int, share: float) -> None:
    x = n * share
    ks = range(n, n + 4000)
    mass = [math.exp(k * math.log(x) - x - math.lgamma(k + 1)) for k in ks]
    expected = math.fsum(k * p for k, p in zip(ks, mass, strict=True)) / math.fsum(mass)
    assert _mean_at_least(n, x) == pytest.approx(expected, rel=1e-13)


def test_mean_at_least_limits() -> None:
    assert _mean_at_least(3, 0.0) == 3.0
    assert _mean_at_least(1, 1e-8) == pytest.approx(1.0 + 5e-9, rel=1e-15)
    assert _mean_at_least(1, 2.0) == pytest.approx(2.0 / -math.expm1(-2.0), rel=1e-15)  # E[N | N >= 1]
    assert _mean_at_least(2, 1e6) == 1e6


def test_a_full_list_caps_what_a_visit_is_expected_to_reveal() -> None:
    s = NewLinkStats()
    s.observe(4, 2.0, math.inf, listed=10)
    assert not s.saturated
    assert s.cap == math.inf
    assert s.expected(30.0) == s.rate() * 30.0
    s.observe(10, 6.0, math.inf, listed=10)
    assert s.saturated
    assert s.cap == 10.0
    assert s.expected(30.0) == 10.0
    assert s.expected(1.0) == s.rate()
    s.observe(0, 1.0, math.inf, listed=0)  # an empty list is not a full one
    assert s.most == 10


def test_a_saturated_visit_counts_at_least_what_it_showed() -> None:
    s = NewLinkStats()
    s.observe(2, 1.0, math.inf)
    before = s.rate()
    s.observe(10, 4.0, math.inf, listed=10)
    imputed = s.links - 2.0
    assert imputed == _mean_at_least(10, before * 4.0)
    assert imputed > 10.0


@pytest.mark.parametrize("interval", [5.0, 10.0])
def test_imputation_reduces_the_bias_of_a_list_that_turns_over(interval: float) -> None:
    rng = random.Random(1)
    imputed, counted = NewLinkStats(), NewLinkStats()
    for _ in range(60):  # 2 new articles a day, the newest 10 listed
        shown = min(poisson(rng, 2.0 * interval), 10)
        imputed.observe(shown, interval, 180.0, listed=10)
        counted.observe(shown, interval, 180.0)
    assert counted.rate() <= 10.0 / interval + 0.05  # counted as shown: at most K per interval
    assert counted.rate() < imputed.rate() < 2.0


# -- round trip and bad input ----------------------------------------------------


def test_json_round_trip() -> None:
    s = NewLinkStats()
    s.observe(3, 1.5, 30.0)
    s.observe(7, 2.0, 30.0, listed=7)
    data = s.to_json()
    assert data == [s.links, s.days, 7, 1]
    assert NewLinkStats.from_json(data) == s
    assert NewLinkStats.from_json([0, 0, 0, 0]) == NewLinkStats()


@pytest.mark.parametrize(
    "data",
    [None, [], [1.0, 2.0, 3], [1.0, 2.0, 3, 2], [-1.0, 2.0, 3, 0], [1.0, math.inf, 3, 0], [1.0, 2.0, 3.5, 0],
     [1.0, 2.0, True, 0], [1.0, 2.0, 3, 0.0], ["1", 2.0, 3, 0], {"links": 1.0}, [1.0, 2.0, 0, 1]],
)
def test_from_json_rejects_malformed_data(data: object) -> None:
    with pytest.raises(ValueError, match="malformed new-link stats"):
        NewLinkStats.from_json(data)


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((-1, 1.0, 1.0), {}, "new_links"),
        ((1.5, 1.0, 1.0), {}, "new_links"),
        ((True, 1.0, 1.0), {}, "new_links"),
        ((3, 1.0, 1.0), {"listed": 2}, "listed"),
        ((1, math.nan, 1.0), {}, "interval_days"),
        ((1, math.inf, 1.0), {}, "interval_days"),
        ((1, 1.0, 0.0), {}, "half_life_days"),
    ],
)
def test_observe_rejects_bad_input(args: tuple[object, ...], kwargs: dict[str, object], message: str) -> None:
    s = NewLinkStats()
    with pytest.raises(ValueError, match=message):
        s.observe(*args, **kwargs)  # type: ignore[arg-type]
    assert s == NewLinkStats()


def test_negative_intervals_count_as_tiny() -> None:
    s = NewLinkStats()
    s.observe(1, -5.0, 30.0)
    assert s.links == 1.0
    assert 0.0 < s.days < 1e-8


@pytest.mark.parametrize(("shape", "days"), [(0.0, 1.0), (1.0, 0.0), (math.inf, 1.0), (1.0, math.nan)])
def test_link_prior_rejects_bad_parameters(shape: float, days: float) -> None:
    with pytest.raises(ValueError, match="must be positive"):
        LinkPrior(shape, days)


def test_expected_new() -> None:
    assert expected_new(2.0, 0.0) == 0.0
    assert expected_new(0.0, math.inf, 5.0) == 0.0
    assert expected_new(2.0, math.inf) == math.inf
    assert expected_new(2.0, math.inf, 5.0) == 5.0
    for rate, elapsed, cap, message in [(-1.0, 1.0, 1.0, "rate"), (math.inf, 1.0, 1.0, "rate"),
                                        (1.0, -1.0, 1.0, "elapsed"), (1.0, 1.0, 0.0, "cap")]:
        with pytest.raises(ValueError, match=message):
            expected_new(rate, elapsed, cap)


# -- scoring a hub visit ----------------------------------------------------------

# Scores of the ranking before hubs were priced (computed with scoring.py as of ca62852).
OLD_SCORES = [
    (Candidate("a", 2.0, 1.0, 1.0, 4.0), "freshness", 0.0, 0.13212055882855767),
    (Candidate("a", 2.0, 1.0, 1.0, 4.0), "freshness", 1.0, 0.19978820044686402),
    (Candidate("a", 1.0, 1.0, 20.0, 1.0, None, 0.2, 5.0), "freshness", 0.0, 1.5067575011564915),
    (Candidate("a", 1.0, 1.0, 1.0, 1.0, 0.05), "freshness", 0.0, 0.877792715758682),
    (Candidate("a", 4.0, 96.0, 1.0, 1.0), "freshness", 1.0, 0.041666666666666664),
    (Candidate("a", 1.0, 1 / 7, 3.0, 2.0, 0.1, 1 / 21, 3 / 7), "changes", 1.0, 0.38120939319606917),
    (Candidate("a", 1.0, 1 / 365, 30.0, 1.0), "changes", 0.0, 0.0031982441894188207),
    (Candidate("a", 0.25, 1 / 30, math.inf, 1.0, None, 0.01, 0.1), "freshness", 1.0, 9.810071934176218),
]


@pytest.mark.parametrize(("candidate", "objective", "cycle", "old"), OLD_SCORES)
def test_candidates_without_new_links_score_exactly_as_before(
    candidate: Candidate, objective: str, cycle: float, old: float
) -> None:
    assert score(candidate, objective, cycle) == old
    for hub in (Discovery(0.0, 5.0, 1.0, 0.1), Discovery(0.0, 5.0, 1.0, 0.1, cap=3.0)):
        assert score(candidate._replace(hub=hub), objective, cycle) == old


def test_rank_of_hubs_that_reveal_nothing_is_unchanged() -> None:
    rng = random.Random(3)
    plain = []
    for i in range(300):
        rate = math.exp(rng.uniform(-7.0, 3.0))
        spread = math.exp(rng.uniform(0.2, 2.0))
        low, high = (None, None) if rng.random() < 0.5 else (rate / spread, rate * spread)
        plain.append(Candidate(f"k{i:03d}", rng.choice([0.0, 1.0, 4.0]), rate, rng.choice([0.0, 1.0, 2.5, math.inf]),
                               1.0, rng.choice([None, 0.1]), low, high))
    hubs = [c._replace(hub=Discovery(0.0, 2.0, 1.0, 0.1)) if i % 3 == 0 else c for i, c in enumerate(plain)]
    for objective in ("freshness", "changes"):
        for cycle in (0.0, 1.0):
            before = [(s, c.key) for s, c in rank(plain, objective, cycle)]
            assert [(s, c.key) for s, c in rank(hubs, objective, cycle)] == before


@pytest.mark.parametrize("objective", ["freshness", "changes"])
@pytest.mark.parametrize("cycle", [0.0, 1.0])
@pytest.mark.parametrize("c304", [None, 0.2])
def test_a_hub_is_the_bundle_of_its_visit_and_the_pages_it_reveals(
    objective: str, cycle: float, c304: float | None
) -> None:
    rate, elapsed, value, cost = 8.0, 1.5, 2.0, 1.5
    hub = Discovery(rate=2.0, value=3.0, cost=0.5, page_rate=0.1, cap=10.0)
    u = cycle_utility(rate, elapsed, cycle) if cycle else utility(rate, elapsed)
    own = value * (rate * u if objective == "changes" else u)
    divisor = cost if c304 is None else c304 + (cost - c304) * rate * u
    new_page = hub.value * (1.0 if objective == "changes" else 1.0 / hub.page_rate)
    found = 3.0  # 2 a day for 1.5 days
    expected = (own + found * new_page) / (divisor + found * hub.cost)
    got = score(Candidate("h", value, rate, elapsed, cost, c304, hub=hub), objective, cycle)
    assert got == pytest.approx(expected, rel=1e-13)


def test_the_bundle_lies_between_the_hub_and_a_new_page() -> None:
    hub = Discovery(rate=2.0, value=1.0, cost=1.0, page_rate=0.1)
    own = score(Candidate("h", 1.0, 8.0, 1.0, 1.0), cycle=1.0)
    new_page = score(Candidate("n", hub.value, hub.page_rate, math.inf, hub.cost), cycle=1.0)
    indexes = [score(Candidate("h", 1.0, 8.0, t, 1.0, hub=hub), cycle=1.0) for t in (0.1, 0.5, 1.0, 3.0, 30.0)]
    assert all(own < a < b < new_page for a, b in pairwise(indexes))
    # Never visited and without a known limit: a visit is worth what a new page is.
    assert score(Candidate("h", 1.0, 8.0, math.inf, 1.0, hub=hub), cycle=1.0) == new_page
    capped = hub._replace(cap=4.0)
    assert score(Candidate("h", 1.0, 8.0, math.inf, 1.0, hub=capped), cycle=1.0) == pytest.approx(
        (1.0 / 8.0 + 4.0 * 10.0) / (1.0 + 4.0), rel=1e-15
    )


def test_a_hub_with_a_static_or_worthless_record_is_worth_its_new_pages() -> None:
    hub = Discovery(rate=1.0, value=1.0, cost=1.0, page_rate=0.5)
    static = score(Candidate("h", 1.0, 0.0, 2.0, 1.0, hub=hub))
    assert static == pytest.approx(2.0 * 2.0 / (1.0 + 2.0), rel=1e-15)
    assert score(Candidate("h", 0.0, 3.0, 2.0, 1.0, hub=hub)) == static
    marginal = 0.5 + 0.5 * 3.0 * utility(3.0, 2.0)  # a worthless record still costs what its changes make it
    assert score(Candidate("h", 0.0, 3.0, 2.0, 1.0, 0.5, hub=hub)) == pytest.approx(4.0 / (marginal + 2.0), rel=1e-15)
    assert score(Candidate("h", 1.0, 0.0, 2.0, 1.0, 0.5, hub=hub)) == pytest.approx(4.0 / 2.5, rel=1e-15)
    assert score(Candidate("h", 1.0, 3.0, 0.0, 1.0, hub=hub)) == 0.0  # just visited: nothing yet


def test_a_fast_hub_that_reveals_two_pages_a_day_outranks_slow_pages_under_a_30_percent_budget() -> None:
    rng = random.Random(30)
    slow = [Candidate(f"p{i:02d}", 1.0, rate, float(rng.randint(1, 60)), 1.0)
            for i, rate in enumerate(rng.choice([1 / 7, 1 / 30, 1 / 365]) for _ in range(60))]
    own = Candidate("hub", 1.0, 8.0, 1.0, 1.0)  # its list changes 8 times a day
    hub = own._replace(hub=Discovery(rate=2.0, value=1.0, cost=1.0, page_rate=1 / 30))
    budget = 0.3 * (len(slow) + 1)
    assert "hub" not in [c.key for c in affordable_prefix(rank([*slow, own], cycle=1.0), budget)]
    assert "hub" in [c.key for c in affordable_prefix(rank([*slow, hub], cycle=1.0), budget)]
    best_slow = max(score(c, cycle=1.0) for c in slow)
    assert score(own, cycle=1.0) < best_slow < score(hub, cycle=1.0)


def test_rank_orders_hubs_by_score() -> None:
    rng = random.Random(11)
    candidates = []
    for i in range(400):
        rate = math.exp(rng.uniform(-6.0, 3.0))
        low, high = (rate / 3, rate * 3) if rng.random() < 0.5 else (None, None)
        hub = None
        if rng.random() < 0.4:
            hub = Discovery(rng.choice([0.0, 0.3, 2.0]), rng.choice([0.0, 1.0]), rng.choice([0.5, 1.0]),
                            rng.choice([0.05, 1.0]), rng.choice([math.inf, 5.0]))
        candidates.append(Candidate(f"k{i:03d}", rng.choice([0.0, 1.0]), rng.choice([0.0, rate]),
                                    rng.choice([0.0, 0.5, 4.0, math.inf]), 1.0, rng.choice([None, 0.2]), low, high,
                                    hub))
    for objective in ("freshness", "changes"):
        for cycle in (0.0, 1.0):
            expected = sorted(((score(c, objective, cycle), c) for c in candidates), key=lambda sc: (-sc[0], sc[1].key))
            assert rank(candidates, objective, cycle) == [(s, c) for s, c in expected if s > 0.0]


def test_discovery_spend() -> None:
    hub = Discovery(rate=2.0, value=1.0, cost=0.5, page_rate=0.1, cap=10.0)
    assert discovery_spend(Candidate("h", 1.0, 8.0, 1.5, 1.0, hub=hub)) == 1.5
    assert discovery_spend(Candidate("h", 1.0, 8.0, 30.0, 1.0, hub=hub)) == 5.0  # at most the list's 10
    assert discovery_spend(Candidate("h", 1.0, 8.0, 1.5, 1.0, hub=hub._replace(rate=0.0))) == 0.0
    assert discovery_spend(Candidate("h", 1.0, 8.0, math.inf, 1.0, hub=hub._replace(cap=math.inf))) == math.inf
    assert discovery_spend(Candidate("p", 1.0, 8.0, 1.5, 1.0)) == 0.0


@pytest.mark.parametrize(
    ("hub", "message"),
    [
        (Discovery(-1.0, 1.0, 1.0, 0.1), "hub rate"),
        (Discovery(math.inf, 1.0, 1.0, 0.1), "hub rate"),
        (Discovery(1.0, -1.0, 1.0, 0.1), "hub value"),
        (Discovery(1.0, 1.0, 0.0, 0.1), "hub cost"),
        (Discovery(1.0, 1.0, math.inf, 0.1), "hub cost"),
        (Discovery(1.0, 1.0, 1.0, 0.0), "hub page_rate"),
        (Discovery(1.0, 1.0, 1.0, 0.1, cap=0.0), "hub cap"),
        (Discovery(1.0, 1.0, 1.0, 0.1, cap=math.nan), "hub cap"),
    ],
)
def test_bad_hubs_raise_in_score_and_rank(hub: Discovery, message: str) -> None:
    candidate = Candidate("h", 1.0, 1.0, 1.0, 1.0, hub=hub)
    with pytest.raises(ValueError, match=message):
        score(candidate)
    with pytest.raises(ValueError, match=message):
        rank([Candidate("a", 1.0, 1.0, 1.0, 1.0), candidate])
