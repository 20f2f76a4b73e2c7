"""Trust in a host's Last-Modified, audited against the records it should date."""

from __future__ import annotations

import pytest

from scrapy_costsched.model.trust import PROBATION_AUDITS, TRUST_AFTER, SignalTrust


def test_an_honest_host_is_trusted_after_enough_agreeing_audits() -> None:
    trust = SignalTrust()
    for n in range(TRUST_AFTER):
        assert not trust.trusted
        # changed, with a date after the previous visit; then unchanged with the same date
        assert trust.audit(changed=n % 2 == 0, moved=n % 2 == 0, age=0.5, interval=1.0) == "agrees"
    assert trust.trusted


def test_one_contradiction_ends_trust_at_once_and_a_probation_doubles_with_each() -> None:
    trust = SignalTrust(agrees=100)
    assert trust.audit(changed=True, moved=False, age=30.0, interval=1.0) == "contradicts"
    assert not trust.trusted
    assert trust.verdict == "lies"
    for _ in range(PROBATION_AUDITS - 1):
        trust.audit(changed=False, moved=False, age=30.0, interval=1.0)
        assert not trust.trusted
    trust.audit(changed=False, moved=False, age=30.0, interval=1.0)
    assert trust.trusted  # the host fixed itself: every audit of the probation agreed
    trust.audit(changed=True, moved=False, age=30.0, interval=1.0)
    assert trust.probation == 2 * PROBATION_AUDITS
    assert trust.contradicts == 2


def test_counts_written_before_probations_keep_a_liar_out() -> None:
    trust = SignalTrust.from_json([7, 0, 1])
    assert not trust.trusted
    assert trust.probation == PROBATION_AUDITS
    assert SignalTrust.from_json([7, 1, 0]) == SignalTrust(7, 1, 0)


def test_a_date_older_than_the_previous_visit_contradicts_a_change() -> None:
    # The record changed since the last visit, but the date says the change came before it.
    assert SignalTrust().audit(changed=True, moved=True, age=3.0, interval=2.0) == "contradicts"


def test_a_date_that_moves_without_the_record_is_volatile_and_not_trusted() -> None:
    trust = SignalTrust()
    for _ in range(20):
        trust.audit(changed=True, moved=True, age=0.5, interval=1.0)
        trust.audit(changed=False, moved=True, age=0.0, interval=1.0)  # a date that is always "now"
    assert (trust.agrees, trust.volatile, trust.contradicts) == (20, 20, 0)
    assert not trust.trusted


def test_a_date_that_is_always_the_response_time_is_volatile_even_when_pages_change() -> None:
    # Pages that change at every visit, under a date that is "now": every audit would agree on
    # movement alone, and every change would be dated 0 seconds ago (a rate far too high).
    trust = SignalTrust()
    for _ in range(10):
        assert trust.audit(changed=True, moved=True, age=0.0, interval=1.0) == "volatile"
    assert not trust.trusted


def test_counts_round_trip_and_bad_counts_are_refused() -> None:
    trust = SignalTrust(agrees=4, volatile=1, contradicts=0)
    assert SignalTrust.from_json(trust.to_json()) == trust
    for bad in ([1, 2], [1, -1, 0], ["1", 0, 0], [True, 0, 0], {"agrees": 1}, None):
        with pytest.raises(ValueError, match="malformed validator audit counts"):
            SignalTrust.from_json(bad)


def test_contradictions_during_a_probation_restart_it_without_doubling_it() -> None:
    """One crawl whose every page contradicts (a timestamp field, ignored since) is one strike: the host
    earns its trust back after one probation once its records are hashed right, not after thousands of audits."""
    trust = SignalTrust(agrees=50)
    for _ in range(100):
        trust.audit(changed=True, moved=False, age=30.0, interval=1.0)
    assert (trust.contradicts, trust.strikes, trust.probation) == (100, 1, PROBATION_AUDITS)
    for _ in range(PROBATION_AUDITS - 1):
        trust.audit(changed=False, moved=False, age=30.0, interval=1.0)
        assert not trust.trusted
    trust.audit(changed=False, moved=False, age=30.0, interval=1.0)
    assert trust.trusted
