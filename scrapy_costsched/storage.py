"""The state store: one small interface, and its sqlitedict implementation.

Values are JSON, never pickle: a state file must not be able to run code. Each
page is kept twice: its full record (key ``page:<fingerprint>``) and a short
summary row that planning reads, so a large crawl plans without decoding every
page's history. Summaries live in a table of their own, one SQL column per item,
so planning reads them without the page records and without parsing any JSON
(:data:`PLAN_TABLE`). Everything lives in one file written through one
connection, so a commit is one SQLite transaction: a crash keeps all of a batch or
none of it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import math
import sqlite3
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol, runtime_checkable

from sqlitedict import SqliteDict

if TYPE_CHECKING:
    import os
    from collections.abc import Iterable, Iterator, Mapping, Sequence

#: Bumped when stored data changes shape; a newer file is refused, never rewritten.
#: Version 2 moved the summaries from ``plan:`` rows of :data:`TABLE` to :data:`PLAN_TABLE`.
SCHEMA_VERSION = 2
SCHEMA_FORMAT = "scrapy-costsched"
TABLE = "costsched"
#: Page summaries: ``n`` items of JSON scalars in columns ``c0``.. (booleans come back as 0 or 1),
#: or, for a summary with a list, a dict or more items, its JSON text in ``json`` (with lists, the scalars in
#: their columns too, ``n`` set).
PLAN_TABLE = "costsched_plan"
#: Summary items that get a column each: as many as a page's summary has (:class:`~.pages.Summary`), or every
#: summary would go to ``json``, which planning decodes row by row. A column added later is added to an older
#: table when a crawl opens it (older versions read the columns they know), and a reader takes the columns a
#: table has.
PLAN_COLUMNS = 15
_PLAN_FIELDS = ("key", "n", "json", *(f"c{i}" for i in range(PLAN_COLUMNS)))
#: Rows fetched at a time when iterating over pages or summaries.
READ_CHUNK = 4096
#: Values bound to one statement (SQLite before 3.32 allows 999).
MAX_VARIABLES = 500
#: Encoded rows kept before they are handed to sqlitedict in any case.
PENDING_ROWS = 1000
#: Whether this SQLite has ``INSERT ... ON CONFLICT DO UPDATE`` (3.24, 2018).
_UPSERT = sqlite3.sqlite_version_info >= (3, 24, 0)


def _has_json_functions() -> bool:
    """Whether this SQLite has its JSON functions: built in since 3.38 (2022), an extension most builds include
    before."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("SELECT json_extract('[1]', '$[0]')").fetchone()
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()
    return True


_NOT_OPEN = "the costsched state store is not open"

logger = logging.getLogger(__name__)


class StateError(RuntimeError):
    """The state store cannot be used; the message says why and what to do."""


