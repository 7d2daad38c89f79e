"""The Redis store (see the package's docstring for the layout, the protocol and the argument): the index, and
what is done to its records besides filing them (re-filing, re-pointing, ageing, purging, listing); its parts
beside the fingerprints are in :mod:`.parts`."""

from __future__ import annotations

import logging
import struct
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..base import DocRecord
from .codec import (
    U32,
    StoredRecord,
    bucket_rows,
    by_group,
    pack_record,
    unpack_record,
)
from .index import RedisIndex
from .layout import RECORDS_PER_BIN
from .parts import RedisBooks, RedisBudgets, RedisRuleCounts, RedisRunning, RedisSelectors

logger = logging.getLogger("scrapy_neardup.store.redis")

#: The store's own keys beside its groups' (``P:name``), all deleted by :meth:`RedisStore.clear`.
OWN_KEYS = (
    "meta",
    "seq",
    "count",
    "flight",
    "urlrules",
    "urlrules_changed",
    "crawls",
    "budget",
    "selectors",
    "selectors_changed",
    "running",
)


class RedisStore(RedisIndex):
    """A store on a Redis server (``redis://``, ``rediss://`` for TLS, ``unix://``) or a Redis Cluster
    (``redis+cluster://``), via redis-py."""

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisStore:
        wanted = (
            "prefix",
            "retries",
            "backoff_secs",
            "timeout_secs",
            "bucket_bins",
            "tls_ca_file",
            "tls_cert_file",
            "tls_key_file",
            "start_wait_secs",
        )
        return cls(url, **{k: v for k, v in options.items() if k in wanted})

    def __init__(self, url: str, **options: Any) -> None:
        super().__init__(url, **options)
        self.rules = RedisRuleCounts(self)
        self.budgets = RedisBudgets(self)
        self.selectors = RedisSelectors(self)
        self.books = RedisBooks(self)
        self.running = RedisRunning(self)

    # -- meta --------------------------------------------------------------------------------------
    def _group_keys(self) -> list[bytes]:
        """Every key of the store's groups (a SCAN of every master)."""
        return self.call(lambda: list(self.client.scan_iter(match=self.layout.pattern, count=10_000)))

    def clear(self) -> None:
        own = [self.key_of(n) for n in OWN_KEYS]
        keys = self._group_keys()
        self.call(self.client.delete, *own)
        for i in range(0, len(keys), self._BATCH):  # a key a command: a cluster refuses a DEL across slots
            part = keys[i : i + self._BATCH]

            def unlink() -> None:
                pipe = self.client.pipeline(transaction=False)
                for key in part:
                    pipe.unlink(key)
                pipe.execute()

            self.call(unlink)

    def refile(self, key: str, signature: bytes, buckets: Sequence[int] | np.ndarray) -> bool:
        doc = self._id_of(key)
        records = self._records({doc: False}) if doc else {}
        if not doc or doc not in records:
            return False
        old = unpack_record(records[doc], self._where(doc))
        if old.key != key or old.canonical_id:
            return False
        record = pack_record(key, signature, 0, 1.0, old.seen, old.body)
        groups, bins, rests = self.layout.buckets(buckets)
        split = by_group(groups, bucket_rows(bins, rests, doc, 0xFFFFFFFF))
        self._scripts("claim", {g: [b"", blob, b""] for g, (_, blob) in split.items()})
        self._write({self.layout.record_group(doc): [struct.pack("<II", doc, len(record)) + record]}, {}, {})
        return True

    def repoint(self, old: str, new: str, similarity: float) -> bool:
        old_id, new_id = self._ids_of([old, new])
        if not old_id or not new_id or old_id == new_id:
            return False
        records = self._records({old_id: False, new_id: False})
        if old_id not in records or new_id not in records:
            return False
        old_record = unpack_record(records[old_id], self._where(old_id))
        new_record = unpack_record(records[new_id], self._where(new_id))
        if old_record.key != old or new_record.key != new or new_record.canonical_id:
            return False
        group = self.layout.record_group(old_id)
        reply = self._scripts("repoint", {group: [struct.pack("<IIf", old_id, new_id, similarity)]})[group]
        return int(reply) == 1

    # -- reading it all ------------------------------------------------------------------------------
    def _bins(self, kind: bytes) -> dict[int, list[int]]:
        """The numbers of every bin of ``kind`` (``b"b"``, ``b"k"``, ``b"r"``) by group (a SCAN)."""
        width = 4 if kind == b"r" else 2
        tags = {tag.encode(): g for g, tag in enumerate(self.layout.tags)}
        out: dict[int, list[int]] = defaultdict(list)
        for name in self._group_keys():
            head = name[: -width - 3]
            if name[-width - 3 : -width] == b":" + kind + b":" and head in tags:
                out[tags[head]].append(int.from_bytes(name[-width:], "little"))
        return out

    def _all_records(self) -> dict[int, StoredRecord]:
        """Every record by id."""
        by_id: dict[int, StoredRecord] = {}
        for g, numbers in self._bins(b"r").items():
            for i in range(0, len(numbers), self._BATCH):
                part = numbers[i : i + self._BATCH]
                values = self.call(lambda: self._get_many([self.layout.bin_name(g, b"r", n) for n in part]))
                for number, value in zip(part, values):
                    pos, value = 0, value or b""
                    while pos + 3 <= len(value):
                        slot, size = struct.unpack_from("<BH", value, pos)
                        doc = number * RECORDS_PER_BIN + slot
                        by_id[doc] = unpack_record(value[pos + 3 : pos + 3 + size], self._where(doc))
                        pos += 3 + size
        return by_id

    def _get_many(self, names: list[bytes]) -> list[bytes | None]:
        pipe = self.client.pipeline(transaction=False)
        for name in names:
            pipe.get(name)
        return pipe.execute()

    def iter_records(self) -> Iterator[DocRecord]:
        by_id = self._all_records()
        for _, (key, sig, canonical_id, sim, seen, body) in sorted(by_id.items()):
            if not canonical_id:
                yield DocRecord(key, None, sim, sig or None, seen, body=body)
            elif canonical_id in by_id:  # an orphan (its canonical removed) is skipped
                theirs = by_id[canonical_id]
                yield DocRecord(
                    key,
                    theirs.key,
                    sim,
                    None,
                    seen,
                    theirs.signature or None,
                    chained=bool(theirs.canonical_id),
                    body=body,
                )

    # -- ageing --------------------------------------------------------------------------------------
    _BATCH = 1_000  # bins or ids per script call in a maintenance pass

    def touch(self, keys: Sequence[str]) -> None:
        if keys:
            self._records({doc: True for doc in self._ids_of(keys) if doc})

    def _forget(self, gone: Mapping[int, str]) -> int:
        """Delete the records of ids (id -> key) and release their key entries; how many records were."""
        dropped, _ = self._write({}, self._drops(gone), self._releases((key, doc) for doc, key in gone.items()))
        if dropped:
            self.call(self.client.decrby, self.key_of("count"), dropped)
        return dropped

    def remove(self, keys: Sequence[str]) -> int:
        removed = 0
        for i in range(0, len(keys), self._BATCH):
            part = keys[i : i + self._BATCH]
            removed += self._forget({doc: key for doc, key in zip(self._ids_of(part), part) if doc})
        return removed

    def expire(self, before: float) -> int:
        gone: dict[int, str] = {}
        for g, numbers in self._bins(b"r").items():
            for i in range(0, len(numbers), self._BATCH):
                nums = b"".join(U32.pack(n) for n in numbers[i : i + self._BATCH])
                reply = self._scripts("expire", {g: [int(before), nums]})[g]
                pos = 0
                while pos < len(reply):
                    doc, size = struct.unpack_from("<II", reply, pos)
                    gone[doc] = unpack_record(reply[pos + 8 : pos + 8 + size], self._where(doc)).key
                    pos += 8 + size
        # The records are gone (counted here); their key entries are released.
        self._write({}, {}, self._releases((key, doc) for doc, key in gone.items()))
        if gone:
            self.call(self.client.decrby, self.key_of("count"), len(gone))
        return len(gone)

    def purge(self) -> int:
        # Ids at or above the lowest batch in flight now may belong to a batch still filing: never touched.
        flight = self.call(self.client.hgetall, self.key_of("flight"))
        limit = min(
            [int(lo) for lo, v in flight.items() if not v.startswith(b"void")]
            + [int(self.call(self.client.get, self.key_of("seq")) or 0) + 1]
        )
        by_id = self._all_records()
        orphans: dict[int, str] = {}
        while True:  # a removed page's near-duplicates, then theirs (a re-pointed group's chain)
            more = {
                doc: rec.key
                for doc, rec in by_id.items()
                if rec.canonical_id
                and doc not in orphans
                and (rec.canonical_id not in by_id or rec.canonical_id in orphans)
            }
            if not more:
                break
            orphans.update(more)
        self._forget(orphans)
        live = set(by_id) - set(orphans)
        for g, numbers in self._bins(b"b").items():
            for i in range(0, len(numbers), self._BATCH):
                part = numbers[i : i + self._BATCH]
                values = self.call(lambda: self._get_many([self.layout.bin_name(g, b"b", n) for n in part]))
                for number, value in zip(part, values):
                    entries = np.frombuffer(value or b"", dtype=np.uint8).reshape(-1, 7)
                    ids = set(entries[:, 3:].copy().view("<u4").ravel().tolist())
                    dead = sorted(doc for doc in ids if doc < limit and doc not in live)
                    if dead:
                        blob = struct.pack("<H", number) + b"".join(U32.pack(d) for d in dead)
                        self._scripts("purge", {g: [blob]})
        return len(orphans)
