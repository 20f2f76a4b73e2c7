"""The period's ledger: what was spent, what is reserved by requests in flight, and what is on disk.

A budget belongs to the period, not to a process run, and a run can die at any
moment (``kill -9``, OOM, a container stop). So the ledger on disk is never
behind what may have been spent: before a request leaves the scheduler, the
stored spend covers it. Requests merely queued are reserved in memory only (they
cannot have been sent); the ledger writes a *grant* (spent + the cost of requests
that left the scheduler + one chunk) and commits it whenever the requests sent
outgrow the last grant. A run that dies finds the grant in the state and counts
it as spent. A crash therefore leaves unspent at most one chunk plus the requests
in flight, and never overspends the period. A run that closes normally stores its
exact spend.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import deque
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy import Request

    from scrapy_costsched.storage import StateStorage

#: Request meta key of a request's reservation (set by the ledger; never part of a template).
HOLD_META = "costsched_hold"
#: A grant covers this many more planned visits than are reserved when it is written,
#: so the state is committed once per chunk of requests rather than once per request.
GRANT_CHUNK_VISITS = 64
#: ...and at most this share of the period's budget (what a crash may leave unspent).
GRANT_CHUNK_SHARE = 0.05
#: How many of the run's latest charges say how far their reservations fell short (:meth:`Ledger.remaining`).
SHORTFALL_WINDOW = 32
#: What sums of fractional costs may be off by, as a share of the budget: a cost that fits within it fits.
ROUNDING = 1e-9


#: Meta key of the basis the latest run counted its period's spend on (``ledger_basis:<period>``: a period's).
BASIS_KEY = "ledger_basis"


def number(value: float, spec: str | None = None) -> str:
    """*value* as the log says it: formatted by *spec*, or else to three significant digits and whole from 100 on;
    from 10,000 on whole, with thousands separators, where ``g`` would turn a byte budget of a million into
    ``1e+06``. A budget left after a killed run's draws was logged as "8.2743 requests", then "0.274299".

    >>> number(2.5), number(8.2743), number(0.274299), number(1234.5), number(150000), number(1175410.4, ".0f")
    ('2.5', '8.27', '0.274', '1,234', '150,000', '1,175,410')
    """
    if abs(value) >= 10_000 or (spec is None and abs(value) >= 100):
        return f"{value:,.0f}"
    return format(value, spec or ".3g")


def amount(value: float, unit: str, spec: str | None = None) -> str:
    """*value* in *unit*, formatted by *spec* (:func:`number`), as the log says it: "1 credit", "0.5 credits".

    >>> amount(1, "credits"), amount(2.5, "requests"), amount(1.00004, "requests", ".4g"), amount(1, "USD")
    ('1 credit', '2.5 requests', '1 request', '1 USD')
    >>> amount(1e6, "bytes")
    '1,000,000 bytes'
    """
    text = number(value, spec)
    return f"{text} {unit.removesuffix('s') if text == '1' else unit}"


def per_change(spent: float, changes: int, unit: str) -> str:
    """What each change found cost, for a log line: " (4.67 requests per change)", "" when none was found.

    >>> per_change(14, 3, "requests"), per_change(119951, 7, "bytes"), per_change(5, 0, "credits")
    (' (4.67 requests per change)', ' (17,136 bytes per change)', '')
    """
    if not changes:
        return ""
    each = spent / changes
    return f" ({amount(each, unit)} per change)"


def _key(period: int) -> str:
    return f"ledger:{period}"


def _basis_key(period: int) -> str:
    return f"ledger_basis:{period}"


@dataclass(frozen=True)
class Basis:
    """What a run counted its period's spend in: the period (its number and length), the unit and the budget."""

    period: int
    period_seconds: float
    unit: str
    budget: float | None

    @property
    def start(self) -> float:
        return self.period * self.period_seconds

    @property
    def end(self) -> float:
        return (self.period + 1) * self.period_seconds

    def same_terms(self, other: Basis) -> bool:
        """Whether spend on *other* counts on this one: the same period length and unit."""
        return (self.period_seconds, self.unit) == (other.period_seconds, other.unit)

    @classmethod
    def from_json(cls, data: Any) -> Basis | None:
        """The stored basis, or ``None`` for none (a state from before bases were stored) or a malformed one."""
        try:
            budget = data["budget"]
            return cls(int(data["period"]), float(data["period_seconds"]), str(data["unit"]),
                       None if budget is None else float(budget))
        except (TypeError, KeyError, ValueError):
            return None


@dataclass(frozen=True)
class Carried:
    """What a change of ``COSTSCHED_BUDGET_PERIOD`` or ``COSTSCHED_BILLING`` carried into this period."""

    previous: Basis
    previous_spent: float
    share: float | None
    """The share of its budget the previous period had spent (``None``: it had no budget)."""
    amount: float
    """What of this period's spend the share stands for (spent by the previous period's runs, not this one's)."""


