"""The bytes of the Redis layout: records, key-bin and bucket-bin entries, and the replies that carry them."""

from __future__ import annotations

import struct
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from ..base import (
    StoreError,
)

#: The record formats (a record: header, signature, key; version 4: header, body digest, signature, key) and
#: the fixed-size entries of the bins. A record without a body digest is written as version 3, as before.
RECORD_VERSION = 4
_WITHOUT_BODY = 3
_HEADER = struct.Struct("<BIfIH")
_BODY_LENGTH = struct.Struct("<B")
U32 = struct.Struct("<I")
U16 = struct.Struct("<H")
_CHANGE = struct.Struct("<II")


class StoredRecord(NamedTuple):
    """A record as stored: the document's key, its signature (empty for a near-duplicate), the id of its
    canonical (0: it is canonical), its similarity to it, when it was last seen (Unix seconds) and the
    digest of its bytes when filed (``None``: not given)."""

    key: str
    signature: bytes
    canonical_id: int
    similarity: float
    seen: float
    body: bytes | None = None


def pack_record(
    key: str,
    signature: bytes | None,
    canonical_id: int,
    similarity: float,
    seen: float | None = None,
    body: bytes | None = None,
) -> bytes:
    sig = signature or b""
    seen = time.time() if seen is None else seen
    if not body:
        header = _HEADER.pack(_WITHOUT_BODY, canonical_id, similarity, int(seen), len(sig))
        return header + sig + key.encode("utf-8")
    header = _HEADER.pack(RECORD_VERSION, canonical_id, similarity, int(seen), len(sig))
    return header + _BODY_LENGTH.pack(len(body)) + body + sig + key.encode("utf-8")


def unpack_record(data: bytes, where: str = "") -> StoredRecord:
    """A record's fields; raises :class:`StoreError`
    naming ``where`` (the bin and id it was read from) if it is malformed in any way."""
    if len(data) < _HEADER.size:
        raise StoreError(f"malformed record in the Redis store{where} (too short: {len(data)} bytes)")
    version, canonical_id, similarity, seen, sig_len = _HEADER.unpack_from(data)
    start, body = _HEADER.size, None
    if version == RECORD_VERSION and len(data) > start:
        body_len = data[start]
        body, start = data[start + 1 : start + 1 + body_len], start + 1 + body_len
    elif version == RECORD_VERSION:
        start += 1  # no digest length: malformed, as the check below says
    if version not in (RECORD_VERSION, _WITHOUT_BODY) or len(data) < start + sig_len:
        raise StoreError(f"unknown or malformed record in the Redis store{where} (version {version})")
    try:
        key = data[start + sig_len :].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StoreError(f"malformed record in the Redis store{where} (its key is not UTF-8: {exc})") from None
    return StoredRecord(key, data[start : start + sig_len], canonical_id, similarity, float(seen), body)


def lower_entry(delta: bytes, rest: int, doc: int) -> bool:
    """Whether ``delta`` (7-byte bucket entries) holds an entry of bucket prefix ``rest`` with an id below
    ``doc``."""
    prefix = rest.to_bytes(4, "little")[:3]
    for pos in range(0, len(delta) - 6, 7):
        if delta[pos : pos + 3] == prefix and U32.unpack_from(delta, pos + 3)[0] < doc:
            return True
    return False


def key_entry_id(bin_value: bytes, key_hash: bytes, where: str) -> int:
    """The id in a key bin's entry (12 bytes: the key's 8-byte hash, u32 id) for ``key_hash``; 0: none."""
    if len(bin_value) % 12:
        raise StoreError(f"malformed key bin in the Redis store{where} ({len(bin_value)} bytes, not a multiple of 12)")
    at = bin_value.find(key_hash)
    while at >= 0 and at % 12:
        at = bin_value.find(key_hash, at + 1)
    return 0 if at < 0 else U32.unpack_from(bin_value, at + 8)[0]


def bucket_hits(entries: bytes, counts: np.ndarray, inverse: np.ndarray, rests: np.ndarray) -> dict[int, list[int]]:
    """The ids each bucket row found: ``entries`` are the bins read (7-byte entries end to end, ``counts``
    entries each), row r looks in bin ``inverse[r]`` for entries of prefix ``rests[r]``. Row -> ids, in bin
    order, for the rows that found any."""
    table = np.frombuffer(entries, dtype=np.uint8).reshape(-1, 7)
    if not len(table):
        return {}
    prefix = table[:, 0].astype(np.int64) | (table[:, 1].astype(np.int64) << 8) | (table[:, 2].astype(np.int64) << 16)
    entry_bin = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    entry_key = (entry_bin << 24) | prefix
    row_key = (inverse.astype(np.int64) << 24) | rests
    order = np.argsort(row_key, kind="stable")
    sorted_keys = row_key[order]
    # Each entry's run of rows with its key: an entry matches where the run is not empty.
    lo = np.searchsorted(sorted_keys, entry_key, "left")
    hi = np.searchsorted(sorted_keys, entry_key, "right")
    matched = np.flatnonzero(hi > lo)
    if not len(matched):
        return {}
    ids = np.ascontiguousarray(table[matched, 3:]).view("<u4").ravel().tolist()
    hits: dict[int, list[int]] = {}
    for doc, a, b in zip(ids, lo[matched].tolist(), hi[matched].tolist()):
        for row in order[a:b].tolist():
            hits.setdefault(row, []).append(doc)
    return hits


def bucket_rows(bins: np.ndarray, rests: np.ndarray, *columns: Any) -> np.ndarray:
    """Bucket entries as rows of bytes: u16 bin, the 3-byte prefix, then each of ``columns`` as a u32."""
    n = len(bins)
    out = np.empty((n, 5 + 4 * len(columns)), dtype=np.uint8)
    out[:, 0:2] = bins.astype("<u2").view(np.uint8).reshape(n, 2)
    out[:, 2:5] = rests.astype("<u4").view(np.uint8).reshape(n, 4)[:, :3]
    for j, column in enumerate(columns):
        values = np.broadcast_to(np.asarray(column, dtype="<u4"), (n,))
        out[:, 5 + 4 * j : 9 + 4 * j] = np.ascontiguousarray(values).view(np.uint8).reshape(n, 4)
    return out


def by_group(groups: np.ndarray, rows: np.ndarray) -> dict[int, tuple[np.ndarray, bytes]]:
    """Rows split by group: group -> (their positions, their bytes end to end)."""
    order = np.argsort(groups, kind="stable")
    ordered = groups[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]]) if len(order) else np.empty(0, np.int64)
    ends = np.r_[starts[1:], len(order)]
    return {int(ordered[s]): (order[s:e], rows[order[s:e]].tobytes()) for s, e in zip(starts, ends)}


def appended_since(replies: Sequence[bytes], positions: Sequence[np.ndarray]) -> dict[int, bytes | None]:
    """What other documents appended to buckets since a lookup, from replies of changed bins (see the
    scripts), one per group, whose appends or reads were the bucket rows at ``positions`` (each group's, in
    order). Row -> the bytes (``None``: the bin shrank), for the few rows that have any."""
    out: dict[int, bytes | None] = {}
    for reply, rows in zip(replies, positions):
        pos = 0
        while pos < len(reply):
            index, size = _CHANGE.unpack_from(reply, pos)
            pos += _CHANGE.size
            if size == 0xFFFFFFFF:
                out[int(rows[index])] = None
            else:
                out[int(rows[index])] = reply[pos : pos + size]
                pos += size
    return out
