from __future__ import annotations

import hashlib
import sqlite3
from typing import TYPE_CHECKING

import pytest

from scrapy_costsched.storage import SCHEMA_VERSION, SqliteDictStorage, StateError, storage_from_uri

if TYPE_CHECKING:
    from pathlib import Path


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_pages_summaries_and_meta_survive_reopen(tmp_path: Path) -> None:
    store = SqliteDictStorage(tmp_path / "s.sqlite")
    store.open()
    store.put_page("ab", {"url": "http://x/"}, [None, 0.5, "high", False, True, "x|default"])
    store.set_meta("ledger:1", 12.0)
    store.close()
    reopened = storage_from_uri(f"sqlite:///{tmp_path / 's.sqlite'}")  # sqlite:////absolute/path
    reopened.open()
    assert reopened.get_page("ab") == {"url": "http://x/"}
    assert list(reopened.iter_summaries()) == [("ab", [None, 0.5, "high", False, True, "x|default"])]
    assert reopened.get_meta("ledger:1") == 12.0
    assert reopened.get_meta("schema") == {"format": "scrapy-costsched", "version": SCHEMA_VERSION}
    reopened.close()


def test_values_are_json_not_pickle(tmp_path: Path) -> None:
    store = SqliteDictStorage(tmp_path / "s.sqlite")
    store.open()
    store.put_page("ab", {"n": 1}, [])
    store.close()
    conn = sqlite3.connect(tmp_path / "s.sqlite")
    (value,) = conn.execute("SELECT value FROM costsched WHERE key = 'page:ab'").fetchone()
    conn.close()
    assert value == '{"n":1}'


def test_second_process_is_refused(tmp_path: Path) -> None:
    first = SqliteDictStorage(tmp_path / "s.sqlite")
    first.open()
    second = SqliteDictStorage(tmp_path / "s.sqlite")
    with pytest.raises(StateError, match="is in use by another process"):
        second.open()
    first.close()
    second.open()
    second.close()


def test_corrupt_file_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    before = digest(path)
    with pytest.raises(StateError, match="is not a readable SQLite file"):
        SqliteDictStorage(path).open()
    assert digest(path) == before


def test_foreign_sqlite_file_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE people (name TEXT)")
    conn.commit()
    conn.close()
    before = digest(path)
    with pytest.raises(StateError, match="was not written by scrapy-costsched"):
        SqliteDictStorage(path).open()
    assert digest(path) == before


def test_newer_schema_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    store = SqliteDictStorage(path)
    store.open()
    store.set_meta("schema", {"format": "scrapy-costsched", "version": SCHEMA_VERSION + 1})
    store.close()
    before = digest(path)
    with pytest.raises(StateError, match="newer than this scrapy-costsched understands"):
        SqliteDictStorage(path).open()
    assert digest(path) == before
