"""In-process store, gone when the process ends: for tests, one-off jobs and the batch CLI.

Built to hold tens of millions of fingerprints: URLs and signatures end to end in byte arrays, the bucket
index and the key index in sorted numpy levels (:mod:`.compact`), so a MinHash-128 page with 29 LSH bands
costs about half a KB (its 256-byte signature, 8 bytes per band, its URL) instead of the ~5 KB of dicts and
lists. A batch of lookups is one vectorised binary search per level.

A removed document keeps its slot, marked removed (:data:`_REMOVED`): the arrays are append-only, and the
store lives as long as its process, so removals are rare and their bytes not worth compacting.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from .base import Added, BatchFiling, Candidate, DocRecord, Filing, Lookup, Query, Store, key_hash
from .compact import BlobArray, LevelIndex

#: ``_canonical`` of a removed document (-1 marks a canonical one, >= 0 a near-duplicate's canonical).
_REMOVED = -2


class MemoryStore(Store):
    local = True
    location = "memory"

    @classmethod
    def from_url(cls, url: str, **options: Any) -> MemoryStore:
        return cls()

    def __init__(self) -> None:
        super().__init__()
        self._meta: dict[str, str] | None = None
        self._keys = BlobArray()  # UTF-8 URL of document i
        self._signatures = BlobArray()  # signature of document i; empty for a near-duplicate
        self._canonical = array("i")  # id of the canonical document, -1 for a canonical one
        self._similarity = array("f")
        self._seen = array("d")  # last-seen time of document i (Unix seconds)
        self._bodies = BlobArray()  # the digest of document i's bytes when filed; empty when not given
        self._removed = 0
        self._key_index = LevelIndex()  # 64-bit hash of the URL -> ids
        # Bucket keys are hashes and every candidate is verified, so their low 32 bits are enough: that
        # halves the index for about b*b*n / 2**32 spurious candidates per lookup (b bands, n documents:
        # 0.2 at a million MinHash pages with 29 bands, each one signature comparison).
        self._buckets = LevelIndex(key_bits=32)  # bucket key -> canonical ids

    def connect(self) -> None:
        pass

    def clear(self) -> None:
        self.__init__()  # type: ignore[misc]

    def read_meta(self) -> dict[str, str] | None:
        return self._meta

    def write_meta(self, meta: Mapping[str, str]) -> None:
        self._meta = dict(meta)

    def count(self) -> int:
        return len(self._keys) - self._removed

    # -- documents ---------------------------------------------------------------------------------
    def _ids_of(self, keys: Sequence[str]) -> list[int]:
        """Document id of each key, -1 where unknown."""
        hashes = np.fromiter((key_hash(k) for k in keys), dtype=np.int64, count=len(keys))
        out = [-1] * len(keys)
        positions, ids = self._key_index.lookup(hashes)
        for pos, doc in zip(positions.tolist(), ids.tolist()):
            if out[pos] < 0 and self._canonical[doc] != _REMOVED and self._keys[doc] == keys[pos].encode("utf-8"):
                out[pos] = doc
        return out

    def _record(self, doc: int) -> DocRecord:
        canonical = self._canonical[doc]
        key, similarity, seen = self._keys[doc].decode("utf-8"), float(self._similarity[doc]), self._seen[doc]
        body = self._bodies[doc] or None
        if canonical < 0:
            return DocRecord(key, None, similarity, self._signatures[doc], seen, body=body)
        if self._canonical[canonical] == _REMOVED:
            return DocRecord(key, None, similarity, None, seen, orphaned=True, body=body)
        return DocRecord(
            key,
            self._keys[canonical].decode("utf-8"),
            similarity,
            None,
            seen,
            self._signatures[canonical],
            chained=self._canonical[canonical] >= 0,
            body=body,
        )

    def get(self, key: str) -> DocRecord | None:
        doc = self._ids_of([key])[0]
        return None if doc < 0 else self._record(doc)

    def _candidates(self, docs: Sequence[int]) -> list[Candidate]:
        return [
            Candidate(self._keys[d].decode("utf-8"), self._signatures[d]) for d in docs if self._canonical[d] == -1
        ]  # a removed document's bucket entries stay: skipped here

    def lookup_many(self, queries: Sequence[Query], file_alone: bool = False) -> list[Lookup]:
        items = [Query(*query) for query in queries]
        n = len(items)
        if not n:
            return []
        known = self._ids_of([query.key for query in items])
        arrays = [np.asarray(query.buckets, dtype=np.int64) for query in items]
        flat = np.concatenate(arrays)
        owner = np.repeat(np.arange(n), [len(b) for b in arrays])
        positions, ids = self._buckets.lookup(flat)
        found: list[list[int]] = [[] for _ in range(n)]
        for pos, doc in zip(owner[positions].tolist(), ids.tolist()):
            found[pos].append(doc)
        # Items sharing a bucket with another item of the batch must see the documents filed before them
        # in this call, and must not be filed ahead of an earlier one still waiting for its verdict; the
        # others are independent of the batch.
        _, inverse, counts = np.unique(flat, return_inverse=True, return_counts=True)
        contested = set(owner[counts[inverse.ravel()] >= 2].tolist())
        out: list[Lookup] = []
        filed_now: dict[str, int] = {}
        new_buckets: dict[int, list[int]] = {}
        waiting: set[int] = set()
        filed_docs: list[int] = []
        for i, (key, signature, _, body) in enumerate(items):
            doc = known[i] if known[i] >= 0 else filed_now.get(key, -1)
            if doc >= 0:
                out.append(Lookup(self._record(doc)))  # as it was before this fetch
                self._seen[doc] = time.time()
                continue
            docs = found[i]
            mine = arrays[i].tolist() if i in contested else []
            if mine:
                docs = docs + [d for b in mine for d in new_buckets.get(b, ())]
            docs = list(dict.fromkeys(docs))
            if docs or not file_alone or not waiting.isdisjoint(mine):
                waiting.update(mine)  # later items sharing a bucket wait for this one's verdict
                out.append(Lookup(None, self._candidates(docs)))
                continue
            filed_now[key] = doc = self._append(key, signature, None, 1.0, body)
            filed_docs.append(i)
            if i in contested:
                for b in arrays[i].tolist():
                    new_buckets.setdefault(b, []).append(doc)
            out.append(Lookup(filed=True))
        if filed_docs:
            first = len(self._keys) - len(filed_docs)
            self._key_index.add_many(
                np.fromiter((key_hash(items[i][0]) for i in filed_docs), dtype=np.int64, count=len(filed_docs)),
                np.arange(first, len(self._keys), dtype=np.int32),
            )
            self._buckets.add_many(
                np.concatenate([arrays[i] for i in filed_docs]),
                np.repeat(np.arange(first, len(self._keys), dtype=np.int32), [len(arrays[i]) for i in filed_docs]),
            )
        return out

    def add_many(self, filings: Sequence[Filing]) -> list[Added]:
        items = filings
        known = self._ids_of([item[0] for item in items])
        canonical_ids = self._ids_of([item[3] for item in items if item[3] is not None])
        out: list[Added] = []
        rules = BatchFiling()
        new: list[tuple[str, np.ndarray | None]] = []
        first = len(self._keys)
        next_canonical = iter(canonical_ids)
        for (key, signature, buckets, canonical, similarity, _, _, body), doc in zip(items, known):
            canonical_id = None if canonical is None else next(next_canonical)
            keys = np.asarray(buckets, dtype=np.int64) if canonical is None else None
            alive = None if canonical_id is None else canonical_id >= 0 and self._canonical[canonical_id] == -1
            outcome = rules.decide(key, doc >= 0, keys.tolist() if keys is not None else (), alive)
            out.append(outcome)
            if outcome != Added.FILED:
                continue
            self._append(key, signature, canonical_id, similarity, body)
            new.append((key, keys))
        if new:
            ids = np.arange(first, len(self._keys), dtype=np.int32)
            self._key_index.add_many(np.fromiter((key_hash(k) for k, _ in new), dtype=np.int64, count=len(new)), ids)
            canonical_rows = [(doc, keys) for doc, (_, keys) in zip(ids.tolist(), new) if keys is not None]
            if canonical_rows:
                self._buckets.add_many(
                    np.concatenate([keys for _, keys in canonical_rows]),
                    np.repeat(
                        np.array([doc for doc, _ in canonical_rows], dtype=np.int32),
                        [len(keys) for _, keys in canonical_rows],
                    ),
                )
        return out

    def _append(
        self, key: str, signature: bytes | None, canonical: int | None, similarity: float, body: bytes | None
    ) -> int:
        """Append a document's record (not yet indexed); its id."""
        doc = self._keys.append(key.encode("utf-8"))
        self._signatures.append((signature or b"") if canonical is None else b"")
        self._canonical.append(-1 if canonical is None else canonical)
        self._similarity.append(similarity)
        self._seen.append(time.time())
        self._bodies.append(body or b"")
        return doc

    def refile(self, key: str, signature: bytes, buckets: Sequence[int] | np.ndarray) -> bool:
        doc = self._ids_of([key])[0]
        if doc < 0 or self._canonical[doc] >= 0:
            return False
        self._signatures.replace(doc, signature)
        self._buckets.add(buckets, doc)
        return True

    def repoint(self, old: str, new: str, similarity: float) -> bool:
        old_doc, new_doc = self._ids_of([old, new])
        if old_doc < 0 or new_doc < 0 or old_doc == new_doc:
            return False
        if self._canonical[old_doc] != -1 or self._canonical[new_doc] != -1:
            return False
        self._canonical[old_doc] = new_doc  # its signature stays: its near-duplicates are compared with it
        self._similarity[old_doc] = similarity
        return True

    def iter_records(self) -> Iterator[DocRecord]:
        for doc in range(len(self._keys)):
            if self._canonical[doc] != _REMOVED:
                record = self._record(doc)
                if not record.orphaned:
                    yield record

    def touch(self, keys: Sequence[str]) -> None:
        now = time.time()
        for doc in self._ids_of(keys):
            if doc >= 0:
                self._seen[doc] = now

    def _remove_ids(self, docs: Sequence[int]) -> int:
        removed = 0
        for doc in docs:
            if doc >= 0 and self._canonical[doc] != _REMOVED:
                self._canonical[doc] = _REMOVED
                self._signatures.replace(doc, b"")
                removed += 1
        self._removed += removed
        return removed

    def remove(self, keys: Sequence[str]) -> int:
        return self._remove_ids(self._ids_of(keys))

    def expire(self, before: float) -> int:
        seen = np.frombuffer(self._seen, dtype=np.float64)
        return self._remove_ids(np.flatnonzero(seen < before).tolist())

    def purge(self) -> int:
        orphans = 0
        while True:  # a removed page's near-duplicates, then theirs (a re-pointed group's chain)
            canonical = np.frombuffer(self._canonical, dtype=np.int32)
            dups = np.flatnonzero(canonical >= 0)
            gone = self._remove_ids(dups[canonical[canonical[dups]] == _REMOVED].tolist())
            orphans += gone
            if not gone:
                return orphans
