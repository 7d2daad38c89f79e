"""SQLite store: the embedded, on-disk default (one file per spider).

Layout (``FORMAT_VERSION`` 2, ``sqlite_layout`` 3)::

    meta(name TEXT PRIMARY KEY, value TEXT)                 -- format version and algorithm parameters (JSON)
    docs(id INTEGER PRIMARY KEY, key_hash INTEGER, key TEXT, canonical INTEGER, similarity REAL, sig BLOB,
         seen INTEGER)                                      -- seen: last filed or fetched again, Unix seconds
    buckets(bucket INTEGER, doc INTEGER, PRIMARY KEY (bucket, doc)) WITHOUT ROWID
    staged(doc INTEGER PRIMARY KEY, buckets BLOB)           -- bucket keys of documents not yet in ``buckets``

``key_hash`` is the 64-bit MurmurHash3 of the key, indexed instead of the URL text to keep the index small.
``bucket`` keeps the low 32 bits of the 64-bit bucket key, as a signed integer, which SQLite stores in 4
bytes instead of 8: with ~29 rows per document that is a tenth of the file. Two bucket keys that agree in
32 bits only add a candidate, which verification against its signature then rejects (at 10 million pages,
about one spurious candidate per 15 lookups).
``canonical`` is the ``id`` of the canonical document for a near-duplicate, NULL for a canonical one; only
canonical documents are filed in ``buckets``, and near-duplicates keep no signature.

Removal (:meth:`SqliteStore.remove`, :meth:`~SqliteStore.expire`) deletes rows of ``docs`` only: the
removed documents' rows in ``buckets`` and ``staged`` are skipped by every lookup (they join no canonical
document) until :meth:`~SqliteStore.purge` deletes them in one pass. Ids are never reused (the highest id
handed out is kept in ``meta`` as ``doc_id_high_water``), so a stale bucket row never points at another
document.

Why ``staged``: bucket keys are hashes, so a document's 29 rows land at random places of the ``buckets``
B-tree. Once the tree is larger than a commit, every row dirties a page of its own, written once to the
write-ahead log and once more into the file: ~200 KB of disk writes per document, which capped inserts
below 1,000 documents per second at 3 million documents. New documents are therefore *staged*: their keys
are appended to ``staged`` (one row per document, in id order, so appends are sequential) and held in
memory in a :class:`~scrapy_neardup.store.compact.LevelIndex`; lookups search both. When the staged
documents reach an eighth of the store (at least ``merge_min_docs``, at most ``merge_max_docs``), they are
frozen, sorted by key, and merged into ``buckets`` a slice of consecutive keys at a time, by the writes that
follow (twice as many rows as each write stages, so one merge ends before the next is due): a slice falls on
a few neighbouring pages of the B-tree, each written once for many rows — the log-structured merge of
O'Neil et al. (1996) with one level on disk, spread out so that no write waits for a whole merge. The rows
of ``staged`` are deleted in the transaction that merges the last slice; at open, every row still in
``staged`` is loaded again, and rows of an interrupted merge that already reached ``buckets`` are ignored
when they are merged again, so a crash at any point loses nothing beyond the last batch.

The database runs in WAL mode. Writes are committed in batches of at most ``commit_every`` documents or
``commit_secs`` seconds, whichever comes first, so a crash loses at most the last batch and a kill never
corrupts the file (SQLite's journal guarantees that). One process at a time: the store takes an exclusive
lock on ``<file>.lock`` at open (beside the real file, symbolic links resolved, so that two paths to one
file share one lock), and a second process gets a :class:`StoreLockedError` that says so (several
processes share a Redis store instead).

Other people's data is never touched. The file carries the plugin's mark, ``PRAGMA application_id`` =
:data:`APPLICATION_ID` (the place SQLite reserves for it). Only an empty database, a database with that
mark, or one of an older version of this plugin (exactly its tables, with its ``format_version``) is
opened; anything else is refused before a single byte is written, ``NEARDUP_RESET`` included, which in
any case empties only the plugin's own tables. At open the store also writes its mark and commits, so a
file that cannot be written (read-only, on a read-only or full file system) is found before any page is
filed.

Every failure of SQLite or of the file system becomes a :class:`~.base.StoreError`. A failed write rolls
the open transaction back; the documents filed since the last commit are then lost, and the
:class:`~.base.StoreWriteError` counts them, so that no page is ever reported as filed when it is not.
"""

