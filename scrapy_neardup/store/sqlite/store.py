"""The SQLite store: documents, their bucket rows and the staged index merged into them (see the package's
docstring), and what is done to the records besides filing them."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ..base import (
    Added,
    BatchFiling,
    Candidate,
    DocRecord,
    Filing,
    Lookup,
    Query,
    key_hash,
)
from ..compact import LevelIndex
from .file import HIGH_WATER, SqliteFile, translated, translated_read
from .parts import SqliteBooks, SqliteBudgets, SqliteRuleCounts, SqliteSelectors

_MERGE_BATCH = 100_000  # rows per executemany call while merging: bounds the Python objects alive at once

logger = logging.getLogger("scrapy_neardup.store.sqlite")


_CHUNK = 900  # values per IN (...) list: under SQLite's oldest limit of 999 parameters


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


_BUCKET_ROWS = "SELECT bucket, doc FROM buckets WHERE bucket IN ({marks})"


def _bucket_ids(buckets: Sequence[int] | np.ndarray) -> list[int]:
    """The stored form of bucket keys: their low 32 bits as signed integers (4 bytes each in SQLite)."""
    return np.asarray(buckets, dtype=np.int64).astype(np.int32).tolist()


#: Every column of a document's record, its canonical's key and signature beside it.
_RECORDS = (
    "SELECT d.id, d.key, d.canonical, c.key, d.similarity, d.sig, d.seen, c.sig, c.canonical, d.body "
    "FROM docs d LEFT JOIN docs c ON c.id = d.canonical "
)


#: A new row of ``docs``: id, key hash, key, canonical id, similarity, signature, last seen, body digest.
_DocRow = tuple[int, int, str, "int | None", float, "bytes | None", int, "bytes | None"]


def _record(row: tuple[Any, ...]) -> DocRecord:
    """The :class:`DocRecord` of a row of :data:`_RECORDS` (an orphan when its canonical is gone)."""
    _, key, canonical_id, canonical, similarity, sig, seen, canonical_sig, chained, body = row
    seen = None if seen is None else float(seen)
    if canonical_id is None:
        return DocRecord(key, None, similarity, sig, seen, body=body)
    if canonical is None:
        return DocRecord(key, None, similarity, None, seen, orphaned=True, body=body)
    return DocRecord(key, canonical, similarity, None, seen, canonical_sig, chained=chained is not None, body=body)


class SqliteStore(SqliteFile):
    local = True

    @classmethod
    def from_url(cls, url: str, **options: Any) -> SqliteStore:
        from .. import sqlite_path

        return cls(
            sqlite_path(url),
            **{k: v for k, v in options.items() if k in ("commit_every", "commit_secs", "make_folders")},
        )

    def __init__(
        self,
        path: str,
        commit_every: int = 500,
        commit_secs: float = 1.0,
        merge_min_docs: int = 20_000,
        merge_max_docs: int = 250_000,
        make_folders: bool = True,
    ) -> None:
        super().__init__(path, commit_every, commit_secs, make_folders)
        self.merge_min_docs = merge_min_docs
        self.merge_max_docs = merge_max_docs
        self._staged = LevelIndex(key_bits=32)
        self._staged_docs = 0
        self._merging: _Merge | None = None
        #: Whether the band index is known to hold no row (read at open): its lookup is then skipped.
        self._buckets_empty = False
        self.rules = rules = SqliteRuleCounts(self)
        self.budgets = SqliteBudgets(self)
        self.selectors = selectors = SqliteSelectors(self)
        self._change_logs = (rules.log, selectors.log)
        self.books = SqliteBooks(self)

    # -- meta --------------------------------------------------------------------------------------
    @translated
    def clear(self) -> None:
        self.db.execute("DELETE FROM budget")
        self.db.execute("DELETE FROM selectors")
        self.db.execute("DELETE FROM crawls")
        self.db.execute("DELETE FROM url_rules")
        for log in self._change_logs:
            log.clear()
        self.db.execute("DELETE FROM buckets")
        self.db.execute("DELETE FROM staged")
        self._reset_staged()
        self._buckets_empty = True
        self.db.execute("DELETE FROM docs")
        self.db.execute("DELETE FROM meta")
        self._count = 0
        self._next_id = 1
        self._commit()

    @translated_read
    def get(self, key: str) -> DocRecord | None:
        rows = self.db.execute(_RECORDS + "WHERE d.key_hash = ?", (key_hash(key),)).fetchall()
        for row in rows:
            if row[1] == key:
                return _record(row)
        return None

    @translated
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
            self._buckets_empty = False
            self.db.executemany(
                "INSERT OR IGNORE INTO buckets (bucket, doc) VALUES (?, ?)",
                [(bucket, doc) for bucket in _bucket_ids(buckets)],
            )
            self._pending += 1
            if self._pending >= self.commit_every:
                self._commit()
            return True
        return False

    @translated
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

    @translated
    def lookup_many(self, queries: Sequence[Query], file_alone: bool = False) -> list[Lookup]:
        items = [Query(*query) for query in queries]
        if not items:
            return []
        known = self._known([query.key for query in items])
        bucket_lists = [_bucket_ids(query.buckets) for query in items]
        all_buckets = [b for bl in bucket_lists for b in bl]
        docs_in: dict[int, list[int]] = {}
        if not self._buckets_empty:
            for bucket, doc in self._select_in(_BUCKET_ROWS, all_buckets):
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
        new_docs: list[_DocRow] = []
        new_buckets: list[tuple[int, list[int]]] = []
        waiting: set[int] = set()
        for (key, signature, _, body), buckets in zip(items, bucket_lists):
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
            new_docs.append((doc, key_hash(key), key, None, 1.0, signature, now, body))
            new_buckets.append((doc, buckets))
            for b in buckets:
                docs_in.setdefault(b, []).append(doc)  # later items of the batch see it
            found[doc] = Candidate(key, signature or b"")
            out.append(Lookup(filed=True))
        self._insert(new_docs, new_buckets)
        return out

    @translated
    def add_many(self, filings: Sequence[Filing]) -> list[Added]:
        items = filings
        keys = [item[0] for item in items]
        wanted = [item[3] for item in items if item[3] is not None]
        filed = self._known(keys + wanted)  # one read for the documents and the canonicals they name
        known = {key: filed[key] for key in keys if key in filed}
        canonical_ids = {
            key: doc
            for key, (doc, record) in ((k, filed[k]) for k in wanted if k in filed)
            if record.canonical is None and not record.orphaned
        }
        out: list[Added] = []
        rules = BatchFiling()
        new_docs: list[_DocRow] = []
        new_buckets: list[tuple[int, list[int]]] = []
        now = int(time.time())
        for key, signature, buckets, canonical, similarity, _, _, body in items:
            bucket_list = _bucket_ids(buckets) if canonical is None else []
            alive = None if canonical is None else canonical in canonical_ids
            outcome = rules.decide(key, key in known, bucket_list, alive)
            if outcome != Added.FILED:
                out.append(outcome)
                continue
            doc = self._next_id
            self._next_id += 1
            if canonical is None:
                new_docs.append((doc, key_hash(key), key, None, similarity, signature, now, body))
                new_buckets.append((doc, bucket_list))
            else:
                new_docs.append((doc, key_hash(key), key, canonical_ids[canonical], similarity, None, now, body))
            out.append(Added.FILED)
        self._insert(new_docs, new_buckets)
        return out

    def _insert(
        self,
        docs: list[_DocRow],
        buckets: list[tuple[int, list[int]]],
    ) -> None:
        """Write new documents, and stage the bucket keys of the canonical ones (``(doc, keys)`` pairs)."""
        if not docs:
            return
        self.db.executemany(
            "INSERT INTO docs (id, key_hash, key, canonical, similarity, sig, seen, body) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
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
        # A store whose band index has no row yet (no merge ran: fewer than merge_min_docs documents) is not
        # asked for its rows by every lookup; the first row written there clears it.
        self._buckets_empty = self.db.execute("SELECT 1 FROM buckets LIMIT 1").fetchone() is None
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
        self._buckets_empty = False
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

    @translated_read
    def iter_records(self) -> Iterator[DocRecord]:
        rows = self.db.execute(_RECORDS + "WHERE d.canonical IS NULL OR c.id IS NOT NULL ORDER BY d.id").fetchall()
        return iter([_record(row) for row in rows])

    # -- ageing --------------------------------------------------------------------------------------
    @translated
    def touch(self, keys: Sequence[str]) -> None:
        self._touch_ids([doc for doc, _ in self._known(keys).values()], int(time.time()))

    def _touch_ids(self, ids: list[int], now: int) -> None:
        """Set the last-seen time of documents ``ids`` to ``now`` (a lookup or :meth:`touch`)."""
        if ids:
            self._select_in(f"UPDATE docs SET seen = {now} WHERE id IN ({{marks}})", ids)
            self._wrote(0)

    @translated
    def remove(self, keys: Sequence[str]) -> int:
        ids = [doc for doc, _ in self._known(keys).values()]
        if ids:
            self._select_in("DELETE FROM docs WHERE id IN ({marks})", ids)
        return self._removed(len(ids))

    @translated
    def expire(self, before: float) -> int:
        return self._removed(self.db.execute("DELETE FROM docs WHERE seen < ?", (before,)).rowcount)

    def _removed(self, n: int) -> int:
        """Book ``n`` documents just deleted: ids stay unused, the count drops."""
        if n:
            self.db.execute(
                "INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)", (HIGH_WATER, str(self._next_id - 1))
            )
            self._count -= n
            self._wrote(n)
        return n

    def _wrote(self, n: int) -> None:
        self._pending += max(n, 1)
        if self._pending >= self.commit_every or time.monotonic() - self._last_commit >= self.commit_secs:
            self._commit()

    @translated
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