class StateStorage(Protocol):
    """Where a crawl's pages, ledger and priors live between runs.

    ``open`` refuses (``StateError``) a store that is foreign, corrupt, newer than
    this version, or in use by another process, and leaves it untouched. Writes may
    be buffered until ``commit``; ``close`` commits.
    """

    #: Whether ``open`` found an empty state (nothing to lose) and initialised it as new: the caller says so.
    found_empty: bool
    #: Whether ``open`` found a state its last writer did not close (killed or crashed mid-run), which it
    #: checked in full and continues from its last commit: the caller says so.
    found_unclosed: bool

    def open(self) -> None: ...

    def close(self) -> None: ...

    def commit(self) -> None: ...

    def get_meta(self, key: str) -> Any: ...

    def set_meta(self, key: str, value: Any) -> None: ...

    def get_page(self, fingerprint: str) -> dict[str, Any] | None: ...

    def get_pages(self, fingerprints: list[str]) -> Iterator[tuple[str, dict[str, Any]]]:
        """The stored pages among *fingerprints*, in one read (``get_page`` of each, in no particular order)."""

    def put_page(self, fingerprint: str, page: dict[str, Any], summary: list[Any]) -> None: ...

    def iter_summaries(self) -> Iterator[tuple[str, Sequence[Any]]]:
        """Every page's fingerprint and summary (the items ``put_page`` stored), in no particular order."""

    def iter_pages(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every page's fingerprint and full record, in no particular order."""

    def iter_meta(self, prefix: str = "") -> Iterator[tuple[str, Any]]:
        """Every meta row (ledger, priors, hosts, ...) whose key starts with *prefix*, as ``get_meta`` gives it,
        sorted by key."""


@runtime_checkable
class SummaryQueries(Protocol):
    """A store that answers SQL over its summaries (:data:`PLAN_TABLE`: the items of a summary stored in columns
    ``c0``.., their number in ``n``; a summary that does not fit them as JSON text in ``json``).

    Planning a large crawl computes part of each page's bound where the rows are and reads in full only the
    pages whose bound reaches the head of its ranking (:mod:`~scrapy_costsched.preselection`)."""

    #: Whether the SQL has SQLite's JSON functions (``json_extract``), to read into the JSON text.
    json_functions: bool

    def scan_plan(self, select: str, args: Mapping[str, Any], clauses: str = "") -> Iterator[tuple[Any, ...]]:
        """Every summary row as the SQL expressions *select* over its columns (named parameters in *args*), or what
        SQL *clauses* after ``FROM`` (a ``WHERE``, a ``GROUP BY``) make of them."""

    def summaries_of(self, fingerprints: Sequence[str]) -> Iterator[tuple[str, Sequence[Any]]]:
        """The stored pages among *fingerprints*, as ``iter_summaries`` gives them."""

    def summaries_at(self, rowids: Sequence[int]) -> Iterator[tuple[str, Sequence[Any]]]:
        """The pages of the rows *rowids* gave (``rowid`` in a ``scan_plan`` with no write since), as ``summaries_of``:
        a row is found by its rowid in one search of the table, by its key in two."""


def _encode(value: Any) -> str:
    return _ENCODER(value)


# json.dumps with options builds an encoder at each call: one, made once.
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


def _plan_row(fingerprint: str, summary: list[Any]) -> tuple[Any, ...]:
    """*summary* as a row of :data:`PLAN_TABLE`: its items in columns when they are all JSON scalars. A summary
    with lists among them (a hub's link stats) is read from its JSON text, but its scalars are in their columns too
    (the lists' are ``NULL``), so SQL over the columns sees every page that way."""
    if len(summary) > PLAN_COLUMNS:
        return (fingerprint, None, _encode(summary), *(None,) * PLAN_COLUMNS)
    padding = (None,) * (PLAN_COLUMNS - len(summary))
    if all(map(_column_value, summary)):  # most pages: checked in one pass, the list-aware pass only if it fails
        return (fingerprint, len(summary), None, *summary, *padding)
    lists = [isinstance(item, list) for item in summary]
    if all(is_list or _column_value(item) for is_list, item in zip(lists, summary, strict=True)):
        return (fingerprint, len(summary), _encode(summary),
                *(None if is_list else item for is_list, item in zip(lists, summary, strict=True)), *padding)
    return (fingerprint, None, _encode(summary), *(None,) * PLAN_COLUMNS)


def _summaries(rows: Iterable[Sequence[Any]]) -> Iterator[tuple[str, Sequence[Any]]]:
    """Each row of :data:`PLAN_TABLE` (selected with ``*``: the columns it has, in ``_PLAN_FIELDS``' order) as a
    fingerprint and a summary."""
    for row in rows:
        text = row[2]
        yield row[0], row[3:row[1] + 3] if text is None else json.loads(text)


def _column_value(item: Any) -> bool:
    """Whether *item* is a JSON scalar that an SQL column gives back equal (NaN and infinities are not JSON)."""
    kind = type(item)
    if item is None or kind is str or kind is bool:
        return True
    if kind is int:
        return bool(-(2**63) <= item < 2**63)
    return kind is float and math.isfinite(item)


def _decode_all(texts: list[str]) -> list[Any]:
    """``json.loads`` of each text, in one call when they all parse as they should.

    For short rows the call costs more than the parsing; a text that is not one JSON value
    shows as a parse error or a wrong count, and then each is parsed alone (and raises).
    """
    try:
        values = json.loads(f"[{','.join(texts)}]")
    except (TypeError, ValueError):
        values = None
    if not isinstance(values, list) or len(values) != len(texts):
        return [json.loads(text) for text in texts]
    return values


class SqliteDictStorage:
    """The default store: one SQLite file through sqlitedict, locked to one process.

    sqlitedict runs every statement in a thread of its own, which must take the GIL
    from the crawl for each statement it takes off its queue and each row it hands
    back. So writes are kept encoded here and handed over a few hundred rows to a
    statement (at the latest before a commit, a close or a meta read), and pages are
    read through a read-only connection of our own, except those written since the
    last commit, which only sqlitedict's connection sees.
    """

    json_functions = _has_json_functions()

    def __init__(self, path: str | os.PathLike[str], read_only: bool = False) -> None:
        self.path = Path(path)
        #: Opened for the commands that only read (reports, exports): no lock is taken, so they read a
        #: state while a crawl writes it (what that crawl committed), and any write raises.
        self.read_only = read_only
        #: Whether ``open`` found an empty file (a crash before the first commit, or a touch) and initialised
        #: it as a new state. It says nothing itself: a crawl says so once its spider is open, where Scrapy
        #: 2.14 and later count ``log_count/WARNING``.
        self.found_empty = False
        #: Whether ``open`` found a state not as a clean close left it (:meth:`_closed_cleanly`): its last
        #: writer was killed or crashed (or the file is a copy), so it was checked in full.
        self.found_unclosed = False
        self._lock: IO[str] | None = None
        self._db: SqliteDict | None = None
        self._pending: dict[str, str] = {}  # encoded rows not handed to sqlitedict yet, by key
        self._pending_plan: dict[str, tuple[Any, ...]] = {}  # summary rows, likewise
        self._uncommitted: set[str] = set()  # keys handed to sqlitedict since the last commit
        self._reader_conn: sqlite3.Connection | None = None

    @classmethod
    def from_uri(cls, uri: str, read_only: bool = False) -> SqliteDictStorage:
        """``sqlite:///relative/path``, ``sqlite:////absolute/path`` (as SQLAlchemy spells them) or a path."""
        return cls(uri.removeprefix("sqlite:///"), read_only)

    def open(self) -> None:
        if self.path.is_dir():
            raise StateError(f"The costsched state {str(self.path)!r} is a directory; COSTSCHED_STATE names a file, "
                             f"such as {str(self.path / 'state.sqlite')!r}.")
        if self.read_only:
            if not self.path.exists() or self.path.stat().st_size == 0:
                raise StateError(f"There is no costsched state at {str(self.path)!r}: run a crawl first, "
                                 "or name the state with --state or COSTSCHED_STATE.")
            if self._check_existing(thorough=not self._closed_cleanly()) < SCHEMA_VERSION:
                raise StateError(f"The costsched state {str(self.path)!r} is of an older schema; run a crawl "
                                 "with it once to upgrade it.")
            self._reader()
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._acquire_lock()
        try:
            exists = self.path.exists()
            fresh = not exists or self.path.stat().st_size == 0
            self.found_empty = exists and fresh  # nothing to lose
            self.found_unclosed = not fresh and not self._closed_cleanly()
            version = SCHEMA_VERSION if fresh else self._check_existing(thorough=self.found_unclosed)
            self._stamp("")  # written to from here on: a crash leaves no stamp, so the next open checks
            self._db = SqliteDict(str(self.path), tablename=TABLE, encode=_encode, decode=json.loads,
                                  autocommit=False, outer_stack=False)
            columns = ", ".join(f"c{i}" for i in range(PLAN_COLUMNS))
            self._db.conn.execute(f'CREATE TABLE IF NOT EXISTS "{PLAN_TABLE}" (key TEXT PRIMARY KEY, n INTEGER, '
                                  f"json TEXT, {columns})")
            present = {row[1] for row in self._select(f'PRAGMA table_info("{PLAN_TABLE}")', [])}
            for column in _PLAN_FIELDS:
                if column not in present:
                    self._db.conn.execute(f'ALTER TABLE "{PLAN_TABLE}" ADD COLUMN {column}')
            if version < SCHEMA_VERSION:
                self._upgrade(version)
            if fresh or version < SCHEMA_VERSION:
                self.set_meta("schema", {"format": SCHEMA_FORMAT, "version": SCHEMA_VERSION})
                self.commit()
        except BaseException:
            self._release()
            raise

    @property
    def _lock_path(self) -> Path:
        return self.path.with_name(self.path.name + ".lock")

    @property
    def _journal_path(self) -> Path:
        """Where SQLite keeps a transaction's rollback journal; left behind, a writer stopped mid-transaction."""
        return self.path.with_name(self.path.name + "-journal")

    def _acquire_lock(self) -> None:
        lock = self._lock_path.open("a", encoding="ascii")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise StateError(
                f"The costsched state {str(self.path)!r} is in use by another process; "
                "run one crawl per state file, or give each its own COSTSCHED_STATE."
            ) from None
        self._lock = lock

    def _upgrade(self, version: int) -> None:
        """Rewrite a state of schema *version* as this version stores it (committed by the caller)."""
        logger.info("Upgrading the costsched state %r from schema version %d to %d.", str(self.path), version,
                    SCHEMA_VERSION)
        if version < 2:  # summaries were JSON rows "plan:<fingerprint>" of the main table
            rows = self._select(f'SELECT key, value FROM "{TABLE}" WHERE key >= ? AND key < ?', ["plan:", "plan;"])
            for key, value in rows:
                self._pending_plan[key.removeprefix("plan:")] = _plan_row(key.removeprefix("plan:"), json.loads(value))
            self._write_pending()
            self.db.conn.execute(f'DELETE FROM "{TABLE}" WHERE key >= ? AND key < ?', ("plan:", "plan;"))

    def _file_stamp(self) -> str:
        """The state file as the file system sees it: size, modification time and inode."""
        info = self.path.stat()
        return f"closed {info.st_size} {info.st_mtime_ns} {info.st_ino}"

    def _stamp(self, text: str) -> None:
        """Keep *text* in the lock file (``""`` clears it)."""
        assert self._lock is not None
        self._lock.truncate(0)
        self._lock.write(text)
        self._lock.flush()

    def _closed_cleanly(self) -> bool:
        """Whether the file is as the last clean close left it: that close's stamp (in the lock file)
        matches it and no journal says a writer stopped mid-transaction. Then nothing has written it
        since a close that committed everything, and the page-by-page check can be spared (a crawl
        clears the stamp when it opens the file, so a reading command checks a state in use)."""
        try:
            stamp = self._lock_path.read_text(encoding="ascii")
        except (OSError, UnicodeDecodeError):
            return False
        return bool(stamp) and not self._journal_path.exists() and stamp == self._file_stamp()

    def _check_existing(self, thorough: bool) -> int:
        """Refuse anything that is not ours, or is damaged (*thorough*: checked page by page, for a file no
        clean close left as it is), before sqlitedict writes to it; the schema version.

        The file is read through a read-only connection, so a refused file is left as it was.
        A read-only connection cannot roll back a hot journal, the one a writer killed
        mid-transaction leaves, and would call the file unreadable: then the journal is rolled
        back first, as any SQLite connection would, which restores the last committed state.
        """
        where = f"The costsched state {str(self.path)!r}"
        kept = "it was left untouched"
        try:
            try:
                row, damage = self._inspect(thorough=thorough)
            except sqlite3.OperationalError:
                if not self._roll_back_journal():
                    raise
                kept = "only the transaction its last writer left unfinished was rolled back"
                row, damage = self._inspect(thorough=True)
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
        return version

    def _inspect(self, thorough: bool) -> tuple[Any, str | None]:
        """The stored schema row, and (*thorough*) the first problem SQLite's quick_check finds in a file of ours.

        The check reads every page once (about half a second for 300 MB); a damaged page would
        otherwise fail later, mid-crawl, in sqlitedict's thread. A file a clean close left as it
        is (:meth:`_closed_cleanly`) is not checked again.
        """
        conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if TABLE not in tables:
                return None, None
            found = conn.execute(f'SELECT value FROM "{TABLE}" WHERE key = ?', ("meta:schema",)).fetchone()
            if found is None or not thorough:
                return (found[0] if found else None), None
            (verdict,) = conn.execute("PRAGMA quick_check(1)").fetchone()
            if verdict == "ok":
                return found[0], None
            return found[0], " ".join(str(verdict).replace("*** in database main ***", "").split())
        finally:
            conn.close()

    def _roll_back_journal(self) -> bool:
        """Roll back a hot journal through a read-write connection; ``False`` if there is none."""
        journal = self._journal_path
        if not journal.exists():
            return False
        conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=rw", uri=True)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # the first read rolls it back
        finally:
            conn.close()
        return not journal.exists()

    def close(self) -> None:
        if self._reader_conn is not None:
            self._reader_conn.close()
            self._reader_conn = None
        if self._db is not None:
            self._write_pending()
            self._db.commit(blocking=True)
            self._db.close()
            self._db = None
            self._stamp(self._file_stamp())
        self._uncommitted.clear()
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
            raise StateError(_NOT_OPEN)
        return self._db

    def commit(self) -> None:
        if self.read_only:
            return
        self._write_pending()
        self.db.commit(blocking=True)
        self._uncommitted.clear()

    def get_meta(self, key: str) -> Any:
        if self.read_only:
            rows = self._read(f'SELECT value FROM "{TABLE}" WHERE key = ?', [f"meta:{key}"])
            return json.loads(rows[0][0]) if rows else None
        self._write_pending()  # a read is a round trip: whoever waits for it expects the writes before it done
        return self.db.get(f"meta:{key}")

    def iter_meta(self, prefix: str = "") -> Iterator[tuple[str, Any]]:
        start = f"meta:{prefix}"
        end = start[:-1] + chr(ord(start[-1]) + 1)  # the first key past every key that starts with *start*
        for chunk in self._scan(f'SELECT key, value FROM "{TABLE}" WHERE key >= ? AND key < ? ORDER BY key',
                                (start, end)):
            for key, value in chunk:
                yield key[len("meta:"):], json.loads(value)

    def set_meta(self, key: str, value: Any) -> None:
        self._put(f"meta:{key}", value)

    def get_page(self, fingerprint: str) -> dict[str, Any] | None:
        return next((page for _, page in self.get_pages([fingerprint])), None)

    def get_pages(self, fingerprints: list[str]) -> Iterator[tuple[str, dict[str, Any]]]:
        committed: list[str] = []
        uncommitted: list[str] = []
        for fingerprint in fingerprints:
            key = f"page:{fingerprint}"
            pending = self._pending.get(key)
            if pending is not None:
                yield fingerprint, json.loads(pending)
            else:
                (uncommitted if key in self._uncommitted else committed).append(key)
        for keys, read in ((uncommitted, self._select), (committed, self._read)):
            for start in range(0, len(keys), MAX_VARIABLES):
                chunk = keys[start:start + MAX_VARIABLES]
                query = f'SELECT key, value FROM "{TABLE}" WHERE key IN ({",".join("?" * len(chunk))})'
                for key, value in read(query, chunk):
                    yield key.removeprefix("page:"), json.loads(value)

    def _select(self, query: str, args: list[str]) -> list[tuple[str, str]]:
        return list(self.db.conn.select(query, args))

    def _read(self, query: str, args: list[str]) -> list[Any]:
        """*query* on our read-only connection, or through sqlitedict while its writer locks the file.

        That happens only when a transaction outgrows SQLite's page cache and spills into the
        file before its commit; then nothing but sqlitedict's own connection can read.
        """
        if self._db is None and not self.read_only:
            raise StateError(_NOT_OPEN)
        try:
            return self._reader().execute(query, args).fetchall()
        except sqlite3.OperationalError:
            if self.read_only:
                raise StateError(f"The costsched state {str(self.path)!r} is being written by a crawl right "
                                 "now; try again in a moment.") from None
            return self._select(query, args)

    def _reader(self) -> sqlite3.Connection:
        if self._reader_conn is None:
            # Any thread may use it, one at a time (the crawl, then the close); it never waits for a lock.
            self._reader_conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=0,
                                                check_same_thread=False)
        return self._reader_conn

    def put_page(self, fingerprint: str, page: dict[str, Any], summary: list[Any]) -> None:
        self._put(f"page:{fingerprint}", page)
        self._pending_plan[fingerprint] = _plan_row(fingerprint, summary)

    def _put(self, key: str, value: Any) -> None:
        if self.read_only:
            raise StateError(f"The costsched state {str(self.path)!r} was opened read-only.")
        if self._db is None:
            raise StateError(_NOT_OPEN)
        self._pending[key] = _encode(value)
        if len(self._pending) >= PENDING_ROWS:
            self._write_pending()

    def _write_pending(self) -> None:
        """Hand the pending rows to sqlitedict, :data:`MAX_VARIABLES` values to a statement."""
        rows = list(self._pending.items())
        self._pending.clear()
        self._uncommitted.update(key for key, _ in rows)
        self._replace(TABLE, ("key", "value"), rows)
        plan_rows = list(self._pending_plan.values())
        self._pending_plan.clear()
        self._replace(PLAN_TABLE, _PLAN_FIELDS, plan_rows)

    def _replace(self, table: str, fields: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
        """Insert *rows*, or update the rows of their keys in place.

        An upsert rather than ``REPLACE``, which deletes the old row and inserts a new one, so
        that each row of a page written again also moves in the table and its key index: writing
        pages back costs about a third less (SQLite 3.24 and later; ``REPLACE`` before).
        """
        per_statement = MAX_VARIABLES // len(fields)
        one = f"({','.join('?' * len(fields))})"
        if _UPSERT:
            verb = "INSERT"
            tail = " ON CONFLICT(key) DO UPDATE SET " + ", ".join(f"{f} = excluded.{f}" for f in fields[1:])
        else:
            verb, tail = "REPLACE", ""
        for start in range(0, len(rows), per_statement):
            chunk = rows[start:start + per_statement]
            self.db.conn.execute(
                f'{verb} INTO "{table}" ({", ".join(fields)}) VALUES {",".join([one] * len(chunk))}{tail}',
                [field for row in chunk for field in row])

    def _scan(self, query: str, args: Sequence[Any] | Mapping[str, Any] = ()) -> Iterator[list[Any]]:
        """The rows of *query*, a chunk at a time, through a connection of our own.

        sqlitedict hands a select's rows one at a time through a queue from its thread, which
        costs more than reading them (seconds for a few hundred thousand pages); our own
        connection sees only what is committed, so what was written is committed first.
        """
        self.commit()
        conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            rows = conn.execute(query, args)
            while chunk := rows.fetchmany(READ_CHUNK):
                yield chunk
        finally:
            conn.close()

    def iter_summaries(self) -> Iterator[tuple[str, Sequence[Any]]]:
        """Every page's fingerprint and summary (booleans in columns come back as 0 or 1; a tuple or a list)."""
        for chunk in self._scan(f'SELECT * FROM "{PLAN_TABLE}"'):
            yield from _summaries(chunk)

    def summaries_of(self, fingerprints: Sequence[str]) -> Iterator[tuple[str, Sequence[Any]]]:
        return self._summaries_in("key", fingerprints)

    def summaries_at(self, rowids: Sequence[int]) -> Iterator[tuple[str, Sequence[Any]]]:
        return self._summaries_in("rowid", sorted(rowids))  # in order, the searches go through the file once

    def _summaries_in(self, column: str, values: Sequence[Any]) -> Iterator[tuple[str, Sequence[Any]]]:
        self.commit()  # read through our own connection, which sees what is committed
        for start in range(0, len(values), MAX_VARIABLES):
            chunk = list(values[start:start + MAX_VARIABLES])
            yield from _summaries(self._read(
                f'SELECT * FROM "{PLAN_TABLE}" WHERE {column} IN ({",".join("?" * len(chunk))})', chunk))

    def scan_plan(self, select: str, args: Mapping[str, Any], clauses: str = "") -> Iterator[tuple[Any, ...]]:
        for chunk in self._scan(f'SELECT {select} FROM "{PLAN_TABLE}" {clauses}', args):
            yield from chunk

    def iter_pages(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every page's record, in storage order rather than through the key index (which jumps across the
        file at every row)."""
        # "+key": the condition is not one the key index can serve, so SQLite scans the table.
        for chunk in self._scan(f'SELECT key, value FROM "{TABLE}" WHERE +key >= ? AND +key < ?', ("page:", "page;")):
            for (key, _), value in zip(chunk, _decode_all([value for _, value in chunk]), strict=True):
                yield key[len("page:"):], value


def storage_from_uri(uri: str, read_only: bool = False) -> StateStorage:
    """The store named by ``COSTSCHED_STATE``: a path or ``sqlite:///path``; *read_only* for the commands
    that only read it (they take no lock, and see what a running crawl committed)."""
    return SqliteDictStorage.from_uri(uri, read_only)
