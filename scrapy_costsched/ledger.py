"""The period's ledger: what was spent, what is reserved by requests in flight, and what is on disk.

A budget belongs to the period, not to a process run, and a run can die at any
moment (``kill -9``, OOM, a container stop). So the ledger on disk is never
behind what may have been spent: before a request can leave, the stored spend
covers it. The ledger writes a *grant* (spent + reserved + one chunk) and commits
it whenever the requests admitted outgrow the last grant; a run that dies finds
the grant in the state and counts it as spent. A crash therefore costs at most
one chunk of unused budget, and never overspends the period. A run that closes
normally stores its exact spend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy import Request

    from scrapy_costsched.storage import StateStorage

#: A grant covers this many more planned visits than are reserved when it is written,
#: so the state is committed once per chunk of requests rather than once per request.
GRANT_CHUNK_VISITS = 16
#: ...and at most this share of the period's budget (what a crash may leave unspent).
GRANT_CHUNK_SHARE = 0.05


class Ledger:
    """Spend and reservations of one budget period.

    Every attempt that reached the network is charged (:meth:`charge`); a request
    admitted by the scheduler first *reserves* its planned cost, and the
    reservation is released when the request is charged or found never to have
    reached a download handler (robots.txt, offsite, HTTP cache, a middleware that
    answered it), so ``reserved`` always equals the cost of the requests in flight.
    """

    def __init__(self, store: StateStorage, period: int, budget: float | None,
                 commit: Callable[[], None]) -> None:
        self.store = store
        self.period = period
        self.budget = budget
        self._commit = commit
        self.spent_at_start = float(store.get_meta(self._key) or 0.0)
        self.spent = self.spent_at_start
        self.reserved = 0.0
        # By id(request), or by a name for a request not made yet (a host's robots.txt).
        self._reservations: dict[int | str, tuple[Request | None, float]] = {}
        self._granted = self.spent

    @property
    def _key(self) -> str:
        return f"ledger:{self.period}"

    @property
    def spent_this_run(self) -> float:
        return self.spent - self.spent_at_start

    def remaining(self) -> float:
        assert self.budget is not None
        return self.budget - self.spent - self.reserved

    def reserve(self, request: Request | str, cost: float) -> None:
        """Hold *cost* for *request* until it is charged or released; the grant on disk covers it first."""
        holder = request if isinstance(request, str) else id(request)
        previous = self._reservations.get(holder)
        if previous is not None:
            self.reserved -= previous[1]
        self._reservations[holder] = (None if isinstance(request, str) else request, cost)
        self.reserved += cost
        if self.spent + self.reserved > self._granted:
            chunk = cost * GRANT_CHUNK_VISITS
            if self.budget is not None:
                chunk = min(chunk, self.budget * GRANT_CHUNK_SHARE)
            self._granted = self.spent + self.reserved + chunk
            self.store.set_meta(self._key, self._granted)
            self._commit()

    def release(self, request: Request | str) -> bool:
        """Drop *request*'s reservation unpaid; ``True`` if it held one."""
        entry = self._reservations.pop(request if isinstance(request, str) else id(request), None)
        if entry is None:
            return False
        self.reserved = max(self.reserved - entry[1], 0.0)
        return True

    def charge(self, request: Request, cost: float) -> None:
        """*request* left the downloader having cost *cost*."""
        self.release(request)
        self.spent += cost
        if self.spent > self._granted:  # an attempt nothing reserved for: robots.txt, shadow mode
            self._granted = self.spent
            self.store.set_meta(self._key, self._granted)

    def release_all(self) -> int:
        """The run is over: requests still queued never went out; returns how many."""
        count = sum(request is not None for request, _ in self._reservations.values())
        self._reservations.clear()
        self.reserved = 0.0
        return count

    def close(self) -> None:
        """Store the exact spend (the grant is no longer needed)."""
        self.store.set_meta(self._key, self.spent)
