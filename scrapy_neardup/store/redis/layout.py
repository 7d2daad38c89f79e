"""Where a spider's index lives in Redis: the layout's constants, the groups' hash tags and slots, and
which bin a bucket, a key or a record is in (the layout itself is described in the package's docstring)."""

from __future__ import annotations

import binascii
import functools
import json
from collections.abc import Sequence

import numpy as np

from ..base import (
    key_hash,
)

#: Version of the Redis layout (``P:meta`` field ``redis_layout``): the one this version writes and reads.
LAYOUT = 4
READ_LAYOUTS = (4,)
#: Redis Cluster's hash slots (a key's slot: CRC16/XMODEM of its hash tag, mod 16384).
CLUSTER_SLOTS = 16384
LAYOUT_FIELD = "redis_layout"
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
#: Defaults of a new store (a store keeps the values it was made with, in ``P:meta``).
GROUP_BITS, BUCKET_BIN_BITS, KEY_BIN_BITS = 6, 12, 8
RECORDS_PER_BIN = 64


def cluster_slot(tag: str) -> int:
    """The Redis Cluster slot of a key whose hash tag is ``tag`` (without its braces)."""
    return binascii.crc_hqx(tag.encode(), 0) % CLUSTER_SLOTS


@functools.lru_cache(maxsize=64)
def group_tags(base: str, groups: int, version: int = LAYOUT) -> tuple[str, ...]:
    """The hash tags of the groups. Layout 4 gives group ``g`` the tag ``{B:g}``, or ``{B:g.n}`` with the
    least ``n`` that puts it in the first sixteenth of the ``g``-th of ``groups`` equal runs of slots: every
    group has a slot of its own, and masters that each serve a run of slots (what ``redis-cli --cluster
    create`` makes) serve their share of the groups, rounded up or down (a split of slots rounds a group's
    run to its start)."""
    run = CLUSTER_SLOTS // groups
    window = run // 16
    tags = []
    for g in range(groups):
        tag, n = f"{base}:{g}", 0
        while not 0 <= cluster_slot(tag) - g * run < window:  # ~1,000 tries (CRC16 spreads suffixes evenly)
            n += 1
            tag = f"{base}:{g}.{n}"
        tags.append(f"{{{tag}}}")
    return tuple(tags)


class KeyLayout:
    """Where a bucket, a key and a record live: groups (hash tags) and bins, from the store's parameters."""

    def __init__(
        self,
        prefix: str,
        group_bits: int = GROUP_BITS,
        bucket_bin_bits: int = BUCKET_BIN_BITS,
        key_bin_bits: int = KEY_BIN_BITS,
        version: int = LAYOUT,
    ) -> None:
        self.group_bits, self.bucket_bin_bits, self.key_bin_bits = group_bits, bucket_bin_bits, key_bin_bits
        self.version = version
        self.groups = 1 << group_bits
        base = prefix.replace("{", "").replace("}", "")
        self.tags = group_tags(base, self.groups, version)
        #: One key of each group, for a cluster client to route the group's scripts by.
        self.route = [f"{tag}:r" for tag in self.tags]
        self.pattern = "".join("\\" + c if c in "*?[]\\" else c for c in f"{{{base}:") + "*}:*"
        #: The start of a bin's name by kind and group (the number follows as raw bytes).
        self.heads = {kind: [f"{tag}:{kind.decode()}:".encode() for tag in self.tags] for kind in (b"b", b"k", b"r")}

    def params(self) -> str:
        return json.dumps(
            {
                "version": self.version,
                "group_bits": self.group_bits,
                "bucket_bin_bits": self.bucket_bin_bits,
                "key_bin_bits": self.key_bin_bits,
            },
            sort_keys=True,
        )

    def buckets(self, keys: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Group, bin and entry prefix (24 bits) of each bucket key."""
        with np.errstate(over="ignore"):
            m = np.asarray(keys, dtype=np.int64).view(np.uint64) * _GOLDEN
        top = 64 - self.group_bits
        groups = (m >> np.uint64(top)).astype(np.int64)
        low = np.uint64((1 << self.bucket_bin_bits) - 1)
        bins = ((m >> np.uint64(top - self.bucket_bin_bits)) & low).astype(np.int64)
        rests = ((m >> np.uint64(top - self.bucket_bin_bits - 24)) & np.uint64(0xFFFFFF)).astype(np.int64)
        return groups, bins, rests

    def key(self, key: str) -> tuple[int, int, bytes]:
        """Group, bin and 8-byte hash of a key."""
        h = key_hash(key) & 0xFFFF_FFFF_FFFF_FFFF
        return (
            h >> (64 - self.group_bits),
            (h >> (64 - self.group_bits - self.key_bin_bits)) & ((1 << self.key_bin_bits) - 1),
            h.to_bytes(8, "little"),
        )

    def record_group(self, doc: int) -> int:
        return (doc // RECORDS_PER_BIN) % self.groups

    def bin_name(self, group: int, kind: bytes, number: int) -> bytes:
        """The key of bin ``number`` of ``kind`` (``b"b"``, ``b"k"``, ``b"r"``) in ``group``: the group's tag,
        the kind and the number as raw little-endian bytes (u32 for records, u16 for the others), which the
        scripts cut from their arguments without formatting a number."""
        return self.heads[kind][group] + number.to_bytes(4 if kind == b"r" else 2, "little")


class FilingBuckets:
    """A canonical filing's view of its buckets: group, bin, entry prefix and the bin's length at lookup."""

    __slots__ = ("groups", "bins", "rests", "lengths", "stale_claim")

    def __init__(
        self, groups: np.ndarray, bins: np.ndarray, rests: np.ndarray, lengths: np.ndarray | None, stale_claim: int = 0
    ) -> None:
        #: ``lengths`` None: filed without a lookup (no check of what others filed meanwhile).
        self.groups, self.bins, self.rests, self.lengths = groups, bins, rests, lengths
        #: The id that held the key's entry at lookup without a record (a claim left by a crash), or 0.
        self.stale_claim = stale_claim
