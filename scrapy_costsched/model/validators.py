"""Which validators a host has earned, learned from evidence (pure; the tracker and the simulator share it).

A conditional request is the cheapest signal there is: an unchanged page
costs a 304 (a few hundred bytes) instead of a full fetch. But hosts send
validators and ignore them, rotate ETags on every response, and some answer
304 although the data changed. So each host earns trust per signal:

- **ETag**: every full response to a page with a stored record and ETag is an
  audit (:func:`audit_etag`): the same ETag over a changed record *contradicts*
  (the ETag lies), a new ETag over the same record is *volatile* (rotating,
  per-server or gzip-suffixed tags). Counted in a :class:`~.trust.SignalTrust`,
  as Last-Modified dates are (:func:`~.trust.audit_date`).
- **304 answers** (:class:`NotModifiedTrust`): each host's first conditional
  visit, and one in every ``k = ⌈1/share⌉`` after (per host, so small hosts
  are verified as often as big ones), is a verification: it goes out without
  the page's validators, with a *canary* instead, an ``If-None-Match`` no
  response ever carried (or an ``If-Modified-Since`` a second before the
  page's date). An honest host answers in full, exactly as without validators;
  a host that answers 304 to it would answer 304 whatever changed, and is
  convicted by that one answer, without guessing whether the page's rate
  explains a change. Its 304s lose trust at once. A host that is sent
  validators that still match and answers in full every time ignores them.
  Either way it gets no conditional request for a probation of
  :data:`PROBATION_DAYS` (doubled with each strike), then is tried again, its
  first conditional visit a verification: trust is re-audited, never granted
  for good. Hosts whose ETags or dates do not follow the record are caught by
  the audits of full answers above.

A host is sent ``If-None-Match`` only while its ETags are trusted, and
``If-Modified-Since`` only while its dates are (:meth:`HostValidators.to_send`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from scrapy_costsched.model.trust import AGREES, CONTRADICTS, VOLATILE, SignalTrust

__all__ = ["CANARY_ETAG", "DEFAULT_VERIFY_SHARE", "IGNORED_AFTER", "PROBATION_DAYS", "HostValidators",
           "NotModifiedTrust", "audit_etag", "validator_stayed", "verify_every"]

#: Share of a host's conditional visits sent as verifications, unless ``COSTSCHED_VERIFY_SHARE`` says otherwise.
DEFAULT_VERIFY_SHARE = 0.1
#: The entity-tag a verification sends: no server ever gave it, so only a liar answers 304 to it.
CANARY_ETAG = '"costsched-canary-0"'
#: Full answers to matching validators, with no 304 ever, before a host is said to ignore them.
IGNORED_AFTER = 3
#: Days without conditional requests for a host caught on a false 304 or ignoring validators (doubled per strike).
PROBATION_DAYS = 7.0
#: Responses a host must have sent before a validator it never sends is called absent.
ABSENT_AFTER = 3


def verify_every(share: float) -> int:
    """A share of conditional visits to verify as "every k-th" (0: never).

    >>> verify_every(0.1), verify_every(0.3), verify_every(1.0), verify_every(0.0)
    (10, 4, 1, 0)
    """
    return math.ceil(1.0 / share - 1e-9) if share > 0.0 else 0


def audit_etag(trust: SignalTrust, previous: str, current: str, changed: bool) -> str:
    """Audit a host's ETag with one full response to a page whose previous record carried *previous*.

    >>> trust = SignalTrust()
    >>> audit_etag(trust, '"a"', 'W/"a"', False), audit_etag(trust, '"a"', '"b"', True)
    ('agrees', 'agrees')
    >>> audit_etag(trust, '"a"', '"b"', False), audit_etag(trust, '"a"', '"a"', True)
    ('volatile', 'contradicts')
    """
    verdict = (CONTRADICTS if changed else AGREES) if _same_etag(previous, current) else \
        AGREES if changed else VOLATILE
    return trust.count(verdict)


def validator_stayed(previous_etag: str | None, etag: str | None, previous_date: float | None,
                     date: float | None) -> bool:
    """Whether a full answer carries the same validator as the page's previous one: the server's word that the
    page is as it was. The ETag decides when both answers have one, else the Last-Modified date.

    >>> validator_stayed('"a"', 'W/"a"', 1.0, 2.0), validator_stayed(None, '"a"', 5.0, 5.0)
    (True, True)
    >>> validator_stayed('"a"', '"b"', 5.0, 5.0), validator_stayed(None, None, None, None)
    (False, False)
    """
    if previous_etag is not None and etag is not None:
        return _same_etag(previous_etag, etag)
    return previous_date is not None and previous_date == date


def _same_etag(previous: str, current: str) -> bool:
    """ETags compared weakly (RFC 9110 section 8.8.3.2), as ``If-None-Match`` compares them."""
    return previous.removeprefix("W/") == current.removeprefix("W/")


@dataclass
class NotModifiedTrust:
    """What a host's answers to conditional requests have shown.

    *answered*: 304s to the page's own validators; *verified*: verifications
    answered in full, as they must be; *false*: verifications answered 304;
    *ignored*: full answers to validators that still matched, in a row;
    *until_verify*: conditional visits to pass before the next verification (0:
    the next is one); *strikes*: probations so far; *blocked_until*: the day
    (in the caller's clock, days) a probation ends, 0 when none; *reason*: the
    verdict that started it.
    """

    answered: int = 0
    verified: int = 0
    false: int = 0
    ignored: int = 0
    until_verify: int = 0
    strikes: int = 0
    blocked_until: float = 0.0
    reason: str = ""

    def usable(self, today: float) -> bool:
        """Whether the host may be sent conditional requests on day *today*; a probation that ended is lifted."""
        if self.blocked_until and today >= self.blocked_until:
            self.blocked_until = 0.0
            self.ignored = self.until_verify = 0  # tried again from scratch, its first conditional visit verified
        return not self.blocked_until

    @property
    def verdict(self) -> str:
        """``"false"`` or ``"ignored"`` during a probation, ``"trusted"`` once a verification passed, else ``"learning"``."""
        if self.blocked_until:
            return self.reason
        return "trusted" if self.verified else "learning"

    def due(self, every: int) -> bool:
        """A conditional visit is about to go out: whether it is a verification (every *every*-th, the first included).

        >>> trust = NotModifiedTrust()
        >>> [trust.due(3) for _ in range(7)], NotModifiedTrust().due(0)
        ([True, False, False, True, False, False, True], False)
        """
        if not every:
            return False
        if self.until_verify:
            self.until_verify -= 1
            return False
        self.until_verify = every - 1
        return True

    def not_modified(self) -> None:
        """A 304 to the page's own validators."""
        self.answered += 1
        self.ignored = 0

    def verified_by(self, not_modified: bool, today: float) -> str:
        """A verification's answer: ``"false"`` (a 304 to the canary: the probation starts) or ``"verified"``.

        >>> trust = NotModifiedTrust()
        >>> trust.verified_by(False, 1.0), trust.verdict, trust.verified_by(True, 1.0), trust.verdict
        ('verified', 'trusted', 'false', 'false')
        >>> trust.usable(7.9), trust.usable(8.0), trust.verdict
        (False, True, 'trusted')
        """
        if not not_modified:
            self.verified += 1
            return "verified"
        self.false += 1
        self._strike("false", today)
        return "false"

    def answered_in_full(self, validators_matched: bool, today: float) -> bool:
        """A conditional request got a full answer; ``True`` when this shows the host ignores validators."""
        if not validators_matched:
            return False
        self.ignored += 1
        if self.ignored >= IGNORED_AFTER and not self.answered:
            self._strike("ignored", today)
            return True
        return False

    def _strike(self, reason: str, today: float) -> None:
        self.strikes += 1
        self.reason = reason
        self.blocked_until = today + PROBATION_DAYS * 2 ** min(self.strikes - 1, 10)

    def to_json(self) -> list[int | float | str]:
        return [self.answered, self.verified, self.false, self.ignored, self.until_verify, self.strikes,
                self.blocked_until, self.reason]

    @classmethod
    def from_json(cls, data: object) -> NotModifiedTrust:
        """Rebuild stored counts; ``ValueError`` when malformed."""
        if not (isinstance(data, list) and len(data) == 8 and isinstance(data[7], str)
                and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in data[:6])
                and isinstance(data[6], (int, float)) and not isinstance(data[6], bool) and data[6] >= 0):
            raise ValueError(f"malformed 304 audit counts: {data!r}")
        answered, verified, false, ignored, until_verify, strikes = data[:6]
        return cls(answered, verified, false, ignored, until_verify, strikes, float(data[6]), data[7])