class Ledger:
    """Spend and reservations of one budget period.

    Every attempt that reached the network is charged (:meth:`charge`); a request
    admitted by the scheduler first *reserves* its planned cost, and the
    reservation is released when the request is charged or found never to have
    reached a download handler (robots.txt, offsite, HTTP cache, a middleware that
    answered it), so ``reserved`` always equals the cost of the requests queued or
    in flight. :meth:`dispatch` marks a reserved request that left the scheduler:
    only those can have been sent, so only those must be covered on disk.

    A reservation is found by a number in the request's meta (:data:`HOLD_META`),
    not by the object: with ``JOBDIR`` the scheduler's disk queues hand back a copy
    of each request. A retry or redirect copies the meta of an attempt already
    charged, and is given a number of its own when it is reserved.

    A reservation is an estimate (under byte billing, the mean bytes of pages like
    it), and the requests queued and in flight were all priced before the latest
    answers were measured: when answers keep costing more than was reserved for
    them, what is reserved is scaled up by how far they fell short, so that the last
    requests admitted do not overspend the period by the sum of their errors.
    """

    def __init__(self, store: StateStorage, basis: Basis, commit: Callable[[], None]) -> None:
        self.store = store
        self.basis = basis
        self._commit = commit
        self.spent_at_start = self.stored_spend(store, basis.period)
        self.spent = self.spent_at_start
        self.reserved = 0.0
        self.dispatched = 0.0
        # By the request's hold number, or by a name for a request not made yet (a host's
        # robots.txt): (its cost, whether it left the scheduler).
        self._reservations: dict[int | str, tuple[float, bool]] = {}
        self._holds = itertools.count(1)
        self._granted = self.spent
        # What the latest charges cost over what was reserved for them, and their median (at least 1).
        self._shortfalls: deque[float] = deque(maxlen=SHORTFALL_WINDOW)
        self.shortfall = 1.0

    @property
    def period(self) -> int:
        return self.basis.period

    @property
    def budget(self) -> float | None:
        return self.basis.budget

    @property
    def _key(self) -> str:
        return _key(self.period)

    @staticmethod
    def stored_spend(store: StateStorage, period: int) -> float:
        """What the state says *period* spent (a crashed run's grant included): what a run starts from, and
        what the report shows."""
        return float(store.get_meta(_key(period)) or 0.0)

    def rebase(self, now: float, *, record: bool = True) -> Carried | None:
        """Count this period on the settings' terms when earlier runs counted on others, and store them.

        A period's spend is in one unit over one length. When a run finds the billing unit or
        the period length changed while a period counted on the old terms is still running,
        the share of its budget that period had spent carries over as the same share of this
        budget, rounded up (all of it spent stays all spent), so a change of terms takes effect
        at once and neither spends the period twice nor reads requests as bytes. A period that
        had no budget carries nothing. A row of another length keeps its own number and spend.
        With *record* false (a report over a read-only state) the ledger counts as the next crawl's
        will, storing nothing.
        """
        last = Basis.from_json(self.store.get_meta(BASIS_KEY))
        own = Basis.from_json(self.store.get_meta(_basis_key(self.period)))
        if record:
            for key in (BASIS_KEY, _basis_key(self.period)):
                self.store.set_meta(key, asdict(self.basis))
        previous = last if last is not None and not last.same_terms(self.basis) and now < last.end else None
        spent = self.spent
        if own is not None and not own.same_terms(self.basis):
            # This number's row counted another unit (or, by chance, another length's period): its amount
            # means nothing here, only its share of its budget does, while it is this period.
            spent = 0.0
            if own.period_seconds == self.basis.period_seconds:
                previous = previous or own
        if previous is None:
            if spent != self.spent:
                self._restart(spent, record)
            return None
        previous_spent = self.stored_spend(self.store, previous.period)
        share = min(previous_spent / previous.budget, 1.0) if previous.budget else None
        carried = math.ceil(share * self.budget - 1e-9) if share is not None and self.budget is not None else 0.0
        self._restart(max(spent, carried), record)
        return Carried(previous, previous_spent, share, self.spent - spent)

    def _restart(self, spent: float, record: bool) -> None:
        self.spent_at_start = self.spent = self._granted = spent
        if record:
            self.store.set_meta(self._key, spent)

    @property
    def spent_this_run(self) -> float:
        return self.spent - self.spent_at_start

    def remaining(self) -> float:
        """The budget less what was spent and what is reserved, scaled by :attr:`shortfall`: the requests
        queued or in flight are expected to cost as much more than their reservations as the latest did."""
        assert self.budget is not None
        return self.budget - self.spent - self.reserved * self.shortfall

    def spendable(self) -> float:
        """What a request may yet be reserved at: :meth:`remaining`, within :data:`ROUNDING`."""
        assert self.budget is not None
        return self.remaining() + self.budget * ROUNDING

    def pays_to_send(self, request: Request) -> bool:
        """Whether the budget pays for queued *request* to go out now: it less what was spent leaves enough for
        what the requests sent before it and *request* itself are reserved at, scaled by :attr:`shortfall`.
        Requests still queued behind it do not count: each is asked in its turn."""
        hold = request.meta.get(HOLD_META)
        entry = self._reservations.get(hold) if hold is not None else None
        return self.affords(entry[0] if entry is not None and not entry[1] else 0.0)

    def affords(self, cost: float) -> bool:
        """Whether the budget pays for *cost* on top of what was spent and what the requests sent are reserved
        at, scaled by :attr:`shortfall`; requests merely queued do not count, each is asked at its turn.

        Within :data:`ROUNDING`: reservations of fractional costs (a page type's mean redirects, bytes) added
        and released leave a remainder, which must not refuse a visit that fits exactly.
        """
        assert self.budget is not None
        return self.budget - self.spent - (self.dispatched + cost) * self.shortfall >= -self.budget * ROUNDING

    def headroom(self) -> float:
        """The largest cost :meth:`affords` passes now."""
        assert self.budget is not None
        return (self.budget - self.spent + self.budget * ROUNDING) / self.shortfall - self.dispatched

    def left(self) -> str:
        """What is left of the period's budget, as the log says it: a budget lowered below the period's spend
        (or a shadow run's spend earlier in the period) leaves nothing, not a negative amount."""
        remaining = self.remaining()
        if remaining >= 0.0:
            return f"{amount(remaining, self.basis.unit)} left in this period"
        return f"0 {self.basis.unit} left in this period ({number(self.spent)} spent, over this budget)"

    def reserve(self, request: Request | str, cost: float) -> None:
        """Hold *cost* for *request* until it is charged or released.

        A named holder (a robots.txt request the middleware makes when it wants) may
        leave at any moment, so it counts as dispatched at once.
        """
        self.reserved += cost
        if isinstance(request, str):
            self.release(request)
            self._reservations[request] = (cost, True)
            self.dispatched += cost
            self._cover()
        else:
            hold = next(self._holds)
            request.meta[HOLD_META] = hold
            self._reservations[hold] = (cost, False)

    def dispatch(self, request: Request) -> None:
        """*request* left the scheduler for the downloader: the grant on disk covers it first."""
        hold: int | None = request.meta.get(HOLD_META)
        entry = self._reservations.get(hold) if hold is not None else None
        if hold is None or entry is None or entry[1]:
            return
        self._reservations[hold] = (entry[0], True)
        self.dispatched += entry[0]
        self._cover(entry[0])

    def _cover(self, cost: float = 0.0) -> None:
        if self.spent + self.dispatched <= self._granted:
            return
        chunk = cost * GRANT_CHUNK_VISITS
        if self.budget is not None:
            chunk = min(chunk, self.budget * GRANT_CHUNK_SHARE)
        self._granted = self.spent + self.dispatched + chunk
        self.store.set_meta(self._key, self._granted)
        self._commit()

    def held(self, holder: str) -> float:
        """What the named *holder* holds (0 when nothing)."""
        entry = self._reservations.get(holder)
        return entry[0] if entry is not None else 0.0

    def release(self, request: Request | str) -> bool:
        """Drop *request*'s reservation unpaid; ``True`` if it held one."""
        return self._release(request) is not None

    def _release(self, request: Request | str) -> float | None:
        """Drop *request*'s reservation; what it held (``None`` if nothing)."""
        hold = request if isinstance(request, str) else request.meta.get(HOLD_META)
        entry = self._reservations.pop(hold, None) if hold is not None else None
        if entry is None:
            return None
        self.reserved = max(self.reserved - entry[0], 0.0)
        if entry[1]:
            self.dispatched = max(self.dispatched - entry[0], 0.0)
        return entry[0]

    def charge(self, request: Request, cost: float) -> None:
        """*request* left the downloader having cost *cost*."""
        reserved = self._release(request)
        if reserved:
            self._shortfalls.append(cost / reserved)
            self.shortfall = max(statistics.median(self._shortfalls), 1.0)
        self.spent += cost
        if self.spent > self._granted:  # an attempt nothing reserved for: robots.txt, shadow mode
            self._granted = self.spent
            self.store.set_meta(self._key, self._granted)

    def release_all(self) -> int:
        """The run is over: requests still queued or in flight never went out; returns how many."""
        count = sum(not isinstance(holder, str) for holder in self._reservations)
        self._reservations.clear()
        self.reserved = self.dispatched = 0.0
        return count

    def close(self) -> None:
        """Store the exact spend (the grant is no longer needed)."""
        self.store.set_meta(self._key, self.spent)
