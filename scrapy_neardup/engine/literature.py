"""The rest of the near-duplicate literature, on the same contract as MinHash and SimHash.

* :class:`ExactHash` — a hash of the normalised token sequence: identical text only. The baseline every
  crawler has.
* :class:`BottomK` — Broder's "n minimal values of one permutation" sketch, indexed by its few smallest
  values.
* :class:`SuperShingles` — Broder's super-shingles (Broder, "Identifying and filtering near-duplicate
  documents", CPM 2000): m min-hashes grouped into m' super-shingles; near-duplicates share at least b.
* :class:`SpotSigs` — Theobald, Siddharth & Paepcke, "SpotSigs: robust and efficient near duplicate
  detection in large web collections", SIGIR 2008: signatures anchored at stop words, which occur in
  running text and rarely in navigation and ads; Jaccard over them, with length-ratio pruning.
* :class:`IMatch` — Chowdhury, Frieder, Grossman & McCabe, "Collection statistics for fast duplicate
  document detection", ACM TOIS 2002: the SHA-1 of the sorted distinct terms that survive a lexicon of
  mid-range idf; and Kołcz, Chowdhury & Alspector, "Improved robustness of signature-based near-replica
  detection via lexicon randomization", KDD 2004: K extra lexicons, each missing a random share of the
  terms, and a match on any of the K+1 signatures.

Every signature layout is documented on its class; all are little-endian.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from itertools import combinations
from typing import Any

import numpy as np

from .algorithms import Algorithm, Fingerprint, words
from .lsh import band_keys, optimal_bands
from .minhash import BottomKSketch, MinHasher
from .text import fmix64, hash_tokens, shingle_hashes, tokenize

_U64 = np.uint64


def _keys(values: Iterable[int], salt: int) -> np.ndarray:
    """Bucket keys from 64-bit values, salted so that different tables never collide."""
    arr = np.fromiter((int(v) & 0xFFFFFFFFFFFFFFFF for v in values), dtype=np.uint64)
    return fmix64(arr ^ fmix64(np.array([salt], dtype=np.uint64))).view(np.int64)


class ExactHash(Algorithm):
    """Identical normalised text. Signature: 16 bytes (two 64-bit halves of a hash of the token hashes)."""

    name = "exact"

    def __init__(self) -> None:
        self.threshold = 1.0

    def params(self) -> dict[str, Any]:
        return {"algorithm": self.name}

    def fingerprint(self, text: str) -> Fingerprint:
        digest = hashlib.blake2b(words(text).astype("<u8").tobytes(), digest_size=16).digest()
        return Fingerprint(digest, np.frombuffer(digest[:8], dtype="<i8").astype(np.int64))

    def similarity(self, a: bytes, b: bytes) -> float:
        return 1.0 if a == b else 0.0


class BottomK(Algorithm):
    """Bottom-k sketch of word shingles; indexed by its ``index_values`` smallest hashes.

    Two sets with Jaccard J share their overall minimum with probability J, and each of the next minima
    similarly, so filing a document under its ``index_values`` smallest hashes finds similar documents with
    high probability; candidates are verified with the bottom-k estimator. Signature: up to ``k``
    ascending ``uint64``.
    """

    name = "bottomk"

    def __init__(self, threshold: float = 0.45, k: int = 128, seed: int = 1, shingle_size: int = 2,
                 index_values: int = 24) -> None:
        self.threshold = threshold
        self.shingle_size = shingle_size
        self.index_values = index_values
        self.sketcher = BottomKSketch(k, seed)

    def params(self) -> dict[str, Any]:
        return {"algorithm": self.name, "k": self.sketcher.k, "seed": self.sketcher.seed,
                "shingle_size": self.shingle_size, "index_values": self.index_values}

    def fingerprint(self, text: str) -> Fingerprint:
        sketch = self.sketcher.sketch(shingle_hashes(words(text, self.shingle_size), self.shingle_size))
        return Fingerprint(self.sketcher.to_bytes(sketch), _keys(sketch[: self.index_values].tolist(), 0xB0770))

    def similarity(self, a: bytes, b: bytes) -> float:
        return self.sketcher.similarity(self.sketcher.from_bytes(a), self.sketcher.from_bytes(b))


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

    def __init__(self, m: int = 84, groups: int = 6, min_shared: int = 2, seed: int = 1, shingle_size: int = 2) -> None:
        if m % groups:
            raise ValueError(f"m ({m}) must be a multiple of groups ({groups})")
        self.m, self.groups, self.min_shared = m, groups, min_shared
        self.shingle_size = shingle_size
        self.hasher = MinHasher(m, seed)
        self.threshold = min_shared / groups

    def params(self) -> dict[str, Any]:
        return {"algorithm": self.name, "m": self.m, "groups": self.groups, "min_shared": self.min_shared,
                "seed": self.hasher.seed, "shingle_size": self.shingle_size}

    def fingerprint(self, text: str) -> Fingerprint:
        sig = self.hasher.signature(shingle_hashes(words(text, self.shingle_size), self.shingle_size))
        supers = band_keys(sig, self.groups, self.m // self.groups).view(np.uint64)
        subsets = combinations(range(self.groups), self.min_shared)
        keys = [int(fmix64(np.array([sum(int(supers[i]) * (2 * j + 1) for j, i in enumerate(c)) & (2**64 - 1)],
                                    dtype=np.uint64))[0]) for c in subsets]
        return Fingerprint(supers.astype("<u8").tobytes(), _keys(keys, 0x5E9E7))

    def similarity(self, a: bytes, b: bytes) -> float:
        return float(np.count_nonzero(np.frombuffer(a, "<u8") == np.frombuffer(b, "<u8"))) / self.groups


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
    " i w z na do nie się jest to że jak od po są przez dla het een van en op voor niet met zijn"
    .split()
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

    def __init__(self, threshold: float = 0.45, chain: int = 2, num_perm: int = 128, seed: int = 1) -> None:
        self.threshold = threshold
        self.chain = chain
        self.hasher = MinHasher(num_perm, seed)
        self.bands, self.rows = optimal_bands(threshold, num_perm)
        self._stop = hash_tokens(sorted(STOP_WORDS))

    def params(self) -> dict[str, Any]:
        return {"algorithm": self.name, "chain": self.chain, "num_perm": self.hasher.num_perm,
                "seed": self.hasher.seed, "bands": self.bands, "rows": self.rows,
                "stop_words": hashlib.sha1(" ".join(sorted(STOP_WORDS)).encode()).hexdigest()[:12]}

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
        return Fingerprint(np.uint32(len(spots)).tobytes() + self.hasher.to_bytes(sig),
                           band_keys(sig, self.bands, self.rows))

    def similarity(self, a: bytes, b: bytes) -> float:
        size_a, size_b = int.from_bytes(a[:4], "little"), int.from_bytes(b[:4], "little")
        if max(size_a, size_b) == 0 or min(size_a, size_b) / max(size_a, size_b) < self.threshold:
            return 0.0  # length-ratio pruning: Jaccard cannot reach the threshold
        return MinHasher.similarity(self.hasher.from_bytes(a[4:]), self.hasher.from_bytes(b[4:]))


class IMatch(Algorithm):
    """I-Match with Kołcz's randomized lexicons.

    The lexicon is the set of terms whose document frequency in a collection is neither too high (common
    words carry no identity) nor too low (typos, numbers, session ids change between copies): idf between
    the ``low`` and ``high`` quantiles of the collection's terms. A document's signature is the SHA-1 of
    its sorted distinct lexicon terms; ``extra_lexicons`` more signatures come from lexicons that each
    miss a random ``drop`` share of the terms (chosen by term hash, so they are reproducible), and two
    documents match when any of their signatures agree. Similarity: the share of agreeing signatures;
    the threshold is one agreement.

    The lexicon must come from a collection (:meth:`fit`, or ``scrapy-neardup lexicon``): it is part of
    the fingerprint format, and a store records its digest. Signature: ``1 + extra_lexicons`` SHA-1
    digests (20 bytes each).
    """

    name = "imatch"

    def __init__(self, lexicon: Iterable[str] = (), extra_lexicons: int = 4, drop: float = 0.33,
                 seed: int = 1) -> None:
        self.lexicon = np.unique(hash_tokens([t for word in lexicon for t in tokenize(word)]))
        self.extra_lexicons = extra_lexicons
        self.drop = drop
        self.seed = seed
        self.threshold = 1.0 / (1 + extra_lexicons)
        salts = np.random.Generator(np.random.PCG64(seed)).integers(0, 2**63, size=extra_lexicons, dtype=np.uint64)
        self._salts = salts

    @staticmethod
    def build_lexicon(texts: Iterable[str], low: float = 0.1, high: float = 0.9, min_df: int = 2) -> list[str]:
        """Terms whose idf lies between the ``low`` and ``high`` quantiles of the idf of the collection's
        terms seen in at least ``min_df`` documents (Chowdhury et al.'s lexicon filtering), sorted."""
        df: dict[str, int] = {}
        docs = 0
        for text in texts:
            docs += 1
            for term in set(tokenize(text)):
                df[term] = df.get(term, 0) + 1
        terms = [t for t, n in df.items() if n >= min_df]
        if not terms:
            return []
        idf = np.log(docs / np.array([df[t] for t in terms], dtype=float))
        lo, hi = np.quantile(idf, [low, high])
        return sorted(t for t, v in zip(terms, idf) if lo <= v <= hi)

    def params(self) -> dict[str, Any]:
        digest = hashlib.sha1(self.lexicon.astype("<u8").tobytes()).hexdigest()[:16]
        return {"algorithm": self.name, "lexicon": digest, "lexicon_terms": len(self.lexicon),
                "extra_lexicons": self.extra_lexicons, "drop": self.drop, "seed": self.seed}

    def fingerprint(self, text: str) -> Fingerprint:
        terms = np.unique(words(text))
        kept = terms[np.isin(terms, self.lexicon, assume_unique=True)]
        digests = [hashlib.sha1(kept.astype("<u8").tobytes()).digest()]
        limit = _U64(int(self.drop * 2**64) & (2**64 - 1))
        for salt in self._salts:
            in_lexicon = fmix64(kept ^ salt) >= limit
            digests.append(hashlib.sha1(kept[in_lexicon].astype("<u8").tobytes()).digest())
        keys = _keys((int.from_bytes(d[:8], "little") for d in digests), 0x1A7C)
        keys ^= np.arange(len(digests), dtype=np.int64)  # one table per lexicon
        return Fingerprint(b"".join(digests), keys)

    def similarity(self, a: bytes, b: bytes) -> float:
        n = 1 + self.extra_lexicons
        same = sum(a[i * 20 : (i + 1) * 20] == b[i * 20 : (i + 1) * 20] for i in range(n))
        return same / n


__all__ = ["STOP_WORDS", "BottomK", "ExactHash", "IMatch", "SpotSigs", "SuperShingles"]
