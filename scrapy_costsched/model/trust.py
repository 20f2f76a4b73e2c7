"""How far a host's validators can be believed, learned from the records themselves (pure).

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
under :data:`VOLATILE_SHARE`; one contradiction ends the trust at once
(design: "a false 304 stops trust at once"). The audits go on, so a host that
fixes itself earns trust back, but only after a probation of
:data:`PROBATION_AUDITS` audits that doubles with each contradiction after one
ended. A contradiction during a probation starts it again at its length: a
single crawl whose every page contradicts (an item field that changes on every
visit, later ignored) is one strike, not one per page.

:class:`SignalTrust` keeps these counts for any validator a full response can
be audited against: :mod:`~.validators` audits ETags with it too.

A date that moves exactly with the record may still not time the change as a
Poisson change would be timed. A site whose update runs at one time of the day
(a nightly import an hour before the morning's crawl) dates every change at
that time: read to the second, such a date says "changed, then unchanged for
an hour", and on a page with little history one of them made a page that
changes every few days look like five to ten changes a day, too often to be
worth a visit again (a job board's API in a trial). :class:`DateTiming` sees
when in the day a host's dates fall; where they bunch, a date tells the day.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["AGREES", "BATCHED_AFTER", "BATCHED_SHARE", "CONTRADICTS", "PROBATION_AUDITS", "TRUST_AFTER", "VOLATILE",
           "VOLATILE_SHARE", "DateTiming", "SignalTrust", "audit_date"]

#: Agreeing audits before a host's Last-Modified dates a change.
TRUST_AFTER = 3
#: Largest share of volatile audits a trusted host may show.
VOLATILE_SHARE = 0.1
#: Audits after a contradiction before trust can be earned again (doubled for each contradiction).
PROBATION_AUDITS = 20
#: Agreeing and volatile audits kept: beyond this both are halved, so old behaviour fades.
AUDIT_MEMORY = 200

AGREES, VOLATILE, CONTRADICTS = "agrees", "volatile", "contradicts"

#: Dates a host's pages must have shown before they can be found to bunch at one time of the day ...
BATCHED_AFTER = 10
#: ... and the share of them within two adjacent hours that makes them bunch.
BATCHED_SHARE = 0.9


@dataclass
class SignalTrust:
    """One host's audits of one validator signal (its ETags or its Last-Modified dates).

    *contradicts* counts every contradiction ever seen; *strikes* the ones that
    started a probation (not those that restarted one), and *probation* the
    audits still to pass before trust can be earned again.
    """

    agrees: int = 0
    volatile: int = 0
    contradicts: int = 0
    strikes: int = 0
    probation: int = 0

    @property
    def trusted(self) -> bool:
        """Whether the signal may be believed (sent as a validator, or date a change).

        >>> SignalTrust(agrees=3).trusted, SignalTrust(agrees=30, probation=1).trusted
        (True, False)
        >>> SignalTrust(agrees=9, volatile=1).trusted, SignalTrust(agrees=8, volatile=2).trusted
        (True, False)
        """
        audits = self.agrees + self.volatile
        return not self.probation and self.agrees >= TRUST_AFTER and self.volatile <= VOLATILE_SHARE * audits

    @property
    def verdict(self) -> str:
        """``"lies"``, ``"volatile"``, ``"trusted"`` or ``"learning"`` (reports and stats)."""
        if self.probation:
            return "lies"
        if self.trusted:
            return "trusted"
        return "volatile" if self.volatile > VOLATILE_SHARE * (self.agrees + self.volatile) else "learning"

    def count(self, verdict: str) -> str:
        """Record one audit's *verdict*; a contradiction ends trust and starts a probation (again)."""
        on_probation = self.probation > 0
        if on_probation:
            self.probation -= 1
        if verdict == CONTRADICTS:
            self.contradicts += 1
            self.strikes += not on_probation
            self.agrees = self.volatile = 0
            self.probation = PROBATION_AUDITS * 2 ** min(self.strikes - 1, 10)
            return verdict
        setattr(self, verdict, getattr(self, verdict) + 1)
        if self.agrees + self.volatile > AUDIT_MEMORY:
            self.agrees //= 2
            self.volatile //= 2
        return verdict

    def audit(self, changed: bool, moved: bool, age: float, interval: float) -> str:
        """Record one audit of a Last-Modified date and return its verdict.

        *changed*: the record differs from the previous visit's; *moved*: the
        date differs from the one that visit saw; *age*: time from the date to the
        response (by the server's ``Date``; 0 when the date is that very time or
        later); *interval*: time since the previous visit (same unit).

        >>> trust = SignalTrust()
        >>> trust.audit(True, True, 2.0, 5.0), trust.audit(False, False, 7.0, 5.0), trust.audit(False, True, 3.0, 5.0)
        ('agrees', 'agrees', 'volatile')
        >>> trust.audit(True, True, 0.0, 5.0), trust.audit(True, True, 6.0, 5.0), trust
        ('volatile', 'contradicts', SignalTrust(agrees=0, volatile=0, contradicts=1, strikes=1, probation=20))
        """
        if not changed:
            verdict = VOLATILE if moved else AGREES
        elif not moved or age >= interval:
            verdict = CONTRADICTS
        else:
            verdict = AGREES if age > 0.0 else VOLATILE
        return self.count(verdict)

    def to_json(self) -> list[int]:
        counts = [self.agrees, self.volatile, self.contradicts]
        return [*counts, self.strikes, self.probation] if self.strikes or self.probation else counts

    @classmethod
    def from_json(cls, data: object) -> SignalTrust:
        """Rebuild stored counts; ``ValueError`` unless three or five non-negative integers.

        Three counts were written before probations existed: a contradiction then ended trust for good,
        so it starts a probation now.
        """
        if not (isinstance(data, list) and len(data) in (3, 5)
                and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in data)):
            raise ValueError(f"malformed validator audit counts: {data!r}")
        if len(data) == 3 and data[2]:
            return cls(0, 0, data[2], data[2], PROBATION_AUDITS * 2 ** min(data[2] - 1, 10))
        return cls(*data)