@dataclass
class HostValidators:
    """One host's three signals, and how often it sent each validator at all."""

    etag: SignalTrust = field(default_factory=SignalTrust)
    last_modified: SignalTrust = field(default_factory=SignalTrust)
    answers: NotModifiedTrust = field(default_factory=NotModifiedTrust)
    responses: int = 0
    etags_seen: int = 0
    dates_seen: int = 0

    def saw(self, etag: bool, date: bool) -> None:
        """A full response, with or without each validator."""
        self.responses += 1
        self.etags_seen += etag
        self.dates_seen += date

    def to_send(self, etag: bool, date: bool, today: float) -> tuple[bool, bool]:
        """Which of a page's stored validators (*etag*, *date*) a conditional request sends on day *today*.

        >>> host = HostValidators(etag=SignalTrust(agrees=3), last_modified=SignalTrust(volatile=3))
        >>> host.to_send(True, True, 0.0), host.to_send(False, True, 0.0)
        ((True, False), (False, False))
        """
        if not self.answers.usable(today):
            return False, False
        return etag and self.etag.trusted, date and self.last_modified.trusted

    def verdicts(self) -> dict[str, str]:
        """The host's verdict per signal, as stats and reports show them."""

        def signal(trust: SignalTrust, seen: int) -> str:
            return "none" if not seen and self.responses >= ABSENT_AFTER else trust.verdict

        return {"etag": signal(self.etag, self.etags_seen), "last_modified": signal(self.last_modified, self.dates_seen),
                "not_modified": self.answers.verdict}

    def to_json(self) -> dict[str, object]:
        return {"etag": self.etag.to_json(), "answers": self.answers.to_json(),
                "seen": [self.responses, self.etags_seen, self.dates_seen]}

    @classmethod
    def from_json(cls, data: object, last_modified: SignalTrust) -> HostValidators:
        """Rebuild a stored host (its Last-Modified audits are stored on their own); ``ValueError`` when malformed."""
        if not isinstance(data, dict):
            raise ValueError(f"malformed host validators: {data!r}")
        seen = data.get("seen")
        if not (isinstance(seen, list) and len(seen) == 3
                and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in seen)):
            raise ValueError(f"malformed host validator counts: {seen!r}")
        return cls(SignalTrust.from_json(data.get("etag")), last_modified, NotModifiedTrust.from_json(data.get("answers")),
                   *seen)
