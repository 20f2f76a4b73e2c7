"""The books of each budget period: what was spent, on which hosts and page types, and what it found.

The seed article's whole argument is one metric, cost per detected change, read per site and per page
type next to the fetches that found no change. The ledger keeps only a period's total; these accounts
keep, per period, per host and per page type, the visits by reason, every attempt's cost, and each
visit's outcome with what the visit cost. ``scrapy costsched-report`` reads them. They are saved with
the state at every safe point (meta ``accounts:<period>``), so a crash loses at most what the last
unsaved observations added; the period's total spend stays the ledger's.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from scrapy_costsched.storage import StateStorage

#: The outcomes of a fetch that found no change: what a scheduler that knew would not have paid for.
NO_CHANGE = ("unchanged", "not_modified")
#: Page type of the requests that belong to no page (robots.txt, session steps).
NO_PAGE = "-"
#: Meta key prefix of a period's accounts.
KEY_PREFIX = "accounts:"


@dataclass
class PeriodAccounts:
    """One budget period's books: *counters* by host, then page type, then name.

    Counter names: ``visits`` and ``visits/<reason>`` (a page's first attempt in a run: ``refresh`` or
    ``discovery``), ``attempts`` and ``spent`` (every attempt and its cost, retries and sub-requests
    included), and for each outcome its count and ``<outcome>/cost`` (what those visits cost). The
    outcomes are the tracker's observations: ``baseline`` (a first record), ``rebaseline`` (a record not
    comparable with the last: the hash configuration changed), ``changed``, ``unchanged`` (in full),
    ``not_modified`` (a 304), ``empty`` (no items where there used to be some), ``failed``, ``refused``
    (refused before download: robots.txt, offsite rules, a middleware; no visit), ``not_found`` (a 404 not
    yet believed), ``gone`` and ``redirected`` (a redirect to a page the run fetched already, not
    followed).

    *superseded* books are those of terms a later run changed mid-period (``COSTSCHED_BILLING``, the
    period's length): their spend is their own counters', the ledger's row having moved to the new terms.
    *carried* is what of the ledger's spend such a change carried over from them. *shadow_spent* is what
    its runs without a budget spent (all of it for a shadow period; part of it when a budget was set later
    in the period, which then starts from what they left).
    """

    period: int
    period_seconds: float
    budget: float | None
    unit: str
    shadow: bool
    runs: int = 0
    counters: dict[str, dict[str, defaultdict[str, float]]] = field(default_factory=dict)
    superseded: bool = False
    carried: float = 0.0
    shadow_spent: float = 0.0

    def absorb(self, other: PeriodAccounts) -> None:
        """Add *other*'s runs and counters (books of the same period and terms) to these."""
        self.runs += other.runs
        self.shadow_spent += other.shadow_spent
        for host, page_type, counters in other.rows():
            group = self.group(host, page_type)
            for name, value in counters.items():
                group[name] += value

    def group(self, host: str, page_type: str) -> defaultdict[str, float]:
        return self.counters.setdefault(host, {}).setdefault(page_type, defaultdict(float))

    def rows(self) -> Iterator[tuple[str, str, dict[str, float]]]:
        """(host, page type, counters) for every group with anything in it, sorted."""
        for host in sorted(self.counters):
            for page_type in sorted(self.counters[host]):
                yield host, page_type, self.counters[host][page_type]

    def total(self, name: str) -> float:
        return sum(counters.get(name, 0.0) for _, _, counters in self.rows())

    def to_json(self) -> dict[str, Any]:
        return {"period": self.period, "period_seconds": self.period_seconds, "budget": self.budget,
                "unit": self.unit, "shadow": self.shadow, "runs": self.runs, "superseded": self.superseded,
                "carried": self.carried, "shadow_spent": self.shadow_spent,
                "counters": {host: {page_type: dict(sorted(counters.items()))
                                    for page_type, counters in types.items()}
                             for host, types in self.counters.items()}}

    @classmethod
    def from_json(cls, data: Any) -> PeriodAccounts:
        """Rebuild stored accounts; ``ValueError`` when the row is malformed."""
        try:
            counters = {
                str(host): {str(page_type): defaultdict(float, {str(k): float(v) for k, v in values.items()})
                            for page_type, values in types.items()}
                for host, types in data["counters"].items()
            }
            budget = data["budget"]
            return cls(int(data["period"]), float(data["period_seconds"]),
                       None if budget is None else float(budget), str(data["unit"]), bool(data["shadow"]),
                       int(data["runs"]), counters, bool(data.get("superseded", False)),
                       float(data.get("carried", 0.0)), float(data.get("shadow_spent", 0.0)))
        except (TypeError, KeyError, AttributeError, ValueError) as exc:
            raise ValueError(f"malformed period accounts: {exc!r}") from None


@dataclass
class _VisitCharges:
    """A visit's attempts so far: why it was made, how many reached the network, what they cost."""

    reason: str | None = None
    cost: float = 0.0
    attempts: int = 0


class Accounts:
    """The running period's books, kept by the tracker and saved with the state."""

    def __init__(self, store: StateStorage, period: int, period_seconds: float, budget: float | None,
                 unit: str) -> None:
        self.store = store
        stored = store.get_meta(f"{KEY_PREFIX}{period}")
        try:
            current = PeriodAccounts.from_json(stored) if stored is not None else None
        except ValueError:
            current = None  # the report loses this period's breakdown; the ledger keeps its spend
        if current is not None and (current.unit, current.period_seconds) != (unit, period_seconds):
            self._set_aside(store, current)
            current = None
        if current is None:
            current = PeriodAccounts(period, period_seconds, budget, unit, shadow=budget is None)
        # The latest run's budget and mode stand for the period (a user may change them mid-period).
        current.budget, current.unit, current.shadow = budget, unit, budget is None
        current.runs += 1
        self.current = current
        self._pending: dict[str, _VisitCharges] = {}

    @staticmethod
    def _set_aside(store: StateStorage, books: PeriodAccounts) -> None:
        """Keep the books of terms changed mid-period apart (a unit's amounts never add to another's)."""
        key = f"{KEY_PREFIX}{books.period}:{books.unit}:{books.period_seconds:g}"
        stored = store.get_meta(key)
        if stored is not None:
            try:
                earlier = PeriodAccounts.from_json(stored)
            except ValueError:
                pass
            else:
                books.absorb(earlier)
        books.superseded = True
        store.set_meta(key, books.to_json())

    def reached(self, key: str, reason: str) -> None:
        """A visit of page *key* made its first attempt, for *reason* (``refresh``, ``discovery``)."""
        self._pending.setdefault(key, _VisitCharges()).reason = reason

    def unreached(self, key: str) -> None:
        """Page *key*'s visit, said to make its first attempt, did not (its host's pause released it unsent)."""
        pending = self._pending.get(key)
        if pending is not None and not pending.attempts:
            del self._pending[key]

    def charged(self, key: str | None, host: str, cost: float) -> None:
        """An attempt reached the network: the page's until its visit is observed (a page's type may be
        learned from its first visit's items), or *host*'s requests that belong to no page."""
        if self.current.shadow:
            self.current.shadow_spent += cost
        if key is None:
            self._charge(self.current.group(host, NO_PAGE), cost, 1)
            return
        pending = self._pending.setdefault(key, _VisitCharges())
        pending.cost += cost
        pending.attempts += 1

    def moved(self, key: str, target: str) -> None:
        """Page *key* moved to page *target* mid-visit: what its attempts cost is the target's visit's."""
        pending = self._pending.pop(key, None)
        if pending is None:
            return
        into = self._pending.setdefault(target, _VisitCharges())
        into.cost += pending.cost
        into.attempts += pending.attempts
        into.reason = into.reason or pending.reason

    def observed(self, key: str, host: str, page_type: str, outcome: str) -> float:
        """Page *key*'s visit ended in *outcome*: booked with what its attempts cost, which is returned."""
        pending = self._pending.pop(key, _VisitCharges())
        counters = self.current.group(host, page_type)
        if pending.reason is not None:
            counters["visits"] += 1
            counters[f"visits/{pending.reason}"] += 1
        counters[outcome] += 1
        counters[f"{outcome}/cost"] += pending.cost
        self._charge(counters, pending.cost, pending.attempts)
        return pending.cost

    def close(self, group_of: Callable[[str], tuple[str, str] | None]) -> None:
        """Book what attempts of visits never observed cost (*group_of* gives a page's host and type)."""
        for key, pending in self._pending.items():
            host, page_type = group_of(key) or ("", NO_PAGE)
            self._charge(self.current.group(host, page_type), pending.cost, pending.attempts)
        self._pending.clear()

    @staticmethod
    def _charge(counters: defaultdict[str, float], cost: float, attempts: int) -> None:
        counters["attempts"] += attempts
        counters["spent"] += cost

    def save(self) -> None:
        self.store.set_meta(f"{KEY_PREFIX}{self.current.period}", self.current.to_json())


def stored_periods(store: StateStorage) -> list[PeriodAccounts]:
    """Every period's accounts in the state, oldest first; unreadable ones are left out."""
    periods = []
    for key, value in store.iter_meta():
        if key.startswith(KEY_PREFIX):
            try:
                periods.append(PeriodAccounts.from_json(value))
            except ValueError:
                continue
    # By start (periods of different lengths have numbers of different scales), books set aside first.
    return sorted(periods, key=lambda accounts: (accounts.period * accounts.period_seconds, not accounts.superseded))