@dataclass
class DateTiming:
    """When in the day one host's Last-Modified dates fall, in hourly bins (UTC), each date counted once.

    Dates of changes that come at any time spread over the day (or over working hours); an update run at
    one time of the day puts at least :data:`BATCHED_SHARE` of them within two hours. Such a host's date
    tells on which day its page changed, not when: a change is dated to the day
    (:func:`~.learning.observe`'s *resolution*).
    """

    hours: list[float] = field(default_factory=lambda: [0.0] * 24)

    def saw(self, time_of_day: float) -> None:
        """Count a date *time_of_day* (a fraction of the day) into its hour; old dates fade as audits do.

        >>> timing = DateTiming()
        >>> for day in range(10):
        ...     timing.saw(0.29)  # 07:00 each day
        >>> timing.batched, timing.hours[6:8]
        (True, [10.0, 0.0])
        """
        self.hours[int(time_of_day % 1.0 * 24) % 24] += 1.0
        if sum(self.hours) > AUDIT_MEMORY:
            self.hours = [count / 2.0 for count in self.hours]

    @property
    def batched(self) -> bool:
        """Whether the host's dates bunch within two hours of the day (the window may span midnight).

        >>> DateTiming([1.0] * 24).batched, DateTiming([5.0] + [0.0] * 22 + [5.0]).batched
        (False, True)
        >>> DateTiming([9.0] + [0.0] * 22 + [1.0]).batched, DateTiming([8.0] + [0.0] * 12 + [2.0] + [0.0] * 10).batched
        (True, False)
        """
        seen = sum(self.hours)
        bunched = max(self.hours[hour] + self.hours[(hour + 1) % 24] for hour in range(24))
        return seen >= BATCHED_AFTER and bunched >= BATCHED_SHARE * seen

    @property
    def resolution(self) -> float:
        """How closely the host's dates date its changes, in days: to the day when :attr:`batched`, else to the second.

        >>> DateTiming([10.0] + [0.0] * 23).resolution, DateTiming().resolution == 1.0 / 86_400
        (1.0, True)
        """
        return 1.0 if self.batched else 1.0 / 86_400

    def to_json(self) -> list[float]:
        return list(self.hours)

    @classmethod
    def from_json(cls, data: object) -> DateTiming:
        """Rebuild stored counts; ``ValueError`` unless 24 non-negative numbers.

        >>> DateTiming.from_json([1] + [0] * 23).hours[:2]
        [1.0, 0.0]
        >>> DateTiming.from_json([1, 2])
        Traceback (most recent call last):
        ValueError: malformed date timing counts: [1, 2]
        """
        if not (isinstance(data, list) and len(data) == 24
                and all(isinstance(n, (int, float)) and not isinstance(n, bool) and n >= 0 for n in data)):
            raise ValueError(f"malformed date timing counts: {data!r}")
        return cls([float(n) for n in data])


def audit_date(
    trust: SignalTrust, previous: float | None, current: float, age: float, changed: bool, interval: float
) -> tuple[str | None, float | None]:
    """Audit a host with one full response and say whether its date dates the change.

    *previous* and *current* are the Last-Modified dates the previous visit and
    this one saw (no audit without a previous one); *age*, *changed* and
    *interval* as in :meth:`SignalTrust.audit`. Returns the verdict (or
    ``None``) and *age* when the record changed, the host was trusted before
    this visit and this audit does not disagree (else ``None``). The Scrapy
    tracker and the simulator's learners both decide with it.

    >>> trust = SignalTrust(agrees=3)
    >>> audit_date(trust, 100.0, 105.0, 2.0, True, 4.0), audit_date(trust, 105.0, 105.0, 9.0, True, 4.0)
    (('agrees', 2.0), ('contradicts', None))
    >>> audit_date(SignalTrust(), None, 105.0, 2.0, True, 4.0)
    (None, None)
    """
    trusted = trust.trusted
    verdict = None
    if previous is not None:
        verdict = trust.audit(changed, current != previous, age, interval)
        trusted = trusted and verdict == AGREES
    return verdict, age if trusted and changed else None
