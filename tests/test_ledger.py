"""The ledger on disk covers every request that may have been sent, and nothing merely queued."""

from __future__ import annotations

import doctest
import json
import sqlite3
from contextlib import closing
from typing import TYPE_CHECKING

import pytest
from scrapy import Request

from scrapy_costsched import ledger
from scrapy_costsched.accounts import Accounts, stored_periods
from scrapy_costsched.learner import DAY
from scrapy_costsched.ledger import GRANT_CHUNK_VISITS, Basis, Carried, Ledger
from scrapy_costsched.storage import TABLE, SqliteDictStorage
from tests.helpers import read_state

if TYPE_CHECKING:
    from pathlib import Path


def stored_spend(path: Path, period: int) -> float:
    """What a run that starts after a kill reads as the period's spend: the committed row, read from outside."""
    with closing(sqlite3.connect(path)) as db:
        row = db.execute(f"SELECT value FROM {TABLE} WHERE key = ?", (f"meta:ledger:{period}",)).fetchone()
    return 0.0 if row is None else float(json.loads(row[0]))


def test_queued_requests_are_not_granted_on_disk_but_sent_ones_are(tmp_path: Path) -> None:
    store = SqliteDictStorage(tmp_path / "state.sqlite")
    store.open()
    ledger = Ledger(store, Basis(7, DAY, "requests", 10_000.0), commit=store.commit)
    queued = [Request(f"http://a.example/{n}") for n in range(2 * GRANT_CHUNK_VISITS)]
    for request in queued:
        ledger.reserve(request, 1.0)
    assert ledger.remaining() == 10_000.0 - len(queued)
    assert stored_spend(tmp_path / "state.sqlite", 7) == 0.0  # a kill now loses nothing
    ledger.dispatch(queued[0])
    # The request sent, plus one chunk ahead so that the state is not committed per request...
    assert stored_spend(tmp_path / "state.sqlite", 7) == 1 + GRANT_CHUNK_VISITS
    for request in queued[1:GRANT_CHUNK_VISITS + 2]:
        ledger.dispatch(request)
    # ...and a new grant once the requests sent outgrow it.
    assert stored_spend(tmp_path / "state.sqlite", 7) == GRANT_CHUNK_VISITS + 2 + GRANT_CHUNK_VISITS
    ledger.charge(queued[0], 1.0)
    ledger.release(queued[1])  # never downloaded (robots.txt, the HTTP cache)
    assert (ledger.spent, ledger.dispatched) == (1.0, GRANT_CHUNK_VISITS)
    assert ledger.release_all() == len(queued) - 2
    ledger.close()
    store.commit()
    store.close()
    assert stored_spend(tmp_path / "state.sqlite", 7) == 1.0


def test_the_chunk_is_capped_by_a_share_of_the_budget(tmp_path: Path) -> None:
    store = SqliteDictStorage(tmp_path / "state.sqlite")
    store.open()
    ledger = Ledger(store, Basis(0, DAY, "requests", 60.0), commit=store.commit)
    request = Request("http://a.example/")
    ledger.reserve(request, 1.0)
    ledger.dispatch(request)
    assert stored_spend(tmp_path / "state.sqlite", 0) == 1.0 + 0.05 * 60
    ledger.reserve("robots.txt:a.example", 1.0)  # a named holder may leave at any time: covered at once
    assert ledger.dispatched == 2.0
    store.close()


def test_a_change_of_terms_carries_the_share_of_the_budget_the_running_period_spent(tmp_path: Path) -> None:
    store = SqliteDictStorage(tmp_path / "state.sqlite")
    store.open()

    def run(basis: Basis, now_days: float, spend: int = 0) -> tuple[Ledger, Carried | None]:
        ledger = Ledger(store, basis, commit=store.commit)
        carried = ledger.rebase(now_days * DAY)
        for n in range(spend):
            ledger.charge(Request(f"http://a.example/{n}"), 1.0)
        ledger.close()
        store.commit()
        return ledger, carried

    assert run(Basis(10, DAY, "requests", 20.0), 10.2, spend=15)[1] is None  # the first terms: nothing to carry
    in_bytes, carried = run(Basis(10, DAY, "bytes", 50_000.0), 10.3)  # same period, another unit
    assert carried == Carried(Basis(10, DAY, "requests", 20.0), 15.0, 0.75, 37_500.0)
    assert in_bytes.spent_at_start == stored_spend(tmp_path / "state.sqlite", 10) == 37_500.0
    halves, carried = run(Basis(20, DAY / 2, "bytes", 8_000.0), 10.4)  # twelve-hour periods, the day still running
    assert carried is not None
    assert carried.share == 0.75
    assert halves.spent_at_start == 6_000.0
    assert stored_spend(tmp_path / "state.sqlite", 10) == 37_500.0  # the day's own row is left as it was
    assert run(Basis(20, DAY / 2, "bytes", 8_000.0), 10.45)[1] is None  # the same terms again
    # Back to the day in requests once the half-day is over: the day's row was last counted in bytes.
    day, carried = run(Basis(10, DAY, "requests", 20.0), 10.6)
    assert carried == Carried(Basis(10, DAY, "bytes", 50_000.0), 37_500.0, 0.75, 15.0)
    assert day.spent_at_start == 15.0
    # A share is rounded up to a whole amount.
    assert run(Basis(10, DAY, "bytes", 7.0), 10.7)[0].spent_at_start == 6.0  # 15 of 20 is 5.25 of 7
    assert run(Basis(11, DAY, "bytes", 50_000.0), 11.2)[1] is None  # a new day on the last terms
    shadow, carried = run(Basis(11, DAY, "requests", None), 11.3)  # a period without a budget carries nothing
    assert carried is not None
    assert shadow.spent_at_start == 0.0
    assert run(Basis(11, DAY, "bytes", 50_000.0), 11.4)[1] == Carried(Basis(11, DAY, "requests", None), 0.0, None, 0.0)
    store.close()


