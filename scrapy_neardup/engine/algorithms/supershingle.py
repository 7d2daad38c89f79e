"""Broder's super-shingles (Broder, "Identifying and filtering near-duplicate documents", CPM 2000): m
min-hashes grouped into m' super-shingles; near-duplicates share at least b."""

from __future__ import annotations

from itertools import combinations
from typing import Any

import numpy as np

from ..lsh import band_keys
from ..minwise import MinHasher
from ..text import fmix64, shingle_hashes
from .base import Algorithm, AlgorithmSettings, Fingerprint, salted_keys, words


class SuperShingles(Algorithm):
    """Broder's super-shingles: ``m`` min-hashes in ``groups`` groups; a match needs ``min_shared`` equal.

    Each group of ``m / groups`` min-hashes is hashed into one super-shingle. Two documents of resemblance
    r share a given super-shingle with probability r^(m/groups), so with Broder's 84/6/2 pages of
    resemblance 0.9 share at least two of six with probability ~0.93, and of 0.5 almost never. Documents are
    filed under every ``min_shared``-subset of their super-shingles, so sharing that many is exactly a
    bucket collision. Similarity = shared super-shingles / groups; threshold = min_shared / groups.
    Signature: ``groups`` ``uint64``.
    """

    name = "supershingle"
    FIXED_THRESHOLD = True
    DEFAULT_THRESHOLD = 2 / 6

    @classmethod
    def from_settings(cls, settings: AlgorithmSettings) -> SuperShingles:
        return cls(seed=settings.minhash_seed, shingle_size=settings.shingle_size)

    def __init__(self, m: int = 84, groups: int = 6, min_shared: int = 2, seed: int = 1, shingle_size: int = 2) -> None:
        if m % groups:
            raise ValueError(f"m ({m}) must be a multiple of groups ({groups})")
        self.m, self.groups, self.min_shared = m, groups, min_shared
        self.shingle_size = shingle_size
        self.hasher = MinHasher(m, seed)
        self.threshold = min_shared / groups

    def params(self) -> dict[str, Any]:
        return {
            "algorithm": self.name,
            "m": self.m,
            "groups": self.groups,
            "min_shared": self.min_shared,
            "seed": self.hasher.seed,
            "shingle_size": self.shingle_size,
        }

    def fingerprint(self, text: str) -> Fingerprint:
        sig = self.hasher.signature(shingle_hashes(words(text, self.shingle_size), self.shingle_size))
        supers = band_keys(sig, self.groups, self.m // self.groups).view(np.uint64)
        subsets = combinations(range(self.groups), self.min_shared)
        keys = [
            int(
                fmix64(
                    np.array(
                        [sum(int(supers[i]) * (2 * j + 1) for j, i in enumerate(c)) & (2**64 - 1)], dtype=np.uint64
                    )
                )[0]
            )
            for c in subsets
        ]
        return Fingerprint(supers.astype("<u8").tobytes(), salted_keys(keys, 0x5E9E7))

    def similarity(self, a: bytes, b: bytes) -> float:
        return float(np.count_nonzero(np.frombuffer(a, "<u8") == np.frombuffer(b, "<u8"))) / self.groups
