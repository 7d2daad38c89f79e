"""Broder's bottom-k sketch ("n minimal values of one permutation"), indexed by its few smallest values."""

from __future__ import annotations

from typing import Any

from ..minwise import BottomKSketch
from ..text import shingle_hashes
from .base import Algorithm, AlgorithmSettings, Fingerprint, salted_keys, words


class BottomK(Algorithm):
    """Bottom-k sketch of word shingles; indexed by its ``index_values`` smallest hashes.

    Two sets with Jaccard J share their overall minimum with probability J, and each of the next minima
    similarly, so filing a document under its ``index_values`` smallest hashes finds similar documents with
    high probability; candidates are verified with the bottom-k estimator. Signature: up to ``k``
    ascending ``uint64``.
    """

    name = "bottomk"

    @classmethod
    def from_settings(cls, settings: AlgorithmSettings) -> BottomK:
        return cls(
            settings.threshold,
            k=settings.minhash_num_perm,
            seed=settings.minhash_seed,
            shingle_size=settings.shingle_size,
        )

    def __init__(
        self,
        threshold: float | None = None,
        k: int = 128,
        seed: int = 1,
        shingle_size: int = 2,
        index_values: int = 24,
    ) -> None:
        threshold = self.DEFAULT_THRESHOLD if threshold is None else threshold
        self.threshold = threshold
        self.shingle_size = shingle_size
        self.index_values = index_values
        self.sketcher = BottomKSketch(k, seed)

    def params(self) -> dict[str, Any]:
        return {
            "algorithm": self.name,
            "k": self.sketcher.k,
            "seed": self.sketcher.seed,
            "shingle_size": self.shingle_size,
            "index_values": self.index_values,
        }

    def fingerprint(self, text: str) -> Fingerprint:
        sketch = self.sketcher.sketch(shingle_hashes(words(text, self.shingle_size), self.shingle_size))
        return Fingerprint(self.sketcher.to_bytes(sketch), salted_keys(sketch[: self.index_values].tolist(), 0xB0770))

    def similarity(self, a: bytes, b: bytes) -> float:
        return self.sketcher.similarity(self.sketcher.from_bytes(a), self.sketcher.from_bytes(b))
