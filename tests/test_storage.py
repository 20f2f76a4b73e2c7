from __future__ import annotations

import hashlib
import re
import signal
import sqlite3
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import pytest

from scrapy_costsched.model import ChangeStats, RateEstimate
from scrapy_costsched.pages import PageState, Summary
from scrapy_costsched.storage import SCHEMA_VERSION, SqliteDictStorage, StateError, StateStorage, storage_from_uri
from tests.helpers import ROOT, DemoSite, crawl

if TYPE_CHECKING:
    from pathlib import Path


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def summaries(store: StateStorage) -> list[tuple[str, list[Any]]]:
    """The store's summaries by key, each as a list (the store may give a tuple)."""
    return sorted((key, list(summary)) for key, summary in store.iter_summaries())


def test_pages_summaries_and_meta_survive_reopen(tmp_path: Path) -> None:
    store = SqliteDictStorage(tmp_path / "s.sqlite")
    store.open()
    store.put_page("ab", {"url": "http://x/"}, [None, 0.5, "high", False, True, "x|default"])
    store.set_meta("ledger:1", 12.0)
    store.close()
    reopened = storage_from_uri(f"sqlite:///{tmp_path / 's.sqlite'}")  # sqlite:////absolute/path
    reopened.open()
    assert reopened.get_page("ab") == {"url": "http://x/"}
    assert summaries(reopened) == [("ab", [None, 0.5, "high", False, True, "x|default"])]
    assert reopened.get_meta("ledger:1") == 12.0
    assert reopened.get_meta("schema") == {"format": "scrapy-costsched", "version": SCHEMA_VERSION}
    reopened.close()


@pytest.mark.parametrize("summary", [
    [], [7], [1.5, None, "low", True, False, "h|t", 2, 0.25, 4.0, 1e9, None],
    [1.5, None, "low", True, False, "h|t", None, None, None, None, [0.5, 3.0, 2.0]],  # a hub's link stats
    [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], [{"a": 1}], [2**70],
])
def test_summaries_come_back_as_they_were_put(tmp_path: Path, summary: list[object]) -> None:
    store = SqliteDictStorage(tmp_path / "s.sqlite")
    store.open()
    store.put_page("ab", {"n": 1}, summary)
    store.commit()
    store.put_page("cd", {"n": 2}, summary)  # read before its commit too
    assert summaries(store) == [("ab", summary), ("cd", summary)]
    store.close()


def test_a_visited_pages_summary_is_stored_in_columns(tmp_path: Path) -> None:
    """Planning reads every summary: one in ``json`` costs a decode per page (the plan of 200,000 pages took
    0.3 s longer when a field added to :class:`Summary` found no column)."""
    stats = ChangeStats()
    stats.add(1.0, changed=True)
    page = PageState(url="http://shop.example/p/1", host="shop.example", page_type="product", value="high",
                     first_seen=0.0, last_visit=86400.0, stats=stats, not_before=2e5, unlinked_since=1e5,
                     estimate=RateEstimate(0.5, 0.1, 2.0))
    summary = page.summary()
    assert len(summary) == len(Summary._fields)
    store = SqliteDictStorage(tmp_path / "s.sqlite")
    store.open()
    store.put_page("ab", page.to_json(), summary)
    store.close()
    conn = sqlite3.connect(tmp_path / "s.sqlite")
    assert conn.execute("SELECT n, json FROM costsched_plan").fetchall() == [(len(summary), None)]
    conn.close()


def test_a_summary_that_json_cannot_hold_is_refused(tmp_path: Path) -> None:
    store = SqliteDictStorage(tmp_path / "s.sqlite")
    store.open()
    with pytest.raises(ValueError, match="not JSON compliant"):
        store.put_page("ab", {"n": 1}, [float("nan")])
    store.close()


