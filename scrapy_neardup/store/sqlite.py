"""SQLite store: the embedded, on-disk default (one file per spider).

Layout (``FORMAT_VERSION`` 2)::

    meta(name TEXT PRIMARY KEY, value TEXT)                 -- format version and algorithm parameters (JSON)
    docs(id INTEGER PRIMARY KEY, key_hash INTEGER, key TEXT, canonical INTEGER, similarity REAL, sig BLOB)
    buckets(bucket INTEGER, doc INTEGER, PRIMARY KEY (bucket, doc)) WITHOUT ROWID

``key_hash`` is the 64-bit MurmurHash3 of the key, indexed instead of the URL text to keep the index small.
``bucket`` keeps the low 32 bits of the 64-bit bucket key, as a signed integer, which SQLite stores in 4
bytes instead of 8: with ~29 rows per document that is a tenth of the file. Two bucket keys that agree in
32 bits only add a candidate, which verification against its signature then rejects (at 10 million pages,
about one spurious candidate per 15 lookups).
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
import numpy as np

from .base import Candidate, DocRecord, Lookup, Store, StoreError

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


class StoreLockedError(StoreError):
    """Another process has the SQLite store open."""


def _key_hash(key: str) -> int:
    return mmh3.hash64(key, _KEY_SEED, signed=True)[0]


def _bucket_ids(buckets: Sequence[int] | np.ndarray) -> list[int]:
    """The stored form of bucket keys: their low 32 bits as signed integers (4 bytes each in SQLite)."""
    return np.asarray(buckets, dtype=np.int64).astype(np.int32).tolist()  # type: ignore[no-any-return]


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
        self._next_id = 1

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
            self._db.execute(f"PRAGMA cache_size=-{_CACHE_KIB}")
            self._db.execute(f"PRAGMA journal_size_limit={_WAL_LIMIT}")
            self._db.execute(f"PRAGMA mmap_size={_MMAP_BYTES}")
            self._db.executescript(_SCHEMA)
            self._count = self._db.execute("SELECT COUNT(*) FROM docs").fetchone()[0]
            self._next_id = (self._db.execute("SELECT MAX(id) FROM docs").fetchone()[0] or 0) + 1
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
        self._next_id = 1
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
            _bucket_ids(buckets),
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
        doc = self._next_id
        self._next_id += 1
        self._insert(
            [(doc, _key_hash(key), key, canonical_id, similarity, signature if canonical is None else None)],
            [(b, doc) for b in _bucket_ids(buckets)] if canonical is None else [],
        )
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
        rows = self._select_in(
            "SELECT d.id, d.key, c.key, d.similarity, d.sig FROM docs d LEFT JOIN docs c ON c.id = d.canonical "
            "WHERE d.key_hash IN ({marks})",
            [_key_hash(k) for k in keys],
        )
        wanted = set(keys)
        return {key: (doc, DocRecord(key, canonical, similarity, sig))
                for doc, key, canonical, similarity, sig in rows if key in wanted}

    def lookup_many(self, items: Sequence[tuple[str, bytes | None, Sequence[int]]], file_alone: bool = False,
                    ) -> list[Lookup]:
        if not items:
            return []
        known = self._known([key for key, _, _ in items])
        bucket_lists = [_bucket_ids(buckets) for _, _, buckets in items]
        docs_in: dict[int, list[int]] = {}
        for bucket, doc in self._select_in(
            "SELECT bucket, doc FROM buckets WHERE bucket IN ({marks})", [b for bl in bucket_lists for b in bl]
        ):
            docs_in.setdefault(bucket, []).append(doc)
        wanted = {d for docs in docs_in.values() for d in docs}
        found = {doc: Candidate(key, sig) for doc, key, sig in
                 self._select_in("SELECT id, key, sig FROM docs WHERE id IN ({marks})", list(wanted))}
        out: list[Lookup] = []
        filed_now: dict[str, int] = {}
        new_docs: list[tuple[int, int, str, None, float, bytes | None]] = []
        new_buckets: list[tuple[int, int]] = []
        for (key, signature, _), buckets in zip(items, bucket_lists):
            record = known.get(key)
            if record is not None or key in filed_now:
                out.append(Lookup(record[1] if record is not None else DocRecord(key, None, 1.0, signature)))
                continue
            docs = list(dict.fromkeys(d for b in buckets for d in docs_in.get(b, ())))
            if docs or not file_alone:
                out.append(Lookup(None, [found[d] for d in docs]))
                continue
            doc = self._next_id
            self._next_id += 1
            filed_now[key] = doc
            new_docs.append((doc, _key_hash(key), key, None, 1.0, signature))
            for b in buckets:
                new_buckets.append((b, doc))
                docs_in.setdefault(b, []).append(doc)  # later items of the batch see it
            found[doc] = Candidate(key, signature or b"")
            out.append(Lookup(filed=True))
        self._insert(new_docs, new_buckets)
        return out

    def add_many(self, items: Sequence[tuple[str, bytes | None, Sequence[int], str | None, float, Any]]) -> list[int]:
        known = self._known([item[0] for item in items])
        canonical_ids = {key: doc for key, (doc, _) in self._known([i[3] for i in items if i[3] is not None]).items()}
        out: list[int] = []
        filed_now: set[str] = set()
        filed_buckets: set[int] = set()
        new_docs: list[tuple[int, int, str, int | None, float, bytes | None]] = []
        new_buckets: list[tuple[int, int]] = []
        for key, signature, buckets, canonical, similarity, _ in items:
            if key in known or key in filed_now:
                out.append(-1)
                continue
            bucket_list = _bucket_ids(buckets)
            if canonical is None:
                if not filed_buckets.isdisjoint(bucket_list):
                    out.append(0)  # an earlier document of this batch may be its near-duplicate: look again
                    continue
                filed_buckets.update(bucket_list)
            elif canonical not in canonical_ids:
                raise StoreError(f"canonical document {canonical!r} is not in the store")
            doc = self._next_id
            self._next_id += 1
            filed_now.add(key)
            if canonical is None:
                new_docs.append((doc, _key_hash(key), key, None, similarity, signature))
                new_buckets.extend((b, doc) for b in bucket_list)
            else:
                new_docs.append((doc, _key_hash(key), key, canonical_ids[canonical], similarity, None))
            out.append(1)
        self._insert(new_docs, new_buckets)
        return out

    def _insert(self, docs: list[tuple[int, int, str, int | None, float, bytes | None]],
                buckets: list[tuple[int, int]]) -> None:
        if not docs:
            return
        self.db.executemany(
            "INSERT INTO docs (id, key_hash, key, canonical, similarity, sig) VALUES (?, ?, ?, ?, ?, ?)", docs
        )
        buckets.sort()
        self.db.executemany("INSERT OR IGNORE INTO buckets (bucket, doc) VALUES (?, ?)", buckets)
        self._count += len(docs)
        self._pending += len(docs)
        if self._pending >= self.commit_every or time.monotonic() - self._last_commit >= self.commit_secs:
            self.flush()

    def iter_records(self) -> Iterator[DocRecord]:
        rows = self.db.execute(
            "SELECT d.key, c.key, d.similarity, d.sig FROM docs d LEFT JOIN docs c ON c.id = d.canonical ORDER BY d.id"
        ).fetchall()
        for key, canonical, similarity, sig in rows:
            yield DocRecord(key, canonical, similarity, sig)
