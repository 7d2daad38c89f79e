"""Compact in-memory structures for millions of fingerprints: no Python object per document or bucket.

A Python ``dict`` of bucket key → list of documents costs ~150 bytes for every (bucket, document) pair; with
29 LSH bands that is ~4 KB per page before its signature. These structures keep the same information in
flat arrays, 12 bytes per pair and a few bytes of overhead per document:

* :class:`BlobArray`: variable-length byte strings (URLs, signatures) end to end in one ``bytearray``, with
  an ``array('q')`` of offsets.
* :class:`LevelIndex`: a multimap from 64-bit keys to 32-bit document ids, built like a log-structured
  merge tree (O'Neil et al., 1996): new pairs go into a small write buffer (a ``dict`` of a few thousand
  pairs); when it fills it becomes a sorted pair of numpy arrays (a *level*), and levels of similar size
  are merged, so every pair is merged O(log n) times and the index holds at most O(log n) levels. A lookup
  is one vectorised binary search per level for a whole batch of keys, and a dict lookup per key in the
  buffer.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable

import numpy as np

_EMPTY_KEYS = np.empty(0, dtype=np.int64)
_EMPTY_IDS = np.empty(0, dtype=np.int32)
#: Keys a lookup takes as they come, the buffer key by key, and an addition puts in the buffer (a page's); more
#: are sorted, the buffer made a level.
_FEW_QUERIES = 256


class BlobArray:
    """Append-only sequence of byte strings stored end to end."""

    def __init__(self) -> None:
        self._data = bytearray()
        self._offsets = array("q", [0])
        self._replaced: dict[int, bytes] = {}

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def append(self, blob: bytes) -> int:
        self._data += blob
        self._offsets.append(len(self._data))
        return len(self._offsets) - 2

    def __getitem__(self, i: int) -> bytes:
        if self._replaced and i in self._replaced:
            return self._replaced[i]
        return bytes(self._data[self._offsets[i] : self._offsets[i + 1]])

    def replace(self, i: int, blob: bytes) -> None:
        """Replace blob ``i``: in place when the length is the same (fixed-size signatures), else in a
        small side table (re-filing is rare)."""
        start, end = self._offsets[i], self._offsets[i + 1]
        if len(blob) == end - start:
            self._data[start:end] = blob
            self._replaced.pop(i, None)
        else:
            self._replaced[i] = bytes(blob)


def _merge_sorted(
    keys_a: np.ndarray, ids_a: np.ndarray, keys_b: np.ndarray, ids_b: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Merge two key-sorted levels in linear memory (no argsort of the whole): each element's place in the
    result is its rank in its own level plus the number of elements of the other level before it."""
    n = len(keys_a) + len(keys_b)
    keys, ids = np.empty(n, dtype=keys_a.dtype), np.empty(n, dtype=np.int32)
    pos_b = np.searchsorted(keys_a, keys_b, side="right") + np.arange(len(keys_b))
    keys[pos_b], ids[pos_b] = keys_b, ids_b
    del pos_b
    pos_a = np.searchsorted(keys_b, keys_a, side="left") + np.arange(len(keys_a))
    keys[pos_a], ids[pos_a] = keys_a, ids_a
    return keys, ids


