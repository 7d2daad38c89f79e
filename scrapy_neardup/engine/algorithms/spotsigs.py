"""SpotSigs (Theobald, Siddharth & Paepcke, "SpotSigs: robust and efficient near duplicate detection in large
web collections", SIGIR 2008): signatures anchored at stop words, which occur in running text and rarely in
navigation and ads; Jaccard over them, with length-ratio pruning."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from ..lsh import band_keys, optimal_bands
from ..minwise import MinHasher
from ..text import fmix64, hash_tokens
from .base import Algorithm, AlgorithmSettings, Fingerprint, words

_U64 = np.uint64


#: Stop words of the languages most common on the web; SpotSigs' antecedents. Short function words only:
#: they occur in running text and rarely in navigation, ads and footers.
STOP_WORDS = frozenset(
    # English
    "a an the is are was were be been this that these those there it its of to in on at by for with and or "
    "but not as from he she they we you his her their our has have had will would can could"
    # German
    " der die das den dem des ein eine einen einem einer ist sind war waren und oder nicht mit von zu im "
    "auf für bei aus auch sich es er sie wir ihr dass als wie"
    # French
    " le la les un une des du de et est sont était dans sur pour par avec pas que qui il elle ils nous vous ce "
    "cette au aux"
    # Spanish, Italian, Portuguese
    " el los las una es son fue en con por para del lo se que no il lo gli della delle sono era o os um uma "
    "da do dos das em"
    # Polish, Dutch
    " i w z na do nie się jest to że jak od po są przez dla het een van en op voor niet met zijn".split()
)


class SpotSigs(Algorithm):
    """SpotSigs: each stop word followed by the next ``chain`` non-stop words is one spot signature.

    The set of spot signatures is compared by Jaccard, as in the paper; candidates come from MinHash LSH
    over that set (the paper's partitioned inverted index serves the same end), and the paper's
    length-ratio pruning rejects a candidate whose set size differs by more than the threshold allows
    (J(A, B) <= min/max of the sizes) before its similarity is computed. Signature: ``uint32`` set size,
    then the MinHash signature.
    """

    name = "spotsigs"
    BANDED = True

    @classmethod
    def from_settings(cls, settings: AlgorithmSettings) -> SpotSigs:
        return cls(settings.threshold, num_perm=settings.minhash_num_perm, seed=settings.minhash_seed)

    def __init__(self, threshold: float | None = None, chain: int = 2, num_perm: int = 128, seed: int = 1) -> None:
        threshold = self.DEFAULT_THRESHOLD if threshold is None else threshold
        self.threshold = threshold
        self.chain = chain
        self.hasher = MinHasher(num_perm, seed)
        self.bands, self.rows = optimal_bands(threshold, num_perm)
        self._stop = hash_tokens(sorted(STOP_WORDS))

    def params(self) -> dict[str, Any]:
        return {
            "algorithm": self.name,
            "chain": self.chain,
            "num_perm": self.hasher.num_perm,
            "seed": self.hasher.seed,
            "bands": self.bands,
            "rows": self.rows,
            "stop_words": hashlib.sha1(" ".join(sorted(STOP_WORDS)).encode()).hexdigest()[:12],
        }

    def spot_signatures(self, text: str) -> np.ndarray:
        hashes = words(text, self.chain + 1)
        is_stop = np.isin(hashes, self._stop)
        content = hashes[~is_stop]
        # Position of each token among the content words: the chain after a stop word starts there.
        content_index: np.ndarray = np.cumsum(~is_stop) - (~is_stop)
        starts: np.ndarray = content_index[is_stop]
        antecedents = hashes[is_stop]
        ok = starts + self.chain <= len(content)
        starts, antecedents = starts[ok], antecedents[ok]
        acc = antecedents.copy()
        with np.errstate(over="ignore"):
            for j in range(self.chain):
                acc = acc * _U64(0x9E3779B97F4A7C15) + content[starts + j]
        return np.unique(fmix64(acc))

    def fingerprint(self, text: str) -> Fingerprint:
        spots = self.spot_signatures(text)
        sig = self.hasher.signature(spots)
        return Fingerprint(
            np.uint32(len(spots)).tobytes() + self.hasher.to_bytes(sig), band_keys(sig, self.bands, self.rows)
        )

    def similarity(self, a: bytes, b: bytes) -> float:
        size_a, size_b = int.from_bytes(a[:4], "little"), int.from_bytes(b[:4], "little")
        if max(size_a, size_b) == 0 or min(size_a, size_b) / max(size_a, size_b) < self.threshold:
            return 0.0  # length-ratio pruning: Jaccard cannot reach the threshold
        return MinHasher.similarity(self.hasher.from_bytes(a[4:]), self.hasher.from_bytes(b[4:]))
