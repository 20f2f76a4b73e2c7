"""Period accounts: a visit's attempts are booked with its outcome, runs of one period add up, bad rows are refused."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from scrapy_costsched.accounts import NO_PAGE, Accounts, PeriodAccounts, stored_periods
from scrapy_costsched.storage import SqliteDictStorage

if TYPE_CHECKING:
    from pathlib import Path


def test_a_visit_is_booked_with_what_its_attempts_cost_and_runs_of_a_period_add_up(tmp_path: Path) -> None:
    store = SqliteDictStorage(tmp_path / "s.sqlite")
    store.open()
    first = Accounts(store, 7, 86400.0, None, "requests")
    first.reached("p1", "discovery")
    first.charged("p1", "a.example", 1.0)
    first.charged("p1", "a.example", 1.0)  # a retry: the same visit
    first.charged(None, "a.example", 1.0)  # robots.txt
    assert first.observed("p1", "a.example", "product", "baseline") == 2.0
    first.charged("p2", "a.example", 1.0)  # never observed: booked at close under its page's group
    first.close(lambda key: ("a.example", "listing"))
    first.save()
    second = Accounts(store, 7, 86400.0, 25.0, "requests")  # the same period, now with a budget
    second.reached("p1", "refresh")
    second.charged("p1", "a.example", 1.0)
    second.observed("p1", "a.example", "product", "not_modified")
    second.save()
    (period,) = stored_periods(store)
    store.close()
    assert (period.runs, period.budget, period.shadow) == (2, 25.0, False)
    product = period.counters["a.example"]["product"]
    assert dict(product) == {"visits": 2, "visits/discovery": 1, "visits/refresh": 1, "attempts": 3, "spent": 3,
                             "baseline": 1, "baseline/cost": 2, "not_modified": 1, "not_modified/cost": 1}
    assert dict(period.counters["a.example"][NO_PAGE]) == {"attempts": 1, "spent": 1}
    assert dict(period.counters["a.example"]["listing"]) == {"attempts": 1, "spent": 1}
    assert period.total("spent") == 5


@pytest.mark.parametrize("row", [None, [], {"period": 1}, {"period": "x", "period_seconds": 1, "budget": None,
                                                             "unit": "requests", "shadow": True, "runs": 1,
                                                             "counters": {}},
                                 {"period": 1, "period_seconds": 1, "budget": None, "unit": "requests",
                                  "shadow": True, "runs": 1, "counters": {"h": {"t": {"visits": "many"}}}}])
def test_a_malformed_row_is_refused(row: object) -> None:
    with pytest.raises(ValueError, match="malformed period accounts"):
        PeriodAccounts.from_json(row)


def test_unreadable_accounts_start_the_period_again(tmp_path: Path) -> None:
    store = SqliteDictStorage(tmp_path / "s.sqlite")
    store.open()
    store.set_meta("accounts:3", {"period": 3})
    accounts = Accounts(store, 3, 86400.0, None, "requests")
    assert accounts.current.runs == 1
    assert stored_periods(store) == []  # the broken row is left out of reports, not raised
    store.close()
