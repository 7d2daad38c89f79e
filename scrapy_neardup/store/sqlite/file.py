"""The SQLite store's file: the schema, the lock, opening (the plugin's mark, other applications' files
refused, a corrupted file said and moved aside by a reset), committing in batches, SQLite's failures as
store errors."""

from __future__ import annotations

import functools
import logging
import os
import sqlite3
import time
from collections.abc import Mapping
from typing import Any

from ..base import (
    Store,
    StoreError,
    StoreWriteError,
)

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: SQLite's own locking still keeps the file consistent
    fcntl = None  # type: ignore[assignment]

#: ``PRAGMA application_id`` of a scrapy-neardup store: "NDUP" in ASCII.
APPLICATION_ID = 0x4E445550


#: The tables of the layout; a database holding any other table is not ours.
_TABLES = frozenset(("meta", "docs", "buckets", "staged", "url_rules", "crawls", "budget", "selectors"))


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS docs (
    id INTEGER PRIMARY KEY,
    key_hash INTEGER NOT NULL,
    key TEXT NOT NULL,
    canonical INTEGER,
    similarity REAL NOT NULL,
    sig BLOB,
    seen INTEGER,
    body BLOB
);
CREATE INDEX IF NOT EXISTS docs_key_hash ON docs (key_hash);
CREATE TABLE IF NOT EXISTS buckets (bucket INTEGER NOT NULL, doc INTEGER NOT NULL, PRIMARY KEY (bucket, doc))
    WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS staged (doc INTEGER PRIMARY KEY, buckets BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS url_rules (
    host TEXT NOT NULL,
    rule TEXT NOT NULL,
    successes INTEGER NOT NULL,
    failures INTEGER NOT NULL,
    PRIMARY KEY (host, rule)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS crawls (id INTEGER PRIMARY KEY, books TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS budget (grp TEXT NOT NULL, key TEXT NOT NULL, PRIMARY KEY (grp, key)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS selectors (name TEXT PRIMARY KEY, record TEXT NOT NULL) WITHOUT ROWID;
"""


#: Recorded in ``meta`` beside the detector's parameters: a version of scrapy-neardup that does not know the
#: recorded layout refuses the file instead of silently missing staged documents or last-seen times.
LAYOUT_NAME = "sqlite_layout"


_LAYOUT = "4"
#: The layout before the documents' body digests (``docs.body``): upgraded at open, by adding the column.
_LAYOUT_BEFORE_BODIES = "3"


#: The highest document id handed out, kept once documents have been removed (ids are never reused).
HIGH_WATER = "doc_id_high_water"


#: ``meta`` names that belong to the layout, not to the parameters a store is checked against.
LAYOUT_NAMES = (LAYOUT_NAME, HIGH_WATER)


#: SQLite's page cache, in KiB (negative: KiB, as PRAGMA cache_size takes it); the file itself stays in the
#: operating system's cache.
_CACHE_KIB = 64 * 1024


#: The write-ahead log is truncated back to this size after each checkpoint; without a limit it keeps the
#: size of the largest transaction (hundreds of MB when a batch touches pages all over a large index).
_WAL_LIMIT = 64 * 1024 * 1024


#: Read the file through a memory map of up to this many bytes (SQLite caps it at its compile-time limit):
#: pages are read without a copy into the page cache.
_MMAP_BYTES = 1 << 30


logger = logging.getLogger("scrapy_neardup.store.sqlite")


class StoreLockedError(StoreError):
    """Another process has the SQLite store open."""


class ForeignDatabaseError(StoreError):
    """The file is a SQLite database of another application: it is left as it is."""


def translated(method: Any, writes: bool = True) -> Any:
    """Turn every SQLite and file-system error of ``method`` into a :class:`StoreError` (a
    :class:`StoreWriteError`, after rolling back, for a method that ``writes``): a method of the file, or of
    a part of the store kept in it (:mod:`.parts`, whose ``file`` it is)."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        file: SqliteFile = self if isinstance(self, SqliteFile) else self.file
        count = file._count
        try:
            return method(self, *args, **kwargs)
        except (sqlite3.Error, OSError) as exc:
            raise file._failed(method.__name__.strip("_"), exc, count, writes) from exc

    return wrapper


def translated_read(method: Any) -> Any:
    """:func:`translated` for a method that only reads: a failed read leaves the open batch alone (SQLite
    keeps a transaction across a failed statement), unless SQLite rolled it back itself."""
    return translated(method, writes=False)


class CorruptStoreError(StoreError):
    """The SQLite file is damaged (SQLite reports it malformed, or not a database)."""


def _is_corruption(exc: BaseException) -> bool:
    """Whether SQLite reported a damaged file: by its error code where Python gives it (3.11+), else by the
    class SQLite's corruption errors have (``DatabaseError`` itself, not a subclass)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)  # type: ignore[attr-defined]
    return type(exc) is sqlite3.DatabaseError


#: The first bytes of every SQLite database file.
_SQLITE_MAGIC = b"SQLite format 3\x00"


def _file_header(path: str) -> bytes:
    """The first 100 bytes of the file at ``path`` (SQLite's header); none when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read(100)
    except OSError:
        return b""


def _is_sqlite_file(path: str) -> bool:
    """Whether the file starts with SQLite's header: a damaged database of ours does, a text file or another
    program's data at the store's path does not."""
    return _file_header(path).startswith(_SQLITE_MAGIC)


def _marked_as_ours(path: str) -> bool:
    """Whether the file's header says it is a scrapy-neardup store (SQLite's header, with the application id
    at byte 68): only such a file is ever moved aside by a reset."""
    header = _file_header(path)
    return (
        len(header) == 100
        and header.startswith(_SQLITE_MAGIC)
        and int.from_bytes(header[68:72], "big") == APPLICATION_ID
    )


class SqliteFile(Store):
    """A store's SQLite file, opened, locked and committed in batches; :class:`~.store.SqliteStore` keeps
    the documents in it."""

    def __init__(self, path: str, commit_every: int = 500, commit_secs: float = 1.0, make_folders: bool = True) -> None:
        super().__init__()
        self.path = os.path.abspath(path)
        self.make_folders = make_folders
        self.location = f"sqlite:///{self.path}"
        self.commit_every = commit_every
        self.commit_secs = commit_secs
        self._db: sqlite3.Connection | None = None
        self._lock_file: Any = None
        self._pending = 0
        self._last_commit = time.monotonic()
        self._count = 0
        self._next_id = 1
        self._resetting = False  # opening with NEARDUP_RESET: a corrupted file is moved aside

    def _load_staged(self) -> None:
        """Read again what the file holds beside the committed rows (at open, and after a rolled-back write):
        the store's staged bucket keys (:class:`~.store.SqliteStore`)."""

    # -- lifecycle ---------------------------------------------------------------------------------
    def open(self, meta: Mapping[str, Any], reset: bool = False) -> None:
        self._resetting = reset
        try:
            super().open(meta, reset)
        finally:
            self._resetting = False

    def connect(self) -> None:
        try:
            self._connect()
        except CorruptStoreError:
            if not self._resetting or not _marked_as_ours(self.path):
                raise
            # NEARDUP_RESET on a store SQLite cannot read: it is moved aside (never deleted: it may be
            # salvaged with `sqlite3 FILE .recover`) and a new one is made in its place.
            aside = self._set_aside()
            self._unlock()  # taken again by the new store's open
            logger.warning(
                "The SQLite store %s is corrupted; NEARDUP_RESET moved it to %s and starts a new store",
                self.path,
                aside,
            )
            self._connect()

    def _set_aside(self) -> str:
        """Move the corrupted file (and its WAL and shared-memory files) to ``FILE.corrupt-TIME``; called
        holding the store's lock, so no other process of ours has it open."""
        aside = f"{self.path}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}"
        try:
            for suffix in ("-wal", "-shm", ""):
                if os.path.exists(self.path + suffix):
                    os.replace(self.path + suffix, aside + suffix)
        except OSError as exc:
            self._unlock()
            raise StoreError(f"The SQLite store {self.path} is corrupted and could not be moved aside: {exc}") from exc
        return aside

    def _connect(self) -> None:
        try:
            directory = os.path.dirname(self.path)
            if not self._create and not os.path.exists(self.path):
                raise StoreError(f"There is no SQLite store at {self.path}")
            if directory and not os.path.isdir(directory):
                if not self.make_folders:
                    # A path the user gave: a folder that is not there is a typo more often than a wish, and
                    # a crawl on a new empty store would forget every page met before without a word.
                    raise StoreError(
                        f"Cannot open the SQLite store {self.path}: its folder {directory} does not exist "
                        "(create it, or correct NEARDUP_STORE_URL / --store)"
                    )
                os.makedirs(directory, exist_ok=True)
            # The real file: a second path to it (a symbolic link) must meet the same lock.
            self.path = os.path.realpath(self.path)
            self.location = f"sqlite:///{self.path}"
            self._lock()
        except OSError as exc:
            raise StoreError(f"Cannot open the SQLite store {self.path}: {exc.strerror or exc}") from exc
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
            self._check_owner()
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(f"PRAGMA cache_size=-{_CACHE_KIB}")
            self._db.execute(f"PRAGMA journal_size_limit={_WAL_LIMIT}")
            self._db.execute(f"PRAGMA mmap_size={_MMAP_BYTES}")
            # The mark, written and committed now: a file that cannot be written is found here, not
            # after pages have been given verdicts that could not be saved.
            self._db.execute(f"PRAGMA application_id={APPLICATION_ID}")
            self._db.executescript(_SCHEMA)
            self._upgrade_layout_3()
            self._read_counters()
            self._load_staged()
            self._db.execute("BEGIN")
        except StoreError:
            self._abandon()
            raise
        except (sqlite3.Error, OSError) as exc:
            if _is_corruption(exc) and not _is_sqlite_file(self.path):
                self._abandon()
                raise ForeignDatabaseError(
                    f"The file {self.path} is not a scrapy-neardup store, nor a SQLite database: it is left "
                    "untouched, and NEARDUP_RESET (--reset) never moves it. Point NEARDUP_STORE_URL (--store) at "
                    "another path, or remove the file yourself if it is not needed."
                ) from exc
            if _is_corruption(exc):
                if self._db is not None:
                    self._db.close()  # the lock is kept: a reset moves the file aside under it
                    self._db = None
                if not self._resetting:
                    self._unlock()
                raise CorruptStoreError(
                    f"The SQLite store {self.path} is corrupted ({exc}): its fingerprints cannot be read. "
                    "Set NEARDUP_RESET = True (CLI: --reset) to move it aside and start a new store, or point "
                    "NEARDUP_STORE_URL (--store) at another file; `sqlite3 FILE .recover` may salvage its rows."
                ) from exc
            self._abandon()
            hint = ""
            if "readonly" in str(exc) or isinstance(exc, PermissionError):
                hint = " (the file or its folder cannot be written: the store needs both)"
            raise StoreError(f"Cannot open the SQLite store {self.path}: {exc}{hint}") from exc

    def _upgrade_layout_3(self) -> None:
        """Upgrade a store of layout 3 to 4: the column of the documents' body digests, empty in the rows filed
        before (their pages are checked by their text when fetched again, as they were). A store of any
        other layout is left as it is, for :meth:`read_meta` to refuse."""
        db = self.db
        if "body" in {row[1] for row in db.execute("PRAGMA table_info(docs)")}:
            return
        layout = db.execute("SELECT value FROM meta WHERE name = ?", (LAYOUT_NAME,)).fetchone()
        if layout is None or layout[0] != _LAYOUT_BEFORE_BODIES:
            return
        db.execute("BEGIN")
        db.execute("ALTER TABLE docs ADD COLUMN body BLOB")
        db.execute("UPDATE meta SET value = ? WHERE name = ?", (_LAYOUT, LAYOUT_NAME))
        db.execute("COMMIT")

    def _check_owner(self) -> None:
        """Refuse, without writing anything, a database that is neither empty nor a scrapy-neardup store."""
        db = self.db
        application_id = db.execute("PRAGMA application_id").fetchone()[0]
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if application_id == APPLICATION_ID or (not tables and application_id == 0):
            return
        if application_id == 0 and tables <= _TABLES and {"meta", "docs", "buckets"} <= tables:
            names = {row[1] for row in db.execute("PRAGMA table_info(meta)")}
            if names == {"name", "value"} and db.execute("SELECT 1 FROM meta WHERE name = 'format_version'").fetchone():
                return  # a store of a version from before the mark: it is marked at open
        what = f"application id {application_id:#x}" if application_id else "tables " + ", ".join(sorted(tables))
        raise ForeignDatabaseError(
            f"The SQLite file {self.path} is not a scrapy-neardup store ({what}): it is left untouched. "
            "Point NEARDUP_STORE_URL (or --store) at a new file; NEARDUP_RESET never empties another "
            "application's database."
        )

    def _abandon(self) -> None:
        """Close what a failed open left open, without writing anything more."""
        if self._db is not None:
            try:
                self._db.close()
            except sqlite3.Error:
                pass
            self._db = None
        self._unlock()

    def _failed(self, operation: str, exc: BaseException, before: int, writes: bool = True) -> StoreError:
        """The :class:`StoreError` for a failed ``operation``, which found ``before`` documents filed: after a
        write (or a read that made SQLite roll back) the open transaction is rolled back and the counters are
        read again from what the file really holds. Documents the operation itself was filing are its
        caller's to report, not counted as unsaved."""
        db = self._db
        if db is None or (not writes and db.in_transaction):
            return StoreError(f"SQLite store {self.path}: {operation} failed: {exc}")
        try:
            if db.in_transaction:
                db.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # SQLite may have rolled back already (a full disk, an I/O error)
        unsaved = 0
        try:
            self._read_counters()
            self._load_staged()
            unsaved = max(0, before - self._count)
            self._pending = 0
            self._last_commit = time.monotonic()
            db.execute("BEGIN")
        except sqlite3.Error:
            pass  # the file cannot even be read: every later call fails the same way
        message = f"SQLite store {self.path}: {operation} failed: {exc}"
        if _is_corruption(exc):
            message += " (the file is corrupted: after this crawl, NEARDUP_RESET = True moves it aside for a new one)"
        if unsaved:
            message += f"; the {unsaved} documents filed since the last commit were not saved"
        return StoreWriteError(message, unsaved)

    def _read_counters(self) -> None:
        """The document count and the next id, from what the file holds."""
        db = self.db
        self._count = db.execute("SELECT COUNT(*) FROM docs").fetchone()[0]
        high = db.execute("SELECT MAX(id) FROM docs").fetchone()[0] or 0
        row = db.execute("SELECT value FROM meta WHERE name = ?", (HIGH_WATER,)).fetchone()
        if row is not None and str(row[0]).isdigit():
            high = max(high, int(row[0]))
        self._next_id = high + 1

    def _lock(self) -> None:
        if fcntl is None:
            return
        self._lock_file = open(self.path + ".lock", "a+")  # noqa: SIM115 - held until close()
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._lock_file.close()
            self._lock_file = None
            raise StoreLockedError(
                f"The SQLite store {self.path} is in use by another process. SQLite serves one crawler "
                "process at a time; share a Redis store (NEARDUP_STORE_URL = 'redis://...') between processes, "
                "or give each its own file."
            ) from None

    def _unlock(self) -> None:
        if self._lock_file is not None:
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None

    @translated
    def flush(self) -> None:
        self._commit()

    def batched(self, writes: int = 1) -> None:
        """``writes`` made in the open batch: committed with it, whenever the batch is."""
        self._pending += writes

    def _commit(self) -> None:
        if self._db is not None and self._db.in_transaction:
            self._db.execute("COMMIT")
            self._db.execute("BEGIN")
        self._pending = 0
        self._last_commit = time.monotonic()

    def close(self) -> None:
        """Commit and release the file; the file is released even when the last commit fails (the
        :class:`StoreWriteError` then says how many documents were not saved)."""
        try:
            if self._db is not None and self._db.in_transaction:
                try:
                    self._db.execute("COMMIT")
                except (sqlite3.Error, OSError) as exc:
                    raise self._failed("the final commit", exc, self._count) from exc
        finally:
            self._abandon()

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            raise StoreError("The SQLite store is not open")
        return self._db

    @translated_read
    def read_meta(self) -> dict[str, str] | None:
        rows = dict(self.db.execute("SELECT name, value FROM meta").fetchall())
        if not rows:
            return None
        layout = rows.pop(LAYOUT_NAME, None)
        rows.pop(HIGH_WATER, None)
        if layout != _LAYOUT:
            raise StoreError(
                f"The SQLite store {self.path} has layout {layout}; this version of scrapy-neardup reads layout "
                f"{_LAYOUT}. Set NEARDUP_RESET = True to empty it, or use another NEARDUP_STORE_URL."
            )
        return rows

    @translated
    def write_meta(self, meta: Mapping[str, str]) -> None:
        self.db.execute("DELETE FROM meta")
        self.db.executemany(
            "INSERT INTO meta (name, value) VALUES (?, ?)", sorted({**meta, LAYOUT_NAME: _LAYOUT}.items())
        )
        self._commit()

    # -- documents ---------------------------------------------------------------------------------
    def count(self) -> int:
        return self._count