from __future__ import annotations

import functools
import logging
import os
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from .base import (
    Added,
    BatchFiling,
    Candidate,
    DocRecord,
    Filing,
    Lookup,
    Query,
    Store,
    StoreError,
    StoreWriteError,
    _read_books,
    key_hash,
)
from .books import KEPT_CRAWLS, CrawlBooks
from .compact import LevelIndex

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: SQLite's own locking still keeps the file consistent
    fcntl = None  # type: ignore[assignment]

#: ``PRAGMA application_id`` of a scrapy-neardup store: "NDUP" in ASCII.
APPLICATION_ID = 0x4E445550
#: The tables of the layout; a database holding any other table is not ours.
_TABLES = frozenset(("meta", "docs", "buckets", "staged", "url_rules", "crawls", "budget"))

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS docs (
    id INTEGER PRIMARY KEY,
    key_hash INTEGER NOT NULL,
    key TEXT NOT NULL,
    canonical INTEGER,
    similarity REAL NOT NULL,
    sig BLOB,
    seen INTEGER
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
"""
#: Recorded in ``meta`` beside the detector's parameters: a version of scrapy-neardup that does not know the
#: recorded layout refuses the file instead of silently missing staged documents or last-seen times.
_LAYOUT_NAME = "sqlite_layout"
_LAYOUT = "3"
#: The highest document id handed out, kept once documents have been removed (ids are never reused).
_HIGH_WATER = "doc_id_high_water"
#: ``meta`` names that belong to the layout, not to the parameters a store is checked against.
_LAYOUT_NAMES = (_LAYOUT_NAME, _HIGH_WATER)
_MERGE_BATCH = 100_000  # rows per executemany call while merging: bounds the Python objects alive at once
_CHUNK = 900  # values per IN (...) list: under SQLite's oldest limit of 999 parameters
#: SQLite's page cache, in KiB (negative: KiB, as PRAGMA cache_size takes it); the file itself stays in the
#: operating system's cache.
_CACHE_KIB = 64 * 1024
#: The write-ahead log is truncated back to this size after each checkpoint; without a limit it keeps the
#: size of the largest transaction (hundreds of MB when a batch touches pages all over a large index).
_WAL_LIMIT = 64 * 1024 * 1024
#: Read the file through a memory map of up to this many bytes (SQLite caps it at its compile-time limit):
#: pages are read without a copy into the page cache.
_MMAP_BYTES = 1 << 30


logger = logging.getLogger(__name__)

#: Band rows merged at least per write while a merge is under way.
_MIN_MERGE_STEP = 1_000


class _Merge:
    """Staged pairs frozen for merging, sorted by key: searched by lookups until the merge ends."""

    def __init__(self, keys: np.ndarray, docs: np.ndarray, last_doc: int, n_docs: int) -> None:
        self.keys, self.docs, self.last_doc, self.n_docs = keys, docs, last_doc, n_docs
        self.index = LevelIndex.from_sorted(keys, docs)
        self.done = 0
        self.secs = 0.0
        self.started = time.monotonic()


class StoreLockedError(StoreError):
    """Another process has the SQLite store open."""


class ForeignDatabaseError(StoreError):
    """The file is a SQLite database of another application: it is left as it is."""


def _translated(method: Any, writes: bool = True) -> Any:
    """Turn every SQLite and file-system error of ``method`` into a :class:`StoreError` (a
    :class:`StoreWriteError`, after rolling back, for a method that ``writes``)."""

    @functools.wraps(method)
    def wrapper(self: SqliteStore, *args: Any, **kwargs: Any) -> Any:
        count = self._count
        try:
            return method(self, *args, **kwargs)
        except (sqlite3.Error, OSError) as exc:
            raise self._failed(method.__name__.strip("_"), exc, count, writes) from exc

    return wrapper


def _translated_read(method: Any) -> Any:
    """:func:`_translated` for a method that only reads: a failed read leaves the open batch alone (SQLite
    keeps a transaction across a failed statement), unless SQLite rolled it back itself."""
    return _translated(method, writes=False)


def _bucket_ids(buckets: Sequence[int] | np.ndarray) -> list[int]:
    """The stored form of bucket keys: their low 32 bits as signed integers (4 bytes each in SQLite)."""
    return np.asarray(buckets, dtype=np.int64).astype(np.int32).tolist()


class CorruptStoreError(StoreError):
    """The SQLite file is damaged (SQLite reports it malformed, or not a database)."""


def _is_corruption(exc: BaseException) -> bool:
    """Whether SQLite reported a damaged file: by its error code where Python gives it (3.11+), else by the
    class SQLite's corruption errors have (``DatabaseError`` itself, not a subclass)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)  # type: ignore[attr-defined]
    return type(exc) is sqlite3.DatabaseError


def _marked_as_ours(path: str) -> bool:
    """Whether the file's header says it is a scrapy-neardup store (SQLite's header, with the application id
    at byte 68): only such a file is ever moved aside by a reset."""
    try:
        with open(path, "rb") as f:
            header = f.read(100)
    except OSError:
        return False
    return (
        len(header) == 100
        and header.startswith(b"SQLite format 3\x00")
        and int.from_bytes(header[68:72], "big") == APPLICATION_ID
    )


class SqliteStore(Store):
    local = True

    @classmethod
    def from_url(cls, url: str, **options: Any) -> SqliteStore:
        from . import sqlite_path

        return cls(sqlite_path(url), **{k: v for k, v in options.items() if k in ("commit_every", "commit_secs")})

    def __init__(
        self,
        path: str,
        commit_every: int = 500,
        commit_secs: float = 1.0,
        merge_min_docs: int = 20_000,
        merge_max_docs: int = 250_000,
    ) -> None:
        self.path = os.path.abspath(path)
        self.location = f"sqlite:///{self.path}"
        self.commit_every = commit_every
        self.commit_secs = commit_secs
        self.merge_min_docs = merge_min_docs
        self.merge_max_docs = merge_max_docs
        self._staged = LevelIndex(key_bits=32)
        self._staged_docs = 0
        self._merging: _Merge | None = None
        self._db: sqlite3.Connection | None = None
        self._lock_file: Any = None
        self._pending = 0
        self._last_commit = time.monotonic()
        self._count = 0
        self._next_id = 1
        self._resetting = False  # opening with NEARDUP_RESET: a corrupted file is moved aside

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
            if directory:
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
            self._read_counters()
            self._load_staged()
            self._db.execute("BEGIN")
        except StoreError:
            self._abandon()
            raise
        except (sqlite3.Error, OSError) as exc:
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
        row = db.execute("SELECT value FROM meta WHERE name = ?", (_HIGH_WATER,)).fetchone()
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

    @_translated
    def flush(self) -> None:
        self._commit()

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

    # -- meta --------------------------------------------------------------------------------------
    @_translated
    def add_rule_counts(self, counts: Mapping[tuple[str, str], tuple[int, int]]) -> None:
        self.db.executemany(
            "INSERT INTO url_rules (host, rule, successes, failures) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (host, rule) DO UPDATE SET successes = successes + excluded.successes, "
            "failures = failures + excluded.failures",
            [(host, rule, successes, failures) for (host, rule), (successes, failures) in counts.items()],
        )
        self._commit()

    @_translated_read
    def rule_counts(self) -> dict[tuple[str, str], tuple[int, int]]:
        rows = self.db.execute("SELECT host, rule, successes, failures FROM url_rules").fetchall()
        return {(host, rule): (successes, failures) for host, rule, successes, failures in rows}

    @_translated
    def add_crawl_books(self, books: CrawlBooks) -> None:
        # Committed with the batch it joins (a crawl writes its books just before the store's last commit,
        # whose failure then counts the fingerprints it lost).
        self.db.execute("INSERT INTO crawls (books) VALUES (?)", (books.to_json(),))
        self.db.execute(f"DELETE FROM crawls WHERE id <= (SELECT MAX(id) FROM crawls) - {KEPT_CRAWLS}")
        self._pending += 1

    @_translated
    def admit(self, group: str, key: str, budget: int) -> bool:
        db = self.db
        if db.execute("SELECT 1 FROM budget WHERE grp = ? AND key = ?", (group, key)).fetchone():
            return True
        if db.execute("SELECT COUNT(*) FROM budget WHERE grp = ?", (group,)).fetchone()[0] >= budget:
            return False
        db.execute("INSERT INTO budget (grp, key) VALUES (?, ?)", (group, key))
        self._pending += 1
        return True

    @_translated_read
    def crawl_books(self) -> list[CrawlBooks]:
        return _read_books([text for (text,) in self.db.execute("SELECT books FROM crawls ORDER BY id")])

    @_translated
    def clear(self) -> None:
        self.db.execute("DELETE FROM budget")
        self.db.execute("DELETE FROM crawls")
        self.db.execute("DELETE FROM url_rules")
        self.db.execute("DELETE FROM buckets")
        self.db.execute("DELETE FROM staged")
        self._reset_staged()
        self.db.execute("DELETE FROM docs")
        self.db.execute("DELETE FROM meta")
        self._count = 0
        self._next_id = 1
        self._commit()

    @_translated_read
    def read_meta(self) -> dict[str, str] | None:
        rows = dict(self.db.execute("SELECT name, value FROM meta").fetchall())
        if not rows:
            return None
        layout = rows.pop(_LAYOUT_NAME, None)
        rows.pop(_HIGH_WATER, None)
        if layout != _LAYOUT:
            raise StoreError(
                f"The SQLite store {self.path} has layout {layout}; this version of scrapy-neardup reads layout "
                f"{_LAYOUT}. Set NEARDUP_RESET = True to empty it, or use another NEARDUP_STORE_URL."
            )
        return rows

    @_translated
    def write_meta(self, meta: Mapping[str, str]) -> None:
        self.db.execute("DELETE FROM meta")
        self.db.executemany(
            "INSERT INTO meta (name, value) VALUES (?, ?)", sorted({**meta, _LAYOUT_NAME: _LAYOUT}.items())
        )
        self._commit()

    # -- documents ---------------------------------------------------------------------------------
    def count(self) -> int:
        return self._count

    @_translated_read
    def get(self, key: str) -> DocRecord | None:
        rows = self.db.execute(_RECORDS + "WHERE d.key_hash = ?", (key_hash(key),)).fetchall()
        for row in rows:
            if row[1] == key:
                return _record(row)
        return None

    @_translated
    def refile(self, key: str, signature: bytes, buckets: Sequence[int] | np.ndarray) -> bool:
        for doc, stored_key, canonical in self.db.execute(
            "SELECT id, key, canonical FROM docs WHERE key_hash = ?", (key_hash(key),)
        ).fetchall():
            if stored_key != key:
                continue
            if canonical is not None:
                return False
            self.db.execute("UPDATE docs SET sig = ? WHERE id = ?", (signature, doc))
            # Straight into the B-tree, not staged: re-filing is rare, and a document is staged once.
            self.db.executemany(
                "INSERT OR IGNORE INTO buckets (bucket, doc) VALUES (?, ?)",
                [(bucket, doc) for bucket in _bucket_ids(buckets)],
            )
            self._pending += 1
            if self._pending >= self.commit_every:
                self._commit()
            return True
        return False

    @_translated
    def repoint(self, old: str, new: str, similarity: float) -> bool:
        known = self._known([old, new])
        if old not in known or new not in known or old == new:
            return False
        (old_id, old_record), (new_id, new_record) = known[old], known[new]
        if old_record.canonical is not None or old_record.orphaned or new_record.canonical is not None:
            return False
        # Its signature stays: its own near-duplicates still name it, and are compared with it.
        self.db.execute(
            "UPDATE docs SET canonical = ?, similarity = ? WHERE id = ? AND canonical IS NULL",
            (new_id, similarity, old_id),
        )
        self._wrote(1)
        return True

    # -- batches: a few set-based statements per batch instead of several per document ----------------
    def _select_in(self, sql: str, values: Sequence[int]) -> list[tuple[Any, ...]]:
        """Rows of ``sql`` (with one ``{marks}`` for an IN list) for ``values``, in chunks."""
        rows: list[tuple[Any, ...]] = []
        values = sorted(set(values))  # sorted: the B-tree is walked in order
        for i in range(0, len(values), _CHUNK):
            chunk = values[i : i + _CHUNK]
            rows += self.db.execute(sql.format(marks=",".join("?" * len(chunk))), chunk).fetchall()
        return rows

    def _known(self, keys: Sequence[str]) -> dict[str, tuple[int, DocRecord]]:
        rows = self._select_in(_RECORDS + "WHERE d.key_hash IN ({marks})", [key_hash(k) for k in keys])
        wanted = set(keys)
        return {row[1]: (row[0], _record(row)) for row in rows if row[1] in wanted}

    @_translated
    def lookup_many(self, queries: Sequence[Query], file_alone: bool = False) -> list[Lookup]:
        items = queries
        if not items:
            return []
        known = self._known([key for key, _, _ in items])
        bucket_lists = [_bucket_ids(buckets) for _, _, buckets in items]
        all_buckets = [b for bl in bucket_lists for b in bl]
        docs_in: dict[int, list[int]] = {}
        for bucket, doc in self._select_in("SELECT bucket, doc FROM buckets WHERE bucket IN ({marks})", all_buckets):
            docs_in.setdefault(bucket, []).append(doc)
        for bucket, doc in self._staged_hits(all_buckets):
            docs_in.setdefault(bucket, []).append(doc)
        wanted = {d for docs in docs_in.values() for d in docs}
        # Canonical documents only: a bucket entry of a removed document joins nothing (see the docstring).
        found = {
            doc: Candidate(key, sig)
            for doc, key, sig in self._select_in(
                "SELECT id, key, sig FROM docs WHERE id IN ({marks}) AND canonical IS NULL", list(wanted)
            )
        }
        now = int(time.time())
        self._touch_ids([doc for doc, _ in known.values()], now)
        out: list[Lookup] = []
        filed_now: dict[str, int] = {}
        new_docs: list[tuple[int, int, str, int | None, float, bytes | None, int]] = []
        new_buckets: list[tuple[int, list[int]]] = []
        waiting: set[int] = set()
        for (key, signature, _), buckets in zip(items, bucket_lists):
            record = known.get(key)
            if record is not None or key in filed_now:
                out.append(Lookup(record[1] if record is not None else DocRecord(key, None, 1.0, signature)))
                continue
            docs = list(dict.fromkeys(d for b in buckets for d in docs_in.get(b, ()) if d in found))
            if docs or not file_alone or not waiting.isdisjoint(buckets):
                waiting.update(buckets)  # later items sharing a bucket wait for this one's verdict
                out.append(Lookup(None, [found[d] for d in docs]))
                continue
            doc = self._next_id
            self._next_id += 1
            filed_now[key] = doc
            new_docs.append((doc, key_hash(key), key, None, 1.0, signature, now))
            new_buckets.append((doc, buckets))
            for b in buckets:
                docs_in.setdefault(b, []).append(doc)  # later items of the batch see it
            found[doc] = Candidate(key, signature or b"")
            out.append(Lookup(filed=True))
        self._insert(new_docs, new_buckets)
        return out

    @_translated
    def add_many(self, filings: Sequence[Filing]) -> list[Added]:
        items = filings
        known = self._known([item[0] for item in items])
        wanted = [item[3] for item in items if item[3] is not None]
        canonical_ids = {
            key: doc
            for key, (doc, record) in self._known(wanted).items()
            if record.canonical is None and not record.orphaned
        }
        out: list[Added] = []
        rules = BatchFiling()
        new_docs: list[tuple[int, int, str, int | None, float, bytes | None, int]] = []
        new_buckets: list[tuple[int, list[int]]] = []
        now = int(time.time())
        for key, signature, buckets, canonical, similarity, *_ in items:
            bucket_list = _bucket_ids(buckets) if canonical is None else []
            alive = None if canonical is None else canonical in canonical_ids
            outcome = rules.decide(key, key in known, bucket_list, alive)
            if outcome != Added.FILED:
                out.append(outcome)
                continue
            doc = self._next_id
            self._next_id += 1
            if canonical is None:
                new_docs.append((doc, key_hash(key), key, None, similarity, signature, now))
                new_buckets.append((doc, bucket_list))
            else:
                new_docs.append((doc, key_hash(key), key, canonical_ids[canonical], similarity, None, now))
            out.append(Added.FILED)
        self._insert(new_docs, new_buckets)
        return out

    def _insert(
        self,
        docs: list[tuple[int, int, str, int | None, float, bytes | None, int]],
        buckets: list[tuple[int, list[int]]],
    ) -> None:
        """Write new documents, and stage the bucket keys of the canonical ones (``(doc, keys)`` pairs)."""
        if not docs:
            return
        self.db.executemany(
            "INSERT INTO docs (id, key_hash, key, canonical, similarity, sig, seen) VALUES (?, ?, ?, ?, ?, ?, ?)",
            docs,
        )
        buckets = [(doc, bl) for doc, bl in buckets if len(bl)]  # nothing to find a document by: not staged
        if buckets:
            keys = [np.asarray(bl, dtype="<i4") for _, bl in buckets]
            self.db.executemany(
                "INSERT INTO staged (doc, buckets) VALUES (?, ?)",
                [(doc, k.tobytes()) for (doc, _), k in zip(buckets, keys)],
            )
            self._stage(keys, [doc for doc, _ in buckets])
        self._count += len(docs)
        self._pending += len(docs)
        if self._merging is None and self._staged_docs >= min(
            max(self._count // 8, self.merge_min_docs), self.merge_max_docs
        ):
            self._start_merge()
        if self._merging is not None:
            # Twice the rows staged meanwhile: the merge ends before the next one is due.
            self._merge_step(max(2 * sum(len(bl) for _, bl in buckets), _MIN_MERGE_STEP))
        if self._pending >= self.commit_every or time.monotonic() - self._last_commit >= self.commit_secs:
            self._commit()

    # -- the staged part of the band index (see the module's docstring) ----------------------------------
    def _staged_hits(self, bucket_ids: list[int]) -> Iterator[tuple[int, int]]:
        """``(bucket, doc)`` for each of ``bucket_ids`` (stored form) found in the staged or frozen pairs."""
        indexes = [self._staged] if len(self._staged) else []
        if self._merging is not None:
            indexes.append(self._merging.index)
        if not indexes:
            return
        queries = np.asarray(bucket_ids, dtype=np.int32)
        for index in indexes:
            positions, docs = index.lookup(queries)
            for position, doc in zip(positions.tolist(), docs.tolist()):
                yield bucket_ids[position], doc

    def _stage(self, keys: list[np.ndarray], docs: list[int]) -> None:
        self._staged.add_many(np.concatenate(keys), np.repeat(np.asarray(docs, dtype=np.int32), [len(k) for k in keys]))
        self._staged_docs += len(docs)

    def _reset_staged(self) -> None:
        self._staged, self._staged_docs, self._merging = LevelIndex(key_bits=32), 0, None

    def _load_staged(self) -> None:
        """Every staged row, a merge cut short included (its rows already in ``buckets`` are ignored when it
        runs again)."""
        self._reset_staged()
        rows = self.db.execute("SELECT doc, buckets FROM staged ORDER BY doc").fetchall()
        if rows:
            self._stage([np.frombuffer(blob, dtype="<i4") for _, blob in rows], [doc for doc, _ in rows])

    def _start_merge(self) -> None:
        """Freeze the staged documents, sorted by key, to be merged a slice at a time by later writes."""
        keys, docs = self._staged.pairs()
        order = np.lexsort((docs, keys))
        merge = _Merge(keys[order], docs[order], int(docs.max()), self._staged_docs)
        self._reset_staged()
        self._merging = merge

    def _merge_step(self, rows: int) -> None:
        """Insert the next ``rows`` frozen pairs into ``buckets``: a contiguous key range, so a few pages
        of the B-tree take many rows each. The last step deletes the frozen documents' staged rows."""
        merge = self._merging
        assert merge is not None
        started = time.monotonic()
        end = min(merge.done + rows, len(merge.keys))
        for i in range(merge.done, end, _MERGE_BATCH):
            j = min(i + _MERGE_BATCH, end)
            self.db.executemany(
                "INSERT OR IGNORE INTO buckets (bucket, doc) VALUES (?, ?)",
                zip(merge.keys[i:j].tolist(), merge.docs[i:j].tolist()),
            )
        merge.done = end
        merge.secs += time.monotonic() - started
        if end == len(merge.keys):
            self.db.execute("DELETE FROM staged WHERE doc <= ?", (merge.last_doc,))
            self._merging = None
            logger.info(
                "Merged %d staged documents (%d band rows) into the band index of %s: %.1f s of work over %.1f s",
                merge.n_docs,
                len(merge.keys),
                self.path,
                merge.secs,
                time.monotonic() - merge.started,
            )

    @_translated_read
    def iter_records(self) -> Iterator[DocRecord]:
        rows = self.db.execute(_RECORDS + "WHERE d.canonical IS NULL OR c.id IS NOT NULL ORDER BY d.id").fetchall()
        return iter([_record(row) for row in rows])

    # -- ageing --------------------------------------------------------------------------------------
    @_translated
    def touch(self, keys: Sequence[str]) -> None:
        self._touch_ids([doc for doc, _ in self._known(keys).values()], int(time.time()))

    def _touch_ids(self, ids: list[int], now: int) -> None:
        """Set the last-seen time of documents ``ids`` to ``now`` (a lookup or :meth:`touch`)."""
        if ids:
            self._select_in(f"UPDATE docs SET seen = {now} WHERE id IN ({{marks}})", ids)
            self._wrote(0)

    @_translated
    def remove(self, keys: Sequence[str]) -> int:
        ids = [doc for doc, _ in self._known(keys).values()]
        if ids:
            self._select_in("DELETE FROM docs WHERE id IN ({marks})", ids)
        return self._removed(len(ids))

    @_translated
    def expire(self, before: float) -> int:
        return self._removed(self.db.execute("DELETE FROM docs WHERE seen < ?", (before,)).rowcount)

    def _removed(self, n: int) -> int:
        """Book ``n`` documents just deleted: ids stay unused, the count drops."""
        if n:
            self.db.execute(
                "INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)", (_HIGH_WATER, str(self._next_id - 1))
            )
            self._count -= n
            self._wrote(n)
        return n

    def _wrote(self, n: int) -> None:
        self._pending += max(n, 1)
        if self._pending >= self.commit_every or time.monotonic() - self._last_commit >= self.commit_secs:
            self._commit()

    @_translated
    def purge(self) -> int:
        db = self.db
        orphans = 0
        while True:  # a removed page's near-duplicates, then theirs (a re-pointed group's chain)
            gone = db.execute(
                "DELETE FROM docs WHERE canonical IS NOT NULL AND canonical NOT IN (SELECT id FROM docs)"
            ).rowcount
            orphans += gone
            if not gone:
                break
        self._count -= orphans
        canonical = "SELECT id FROM docs WHERE canonical IS NULL"
        db.execute(f"DELETE FROM buckets WHERE doc NOT IN ({canonical})")
        db.execute(f"DELETE FROM staged WHERE doc NOT IN ({canonical})")
        self._commit()
        self._load_staged()  # the staged index without the removed documents (a merge under way restarts)
        return orphans


#: Every column of a document's record, its canonical's key and signature beside it.
_RECORDS = (
    "SELECT d.id, d.key, d.canonical, c.key, d.similarity, d.sig, d.seen, c.sig, c.canonical "
    "FROM docs d LEFT JOIN docs c ON c.id = d.canonical "
)


def _record(row: tuple[Any, ...]) -> DocRecord:
    """The :class:`DocRecord` of a row of :data:`_RECORDS` (an orphan when its canonical is gone)."""
    _, key, canonical_id, canonical, similarity, sig, seen, canonical_sig, chained = row
    seen = None if seen is None else float(seen)
    if canonical_id is None:
        return DocRecord(key, None, similarity, sig, seen)
    if canonical is None:
        return DocRecord(key, None, similarity, None, seen, orphaned=True)
    return DocRecord(key, canonical, similarity, None, seen, canonical_sig, chained=chained is not None)
