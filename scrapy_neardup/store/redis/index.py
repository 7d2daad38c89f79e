"""The Redis store's index: its meta and layout, lookups of candidates, and check-and-insert in ordered batches
(see the package's docstring for the protocol and the argument)."""

from __future__ import annotations

import json
import logging
import struct
import time
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..base import (
    Added,
    Candidate,
    DocRecord,
    Filing,
    Lookup,
    Query,
    Store,
    StoreError,
    check_meta,
)
from .client import RedisConnection
from .codec import (
    U16,
    U32,
    StoredRecord,
    appended_since,
    bucket_hits,
    bucket_rows,
    by_group,
    key_entry_id,
    lower_entry,
    pack_record,
    unpack_record,
)
from .layout import LAYOUT, LAYOUT_FIELD, READ_LAYOUTS, RECORDS_PER_BIN, FilingBuckets, KeyLayout
from .scripts import WRITE_META
from .transport import mget_command

logger = logging.getLogger("scrapy_neardup.store.redis")


class RedisIndex(RedisConnection, Store):
    """The documents and their buckets: what a lookup reads and a batch files."""

    #: How long a batch may stay in flight before a waiting writer takes it for dead (its owner crashed).
    lease_secs = 30.0

    def read_meta(self) -> dict[str, str] | None:
        raw = self.call(self.client.hgetall, self.key_of("meta"))
        if not raw:
            return None
        meta = self._decode_meta(raw.items())
        self._use_layout(meta.pop(LAYOUT_FIELD, None))
        return meta

    def _use_layout(self, stored: str | None) -> None:
        if stored is None:
            raise StoreError(
                f"The Redis store at {self.location} has a layout this version does not read (written by a "
                f"development version of scrapy-neardup); set NEARDUP_RESET = True to start afresh in layout {LAYOUT}"
            )
        try:
            params = json.loads(stored)
            if params.get("version") not in READ_LAYOUTS:
                raise StoreError(
                    f"The Redis store at {self.location} has layout {params.get('version')}; this version reads "
                    f"layout {LAYOUT} (a store of a development version): set NEARDUP_RESET = True to start afresh"
                )
            self.layout = KeyLayout(
                self.prefix,
                int(params["group_bits"]),
                int(params["bucket_bin_bits"]),
                int(params["key_bin_bits"]),
                int(params["version"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"unreadable {LAYOUT_FIELD} in {self.key_of('meta')}: {stored!r} ({exc})") from None

    def _decode_meta(self, pairs: Any) -> dict[str, str]:
        try:
            return {k.decode(): v.decode() for k, v in pairs}
        except UnicodeDecodeError:
            raise StoreError(f"malformed parameters in the Redis store ({self.key_of('meta')} is not UTF-8)") from None

    def write_meta(self, meta: Mapping[str, str]) -> None:
        # One script: when several processes open an empty store at once, the first one's meta is
        # written whole, and every other process is checked against it, never against half of it.
        args: list[str] = [LAYOUT_FIELD, self.layout.params()]
        for name, value in meta.items():
            args += [name, value]
        raw = self.call(self.client.eval, WRITE_META, 1, self.key_of("meta"), *args)
        stored = self._decode_meta(zip(raw[0::2], raw[1::2]))
        self._use_layout(stored.pop(LAYOUT_FIELD, None))
        check_meta(stored, meta, self.location)

    # -- lookups -----------------------------------------------------------------------------------
    def count(self) -> int:
        return int(self.call(self.client.get, self.key_of("count")) or 0)

    def get(self, key: str) -> DocRecord | None:
        return self._lookup_many([Query(key, None, [])], touch=False)[0].known

    def lookup_many(self, queries: Sequence[Query], file_alone: bool = False) -> list[Lookup]:
        # file_alone is a one-slot shortcut: across shards a canonical is always filed by add_many.
        return self._lookup_many(queries, touch=True)

    def _records(self, wanted: Mapping[int, bool]) -> dict[int, bytes]:
        """The records of ids (id -> touch it), one script call per group; missing ids are left out."""
        calls: dict[int, list[bytes]] = defaultdict(list)
        for doc, touch in wanted.items():
            calls[self.layout.record_group(doc)].append(struct.pack("<IB", doc, 1 if touch else 0))
        now = U32.pack(int(time.time()))
        replies = self._scripts("records", {g: [now, b"".join(parts)] for g, parts in calls.items()})
        out: dict[int, bytes] = {}
        for g, parts in calls.items():
            reply, pos = replies[g], 0
            for part in parts:
                (size,) = U32.unpack_from(reply, pos)
                if size:
                    out[U32.unpack_from(part)[0]] = reply[pos + 4 : pos + 4 + size]
                pos += 4 + size
        return out

    def _where(self, doc: int) -> str:
        return f" ({self.layout.bin_name(self.layout.record_group(doc), b'r', doc // RECORDS_PER_BIN)!r}, id {doc})"

    def _get_bins(self, reads: Mapping[int, Sequence[tuple[bytes, np.ndarray]]]) -> dict[int, list[bytes]]:
        """The values of bins by group (group -> parts of :func:`mget_command`; a missing bin reads as
        empty), in the parts' order. Plain MGETs, atomic per group: one for them all on one server, one per
        group on a cluster, every master at once."""
        groups = [g for g in reads if any(len(numbers) for _, numbers in reads[g])]
        if not groups:
            return {}

        def run() -> list[list[Any]]:
            route = self.layout.route
            if not self.cluster:
                values = self._on_masters([("", mget_command(part for g in groups for part in reads[g]))])[0]
                out, at = [], 0
                for g in groups:
                    n = sum(len(numbers) for _, numbers in reads[g])
                    out.append(values[at : at + n])
                    at += n
                return out
            return self._on_masters([(route[g], mget_command(reads[g])) for g in groups])

        return {g: [v or b"" for v in values] for g, values in zip(groups, self.call(run))}

    def _key_bins(
        self, wheres: Sequence[tuple[int, int, bytes]]
    ) -> tuple[dict[int, tuple[bytes, np.ndarray]], list[tuple[int, int]]]:
        """The key bins of keys (group, key bin, hash), each once, as the part of each group's read that
        :func:`mget_command` takes (the group's key-bin head, the bin numbers); where each key's bin is
        among them."""
        numbers: dict[int, list[int]] = defaultdict(list)
        at: list[tuple[int, int]] = []
        index: dict[tuple[int, int], int] = {}
        for g, kbin, _ in wheres:
            i = index.get((g, kbin))
            if i is None:
                i = index[(g, kbin)] = len(numbers[g])
                numbers[g].append(kbin)
            at.append((g, i))
        heads = self.layout.heads[b"k"]
        return {g: (heads[g], np.array(bins, dtype=np.int64)) for g, bins in numbers.items()}, at

    def _holders(
        self, wheres: Sequence[tuple[int, int, bytes]], at: Sequence[tuple[int, int]], values: Mapping[int, list[bytes]]
    ) -> list[int]:
        """The ids that hold keys (0: none), from their bins as read."""
        return [
            key_entry_id(values[g][i], where[2], self._where_bin(g, b"k", where[1]))
            for (g, i), where in zip(at, wheres)
        ]

    def _where_bin(self, group: int, kind: bytes, number: int) -> str:
        return f" (bin {self.layout.bin_name(group, kind, number)!r})"

    def _read_bins(
        self, wheres: Sequence[tuple[int, int, bytes]], groups: np.ndarray, bins: np.ndarray, rests: np.ndarray
    ) -> tuple[list[int], np.ndarray, dict[int, list[int]]]:
        """A lookup's reads while bins are small: the key bins and bucket bins it needs, read whole by plain
        MGETs (Redis does no more than fetch them) and matched here. The ids holding the keys, the length of
        each bucket row's bin (its token) and the ids each row found (row -> ids, rows that found any)."""
        layout = self.layout
        codes = (groups << 32) | bins
        unique, inverse = np.unique(codes, return_inverse=True)  # sorted: each group's bins side by side
        key_reads, kat = self._key_bins(wheres)
        bucket_groups = unique >> 32
        bucket_bins = unique & 0xFFFF
        bounds = np.searchsorted(bucket_groups, np.arange(layout.groups + 1)).tolist()
        split = {
            g: (len(key_reads[g][1]) if g in key_reads else 0, bounds[g], bounds[g + 1])
            for g in range(layout.groups)
            if bounds[g] < bounds[g + 1]
        }
        b_heads, empty = layout.heads[b"b"], np.empty(0, dtype=np.int64)
        values = self._get_bins(
            {
                g: [
                    key_reads.get(g, (b"", empty)),
                    (b_heads[g], bucket_bins[bounds[g] : bounds[g + 1]] if g in split else empty),
                ]
                for g in set(key_reads) | set(split)
            }
        )
        known_ids = self._holders(wheres, kat, values)
        blobs = [value for g, (skip, _, _) in split.items() for value in values[g][skip:]]
        lengths_by_bin = np.fromiter(map(len, blobs), dtype=np.int64, count=len(blobs))
        if np.any(lengths_by_bin % 7):
            bad = int(np.flatnonzero(lengths_by_bin % 7)[0])
            where = self._where_bin(int(bucket_groups[bad]), b"b", int(unique[bad]) & 0xFFFF)
            raise StoreError(
                f"malformed bucket bin in the Redis store{where} ({lengths_by_bin[bad]} bytes, not a multiple of 7)"
            )
        lengths = lengths_by_bin[inverse] if len(codes) else np.zeros(0, dtype=np.int64)
        return known_ids, lengths, bucket_hits(b"".join(blobs), lengths_by_bin // 7, inverse, rests)

    def _scan_bins(
        self, wheres: Sequence[tuple[int, int, bytes]], groups: np.ndarray, bins: np.ndarray, rests: np.ndarray
    ) -> tuple[list[int], np.ndarray, dict[int, list[int]]]:
        """:meth:`_read_bins` once bins are big: Redis scans them (``_LOOKUP``) and sends back only the
        matching entries and each bin's length, so what crosses the network stays ~10 bytes a bucket."""
        key_calls: dict[int, list[bytes]] = defaultdict(list)
        key_at = []
        for g, kbin, khash in wheres:
            key_at.append((g, len(key_calls[g])))
            key_calls[g].append(U16.pack(kbin) + khash)
        split = by_group(groups, bucket_rows(bins, rests))
        replies = self._scripts(
            "lookup",
            {
                g: [b"".join(key_calls.get(g, [])), split[g][1] if g in split else b""]
                for g in set(key_calls) | set(split)
            },
        )
        lengths = np.zeros(len(groups), dtype=np.int64)
        hits: dict[int, list[int]] = {}
        for g, (positions, _) in split.items():
            fixed = np.frombuffer(replies[g][1], dtype=np.dtype([("len", "<u4"), ("n", "<u2")]))
            lengths[positions] = fixed["len"]
            found = np.frombuffer(replies[g][2], dtype="<u4")
            ends = np.cumsum(fixed["n"].astype(np.int64))
            for i in np.flatnonzero(fixed["n"]).tolist():
                hits[int(positions[i])] = found[ends[i] - fixed["n"][i] : ends[i]].tolist()
        return [U32.unpack_from(replies[g][0], 4 * i)[0] for g, i in key_at], lengths, hits

    #: Bucket bins are read whole while they average at most this many bytes (a lookup reads a sample of
    #: them and remembers the mean); beyond it Redis scans them and sends back only what matches.
    read_bins_upto = 128

    def _lookup_many(self, queries: Sequence[Query], touch: bool) -> list[Lookup]:
        layout = self.layout
        items = [Query(*query) for query in queries]
        wheres = [layout.key(query.key) for query in items]
        # Every bucket of the batch at once: rows in query order.
        sizes = np.array([len(q.buckets) for q in items], dtype=np.int64)
        starts = np.r_[0, np.cumsum(sizes)]
        keys = (
            np.concatenate([np.asarray(q.buckets, dtype=np.int64) for q in items])
            if starts[-1]
            else np.empty(0, dtype=np.int64)
        )
        groups, bins, rests = layout.buckets(keys)
        read = self._read_bins if self._mean_bin <= self.read_bins_upto else self._scan_bins
        known_ids, lengths, hits = read(wheres, groups, bins, rests)
        if len(lengths):
            self._mean_bin = float(lengths.mean())
        wanted: dict[int, bool] = {doc: touch for doc in known_ids if doc}
        for ids in hits.values():
            for doc in ids:
                wanted.setdefault(doc, False)
        records = self._records(wanted) if wanted else {}
        unfiled = [doc for doc in wanted if doc not in records]
        if unfiled:
            # Ids without a record: left behind (skipped), or of a batch still filing. Wait for those
            # batches, then read again: their records are what this lookup must see (a near-duplicate filed
            # a moment ago). Read again even when none is in flight any more: one may have committed since
            # the first read.
            holders = self._meta_script("holders", *unfiled)
            if holders:
                self._wait([int(lo) for lo in holders], "done")
            records.update(self._records({doc: wanted[doc] for doc in unfiled}))
        parsed: dict[int, StoredRecord] = {}

        def parse(doc: int) -> StoredRecord:
            if doc not in parsed:
                parsed[doc] = unpack_record(records[doc], self._where(doc))
            return parsed[doc]

        # Known near-duplicates: their canonicals' records, one more step.
        known = [doc if doc in records and parse(doc).key == q.key else 0 for q, doc in zip(items, known_ids)]
        missing = {
            parse(doc).canonical_id: False
            for doc in known
            if doc and parse(doc).canonical_id and parse(doc).canonical_id not in records
        }
        if missing:
            records.update(self._records(missing))
        hit_rows = sorted(hits)
        out: list[Lookup] = []
        for k, (query, doc) in enumerate(zip(items, known)):
            if doc:
                _, sig, canonical_id, sim, seen, body = parse(doc)
                if not canonical_id:
                    out.append(Lookup(DocRecord(query.key, None, sim, sig or None, seen, body=body)))
                elif canonical_id not in records:
                    out.append(Lookup(DocRecord(query.key, None, sim, None, seen, orphaned=True, body=body)))
                else:
                    canonical, canonical_sig, its_canonical, *_ = parse(canonical_id)
                    record = DocRecord(
                        query.key,
                        canonical,
                        sim,
                        None,
                        seen,
                        canonical_sig or None,
                        chained=bool(its_canonical),
                        body=body,
                    )
                    out.append(Lookup(record))
                continue
            lo, hi = int(starts[k]), int(starts[k + 1])
            candidates, seen_ids = [], set()
            for row in hit_rows[bisect_left(hit_rows, lo) : bisect_left(hit_rows, hi)]:
                for cand in hits[row]:
                    if cand in seen_ids or cand not in records:
                        continue  # a removed document, or one whose batch never wrote its record
                    seen_ids.add(cand)
                    cand_key, sig, canonical_id, *_ = parse(cand)
                    if not canonical_id:
                        candidates.append(Candidate(cand_key, sig, cand))
            # A key entry whose id has no record: a claim left behind (crash, or a batch still in flight).
            stale_claim = known_ids[k] if known_ids[k] and known_ids[k] not in records else 0
            token = FilingBuckets(groups[lo:hi], bins[lo:hi], rests[lo:hi], lengths[lo:hi], stale_claim)
            out.append(Lookup(None, candidates, token))
        return out

    # -- filing ------------------------------------------------------------------------------------
    def add_many(self, filings: Sequence[Filing]) -> list[Added]:
        """File several documents (see :meth:`Store.add_many`) in the steps the module describes."""
        if not filings:
            return []
        first, lower = self._meta_script("alloc", len(filings), int(time.time() * 1000), int(self.lease_secs * 1000))
        first = int(first)
        try:
            return self._file(filings, first, [int(lo) for lo in lower])
        except StoreError:
            try:  # let waiters go on at once rather than after the lease (best effort: Redis may be gone)
                self.client.hset(self.key_of("flight"), first, f"void {int(time.time() * 1000) + 3_600_000}")
            except self._redis_module.RedisError:
                pass
            raise

    @staticmethod
    def _key_entry(where: tuple[int, int, bytes], doc: int, replace: int | None = None) -> bytes:
        """A key bin entry of a claim (with the id it may replace) or a release."""
        entry = struct.pack("<H", where[1]) + where[2] + U32.pack(doc)
        return entry if replace is None else entry + U32.pack(replace)

    def _file(self, filings: Sequence[Filing], first: int, lower: list[int]) -> list[Added]:
        layout = self.layout
        ids = [first + k for k in range(len(filings))]
        claims: dict[int, list[bytes]] = defaultdict(list)
        checks: dict[int, list[bytes]] = defaultdict(list)
        keys = [layout.key(f.key) for f in filings]
        claim_at: list[tuple[int, int]] = []
        check_at: list[tuple[int, int]] = []
        views: list[FilingBuckets | None] = []
        canonical_ids: list[int] = []
        for filing, doc, where in zip(filings, ids, keys):
            token = filing.token if isinstance(filing.token, FilingBuckets) else None
            # The key's entry held an id without a record after its batch was over (the lookup waited for
            # it): a claim left behind, taken over.
            replace = token.stale_claim if token is not None and token.stale_claim < first else 0
            claim_at.append((where[0], len(claims[where[0]])))
            claims[where[0]].append(self._key_entry(where, doc, replace))
            canonical_id = 0
            if filing.canonical is None:
                views.append(token if token is not None else FilingBuckets(*layout.buckets(filing.buckets), None))
                check_at.append((-1, -1))
            else:
                views.append(None)
                ref = filing.canonical_ref
                canonical_id = int(ref) if isinstance(ref, int) else (self._id_of(filing.canonical) or 0)
                cg = layout.record_group(canonical_id)
                check_at.append((cg, len(checks[cg])) if canonical_id else (-1, -1))
                if canonical_id:
                    checks[cg].append(U32.pack(canonical_id))
            canonical_ids.append(canonical_id)
        # The canonical filings' bucket entries, all at once: rows in filing order, split by group.
        owners = [k for k, view in enumerate(views) if view is not None]
        parts = [view for view in views if view is not None]
        sizes = np.array([len(v.rests) for v in parts], dtype=np.int64)
        row_owner = np.repeat(np.array(owners, dtype=np.int64), sizes)  # the filing of each bucket row
        row_doc = np.repeat(np.array([ids[k] for k in owners], dtype=np.int64), sizes)
        if owners:
            groups = np.concatenate([v.groups for v in parts])
            bins = np.concatenate([v.bins for v in parts])
            rests = np.concatenate([v.rests for v in parts])
            seen = np.concatenate(
                [v.lengths if v.lengths is not None else np.full(len(v.rests), 0xFFFFFFFF) for v in parts]
            )
        else:
            groups = bins = rests = seen = np.empty(0, dtype=np.int64)
        split = by_group(groups, bucket_rows(bins, rests, row_doc, seen))
        calls = {
            g: [b"".join(claims.get(g, [])), split[g][1] if g in split else b"", b"".join(checks.get(g, []))]
            for g in set(claims) | set(split) | set(checks)
        }
        replies = self._scripts("claim", calls)
        self._meta_script("appended", first)
        # Per bucket row with any: the entries appended since the lookup.
        deltas = appended_since([replies[g][1] for g in split], [positions for positions, _ in split.values()])
        if lower:
            # Batches with lower ids that had not appended when this one got its ids: wait until they have,
            # then read the buckets again since the lookup. Whatever they appended is there now.
            self._wait(lower, "appended")
            checked = np.flatnonzero(seen != 0xFFFFFFFF)
            rows = bucket_rows(bins[checked], rests[checked], seen[checked])
            reads = rows[:, [0, 1, 5, 6, 7, 8]]  # u16 bin, u32 from
            again = by_group(groups[checked], reads)
            fresh = self._scripts("delta", {g: [blob] for g, (_, blob) in again.items()})
            deltas = appended_since([fresh[g] for g in again], [checked[positions] for positions, _ in again.values()])
        # A canonical filing is stale when a row of its buckets got an entry of a lower id (or shrank).
        stale = np.zeros(len(filings), dtype=bool)
        for row, delta in deltas.items():
            if delta is None or lower_entry(delta, int(rests[row]), int(row_doc[row])):
                stale[row_owner[row]] = True
        results: list[Added] = []
        writes: dict[int, list[bytes]] = defaultdict(list)
        releases: dict[int, list[bytes]] = defaultdict(list)
        written: list[int] = []
        for k, (filing, doc, where, view) in enumerate(zip(filings, ids, keys, views)):
            g, i = claim_at[k]
            if replies[g][0][i : i + 1] == b"K":
                results.append(Added.KNOWN)  # the key is filed, or being filed, under another id
                continue
            if view is None:
                cg, ci = check_at[k]
                filed = cg >= 0 and replies[cg][2][ci : ci + 1] == b"1"  # its canonical is still canonical
            else:
                filed = view.lengths is None or not stale[k]
            if filed:
                record = pack_record(
                    filing.key,
                    filing.signature if view is not None else None,
                    canonical_ids[k],
                    filing.similarity,
                    body=filing.body,
                )
                writes[layout.record_group(doc)].append(struct.pack("<II", doc, len(record)) + record)
                written.append(doc)
                results.append(Added.FILED)
            else:
                releases[where[0]].append(self._key_entry(where, doc))
                results.append(Added.STALE)
        self._write(writes, {}, releases)
        if not int(self._meta_script("commit", first, len(written))):
            # Made void while it was filing (its lease ran out, a waiter took it for dead): nothing stands.
            logger.warning(
                "A batch of %d documents outlived its lease (%.0f s) in the Redis store at %s; "
                "its documents are checked again",
                len(filings),
                self.lease_secs,
                self.location,
            )
            self._write({}, self._drops(written), self._releases((f.key, doc) for f, doc in zip(filings, ids)))
            return [Added.STALE] * len(filings)
        return results

    def _wait(self, batches: list[int], what: str) -> None:
        """Until each of ``batches`` (their first ids) has appended (``what`` "appended") or is over ("done")."""
        # A batch is in flight for a few milliseconds: poll often (one cheap call on the prefix's slot).
        delay = 0.0005
        pending: list[Any] = list(batches)
        while pending:
            pending = self._meta_script("wait", int(time.time() * 1000), what, *pending)
            if pending:
                time.sleep(delay)
                delay = min(delay * 2, 0.004)

    def _write(
        self, writes: Mapping[int, list[bytes]], drops: Mapping[int, list[bytes]], releases: Mapping[int, list[bytes]]
    ) -> tuple[int, int]:
        groups = set(writes) | set(drops) | set(releases)
        replies = self._scripts(
            "write",
            {
                g: [b"".join(writes.get(g, [])), b"".join(drops.get(g, [])), b"".join(releases.get(g, []))]
                for g in groups
            },
        )
        return (sum(int(r[0]) for r in replies.values()), sum(int(r[1]) for r in replies.values()))

    def _id_of(self, key: str | None) -> int | None:
        """The id of a filed key, ``None`` when it is not filed."""
        return (self._ids_of([key])[0] or None) if key is not None else None

    def _ids_of(self, keys: Sequence[str]) -> list[int]:
        """The ids of keys (0: not filed), in one step."""
        wheres = [self.layout.key(key) for key in keys]
        key_reads, at = self._key_bins(wheres)
        return self._holders(wheres, at, self._get_bins({g: [part] for g, part in key_reads.items()}))

    def _releases(self, gone: Iterable[tuple[str, int]]) -> dict[int, list[bytes]]:
        """The key entries of ``(key, id)`` pairs, by group, for :meth:`_write` to release."""
        out: dict[int, list[bytes]] = defaultdict(list)
        for key, doc in gone:
            where = self.layout.key(key)
            out[where[0]].append(self._key_entry(where, doc))
        return out

    def _drops(self, ids: Iterable[int]) -> dict[int, list[bytes]]:
        """Record ids by group, for :meth:`_write` to delete."""
        out: dict[int, list[bytes]] = defaultdict(list)
        for doc in ids:
            out[self.layout.record_group(doc)].append(U32.pack(doc))
        return out
