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
- **304 answers** (:class:`NotModifiedTrust`): every ``k``-th 304 of a host,
  its first one included, is verified by fetching the page again in full at
  once (``k = ⌈1/share⌉``, per host, so small hosts are verified as often as
  big ones). A record that changed within seconds of a 304, which the page's
  rate does not explain, is a false 304: the host's 304s lose trust at once.
  A host that is sent validators that still match and answers in full every
  time ignores them. Either way it gets no conditional request for a probation
  of :data:`PROBATION_VISITS` of its visits (doubled with each strike), then
  is tried again from its first 304: trust is re-audited, never granted for good.

A host is sent ``If-None-Match`` only while its ETags are trusted, and
``If-Modified-Since`` only while its dates are (:meth:`HostValidators.to_send`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from scrapy_costsched.model.trust import AGREES, CONTRADICTS, VOLATILE, SignalTrust

__all__ = ["DEFAULT_VERIFY_SHARE", "FALSE_304_EVIDENCE", "IGNORED_AFTER", "PROBATION_VISITS", "HostValidators",
           "NotModifiedTrust", "audit_etag", "verify_every"]

#: Share of a host's 304s verified by a full fetch, unless ``COSTSCHED_VERIFY_SHARE`` says otherwise.
DEFAULT_VERIFY_SHARE = 0.1
#: A change after a 304 that the page's rate makes less likely than this is blamed on the 304.
FALSE_304_EVIDENCE = 0.05
#: Full answers to matching validators, with no 304 ever, before a host is said to ignore them.
IGNORED_AFTER = 3
#: Visits of a host before conditional requests are tried again after a false 304 (doubled per strike).
PROBATION_VISITS = 20
#: Responses a host must have sent before a validator it never sends is called absent.
ABSENT_AFTER = 3


def verify_every(share: float) -> int:
    """A share of 304s to verify as "every k-th" (0: never).

    >>> verify_every(0.1), verify_every(0.3), verify_every(1.0), verify_every(0.0)
    (10, 4, 1, 0)
    """
    return math.ceil(1.0 / share - 1e-9) if share > 0.0 else 0


def audit_etag(trust: SignalTrust, previous: str, current: str, changed: bool) -> str:
    """Audit a host's ETag with one full response to a page whose previous record carried *previous*.

    ETags are compared weakly (RFC 9110 section 8.8.3.2), as ``If-None-Match`` does.

    >>> trust = SignalTrust()
    >>> audit_etag(trust, '"a"', 'W/"a"', False), audit_etag(trust, '"a"', '"b"', True)
    ('agrees', 'agrees')
    >>> audit_etag(trust, '"a"', '"b"', False), audit_etag(trust, '"a"', '"a"', True)
    ('volatile', 'contradicts')
    """
    same = previous.removeprefix("W/") == current.removeprefix("W/")
    verdict = (CONTRADICTS if changed else AGREES) if same else AGREES if changed else VOLATILE
    return trust.count(verdict)


@dataclass
class NotModifiedTrust:
    """What a host's answers to conditional requests have shown.

    *answered*: 304s received; *verified*: 304s re-fetched in full that found
    the record as it was; *false*: 304s caught over a changed record;
    *ignored*: full answers to validators that still matched, in a row;
    *until_verify*: 304s to pass before the next is verified (0: verify the
    next); *strikes* and *probation* (visits left) as in :class:`~.trust.SignalTrust`,
    *reason* the verdict that started the probation.
    """

    answered: int = 0
    verified: int = 0
    false: int = 0
    ignored: int = 0
    until_verify: int = 0
    strikes: int = 0
    probation: int = 0
    reason: str = ""

    @property
    def usable(self) -> bool:
        """Whether the host may be sent conditional requests at all."""
        return not self.probation

    @property
    def verdict(self) -> str:
        """``"false"`` or ``"ignored"`` during a probation, ``"trusted"`` once a 304 was verified, else ``"learning"``."""
        if self.probation:
            return self.reason
        return "trusted" if self.verified else "learning"

    def not_modified(self, every: int) -> bool:
        """A 304 arrived; whether to verify it (every *every*-th, the first included; 0: never).

        >>> trust = NotModifiedTrust()
        >>> [trust.not_modified(3) for _ in range(7)]
        [True, False, False, True, False, False, True]
        """
        self.answered += 1
        self.ignored = 0
        if not every or self.until_verify:
            self.until_verify = max(self.until_verify - 1, 0)
            return False
        self.until_verify = every - 1
        return True

    def verify(self, changed: bool, explained: float) -> str:
        """The full fetch right after a verified 304 found the record *changed* or not.

        *explained* is the probability the page's rate gives a change in the
        seconds between the two answers; below :data:`FALSE_304_EVIDENCE` a change
        is the 304's fault. Returns ``"verified"``, ``"false"`` or ``"inconclusive"``.

        >>> trust = NotModifiedTrust()
        >>> trust.verify(False, 0.0), trust.verify(True, 0.5), trust.verify(True, 0.001), trust.verdict
        ('verified', 'inconclusive', 'false', 'false')
        """
        if not changed:
            self.verified += 1
            return "verified"
        if explained >= FALSE_304_EVIDENCE:
            return "inconclusive"
        self.false += 1
        self._strike("false")
        return "false"

    def answered_in_full(self, validators_matched: bool) -> bool:
        """A conditional request got a full answer; ``True`` when this shows the host ignores validators."""
        if not validators_matched:
            return False
        self.ignored += 1
        if self.ignored >= IGNORED_AFTER and not self.answered:
            self._strike("ignored")
            return True
        return False

    def visited(self) -> None:
        """One visit of the host: a probation counts down, and at its end conditional requests are tried again."""
        if self.probation:
            self.probation -= 1
            if not self.probation:
                self.ignored = self.until_verify = 0

    def _strike(self, reason: str) -> None:
        self.strikes += 1
        self.reason = reason
        self.probation = PROBATION_VISITS * 2 ** min(self.strikes - 1, 10)

    def to_json(self) -> list[int | str]:
        return [self.answered, self.verified, self.false, self.ignored, self.until_verify, self.strikes,
                self.probation, self.reason]

    @classmethod
    def from_json(cls, data: object) -> NotModifiedTrust:
        """Rebuild stored counts; ``ValueError`` when malformed."""
        if not (isinstance(data, list) and len(data) == 8 and isinstance(data[7], str)
                and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in data[:7])):
            raise ValueError(f"malformed 304 audit counts: {data!r}")
        return cls(*data)


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
        self.answers.visited()

    def to_send(self, etag: bool, date: bool) -> tuple[bool, bool]:
        """Which of a page's stored validators (*etag*, *date*) a conditional request sends.

        >>> host = HostValidators(etag=SignalTrust(agrees=3), last_modified=SignalTrust(volatile=3))
        >>> host.to_send(True, True), host.to_send(False, True)
        ((True, False), (False, False))
        """
        if not self.answers.usable:
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
