"""MinHash of word shingles with LSH banding (Broder 1997; *Mining of Massive Datasets*, ch. 3)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from ..lsh import band_keys, optimal_bands
from ..minwise import MinHasher, OnePermutationHasher
from ..text import shingle_hashes
from . import MINHASH_SKETCH_NAMES
from .base import Algorithm, AlgorithmSettings, Fingerprint, words

#: MinHash sketches by their stored name (:data:`~scrapy_neardup.engine.algorithms.MINHASH_SKETCH_NAMES`).
MINHASH_SKETCHES: dict[str, type[MinHasher]] = dict(zip(MINHASH_SKETCH_NAMES, (OnePermutationHasher, MinHasher)))


class MinHashLSH(Algorithm):
    """MinHash of word k-shingles, indexed by LSH bands chosen from the threshold (MMDS §3.4).

    ``sketch`` names how the ``num_perm`` minima are drawn (:data:`MINHASH_SKETCHES`); both give the same
    estimator and the same layout, but not the same values, so the store records it. Bands are cut from
    the full 32-bit values; the stored signature keeps ``signature_bits`` (16 by default: b-bit minwise
    hashing, half the bytes, the same verdicts) for verification.
    """

    name = "minhash"
    BANDED = True

    @classmethod
    def from_settings(cls, settings: AlgorithmSettings) -> MinHashLSH:
        return cls(
            threshold=settings.threshold,
            num_perm=settings.minhash_num_perm,
            seed=settings.minhash_seed,
            shingle_size=settings.shingle_size,
            sketch=settings.minhash_sketch,
        )

    def __init__(
        self,
        threshold: float | None = None,
        num_perm: int = 128,
        seed: int = 1,
        shingle_size: int = 2,
        signature_bits: int = 16,
        sketch: str = "one-permutation",
    ) -> None:
        if signature_bits not in (16, 32):
            raise ValueError(f"signature_bits must be 16 or 32, got {signature_bits}")
        if sketch not in MINHASH_SKETCHES:
            raise ValueError(f"sketch must be one of {', '.join(MINHASH_SKETCHES)}, got {sketch!r}")
        # The product's defaults (NEARDUP_THRESHOLD None: DEFAULT_THRESHOLD; word 2-shingles), so that code and
        # tests that build an algorithm directly run what a crawl runs.
        threshold = self.DEFAULT_THRESHOLD if threshold is None else threshold
        self.threshold = threshold
        self.shingle_size = shingle_size
        self.signature_bits = signature_bits
        self.sketch = sketch
        self.hasher = MINHASH_SKETCHES[sketch](num_perm, seed)
        self.bands, self.rows = optimal_bands(threshold, num_perm)

    def params(self) -> dict[str, Any]:
        params = {
            "algorithm": self.name,
            "num_perm": self.hasher.num_perm,
            "seed": self.hasher.seed,
            "shingle_size": self.shingle_size,
            "bands": self.bands,
            "rows": self.rows,
            "signature_bits": self.signature_bits,
        }
        if self.sketch != "permutations":  # stores of the permutations sketch predate the parameter
            params["sketch"] = self.sketch
        return params

    def fingerprint(self, text: str) -> Fingerprint:
        shingles = shingle_hashes(words(text, self.shingle_size), self.shingle_size)
        sig = self.hasher.signature(shingles)
        return Fingerprint(self.hasher.to_bytes(sig, self.signature_bits), band_keys(sig, self.bands, self.rows))

    def similarity(self, a: bytes, b: bytes) -> float:
        bits = self.signature_bits
        return MinHasher.similarity(self.hasher.from_bytes(a, bits), self.hasher.from_bytes(b, bits), bits)

    INDEX_PARAMS = ("bands", "rows")

    def _over_index(self, stored: Mapping[str, Any]) -> Algorithm | None:
        bands, rows = int(stored["bands"]), int(stored["rows"])
        if bands < 1 or rows < 1 or bands * rows > self.hasher.num_perm:
            return None
        other = copy.copy(self)
        other.bands, other.rows = bands, rows
        return other

    def index_note(self) -> str:
        from ..lsh import candidate_probability

        found = float(candidate_probability(self.threshold, self.bands, self.rows))
        return (
            f"its {self.bands} bands x {self.rows} rows make a pair at similarity {self.threshold:g} a "
            f"candidate with probability {found:.3f}"
        )
