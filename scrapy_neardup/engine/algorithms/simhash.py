"""Charikar's SimHash (STOC 2002) searched with Manku, Jain & Das Sarma's permuted tables (WWW 2007)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..hamming import HammingTables, SimHasher
from ..text import shingle_hashes
from .base import Algorithm, AlgorithmSettings, Fingerprint, SettingProblem, words

#: The lowest threshold SimHash serves. 64 bits cannot resolve lower similarities: on neardup-dev its
#: precision falls from 0.97 at 0.55 to 0.87 at 0.5 and 0.70 at 0.45 (MinHash: 0.99 at 0.45);
#: ``bench/threshold_scales.py`` shows the same against exact Jaccard.
LOWEST_THRESHOLD = 0.55
#: Its Hamming distance: the most ``NEARDUP_SIMHASH_MAX_DISTANCE`` takes.
MOST_BITS = 15
#: Unrelated candidates a lookup may meet at a million stored pages (uniform fingerprints) before the
#: tables are said not to scale: the default's 6 bits meet about 430.
SCALE_CANDIDATES = 2_000


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
    DEFAULT_THRESHOLD = 0.9

    @classmethod
    def check_threshold(cls, threshold: float | None) -> None:
        if threshold is not None and threshold < LOWEST_THRESHOLD:
            raise SettingProblem(
                "NEARDUP_THRESHOLD",
                threshold,
                f"a number in [{LOWEST_THRESHOLD}, 1.0] for NEARDUP_ALGORITHM = 'simhash': {threshold} would search "
                f"{simhash_distance_for(threshold)} of its 64 bits, too few to tell pages that similar from "
                "unrelated ones (precision 0.70 at 0.45 on real pages); use 'minhash' for lower thresholds",
            )

    @classmethod
    def check_settings(cls, settings: AlgorithmSettings) -> None:
        distance = settings.simhash_max_distance
        if distance is not None and not 0 <= distance <= MOST_BITS:
            raise SettingProblem("NEARDUP_SIMHASH_MAX_DISTANCE", distance, f"an integer from 0 to {MOST_BITS} or None")
        if distance is None:
            distance = simhash_distance_for(settings.threshold)
        blocks = settings.simhash_blocks
        if blocks is not None and blocks <= distance:
            raise SettingProblem(
                "NEARDUP_SIMHASH_BLOCKS",
                blocks,
                f"more blocks than the Hamming distance searched ({distance}); leave it None for {distance + 2}",
            )

    @classmethod
    def from_settings(cls, settings: AlgorithmSettings) -> SimHashHamming:
        return cls(
            threshold=settings.threshold,
            shingle_size=settings.shingle_size,
            max_distance=settings.simhash_max_distance,
            blocks=settings.simhash_blocks,
        )

    def __init__(
        self,
        threshold: float | None = None,
        shingle_size: int = 2,
        max_distance: int | None = None,
        blocks: int | None = None,
    ) -> None:
        threshold = self.DEFAULT_THRESHOLD if threshold is None else threshold
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

    def scale_warning(self) -> str:
        """Manku et al.'s tables key each table on ``64 (m - k) / m`` bits: past a few bits of distance, a
        lookup meets a share of the whole store as candidates, checked one by one."""
        per_million = self.tables.random_candidates(1_000_000)
        if per_million <= SCALE_CANDIDATES:
            return ""
        return (
            f"SimHash at threshold {self.threshold:g} searches {self.max_distance} of its 64 bits: its "
            f"{self.tables.tables} tables key on about {self.tables.key_bits:.1f} bits, so a lookup meets about "
            f"{per_million / 10:,.0f} stored pages as candidates at 100,000 pages and {per_million:,.0f} at a "
            f"million, each checked: fit for crawls of some thousands of pages. For more, keep its default "
            f"threshold ({self.DEFAULT_THRESHOLD:g}) or use NEARDUP_ALGORITHM = 'minhash'"
        )

    def index_note(self) -> str:
        return (
            f"its tables search {self.max_distance} bits, which finds every pair within the "
            f"{simhash_distance_for(self.threshold)} bits of threshold {self.threshold:g}"
        )
