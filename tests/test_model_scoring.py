"""rank_head: the head of rank()'s ranking without scoring the pages that cannot reach it."""

from __future__ import annotations

import math
import random

import pytest

from scrapy_costsched.model.discovery import Discovery
from scrapy_costsched.model.scoring import Candidate, head_above, rank, rank_head


def _candidate(rng: random.Random, i: int) -> Candidate:
    rate = math.exp(rng.uniform(math.log(1e-4), math.log(50.0)))
    low = high = None
    if rng.random() < 0.7:  # a learned rate with its 90% interval
        spread = math.exp(rng.uniform(0.01, 3.0))
        low, high = rate / spread, rate * spread
    if rng.random() < 0.3:  # the edges: never fetched, just fetched, a moment ago, whole days
        elapsed = rng.choice([math.inf, 0.0, rng.uniform(0.0, 1e-3), float(rng.randint(1, 30))])
    else:
        elapsed = rng.uniform(0.01, 30.0)
    cost = rng.choice([1.0, 1.0, 0.5, 3.0])
    c304 = cost * 0.1 if rng.random() < 0.1 else None
    hub = Discovery(rate=rng.uniform(0.0, 3.0), value=1.0, cost=1.0, page_rate=0.1) if rng.random() < 0.02 else None
    if rng.random() < 0.01:
        rate, low, high = 0.0, None, None
    return Candidate(f"k{rng.randint(0, 99):02d}{i:06d}", rng.choice([0.0, 0.25, 1.0, 1.0, 4.0]), rate, elapsed, cost,
                     c304, low, high, hub)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("objective", ["freshness", "changes"])
@pytest.mark.parametrize("cycle", [0.0, 1.0, 7.0])
def test_head_and_the_rest_ranked_after_it_are_the_ranking(seed: int, objective: str, cycle: float) -> None:
    rng = random.Random(seed)
    candidates = [_candidate(rng, i) for i in range(rng.choice([10, 3000, 8000]))]
    if seed % 2:  # many ties: whole days and rounded point rates
        candidates = [c._replace(elapsed=float(round(c.elapsed)) if c.elapsed < math.inf else c.elapsed,
                                 rate=round(c.rate, 1) or 0.1, rate_low=None, rate_high=None) for c in candidates]
    full = rank(candidates, objective, cycle)
    for need in (0.0, 5.0, 60.0, len(candidates) * 0.1, len(candidates) * 2.0, math.inf):
        head, rest = rank_head(candidates, need, objective, cycle)
        assert head + rank(rest, objective, cycle) == full
        spent = math.fsum(c.cost if c.revalidation_cost is None else c.expected_cost for _, c in head)
        assert spent > need or len(head) == len(full)


@pytest.mark.parametrize("learned", [False, True])
def test_a_head_found_in_several_tries_is_the_rankings(monkeypatch: pytest.MonkeyPatch, learned: bool) -> None:
    """When the first pages by bound score too low, rank_head lowers its threshold and scores only the pages
    it lets in: the merged head is still the ranking's, ties (whole days) ordered by key."""
    from scrapy_costsched.model import scoring

    rng = random.Random(3)
    candidates = []
    for i in range(6000):
        rate = rng.choice([0.01, 0.03, 0.1, 0.2, 0.3, 0.5, 1.0])  # few rates: many equal indexes
        spread = rng.choice([1.5, 2.0]) if learned else None
        candidates.append(Candidate(f"p{rng.randint(0, 9999):04d}{i:05d}", rng.choice([1.0, 4.0]), rate,
                                    float(rng.randint(1, 14)), 1.0, None, spread and rate / spread,
                                    spread and rate * spread))
    tries = []
    real_rank = scoring.rank

    def counted(*args: object, **kwargs: object) -> list[tuple[float, Candidate]]:
        tries.append(1)
        return real_rank(*args, **kwargs)  # type: ignore[arg-type]

    several = 0
    for need in (100.0, 500.0, 2000.0):
        full = rank(candidates, cycle=7.0)
        tries.clear()
        monkeypatch.setattr(scoring, "rank", counted)
        head, rest = rank_head(candidates, need, cycle=7.0)
        monkeypatch.setattr(scoring, "rank", real_rank)
        assert head + rank(rest, cycle=7.0) == full
        several += len(tries) > 1
    assert several


def test_most_pages_are_left_unranked_when_the_need_is_small() -> None:
    rng = random.Random(1)
    candidates = [Candidate(f"p{i:05d}", 1.0, rate, rng.uniform(0.5, 30.0), 1.0, None, rate / 2.0, rate * 2.0)
                  for i, rate in enumerate(math.exp(rng.uniform(-7.0, 3.0)) for _ in range(20000))]
    head, rest = rank_head(candidates, 100.0, cycle=1.0)
    assert 100 < len(head) < 5000
    assert len(head) + len(rest) == len(candidates)


def test_bad_candidates_raise_as_in_rank() -> None:
    good = [Candidate(f"p{i}", 1.0, 1.0, 1.0, 1.0) for i in range(3)]
    with pytest.raises(ValueError, match="cost must be positive"):
        rank_head([*good, Candidate("a", 1.0, 1.0, 1.0, 0.0)], 1.0)
    with pytest.raises(ValueError, match="objective must be one of"):
        rank_head(good, 1.0, "speed")


def test_head_above_stops_where_candidates_not_given_could_rank() -> None:
    """A plan that read only part of the pages (:mod:`scrapy_costsched.preselection`) knows the others index
    below a floor: the head of what it read ends there, even where it read pages below the floor too, and
    with the rest and the pages not read ranked after it, it is the ranking of them all."""
    pages = [Candidate(f"p{i:03}", 1.0 + i % 3, 0.01 * (i + 1), 1.0 + i % 7, 1.0) for i in range(300)]
    ranking = rank(pages, cycle=1.0)
    floor = ranking[100][0]
    assert ranking[101][0] < floor
    not_given = [c for _, c in ranking[101:150]]
    given = [c for _, c in ranking[:101]] + [c for _, c in ranking[150:]]
    ranked = head_above(given, 50.0, floor, cycle=1.0)
    assert ranked is not None
    head, rest = ranked
    assert head == ranking[:len(head)]
    assert len(head) > 50
    assert head + rank(rest + not_given, cycle=1.0) == ranking
    # The 101 visits above the floor cost 101: more than that needs the pages not read yet.
    assert head_above(given, 100.0, floor, cycle=1.0) is not None
    assert head_above(given, 101.0, floor, cycle=1.0) is None
