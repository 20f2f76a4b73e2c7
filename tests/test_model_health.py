"""Host health (pure): success probability from recent attempts, recovery, Retry-After blocks, visit prices."""

from __future__ import annotations

import pytest

from scrapy_costsched.model.health import (
    ATTEMPT_MEMORY,
    MAX_FAILURES_PER_SUCCESS,
    MAX_OUTAGE_PAGES,
    OUTAGE_EVIDENCE,
    OUTAGE_PAGES,
    OUTAGE_PAUSE,
    RECOVERY_HALF_LIFE,
    HostHealth,
    outage_pages,
    outage_pause,
    outcome_of,
    visit_cost,
)


def test_a_new_host_is_healthy_and_costs_no_failed_attempts() -> None:
    health = HostHealth()
    assert health.p_success(0.0) == 1.0
    assert health.expected_failures(0.0) == 0.0


def test_a_host_that_starts_throttling_sinks_within_a_few_attempts() -> None:
    health = HostHealth()
    for _ in range(20):
        health.observe("ok", 0.0)
    before = health.expected_failures(0.0)
    for _ in range(5):
        health.observe("throttled", 0.0)
    # The last five attempts weigh (1 - 0.9^5) of the evidence: about 41 %.
    weight = 1 - ATTEMPT_MEMORY**5
    assert health.p_success(0.0) == pytest.approx(1 - weight, abs=0.05)
    assert health.expected_failures(0.0) > before + 0.5
    assert health.failures == {"throttled": 5}


def test_geometric_attempts_per_success() -> None:
    # One success in four attempts (prior included): p = 1/4, so three failed attempts per success.
    health = HostHealth(attempts=3.0, successes=0.0)
    assert health.p_success(0.0) == pytest.approx(0.25)
    assert health.expected_failures(0.0) == pytest.approx(3.0)
    assert HostHealth(attempts=1e9).expected_failures(0.0) == MAX_FAILURES_PER_SUCCESS


def test_health_recovers_as_time_passes_and_as_the_host_answers() -> None:
    health = HostHealth()
    for _ in range(10):
        health.observe("unavailable", 0.0)
    sick = health.p_success(0.0)
    assert health.p_success(RECOVERY_HALF_LIFE) > sick  # evidence fades without attempts
    for _ in range(10):
        health.observe("ok", 0.1)
    assert health.p_success(0.1) > 0.6


def test_visit_cost_follows_the_billing_of_failed_attempts() -> None:
    assert visit_cost(1.0, 1.0, 3.0) == 4.0  # requests: each failure is a request
    assert visit_cost(1.0, 0.0, 3.0) == 1.0  # credits: failures are free
    assert visit_cost(50_000.0, 300.0, 2.0) == 50_600.0  # bandwidth: a 429 moves a few hundred bytes


@pytest.mark.parametrize(("status", "exception", "outcome"), [
    (200, None, "ok"), (304, None, "ok"), (404, None, "ok"), (429, None, "throttled"), (503, None, "unavailable"),
    (500, None, "server_error"), (None, "timeout", "timeout"), (None, "TCPTimedOutError", "timeout"),
    (None, None, "connection"), (None, "ConnectionRefusedError", "connection")])
def test_outcomes(status: int | None, exception: str | None, outcome: str) -> None:
    assert outcome_of(status, exception) == outcome


def test_blocks_only_grow_and_count_once_each() -> None:
    health = HostHealth()
    assert health.block(100.0)
    assert not health.block(90.0)
    assert health.block(120.0)
    assert health.blocks == 2
    assert health.blocked_for(110.0) == 10.0
    assert health.blocked_for(130.0) == 0.0


def test_outages_in_a_row_double_the_pause_until_the_host_answers() -> None:
    health = HostHealth()
    assert health.block(100.0, outage=True)
    assert health.block(200.0, outage=True)
    assert (health.outages, health.outage) == (2, True)
    assert outage_pause(health.outages + 1, 3600.0) == 4 * OUTAGE_PAUSE
    assert outage_pause(40, 3600.0) == 3600.0
    health.observe("unavailable", 0.0)
    assert health.outages == 2  # a failure does not end the streak
    health.observe("ok", 0.0, page=False)
    assert health.outages == 2  # nor does robots.txt, often served while the pages are not
    assert health.failures == {"unavailable": 1}  # though it answered
    health.observe("ok", 0.0)
    assert health.outages == 0
    assert health.block(300.0)  # then a Retry-After: a pause the host asked for
    assert (health.outages, health.outage) == (0, False)


@pytest.mark.parametrize("p_success", [1.0, 0.99, 0.95, 0.9, 0.7, 0.5, 0.2, 0.0])
def test_a_host_that_failed_often_needs_a_streak_it_would_make_once_in_ten_thousand(p_success: float) -> None:
    pages = outage_pages(p_success)
    assert OUTAGE_PAGES <= pages <= MAX_OUTAGE_PAGES
    if pages < MAX_OUTAGE_PAGES:
        assert (1.0 - p_success) ** pages <= OUTAGE_EVIDENCE
    if pages > OUTAGE_PAGES:  # the shortest such streak
        assert (1.0 - p_success) ** (pages - 1) > OUTAGE_EVIDENCE


def test_state_round_trips_and_refuses_garbage() -> None:
    health = HostHealth()
    health.observe("timeout", 1.0, size=300.0, latency=30.0)
    health.block(5.0, outage=True)
    assert HostHealth.from_json(health.to_json()) == health
    old = health.to_json()
    del old["outages"], old["outage"]  # a state written before outages were kept
    assert HostHealth.from_json(old).outages == 0
    bad: object
    for bad in ([], {"attempts": "x"}, {"attempts": 1.0, "successes": 2.0}, {"failures": {"weird": 1}},
                {"nope": 1}, {"outages": -1}, {"outage": "yes"}):
        with pytest.raises(ValueError, match="malformed host health"):
            HostHealth.from_json(bad)
    with pytest.raises(ValueError, match="unknown attempt outcome"):
        health.observe("sad", 1.0)
