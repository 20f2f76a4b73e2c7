"""The state store: one small interface, and its sqlitedict implementation.

Values are JSON, never pickle: a state file must not be able to run code. Each
page is kept twice: its full record (key ``page:<fingerprint>``) and a short
summary row (``plan:<fingerprint>``) that planning reads by key range, so a large
crawl plans without decoding every page's history. Everything lives in one table
of one connection, so a commit is one SQLite transaction: a crash keeps all of a
batch or none of it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import sqlite3
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

from sqlitedict import SqliteDict

if TYPE_CHECKING:
    import os
    from collections.abc import Iterator

#: Bumped when stored data changes shape; a newer file is refused, never rewritten.
SCHEMA_VERSION = 1
SCHEMA_FORMAT = "scrapy-costsched"
TABLE = "costsched"

logger = logging.getLogger(__name__)


class StateError(RuntimeError):
    """The state store cannot be used; the message says why and what to do."""


class StateStorage(Protocol):
    """Where a crawl's pages, ledger and priors live between runs.

    ``open`` refuses (``StateError``) a store that is foreign, corrupt, newer than
    this version, or in use by another process, and leaves it untouched. Writes may
    be buffered until ``commit``; ``close`` commits.
    """

    def open(self) -> None: ...

    def close(self) -> None: ...

    def commit(self) -> None: ...

    def get_meta(self, key: str) -> Any: ...

    def set_meta(self, key: str, value: Any) -> None: ...

    def get_page(self, fingerprint: str) -> dict[str, Any] | None: ...

    def put_page(self, fingerprint: str, page: dict[str, Any], summary: list[Any]) -> None: ...

    def iter_summaries(self) -> Iterator[tuple[str, list[Any]]]: ...

    def iter_pages(self) -> Iterator[tuple[str, dict[str, Any]]]: ...


def _encode(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


class SqliteDictStorage:
    """The default store: one SQLite file through sqlitedict, locked to one process."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock: IO[str] | None = None
        self._db: SqliteDict | None = None

    @classmethod
    def from_uri(cls, uri: str) -> SqliteDictStorage:
        """``sqlite:///relative/path``, ``sqlite:////absolute/path`` (as SQLAlchemy spells them) or a path."""
        return cls(uri.removeprefix("sqlite:///"))

    def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._acquire_lock()
        try:
            exists = self.path.exists()
            fresh = not exists or self.path.stat().st_size == 0
            if exists and fresh:
                # A crash between creating the file and its first commit, or a touch: nothing to lose.
                logger.warning("The costsched state %r is empty, initialised as a new state.", str(self.path))
            if not fresh:
                self._check_existing()
            self._db = SqliteDict(str(self.path), tablename=TABLE, encode=_encode, decode=json.loads,
                                  autocommit=False, outer_stack=False)
            if fresh:
                self.set_meta("schema", {"format": SCHEMA_FORMAT, "version": SCHEMA_VERSION})
                self.commit()
        except BaseException:
            self._release()
            raise

    def _acquire_lock(self) -> None:
        lock = (self.path.parent / (self.path.name + ".lock")).open("a")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise StateError(
                f"The costsched state {str(self.path)!r} is in use by another process; "
                "run one crawl per state file, or give each its own COSTSCHED_STATE."
            ) from None
        self._lock = lock

    def _check_existing(self) -> None:
        """Refuse anything that is not ours, or is damaged, before sqlitedict writes to it.

        The file is read through a read-only connection, so a refused file is left as it was.
        A read-only connection cannot roll back a hot journal, the one a writer killed
        mid-transaction leaves, and would call the file unreadable: then the journal is rolled
        back first, as any SQLite connection would, which restores the last committed state.
        """
        where = f"The costsched state {str(self.path)!r}"
        kept = "it was left untouched"
        try:
            try:
                row, damage = self._inspect()
            except sqlite3.OperationalError:
                if not self._roll_back_journal():
                    raise
                kept = "only the transaction its last writer left unfinished was rolled back"
                row, damage = self._inspect()
        except sqlite3.DatabaseError as exc:
            raise StateError(f"{where} is not a readable SQLite file ({exc}); {kept}. "
                             "Point COSTSCHED_STATE at another path or move the file away.") from None
        try:
            schema = json.loads(row) if row else None
        except (TypeError, ValueError):
            schema = None
        if not isinstance(schema, dict) or schema.get("format") != SCHEMA_FORMAT:
            raise StateError(f"{where} was not written by scrapy-costsched; {kept}. "
                             "Point COSTSCHED_STATE at another path.")
        version = schema.get("version")
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise StateError(f"{where} has schema version {version!r}, newer than this scrapy-costsched "
                             f"understands ({SCHEMA_VERSION}); {kept}. Most likely it was written "
                             "by a newer release: upgrade scrapy-costsched to continue this crawl.")
        if damage is not None:
            raise StateError(f"{where} is damaged (SQLite's quick_check: {damage}); {kept}. Move it away "
                             "to start a new state, or put back a copy from before the damage.")

    def _inspect(self) -> tuple[Any, str | None]:
        """The stored schema row, and the first problem SQLite's quick_check finds in a file of ours.

        The check reads every page once (a fraction of a second for a few hundred MB); a damaged
        page would otherwise fail later, mid-crawl, in sqlitedict's thread.
        """
        conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if TABLE not in tables:
                return None, None
            found = conn.execute(f'SELECT value FROM "{TABLE}" WHERE key = ?', ("meta:schema",)).fetchone()
            if found is None:
                return None, None
            (verdict,) = conn.execute("PRAGMA quick_check(1)").fetchone()
            if verdict == "ok":
                return found[0], None
            return found[0], " ".join(str(verdict).replace("*** in database main ***", "").split())
        finally:
            conn.close()

    def _roll_back_journal(self) -> bool:
        """Roll back a hot journal through a read-write connection; ``False`` if there is none."""
        journal = self.path.with_name(self.path.name + "-journal")
        if not journal.exists():
            return False
        conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=rw", uri=True)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # the first read rolls it back
        finally:
            conn.close()
        return not journal.exists()

    def close(self) -> None:
        if self._db is not None:
            self._db.commit(blocking=True)
            self._db.close()
            self._db = None
        self._release()

    def _release(self) -> None:
        if self._lock is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None

    @property
    def db(self) -> SqliteDict:
        if self._db is None:
            raise StateError("the costsched state store is not open")
        return self._db

    def commit(self) -> None:
        self.db.commit(blocking=True)

    def get_meta(self, key: str) -> Any:
        return self.db.get(f"meta:{key}")

    def set_meta(self, key: str, value: Any) -> None:
        self.db[f"meta:{key}"] = value

    def get_page(self, fingerprint: str) -> dict[str, Any] | None:
        page: dict[str, Any] | None = self.db.get(f"page:{fingerprint}")
        return page

    def put_page(self, fingerprint: str, page: dict[str, Any], summary: list[Any]) -> None:
        self.db[f"page:{fingerprint}"] = page
        self.db[f"plan:{fingerprint}"] = summary

    def _range(self, prefix: str) -> Iterator[tuple[str, Any]]:
        # A key-range scan on the primary key: only the rows asked for are read and decoded.
        query = f'SELECT key, value FROM "{TABLE}" WHERE key >= ? AND key < ? ORDER BY key'
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        for key, value in self.db.conn.select(query, (prefix, end)):
            yield key[len(prefix):], json.loads(value)

    def iter_summaries(self) -> Iterator[tuple[str, list[Any]]]:
        yield from self._range("plan:")

    def iter_pages(self) -> Iterator[tuple[str, dict[str, Any]]]:
        yield from self._range("page:")


def storage_from_uri(uri: str) -> StateStorage:
    """The store named by ``COSTSCHED_STATE``: a path or ``sqlite:///path``."""
    return SqliteDictStorage.from_uri(uri)
