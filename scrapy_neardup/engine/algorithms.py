"""Near-duplicate algorithms on one contract: text → (signature bytes, bucket keys), and a similarity.

Each algorithm names the parameters that define its fingerprints (:meth:`Algorithm.params`); the store
records them and refuses to mix fingerprints made with others.
"""

from __future__ import annotations

import copy
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .lsh import band_keys, optimal_bands
from .minhash import MinHasher, OnePermutationHasher
from .simhash import HammingTables, SimHasher
from .text import shingle_hashes, token_hashes


class NoWords(ValueError):
    """The text has fewer words than one shingle needs (none at all: only punctuation, symbols, emoji,
    invisible characters). Such texts would all share one empty fingerprint and so match each other with
    similarity 1.0; they are skipped, never compared."""


#: A letter or digit of any script (a word character that is not the connector ``_``).
_ALPHANUMERIC = re.compile(r"[^\W_]")


def words(text: str, shingle_size: int = 1) -> np.ndarray:
    """The token hashes of ``text``, raising :class:`NoWords` when it has no letter or digit at all (runs
    of ``_`` are tokens, but not words) or fewer tokens than ``shingle_size`` (at least one). The search
    for a letter stops at the first one, a few characters into any real text."""
    if _ALPHANUMERIC.search(text) is None:
        raise NoWords("no letter or digit")
    hashes = token_hashes(text)
    if len(hashes) < max(1, shingle_size):
        raise NoWords(f"{len(hashes)} words, fewer than the {max(1, shingle_size)} a fingerprint needs")
    return hashes


@dataclass(frozen=True)
class Fingerprint:
    signature: bytes
    buckets: np.ndarray  # int64 bucket keys, one per band or table


class Algorithm(ABC):
    name: str
    threshold: float
    #: Parameters that shape only the index (which documents become candidates), not the signatures: a
    #: store indexed with other values can still serve this algorithm (:meth:`with_index`).
    INDEX_PARAMS: tuple[str, ...] = ()

    def with_index(self, stored: Mapping[str, Any]) -> Algorithm | None:
        """This algorithm (same signatures, same threshold for verification) over a store whose index was
        built with ``stored`` parameters, when only :data:`INDEX_PARAMS` differ and that index can serve
        this threshold; ``None`` otherwise. What a changed threshold needs: the signatures stay comparable,
        only the candidates come from the stored index (see :meth:`index_note`)."""
        own = self.params()
        if not self.INDEX_PARAMS or set(own) != set(stored):
            return None
        if any(own[name] != stored[name] for name in own if name not in self.INDEX_PARAMS):
            return None
        return self._over_index(stored)

    def _over_index(self, stored: Mapping[str, Any]) -> Algorithm | None:
        return None

    def index_note(self) -> str:
        """What the index finds at this algorithm's threshold, for a log line."""
        return ""

    @abstractmethod
    def params(self) -> dict[str, Any]:
        """Everything that changes the fingerprints or the buckets, recorded with them in the store."""

    @abstractmethod
    def fingerprint(self, text: str) -> Fingerprint:
        """Signature and bucket keys of a text; :class:`NoWords` when it has too few words (see
        :func:`words`)."""

    @abstractmethod
    def similarity(self, a: bytes, b: bytes) -> float:
        """Similarity in [0, 1] of two stored signatures; near-duplicates have ``>= threshold``."""


#: MinHash sketches by their stored name: one permutation with densification (the default), or Broder's
#: ``num_perm`` independent permutations (the only sketch of stores made before this setting existed).
MINHASH_SKETCHES: dict[str, type[MinHasher]] = {
    "one-permutation": OnePermutationHasher,
    "permutations": MinHasher,
}


class MinHashLSH(Algorithm):
    """MinHash of word k-shingles, indexed by LSH bands chosen from the threshold (MMDS §3.4).

    ``sketch`` names how the ``num_perm`` minima are drawn (:data:`MINHASH_SKETCHES`); both give the same
    estimator and the same layout, but not the same values, so the store records it. Bands are cut from
    the full 32-bit values; the stored signature keeps ``signature_bits`` (16 by default: b-bit minwise
    hashing, half the bytes, the same verdicts) for verification.
    """

    name = "minhash"

    def __init__(self, threshold: float = 0.5, num_perm: int = 128, seed: int = 1, shingle_size: int = 3,
                 signature_bits: int = 16, sketch: str = "one-permutation") -> None:
        if signature_bits not in (16, 32):
            raise ValueError(f"signature_bits must be 16 or 32, got {signature_bits}")
        if sketch not in MINHASH_SKETCHES:
            raise ValueError(f"sketch must be one of {', '.join(MINHASH_SKETCHES)}, got {sketch!r}")
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
        from .lsh import candidate_probability

        found = float(candidate_probability(self.threshold, self.bands, self.rows))
        return (f"its {self.bands} bands x {self.rows} rows make a pair at similarity {self.threshold:g} a "
                f"candidate with probability {found:.3f}")


