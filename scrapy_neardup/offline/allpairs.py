"""Every pair of near-duplicate documents, as Broder's collection algorithm outputs them.

The detector files each document once, against its best canonical match: a star per group, which is what
deduplication needs. Broder et al.'s clustering of the web ("Syntactic clustering of the Web", WWW 1997)
instead reports *every* pair of documents whose resemblance reaches the threshold, for those who study the
pairs themselves. :class:`AllPairs` does that over one run's documents: each document is looked up in an
index of all documents before it (near-duplicates included, which the detector's store does not index),
and every candidate at or above the threshold is a pair.

Cost: an index entry per document (about 1 KB for MinHash-128, in memory), and per document one lookup plus
one similarity per candidate. A group of n copies yields n(n-1)/2 pairs, so the output, and the time, grow
with the square of the largest group's size.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..engine.algorithms.base import Algorithm
from ..store.memory import MemoryStore


class AllPairs:
    def __init__(self, algorithm: Algorithm) -> None:
        self.algorithm = algorithm
        self._index = MemoryStore()
        self._index.open({})

    def add(self, key: str, signature: bytes, buckets: Sequence[int]) -> list[tuple[str, float]]:
        """The documents added before ``key`` that are its near-duplicates, most similar first (ties by
        key); then ``key`` joins the index. A key added twice is paired once."""
        if self._index.get(key) is not None:
            return []
        candidates, _ = self._index.lookup(buckets)
        threshold = self.algorithm.threshold
        pairs = []
        for candidate in candidates:
            similarity = self.algorithm.similarity(signature, candidate.signature)
            if similarity >= threshold:
                pairs.append((candidate.key, similarity))
        self._index.add(key, signature, buckets)
        return sorted(pairs, key=lambda pair: (-pair[1], pair[0]))