def test_a_version_1_state_is_upgraded_with_its_summaries(tmp_path: Path) -> None:
    """Version 1 kept each summary as a JSON row "plan:<fingerprint>" of the main table."""
    path = tmp_path / "s.sqlite"
    store = SqliteDictStorage(path)
    store.open()
    store.close()
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE costsched_plan")
    conn.executemany("REPLACE INTO costsched (key, value) VALUES (?, ?)", [
        ("meta:schema", '{"format":"scrapy-costsched","version":1}'),
        ("page:ab", '{"n":1}'), ("plan:ab", '[null,0.5,"high",false,true,"x|default"]'),
        ("page:cd", '{"n":2}'), ("plan:cd", '[1.0,0.5,"low",false,true,"x|t",null,0.1,0.9,null,[1.0,2.0,3.0]]'),
    ])
    conn.commit()
    conn.close()
    store = SqliteDictStorage(path)
    store.open()
    assert store.get_meta("schema") == {"format": "scrapy-costsched", "version": SCHEMA_VERSION}
    assert summaries(store) == [
        ("ab", [None, 0.5, "high", False, True, "x|default"]),
        ("cd", [1.0, 0.5, "low", False, True, "x|t", None, 0.1, 0.9, None, [1.0, 2.0, 3.0]]),
    ]
    assert sorted(key for key, _ in store.iter_pages()) == ["ab", "cd"]
    store.close()
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT count(*) FROM costsched WHERE key LIKE 'plan:%'").fetchone() == (0,)
    conn.close()


def test_a_plan_table_of_fewer_columns_is_read_and_widened_by_a_crawl(tmp_path: Path) -> None:
    """Summaries gained columns (whether the page's last answer came through a redirect, then the depth the spider
    found the page at, then since when it is unlinked): a table written before has 12 (c0..c11). A reading command
    takes the columns it has; a crawl adds the new ones and writes rows that use them."""
    path = tmp_path / "s.sqlite"
    old_row = [1.0, 0.5, "low", 0, 1, "x|t", None, 0.1, 0.9, None, None, 2718.5]
    store = SqliteDictStorage(path)
    store.open()
    store.put_page("ab", {"n": 1}, old_row)
    store.close()
    conn = sqlite3.connect(path)
    for column in ("c12", "c13", "c14"):
        conn.execute(f"ALTER TABLE costsched_plan DROP COLUMN {column}")  # as an older version created it
    conn.commit()
    conn.close()
    reader = SqliteDictStorage(path, read_only=True)
    reader.open()
    assert summaries(reader) == [("ab", old_row)]
    reader.close()
    store = SqliteDictStorage(path)
    store.open()
    new_row = [2.0, 0.5, "low", 0, 1, "x|t", None, 0.1, 0.9, None, None, 2718.5, True, 2]
    store.put_page("cd", {"n": 2}, new_row)
    assert summaries(store) == [("ab", old_row), ("cd", new_row)]
    store.close()
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT n, json, c12, c13, c14 FROM costsched_plan WHERE key = 'cd'").fetchone() == (
        14, None, 1, 2, None)
    conn.close()


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


@pytest.mark.parametrize("read_only", [False, True])
def test_a_directory_is_refused_and_nothing_is_written_beside_it(tmp_path: Path, read_only: bool) -> None:
    path = tmp_path / "states"
    path.mkdir()
    with pytest.raises(StateError) as refused:
        SqliteDictStorage(path, read_only=read_only).open()
    assert str(refused.value) == (f"The costsched state {str(path)!r} is a directory; COSTSCHED_STATE names a "
                                  f"file, such as {str(path / 'state.sqlite')!r}.")
    assert sorted(tmp_path.iterdir()) == [path]
    assert list(path.iterdir()) == []


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