def test_a_rebase_without_recording_counts_the_same_and_stores_nothing(tmp_path: Path) -> None:
    store = SqliteDictStorage(tmp_path / "state.sqlite")
    store.open()
    ledger = Ledger(store, Basis(10, DAY, "requests", 20.0), commit=store.commit)
    ledger.rebase(10.2 * DAY)
    for n in range(15):
        ledger.charge(Request(f"http://a.example/{n}"), 1.0)
    ledger.close()
    store.commit()
    before = read_state(tmp_path / "state.sqlite")
    in_bytes = Ledger(store, Basis(10, DAY, "bytes", 50_000.0), commit=store.commit)
    carried = in_bytes.rebase(10.3 * DAY, record=False)
    assert carried == Carried(Basis(10, DAY, "requests", 20.0), 15.0, 0.75, 37_500.0)
    assert in_bytes.spent == 37_500.0
    store.commit()
    assert read_state(tmp_path / "state.sqlite") == before
    store.close()


def test_books_of_another_unit_are_kept_apart(tmp_path: Path) -> None:
    store = SqliteDictStorage(tmp_path / "state.sqlite")
    store.open()
    requests = Accounts(store, 10, DAY, 20.0, "requests")
    requests.charged(None, "a.example", 3.0)
    requests.save()
    in_bytes = Accounts(store, 10, DAY, 50_000.0, "bytes")
    assert in_bytes.current.total("spent") == 0.0
    in_bytes.charged(None, "a.example", 900.0)
    in_bytes.save()
    again = Accounts(store, 10, DAY, 20.0, "requests")  # and back: the first books are not added to
    again.charged(None, "a.example", 2.0)
    again.save()
    books = sorted((b.unit, b.superseded, b.runs, b.total("spent")) for b in stored_periods(store))
    assert books == [("bytes", True, 1, 900.0), ("requests", False, 1, 2.0), ("requests", True, 1, 3.0)]
    store.close()


def test_reservations_are_scaled_by_how_far_the_latest_charges_exceeded_theirs(tmp_path: Path) -> None:
    store = SqliteDictStorage(tmp_path / "state.sqlite")
    store.open()
    ledger = Ledger(store, Basis(0, DAY, "bytes", 10_000.0), commit=store.commit)
    requests = [Request(f"http://a.example/{n}") for n in range(6)]
    for request in requests:
        ledger.reserve(request, 500.0)  # the mean bytes of the pages measured so far
    ledger.charge(requests[0], 250.0)  # cheaper than reserved: reservations are not scaled down
    assert ledger.shortfall == 1.0
    assert ledger.remaining() == 10_000.0 - 250.0 - 5 * 500.0
    for request in requests[1:3]:
        ledger.charge(request, 1500.0)  # three times what was reserved: the median of 0.5, 3 and 3
    assert ledger.shortfall == 3.0
    assert ledger.remaining() == 10_000.0 - 3250.0 - 3 * 500.0 * 3.0
    ledger.dispatch(requests[3])
    # A queued request goes out if what the requests sent before it and itself will cost, priced alike, fits;
    # those queued behind it do not count.
    assert ledger.pays_to_send(requests[4])  # 10,000 - 3,250 - (500 + 500) * 3 = 3,750
    # The headroom is the most a request sent now may be reserved at: the 6,750 bytes left pay for 2,250 reserved at
    # a shortfall of 3, of which the request sent holds 500 (a media download is capped at it).
    assert ledger.headroom() == pytest.approx(1750.0)
    assert ledger.affords(ledger.headroom())
    assert not ledger.affords(ledger.headroom() + 0.01)
    ledger.charge(requests[3], 6000.0)
    assert not ledger.pays_to_send(requests[4])  # 10,000 - 9,250 - 500 * 3 < 0
    store.close()


def test_fractional_reservations_leave_no_remainder_that_refuses_a_visit_which_fits(tmp_path: Path) -> None:
    """Found in a trial: pages priced with their type's mean redirects (1.6 credits) left 4e-16 credits counted as
    sent once every request was charged, and the last visit, fitting the budget exactly, was refused."""
    store = SqliteDictStorage(tmp_path / "state.sqlite")
    store.open()
    ledger = Ledger(store, Basis(0, DAY, "credits", 10.0), commit=store.commit)
    requests = [Request(f"http://a.example/{n}") for n in range(3)]
    for request, cost in zip(requests, (0.1, 2.4, 1.9), strict=True):
        ledger.reserve(request, cost)
        ledger.dispatch(request)
    for request, cost in zip(requests, (0.1, 2.4, 1.9), strict=True):
        ledger.charge(request, cost)
    assert ledger.dispatched > 0.0  # what float sums leave: 0.1 + 2.4 + 1.9 - 0.1 - 2.4 - 1.9
    left = 10.0 - ledger.spent
    assert ledger.affords(left)
    assert not ledger.affords(left + 0.001)
    assert ledger.spendable() >= left
    store.close()


def test_module_doctest() -> None:
    """Amounts as the log says them, in the billing's unit (found on a byte-billed trial: "446 for their hosts'
    robots.txt, 114378 kept for discovery" and "17135.86 per change" named no unit)."""
    result = doctest.testmod(ledger)
    assert result.attempted >= 2
    assert result.failed == 0
