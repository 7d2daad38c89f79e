"""SimHash fingerprints (Charikar 2002) and the permuted-table Hamming search of Manku et al. (WWW 2007).

Charikar's random-hyperplane hashing: every feature contributes its weight to each of the ``f = 64`` bit
positions, positively where the feature's hash has a 1 and negatively where it has a 0; the fingerprint's
bit is the sign of the sum. The Hamming distance of two fingerprints estimates the angle between the
weighted feature vectors: Pr[bit differs] = θ / π.

The features matter. Over single words, frequent words dominate every long page and unrelated pages fall
onto a few fingerprints; so the features here are word shingles (by default 2-shingles, which carry word
order and are rarely shared by chance), weighted by ``1 + log(tf)`` so a repeated navigation phrase does
not outweigh the text.

Search (Manku, Jain & Das Sarma, "Detecting near-duplicates for web crawling", WWW 2007, §3): to find all
fingerprints within Hamming distance ``k``, split the 64 bits into ``m > k`` blocks. Two fingerprints within
distance ``k`` differ in at most ``k`` blocks, so they agree exactly on at least ``m - k`` blocks; build one
table for each choice of ``m - k`` blocks (``C(m, k)`` tables, each the permutation that brings those
blocks to the front), keyed by the bits of those blocks. Every fingerprint within distance ``k`` shares
at least one key; each candidate is then checked by its real Hamming distance. Manku's f=64, k=3 with
m=5 gives 10 tables keyed on about 26 bits.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np

from .text import fmix64

_U64 = np.uint64
_BIT_WEIGHTS = (1 << np.arange(64, dtype=np.uint64)).astype(np.uint64)
_WEIGHT_SCALE = 4096.0


class SimHasher:
    """64-bit SimHash over weighted features."""

    bits = 64

    def fingerprint(self, features: np.ndarray) -> int:
        """SimHash of a multiset of 64-bit feature hashes, each weighted by ``1 + log(tf)``."""
        if len(features) == 0:
            return 0
        ordered = np.sort(features)
        first = np.empty(len(ordered), dtype=bool)
        first[0] = True
        np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
        starts = np.flatnonzero(first)
        values, counts = ordered[starts], np.diff(starts, append=len(ordered))
        # Weights are rounded to whole multiples of 1/4096 so every sum below is an exact integer in
        # float64: the fingerprint does not depend on the BLAS library's order of summation.
        weights = np.rint((1.0 + np.log(counts)) * _WEIGHT_SCALE)
        # Column j holds bit j of every feature hash; sum(w * (2b - 1)) > 0  <=>  2 * sum(w * b) > sum(w).
        bits = np.unpackbits(values.astype("<u8", copy=False).view(np.uint8).reshape(-1, 8), axis=1, bitorder="little")
        totals = weights @ bits
        return int(_BIT_WEIGHTS[2.0 * totals > weights.sum()].sum(dtype=np.uint64))

    @staticmethod
    def distance(a: int, b: int) -> int:
        return (a ^ b).bit_count()

    @staticmethod
    def to_bytes(fp: int) -> bytes:
        return fp.to_bytes(8, "little")

    @staticmethod
    def from_bytes(data: bytes) -> int:
        if len(data) != 8:
            raise ValueError(f"SimHash fingerprint has {len(data)} bytes, expected 8")
        return int.from_bytes(data, "little")


class HammingTables:
    """Bucket keys of the Manku et al. permuted tables for distance ``max_distance`` and ``blocks`` blocks."""

    def __init__(self, max_distance: int = 3, blocks: int | None = None, bits: int = 64) -> None:
        if blocks is None:
            blocks = max_distance + 2
        if not 0 <= max_distance < blocks <= bits:
            raise ValueError(
                f"need 0 <= max_distance < blocks <= {bits}; got max_distance={max_distance}, blocks={blocks}"
            )
        self.max_distance = max_distance
        self.blocks = blocks
        edges = np.linspace(0, bits, blocks + 1).round().astype(int)
        block_masks = [((1 << int(hi)) - 1) ^ ((1 << int(lo)) - 1) for lo, hi in zip(edges[:-1], edges[1:])]
        self.table_masks: list[int] = [
            sum(block_masks[i] for i in chosen) for chosen in combinations(range(blocks), blocks - max_distance)
        ]
        self._masks = np.array(self.table_masks, dtype=np.uint64)
        self._salts = np.arange(1, len(self.table_masks) + 1, dtype=np.uint64) << _U64(56)

    @property
    def tables(self) -> int:
        return len(self.table_masks)

    @property
    def key_bits(self) -> float:
        """The bits a table is keyed on, on average."""
        return sum(mask.bit_count() for mask in self.table_masks) / len(self.table_masks)

    def random_candidates(self, pages: int) -> float:
        """How many of ``pages`` unrelated fingerprints (uniform bits) share a key with a lookup: each table
        keyed on ``b`` bits meets ``pages / 2^b`` of them, checked one by one by their Hamming distance."""
        return sum(pages / 2.0 ** mask.bit_count() for mask in self.table_masks)

    def keys(self, fp: int) -> np.ndarray:
        """One ``int64`` key per table: the fingerprint's bits in that table's blocks, mixed with the table id."""
        masked = np.uint64(fp) & self._masks
        return fmix64(masked ^ fmix64(self._salts)).view(np.int64)