class LevelIndex:
    """Multimap ``key → int32 ids`` for batch lookups, in sorted levels plus a small write buffer.

    Keys are ``int64``, or with ``key_bits=32`` their low 32 bits (wrapped to ``int32``): for keys that are
    hashes and whose hits are verified anyway, that halves the index at the cost of a few extra candidates.

    The write buffer is a plain ``dict`` of up to ``buffer_pairs`` pairs: a crawl files one page at a time,
    and a page's few dozen keys go into a dict and are looked up there at the cost of a few dict operations,
    where a sorted array would be merged and searched with many small numpy calls each time (costly on the
    crawl's reactor, whose caches the rest of the crawl keeps cold). A batch's pairs (more than
    :data:`_FEW_QUERIES`) are sorted into a level at once, and a batch of queries searches the levels only.
    """

    def __init__(self, buffer_pairs: int = 4096, key_bits: int = 64) -> None:
        if key_bits not in (32, 64):
            raise ValueError(f"key_bits must be 32 or 64, got {key_bits}")
        self.key_dtype = np.int32 if key_bits == 32 else np.int64
        self.buffer_pairs = buffer_pairs
        self._levels: list[tuple[np.ndarray, np.ndarray]] = []  # largest first
        # The newest pairs: a key's id, or its ids in the order added. Ints and tuples, not lists: the garbage
        # collector never visits an int and stops tracking a tuple of ints, and a crawl's buffer holds
        # thousands of keys for as long as the crawl runs.
        self._buffer: dict[int, int | tuple[int, ...]] = {}
        self._buffered = 0

    def __len__(self) -> int:
        return self._buffered + sum(len(k) for k, _ in self._levels)

    def add(self, keys: Iterable[int], doc: int) -> None:
        keys = np.asarray(keys if isinstance(keys, np.ndarray) else list(keys), dtype=np.int64)
        self.add_many(keys, np.full(len(keys), doc, dtype=np.int32))

    def add_many(self, keys: np.ndarray, ids: np.ndarray) -> None:
        """Map ``keys[i]`` to ``ids[i]`` for every ``i``."""
        if not len(keys):
            return
        keys = self._keys(keys)
        if len(keys) > min(self.buffer_pairs, _FEW_QUERIES):  # a batch's pairs: sorted into a level at once
            self._flush()
            ids = np.asarray(ids, dtype=np.int32)
            order = np.argsort(keys, kind="stable")
            self._push(keys[order], ids[order])
            return
        buffer = self._buffer
        for key, doc in zip(keys.tolist(), np.asarray(ids).tolist()):
            got = buffer.get(key)
            if got is None:
                buffer[key] = doc
            else:
                buffer[key] = (got, doc) if isinstance(got, int) else (*got, doc)
        self._buffered += len(keys)
        if self._buffered >= self.buffer_pairs:
            self._flush()

    def _flush(self) -> None:
        """The write buffer as a sorted level."""
        if not self._buffered:
            return
        buffer, self._buffer, self._buffered = self._buffer, {}, 0
        ordered = sorted(buffer)
        held = [(got,) if isinstance(got, int) else got for got in map(buffer.__getitem__, ordered)]
        keys = np.repeat(np.asarray(ordered, dtype=self.key_dtype), [len(docs) for docs in held])
        ids = np.fromiter((doc for docs in held for doc in docs), dtype=np.int32, count=len(keys))
        self._push(keys, ids)

    def _push(self, keys: np.ndarray, ids: np.ndarray) -> None:
        """Add a sorted level, then keep level sizes geometric: merge while a level is not at least twice the
        size of the next."""
        self._levels.append((keys, ids))
        while len(self._levels) >= 2 and len(self._levels[-2][0]) <= 2 * len(self._levels[-1][0]):
            (ka, ia), (kb, ib) = self._levels[-2], self._levels[-1]
            self._levels[-2:] = [_merge_sorted(ka, ia, kb, ib)]

    def _keys(self, keys: Iterable[int] | np.ndarray) -> np.ndarray:
        return np.asarray(keys, dtype=np.int64).astype(self.key_dtype, copy=False)  # int32: wraps mod 2**32

    def lookup(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """All ``(query position, id)`` pairs with ``keys[query position]`` mapped to ``id``: each level's
        pairs (oldest first), then the buffer's."""
        if not len(keys) or not (self._levels or self._buffered):
            return _EMPTY_KEYS, _EMPTY_IDS
        keys = self._keys(keys)
        large = len(keys) > _FEW_QUERIES
        if large:
            self._flush()  # searched with the levels, not key by key
        positions, found = [], []
        if self._levels:
            # A large batch of queries is sorted, so that each level is walked in order (numpy narrows every
            # search with the previous result); a page's few dozen are searched as they come.
            order = np.argsort(keys, kind="stable") if large else None
            queries = keys if order is None else keys[order]
            for level_keys, level_ids in self._levels:
                left = np.searchsorted(level_keys, queries, side="left")
                hit = level_keys.take(left, mode="clip") == queries  # a query past the end is not equal
                if not hit.any():
                    continue
                hit = np.flatnonzero(hit)
                starts = left[hit]
                counts = np.searchsorted(level_keys, queries[hit], side="right") - starts
                total = int(counts.sum())
                positions.append(np.repeat(hit if order is None else order[hit], counts))
                found.append(level_ids[np.repeat(starts - (np.cumsum(counts) - counts), counts) + np.arange(total)])
        if self._buffered:
            buffer = self._buffer
            at: list[int] = []
            docs: list[int] = []
            for position, key in enumerate(keys.tolist()):
                got = buffer.get(key)
                if got is None:
                    continue
                if isinstance(got, int):
                    at.append(position)
                    docs.append(got)
                else:
                    at.extend([position] * len(got))
                    docs.extend(got)
            if at:
                positions.append(np.asarray(at, dtype=np.int64))
                found.append(np.asarray(docs, dtype=np.int32))
        if not positions:
            return _EMPTY_KEYS, _EMPTY_IDS
        if len(positions) == 1:
            return positions[0], found[0]
        return np.concatenate(positions), np.concatenate(found)

    @classmethod
    def from_sorted(cls, keys: np.ndarray, ids: np.ndarray) -> LevelIndex:
        """An index of one level made of ``keys`` (already sorted, of the index's key type) and their ids."""
        index = cls(key_bits=32 if keys.dtype == np.int32 else 64)
        if len(keys):
            index._levels.append((keys, np.asarray(ids, dtype=np.int32)))
        return index

    def pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """Every ``(key, id)`` pair, as two arrays (grouped by level, not sorted as a whole)."""
        self._flush()
        if not self._levels:
            return np.empty(0, dtype=self.key_dtype), _EMPTY_IDS
        return np.concatenate([k for k, _ in self._levels]), np.concatenate([i for _, i in self._levels])
