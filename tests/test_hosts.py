"""The host book in the state: a row per host, rewritten only when the host was touched."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy.utils.test import get_crawler

from scrapy_costsched.hosts import HostBook
from scrapy_costsched.storage import SqliteDictStorage

if TYPE_CHECKING:
    from pathlib import Path

HOSTS = [f"shop{i}.example" for i in range(200)]


def host_book(store: SqliteDictStorage) -> HostBook:
    stats = get_crawler().stats
    assert stats is not None
    return HostBook(store, stats)


def test_a_safe_point_rewrites_only_the_hosts_touched_since_the_last(tmp_path: Path) -> None:
    """A crawl of many hosts commits every few dozen visits: each commit writes the rows of the hosts those
    visits touched, not every host's."""
    store = SqliteDictStorage(tmp_path / "state.sqlite")
    store.open()
    book = host_book(store)
    for host in HOSTS:
        book.attempt(host, "ok", 1.0, 5000.0, 0.2)
        book.add_bytes(f"{host}|product", False, 5000.0)
        book.of(host).saw(True, False)
    book.save()
    written: list[str] = []
    set_meta = store.set_meta

    def spy(key: str, value: Any) -> None:
        written.append(key)
        set_meta(key, value)

    store.set_meta = spy  # type: ignore[method-assign]
    book.save()
    assert written == []
    book.attempt("shop7.example", "timeout", 1.0, 0.0, None)
    book.add_bytes("shop9.example|product", True, 300.0)
    book.save()
    assert sorted(written) == ["host:shop7.example", "host:shop9.example"]
    store.close()

    reopened = SqliteDictStorage(tmp_path / "state.sqlite")
    reopened.open()
    again = host_book(reopened)
    assert set(again.health) == set(HOSTS)
    assert again.health["shop7.example"].failures == {"timeout": 1}
    assert again.health["shop8.example"].failures == {}
    assert again.mean_bytes("shop9.example|product", not_modified=True) == 300.0
    assert again.mean_bytes("shop3.example|product", not_modified=False) == 5000.0
    assert again.of("shop3.example").last_modified is again.last_modified_trust("shop3.example")
    reopened.close()


def test_a_host_row_that_is_not_an_object_is_counted_and_restarts_that_host_only(tmp_path: Path) -> None:
    store = SqliteDictStorage(tmp_path / "state.sqlite")
    store.open()
    book = host_book(store)
    for host in ("shop1.example", "shop2.example"):
        book.attempt(host, "ok", 1.0, 5000.0, 0.2)
    book.save()
    store.set_meta("host:shop1.example", ["not", "an", "object"])
    store.close()

    reopened = SqliteDictStorage(tmp_path / "state.sqlite")
    reopened.open()
    stats = get_crawler().stats
    assert stats is not None
    again = HostBook(reopened, stats)
    assert stats.get_value("costsched/storage/unreadable_trust") == 1
    assert set(again.health) == {"shop2.example"}
    again.save()  # the unreadable row is replaced by what this run knows of the host (nothing yet)
    assert reopened.get_meta("host:shop1.example") == {}
    reopened.close()