def simhash_distance_for(threshold: float) -> int:
    """The Hamming distance ``k`` SimHash searches for a Jaccard ``threshold``: the largest ``k`` whose
    Jaccard estimate (:func:`simhash_jaccard`) is at least the threshold."""
    cosine = 2.0 * threshold / (1.0 + threshold)
    return int(math.floor(SimHasher.bits * math.acos(min(1.0, cosine)) / math.pi + 1e-9))


def simhash_jaccard(distance: int) -> float:
    """The Jaccard similarity of two shingle sets whose SimHash fingerprints are ``distance`` bits apart.

    Charikar (STOC 2002): a bit of the fingerprint differs with probability ``theta / pi``, ``theta`` the
    angle between the two feature vectors, so ``distance`` estimates ``theta = pi * distance / 64``. For
    two sets of equal size the cosine is ``|A & B| / |A| = 2J / (1 + J)``, hence ``J = c / (2 - c)`` with
    ``c = cos(theta)``. This puts SimHash on the scale of every other algorithm: ``NEARDUP_THRESHOLD`` is a
    Jaccard similarity of shingle sets for all of them (measured on real pages by
    ``bench/threshold_scales.py``: at 0.6-0.7 the pairs SimHash accepts agree with exact Jaccard of the
    same 2-shingles at precision and recall 0.96)."""
    cosine = math.cos(math.pi * distance / SimHasher.bits)
    return max(0.0, cosine / (2.0 - cosine))


class SimHashHamming(Algorithm):
    """Weighted SimHash of word k-shingles, searched with Manku et al.'s permuted tables.

    The threshold is a Jaccard similarity like every algorithm's; it sets the Hamming distance searched
    (:func:`simhash_distance_for`), and :meth:`similarity` reports the Jaccard estimate of a distance
    (:func:`simhash_jaccard`). ``max_distance`` given instead sets the threshold to that distance's
    estimate.
    """

    name = "simhash"

    def __init__(
        self, threshold: float = 0.97, shingle_size: int = 2, max_distance: int | None = None, blocks: int | None = None
    ) -> None:
        self.max_distance = simhash_distance_for(threshold) if max_distance is None else max_distance
        self.threshold = threshold if max_distance is None else simhash_jaccard(self.max_distance)
        self.shingle_size = shingle_size
        self.hasher = SimHasher()
        self.tables = HammingTables(self.max_distance, blocks)

    def params(self) -> dict[str, Any]:
        return {
            "algorithm": self.name,
            "bits": SimHasher.bits,
            "shingle_size": self.shingle_size,
            "max_distance": self.max_distance,
            "blocks": self.tables.blocks,
            "weighting": "1+log(tf)",
        }

    def fingerprint(self, text: str) -> Fingerprint:
        features = shingle_hashes(words(text, self.shingle_size), self.shingle_size)
        fp = self.hasher.fingerprint(features)
        return Fingerprint(SimHasher.to_bytes(fp), self.tables.keys(fp))

    def similarity(self, a: bytes, b: bytes) -> float:
        return simhash_jaccard(SimHasher.distance(SimHasher.from_bytes(a), SimHasher.from_bytes(b)))

    INDEX_PARAMS = ("max_distance", "blocks")

    def _over_index(self, stored: Mapping[str, Any]) -> Algorithm | None:
        distance, blocks = int(stored["max_distance"]), int(stored["blocks"])
        if distance < self.max_distance or blocks <= distance:
            return None  # tables searching fewer bits than this threshold needs would miss pairs
        other = SimHashHamming(shingle_size=self.shingle_size, max_distance=distance, blocks=blocks)
        other.threshold = self.threshold  # verified at this threshold; the tables search more bits
        return other

    def index_note(self) -> str:
        return (f"its tables search {self.max_distance} bits, which finds every pair within the "
                f"{simhash_distance_for(self.threshold)} bits of threshold {self.threshold:g}")