#: A child that commits 50 pages, writes 3000 more (about 6 MB, more than SQLite's page cache, so
#: they spill into the file) and is killed before committing them: a crash mid-transaction.
_KILLED_MID_TRANSACTION = """
import os, signal, sys
from scrapy_costsched.storage import SqliteDictStorage
store = SqliteDictStorage(sys.argv[1])
store.open()
for i in range(50):
    store.put_page(f"kept{i:03d}", {"n": i}, [i])
store.commit()
for i in range(3000):
    store.put_page(f"lost{i:04d}", {"pad": "x" * 2000}, [i])
store.get_meta("schema")  # a round trip through sqlitedict's queue: every write above reached SQLite
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_writer_killed_mid_transaction_leaves_a_state_that_opens(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    child = subprocess.run([sys.executable, "-c", _KILLED_MID_TRANSACTION, str(path)], cwd=ROOT,
                           capture_output=True, text=True, timeout=120, check=False)
    assert child.returncode == -signal.SIGKILL, child.stderr
    journal = tmp_path / "s.sqlite-journal"
    assert journal.stat().st_size > 0  # a hot journal: the next opener must roll it back
    store = SqliteDictStorage(path)
    store.open()
    assert sorted(key for key, _ in store.iter_pages()) == [f"kept{i:03d}" for i in range(50)]
    assert store.get_meta("schema") == {"format": "scrapy-costsched", "version": SCHEMA_VERSION}
    store.put_page("after", {"n": 1}, [])
    store.close()
    assert not journal.exists()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()


def test_an_empty_file_is_initialised_and_said_to_have_been_empty(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    path.touch()
    store = SqliteDictStorage(path)
    store.open()
    store.close()
    assert store.found_empty  # the crawl warns of it once its spider is open (test_setups.py)
    reopened = SqliteDictStorage(path)
    reopened.open()
    assert reopened.get_meta("schema") == {"format": "scrapy-costsched", "version": SCHEMA_VERSION}
    assert not reopened.found_empty
    reopened.close()


def damaged_state(path: Path) -> None:
    """A state of ours whose schema reads fine but whose last page (page data) is overwritten with garbage."""
    store = SqliteDictStorage(path)
    store.open()
    for i in range(300):
        store.put_page(f"{i:04d}", {"pad": "x" * 500}, [i])
    store.close()
    data = bytearray(path.read_bytes())
    data[-4096:] = b"\x0d" + b"\xee" * 4095
    path.write_bytes(bytes(data))


def checks_made(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each open of a state read every page (quick_check), in order."""
    made: list[bool] = []
    inspect = SqliteDictStorage._inspect

    def recording(self: SqliteDictStorage, thorough: bool) -> object:
        made.append(thorough)
        return inspect(self, thorough)

    monkeypatch.setattr(SqliteDictStorage, "_inspect", recording)
    return made


def test_a_state_a_clean_close_left_is_not_read_page_by_page_again(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The page-by-page check costs half a second per 300 MB at every open; it is spared when the file is
    as the last clean close left it, and made when anything else wrote it since."""
    path = tmp_path / "s.sqlite"
    made = checks_made(monkeypatch)
    store = SqliteDictStorage(path)
    store.open()  # new: nothing to check
    store.put_page("ab", {"url": "http://x/"}, [1])
    store.close()
    for _ in range(2):
        store = SqliteDictStorage(path)
        store.open()
        store.close()
    reader = SqliteDictStorage(path, read_only=True)
    reader.open()
    reader.close()
    assert made == [False, False, False]
    # Written by something else since (same size, a later modification time): checked.
    path.write_bytes(path.read_bytes())
    store = SqliteDictStorage(path)
    store.open()
    store.close()
    assert made[-1] is True
    # A writer that never closed (killed): its stamp was cleared when it opened.
    code = ("import os, sys; from scrapy_costsched.storage import SqliteDictStorage; "
            "s = SqliteDictStorage(sys.argv[1]); s.open(); s.put_page('cd', {'url': 'http://y/'}, [2]); "
            "s.commit(); os._exit(0)")
    subprocess.run([sys.executable, "-c", code, str(path)], cwd=ROOT, check=True, timeout=60)
    reader = SqliteDictStorage(path, read_only=True)
    reader.open()
    assert reader.get_page("cd") == {"url": "http://y/"}
    reader.close()
    store = SqliteDictStorage(path)
    store.open()
    store.close()
    assert made[-2:] == [True, True]


def test_a_damaged_state_of_ours_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    damaged_state(path)
    before = digest(path)
    with pytest.raises(StateError, match=r"is damaged \(SQLite's quick_check: .+\); it was left untouched"):
        SqliteDictStorage(path).open()
    assert digest(path) == before


# -- a refused state stops a real crawl with one line ------------------------------------------------


@pytest.mark.parametrize("kind", ["not sqlite", "damaged"])
def test_a_refused_state_stops_the_crawl_with_one_line_and_no_traceback(
        tiny_shop: DemoSite, tmp_path: Path, kind: str) -> None:
    state = tmp_path / "state.sqlite"
    if kind == "damaged":
        damaged_state(state)
    else:
        state.write_bytes(b"not a database at all" * 50)
    before = digest(state)
    result = crawl(tiny_shop, tmp_path / "work", budget=10, state=state)
    assert result.returncode != 0
    mentions = [line for line in result.log.splitlines() if str(state) in line]
    assert len(mentions) == 1, result.log[-5000:]
    assert re.search(r"(CRITICAL|ERROR): The costsched state .*; it was left untouched", mentions[0])
    assert "Traceback" not in result.log, result.log[-5000:]
    assert result.stats.get("downloader/request_count", 0) == 0
    assert digest(state) == before
