"""Per-host validator trust: ETag audits, verified 304s, hosts that ignore validators, probations."""

from __future__ import annotations

import pytest

from scrapy_costsched.model.trust import PROBATION_AUDITS, TRUST_AFTER, SignalTrust
from scrapy_costsched.model.validators import (
    IGNORED_AFTER,
    PROBATION_DAYS,
    HostValidators,
    NotModifiedTrust,
    audit_etag,
    verify_every,
)


def test_an_etag_that_follows_the_record_earns_trust() -> None:
    trust = SignalTrust()
    for n in range(TRUST_AFTER):
        assert not trust.trusted
        assert audit_etag(trust, f'"v{n}"', f'"v{n + 1}"', changed=True) == "agrees"
    assert trust.trusted


def test_an_etag_that_stays_over_a_changed_record_lies_and_is_not_sent() -> None:
    host = HostValidators(etag=SignalTrust(agrees=50))
    assert audit_etag(host.etag, '"same"', '"same"', changed=True) == "contradicts"
    assert host.to_send(etag=True, date=False, today=1.0) == (False, False)
    assert host.verdicts()["etag"] == "lies"
    for _ in range(PROBATION_AUDITS + TRUST_AFTER - 1):  # still lying now and then keeps it out
        audit_etag(host.etag, '"a"', '"b"', changed=True)
    audit_etag(host.etag, '"same"', '"same"', changed=True)
    assert host.etag.probation == 2 * PROBATION_AUDITS


def test_rotating_etags_are_volatile_and_leave_if_modified_since_to_trusted_dates() -> None:
    host = HostValidators(last_modified=SignalTrust(agrees=TRUST_AFTER))
    for n in range(20):
        audit_etag(host.etag, f'"r{n}"', f'"r{n + 1}"', changed=n % 5 == 0)
    assert host.verdicts()["etag"] == "volatile"
    assert host.to_send(etag=True, date=True, today=1.0) == (False, True)
    host.last_modified = SignalTrust(volatile=5)
    assert host.to_send(etag=True, date=True, today=1.0) == (False, False)


def test_weak_and_strong_forms_of_one_tag_are_the_same_etag() -> None:
    assert audit_etag(SignalTrust(), '"x"', 'W/"x"', changed=False) == "agrees"


def test_verification_takes_each_hosts_first_conditional_visit_then_every_kth() -> None:
    every = verify_every(0.1)
    assert every == 10
    big, small = NotModifiedTrust(), NotModifiedTrust()
    assert small.due(every)  # a host with a single conditional visit is verified too
    assert [n for n in range(35) if big.due(every)] == [0, 10, 20, 30]
    assert not any(NotModifiedTrust().due(verify_every(0.0)) for _ in range(5))


def test_a_304_to_the_canary_convicts_the_host_at_once_and_a_full_answer_clears_it() -> None:
    honest, liar = NotModifiedTrust(), NotModifiedTrust()
    assert honest.verified_by(not_modified=False, today=3.0) == "verified"
    assert honest.usable(3.0)
    assert liar.verified_by(not_modified=True, today=3.0) == "false"
    assert not liar.usable(3.0)


def test_a_false_304_stops_conditional_requests_until_a_probation_ends_then_doubles() -> None:
    host = HostValidators(etag=SignalTrust(agrees=10))
    assert host.answers.due(10)
    host.answers.verified_by(not_modified=True, today=1.0)
    assert host.verdicts()["not_modified"] == "false"
    assert host.to_send(etag=True, date=False, today=1.0 + PROBATION_DAYS - 0.01) == (False, False)
    assert host.to_send(etag=True, date=False, today=1.0 + PROBATION_DAYS) == (True, False)  # re-audited
    assert host.verdicts()["not_modified"] == "learning"
    assert host.answers.due(10)  # its first conditional visit after the probation is a verification
    host.answers.verified_by(not_modified=True, today=10.0)
    assert host.answers.blocked_until == 10.0 + 2 * PROBATION_DAYS


def test_a_host_that_never_answers_304_to_matching_validators_ignores_them() -> None:
    trust = NotModifiedTrust()
    assert not trust.answered_in_full(validators_matched=False, today=1.0)  # the page changed: a full answer is right
    for _ in range(IGNORED_AFTER - 1):
        assert not trust.answered_in_full(validators_matched=True, today=1.0)
    assert trust.answered_in_full(validators_matched=True, today=1.0)
    assert trust.verdict == "ignored"
    assert not trust.usable(2.0)


def test_a_host_that_answered_304_is_not_said_to_ignore_validators() -> None:
    trust = NotModifiedTrust()
    trust.not_modified()
    assert not any(trust.answered_in_full(validators_matched=True, today=1.0) for _ in range(10))


def test_a_host_that_sends_no_validators_is_called_so() -> None:
    host = HostValidators()
    assert host.verdicts()["etag"] == "learning"
    for _ in range(3):
        host.saw(etag=False, date=True)
    assert host.verdicts()["etag"] == "none"
    assert host.verdicts()["last_modified"] == "learning"


def test_host_state_round_trips_and_malformed_state_is_refused() -> None:
    host = HostValidators(etag=SignalTrust(4, 1, 1, 1, 7), answers=NotModifiedTrust(5, 2, 1, 0, 3, 1, 9.5, "false"),
                          responses=8, etags_seen=8, dates_seen=0)
    lm = SignalTrust(agrees=2)
    assert HostValidators.from_json(host.to_json(), lm) == HostValidators(host.etag, lm, host.answers, 8, 8, 0)
    for bad in (None, {"etag": [1, 0, 0], "answers": [0] * 8, "seen": [1, 1, 1]},
                {"etag": [1, 0, 0], "answers": [0, 0, 0, 0, 0, 0, 0, ""], "seen": [1, -1, 1]}):
        with pytest.raises(ValueError, match="malformed"):
            HostValidators.from_json(bad, lm)
