"""Trust in a host's Last-Modified, audited against the records it should date."""

from __future__ import annotations

import pytest

from scrapy_costsched.model.trust import TRUST_AFTER, LastModifiedTrust, http_date


@pytest.mark.parametrize("header", [
    "Sun, 06 Nov 1994 08:49:37 GMT",  # IMF-fixdate
    "Sunday, 06-Nov-94 08:49:37 GMT",  # RFC 850
    "Sun Nov  6 08:49:37 1994",  # asctime
])
def test_http_date_reads_the_three_formats_http_allows(header: str) -> None:
    assert http_date(header) == 784111777.0


@pytest.mark.parametrize("header", [b"yesterday", b"", b"Sun, 99 Nov 1994 08:49:37 GMT", b"\xff\xfe"])
def test_http_date_refuses_garbage_with_one_line(header: bytes) -> None:
    with pytest.raises(ValueError, match="not an HTTP date"):
        http_date(header)


def test_an_honest_host_is_trusted_after_enough_agreeing_audits() -> None:
    trust = LastModifiedTrust()
    for n in range(TRUST_AFTER):
        assert not trust.trusted
        # changed, with a date after the previous visit; then unchanged with the same date
        assert trust.audit(changed=n % 2 == 0, moved=n % 2 == 0, age=0.5, interval=1.0) == "agrees"
    assert trust.trusted


def test_one_contradiction_ends_trust_for_good() -> None:
    trust = LastModifiedTrust(agrees=100)
    assert trust.audit(changed=True, moved=False, age=30.0, interval=1.0) == "contradicts"
    for _ in range(100):
        trust.audit(changed=False, moved=False, age=30.0, interval=1.0)
    assert not trust.trusted


def test_a_date_older_than_the_previous_visit_contradicts_a_change() -> None:
    # The record changed since the last visit, but the date says the change came before it.
    assert LastModifiedTrust().audit(changed=True, moved=True, age=3.0, interval=2.0) == "contradicts"


def test_a_date_that_moves_without_the_record_is_volatile_and_not_trusted() -> None:
    trust = LastModifiedTrust()
    for _ in range(20):
        trust.audit(changed=True, moved=True, age=0.5, interval=1.0)
        trust.audit(changed=False, moved=True, age=0.0, interval=1.0)  # a date that is always "now"
    assert (trust.agrees, trust.volatile, trust.contradicts) == (20, 20, 0)
    assert not trust.trusted


def test_a_date_that_is_always_the_response_time_is_volatile_even_when_pages_change() -> None:
    # Pages that change at every visit, under a date that is "now": every audit would agree on
    # movement alone, and every change would be dated 0 seconds ago (a rate far too high).
    trust = LastModifiedTrust()
    for _ in range(10):
        assert trust.audit(changed=True, moved=True, age=0.0, interval=1.0) == "volatile"
    assert not trust.trusted


def test_counts_round_trip_and_bad_counts_are_refused() -> None:
    trust = LastModifiedTrust(agrees=4, volatile=1, contradicts=0)
    assert LastModifiedTrust.from_json(trust.to_json()) == trust
    for bad in ([1, 2], [1, -1, 0], ["1", 0, 0], [True, 0, 0], {"agrees": 1}, None):
        with pytest.raises(ValueError, match="malformed Last-Modified audit counts"):
            LastModifiedTrust.from_json(bad)
