"""The ledger on disk covers every request that may have been sent, and nothing merely queued."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from typing import TYPE_CHECKING

from scrapy import Request

from scrapy_costsched.ledger import GRANT_CHUNK_VISITS, Ledger
from scrapy_costsched.storage import TABLE, SqliteDictStorage

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
    ledger = Ledger(store, period=7, budget=10_000.0, commit=store.commit)
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
    ledger = Ledger(store, period=0, budget=60.0, commit=store.commit)
    request = Request("http://a.example/")
    ledger.reserve(request, 1.0)
    ledger.dispatch(request)
    assert stored_spend(tmp_path / "state.sqlite", 0) == 1.0 + 0.05 * 60
    ledger.reserve("robots.txt:a.example", 1.0)  # a named holder may leave at any time: covered at once
    assert ledger.dispatched == 2.0
    store.close()
