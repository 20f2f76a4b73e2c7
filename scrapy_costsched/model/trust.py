"""How far a host's ``Last-Modified`` dates can be believed, learned from the records themselves (pure).

A dated change is worth far more to the rate estimate than "changed since the
last visit" (the last-modified estimator, Cho & Garcia-Molina, TODS 2003), but
only when the date moves exactly when the extracted record does. Every full
response to a page with a previous record and date is a free audit: the record
changed and the date moved past the previous visit (or neither moved) agrees;
the record stayed while the date moved, or the date is the response's own time
(a page rendered now, not changed now), is *volatile* (a date that tracks the
HTML, ads or the clock, not the data); the record changed while the date stayed
or points before the previous visit is a *contradiction*. A host's dates are
trusted after :data:`TRUST_AFTER` agreeing audits, while volatile ones stay
under :data:`VOLATILE_SHARE`; one contradiction ends the trust for good
(design: "a false 304 stops trust at once").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

__all__ = ["AGREES", "CONTRADICTS", "TRUST_AFTER", "VOLATILE", "VOLATILE_SHARE", "LastModifiedTrust", "audit_date",
           "http_date"]

#: Agreeing audits before a host's Last-Modified dates a change.
TRUST_AFTER = 3
#: Largest share of volatile audits a trusted host may show.
VOLATILE_SHARE = 0.1

AGREES, VOLATILE, CONTRADICTS = "agrees", "volatile", "contradicts"


def http_date(value: bytes | str | None) -> float | None:
    """Epoch seconds of an HTTP date header, ``None`` when absent; ``ValueError`` when malformed.

    >>> http_date(b"Sun, 06 Nov 1994 08:49:37 GMT")
    784111777.0
    >>> http_date(None) is None
    True
    """
    if value is None:
        return None
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    try:
        when = parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        raise ValueError(f"not an HTTP date: {text[:60]!r}") from None
    if not math.isfinite(when):
        raise ValueError(f"not an HTTP date: {text[:60]!r}")
    return when


@dataclass
class LastModifiedTrust:
    """One host's audits of its Last-Modified dates against the records they should date."""

    agrees: int = 0
    volatile: int = 0
    contradicts: int = 0

    @property
    def trusted(self) -> bool:
        """Whether the host's dates may date a change.

        >>> LastModifiedTrust(agrees=3).trusted, LastModifiedTrust(agrees=30, contradicts=1).trusted
        (True, False)
        >>> LastModifiedTrust(agrees=9, volatile=1).trusted, LastModifiedTrust(agrees=8, volatile=2).trusted
        (True, False)
        """
        audits = self.agrees + self.volatile
        return not self.contradicts and self.agrees >= TRUST_AFTER and self.volatile <= VOLATILE_SHARE * audits

    def audit(self, changed: bool, moved: bool, age: float, interval: float) -> str:
        """Record one audit and return its verdict.

        *changed*: the record differs from the previous visit's; *moved*: the
        date differs from the one that visit saw; *age*: time from the date to the
        response (by the server's ``Date``; 0 when the date is that very time or
        later); *interval*: time since the previous visit (same unit).

        >>> trust = LastModifiedTrust()
        >>> trust.audit(True, True, 2.0, 5.0), trust.audit(False, False, 7.0, 5.0), trust.audit(False, True, 3.0, 5.0)
        ('agrees', 'agrees', 'volatile')
        >>> trust.audit(True, True, 0.0, 5.0), trust.audit(True, True, 6.0, 5.0), trust
        ('volatile', 'contradicts', LastModifiedTrust(agrees=2, volatile=2, contradicts=1))
        """
        if not changed:
            verdict = VOLATILE if moved else AGREES
        elif not moved or age >= interval:
            verdict = CONTRADICTS
        else:
            verdict = AGREES if age > 0.0 else VOLATILE
        setattr(self, verdict, getattr(self, verdict) + 1)
        return verdict

    def to_json(self) -> list[int]:
        return [self.agrees, self.volatile, self.contradicts]

    @classmethod
    def from_json(cls, data: object) -> LastModifiedTrust:
        """Rebuild stored counts; ``ValueError`` when they are not three non-negative integers."""
        if not (isinstance(data, list) and len(data) == 3
                and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in data)):
            raise ValueError(f"malformed Last-Modified audit counts: {data!r}")
        return cls(*data)


def audit_date(
    trust: LastModifiedTrust, previous: float | None, current: float, age: float, changed: bool, interval: float
) -> tuple[str | None, float | None]:
    """Audit a host with one full response and say whether its date dates the change.

    *previous* and *current* are the Last-Modified dates the previous visit and
    this one saw (no audit without a previous one); *age*, *changed* and
    *interval* as in :meth:`LastModifiedTrust.audit`. Returns the verdict (or
    ``None``) and *age* when the record changed, the host was trusted before
    this visit and this audit does not disagree (else ``None``). The Scrapy
    tracker and the simulator's learners both decide with it.

    >>> trust = LastModifiedTrust(agrees=3)
    >>> audit_date(trust, 100.0, 105.0, 2.0, True, 4.0), audit_date(trust, 105.0, 105.0, 9.0, True, 4.0)
    (('agrees', 2.0), ('contradicts', None))
    >>> audit_date(LastModifiedTrust(), None, 105.0, 2.0, True, 4.0)
    (None, None)
    """
    trusted = trust.trusted
    verdict = None
    if previous is not None:
        verdict = trust.audit(changed, current != previous, age, interval)
        trusted = trusted and verdict == AGREES
    return verdict, age if trusted and changed else None
