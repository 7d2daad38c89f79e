"""SQLite store: the embedded, on-disk default (one file per spider).

Layout (``FORMAT_VERSION`` 1)::

    meta(name TEXT PRIMARY KEY, value TEXT)                 -- format version and algorithm parameters (JSON)
    docs(id INTEGER PRIMARY KEY, key_hash INTEGER, key TEXT, canonical INTEGER, similarity REAL, sig BLOB)
    buckets(bucket INTEGER, doc INTEGER, PRIMARY KEY (bucket, doc)) WITHOUT ROWID

``key_hash`` is the 64-bit MurmurHash3 of the key, indexed instead of the URL text to keep the index small.
``canonical`` is the ``id`` of the canonical document for a near-duplicate, NULL for a canonical one; only
canonical documents are filed in ``buckets``, and near-duplicates keep no signature.

The database runs in WAL mode. Writes are committed in batches of at most ``commit_every`` documents or
``commit_secs`` seconds, whichever comes first, so a crash loses at most the last batch and a kill never
corrupts the file (SQLite's journal guarantees that). One process at a time: the store takes an exclusive
lock on ``<file>.lock`` at open, and a second process gets a :class:`StoreLockedError` that says so
(several processes share a Redis store instead).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import mmh3

from .base import Candidate, DocRecord, Store, StoreError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: SQLite's own locking still keeps the file consistent
    fcntl = None  # type: ignore[assignment]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS docs (
    id INTEGER PRIMARY KEY,
    key_hash INTEGER NOT NULL,
    key TEXT NOT NULL,
    canonical INTEGER,
    similarity REAL NOT NULL,
    sig BLOB
);
CREATE INDEX IF NOT EXISTS docs_key_hash ON docs (key_hash);
CREATE TABLE IF NOT EXISTS buckets (bucket INTEGER NOT NULL, doc INTEGER NOT NULL, PRIMARY KEY (bucket, doc))
    WITHOUT ROWID;
"""
_KEY_SEED = 0x4B45_5953


class StoreLockedError(StoreError):
    """Another process has the SQLite store open."""


def _key_hash(key: str) -> int:
    return mmh3.hash64(key, _KEY_SEED, signed=True)[0]


class SqliteStore(Store):
    def __init__(self, path: str, commit_every: int = 500, commit_secs: float = 1.0) -> None:
        self.path = os.path.abspath(path)
        self.location = f"sqlite:///{self.path}"
        self.commit_every = commit_every
        self.commit_secs = commit_secs
        self._db: sqlite3.Connection | None = None
        self._lock_file: Any = None
        self._pending = 0
        self._last_commit = time.monotonic()
        self._count = 0

    # -- lifecycle ---------------------------------------------------------------------------------
    def _connect(self) -> None:
        directory = os.path.dirname(self.path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        self._lock()
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
            self._count = self._db.execute("SELECT COUNT(*) FROM docs").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            self._unlock()
            raise StoreError(f"Cannot open the SQLite store {self.path}: {exc}") from exc
        self._db.execute("BEGIN")

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

    def flush(self) -> None:
        if self._db is not None and self._db.in_transaction:
            self._db.execute("COMMIT")
            self._db.execute("BEGIN")
        self._pending = 0
        self._last_commit = time.monotonic()

    def close(self) -> None:
        if self._db is not None:
            if self._db.in_transaction:
                self._db.execute("COMMIT")
            self._db.close()
            self._db = None
        self._unlock()

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            raise StoreError("The SQLite store is not open")
        return self._db

    # -- meta --------------------------------------------------------------------------------------
    def _clear(self) -> None:
        self.db.execute("DELETE FROM buckets")
        self.db.execute("DELETE FROM docs")
        self.db.execute("DELETE FROM meta")
        self._count = 0
        self.flush()

    def _read_meta(self) -> dict[str, str] | None:
        rows = self.db.execute("SELECT name, value FROM meta").fetchall()
        return dict(rows) if rows else None

    def _write_meta(self, meta: Mapping[str, str]) -> None:
        self.db.execute("DELETE FROM meta")
        self.db.executemany("INSERT INTO meta (name, value) VALUES (?, ?)", sorted(meta.items()))
        self.flush()

    # -- documents ---------------------------------------------------------------------------------
    def count(self) -> int:
        return self._count

    def _doc_id(self, key: str) -> int | None:
        for doc, stored_key in self.db.execute("SELECT id, key FROM docs WHERE key_hash = ?", (_key_hash(key),)):
            if stored_key == key:
                return int(doc)
        return None

    def get(self, key: str) -> DocRecord | None:
        for stored_key, canonical, similarity, sig in self.db.execute(
            "SELECT d.key, c.key, d.similarity, d.sig FROM docs d LEFT JOIN docs c ON c.id = d.canonical "
            "WHERE d.key_hash = ?",
            (_key_hash(key),),
        ):
            if stored_key == key:
                return DocRecord(key, canonical, similarity, sig)
        return None

    def lookup(self, buckets: Sequence[int]) -> tuple[list[Candidate], Any]:
        if not len(buckets):
            return [], None
        marks = ",".join("?" * len(buckets))
        rows = self.db.execute(
            f"SELECT DISTINCT d.key, d.sig FROM buckets b JOIN docs d ON d.id = b.doc WHERE b.bucket IN ({marks})",
            [int(b) for b in buckets],
        ).fetchall()
        return [Candidate(key, sig) for key, sig in rows], None

    def add(
        self,
        key: str,
        signature: bytes | None,
        buckets: Sequence[int],
        canonical: str | None = None,
        similarity: float = 1.0,
        token: Any = None,
    ) -> bool:
        if self._doc_id(key) is not None:
            return True
        canonical_id = None if canonical is None else self._doc_id(canonical)
        cursor = self.db.execute(
            "INSERT INTO docs (key_hash, key, canonical, similarity, sig) VALUES (?, ?, ?, ?, ?)",
            (_key_hash(key), key, canonical_id, similarity, signature if canonical is None else None),
        )
        if canonical is None:
            doc = cursor.lastrowid
            self.db.executemany(
                "INSERT OR IGNORE INTO buckets (bucket, doc) VALUES (?, ?)", [(int(b), doc) for b in buckets]
            )
        self._count += 1
        self._pending += 1
        if self._pending >= self.commit_every or time.monotonic() - self._last_commit >= self.commit_secs:
            self.flush()
        return True

    def iter_records(self) -> Iterator[DocRecord]:
        rows = self.db.execute(
            "SELECT d.key, c.key, d.similarity, d.sig FROM docs d LEFT JOIN docs c ON c.id = d.canonical ORDER BY d.id"
        ).fetchall()
        for key, canonical, similarity, sig in rows:
            yield DocRecord(key, canonical, similarity, sig)
