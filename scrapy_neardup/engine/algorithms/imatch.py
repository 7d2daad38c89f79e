"""I-Match (Chowdhury, Frieder, Grossman & McCabe, "Collection statistics for fast duplicate document
detection", ACM TOIS 2002): the SHA-1 of the sorted distinct terms that survive a lexicon of mid-range idf;
with Kołcz, Chowdhury & Alspector's randomized lexicons ("Improved robustness of signature-based near-replica
detection via lexicon randomization", KDD 2004): K extra lexicons, each missing a random share of the terms,
and a match on any of the K+1 signatures."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from typing import Any

import numpy as np

from ..text import fmix64, hash_tokens, tokenize
from .base import Algorithm, AlgorithmSettings, Fingerprint, SettingProblem, salted_keys, words

_U64 = np.uint64


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
    FIXED_THRESHOLD = True
    DEFAULT_THRESHOLD = 0.2
    DEFAULT_SHINGLE_SIZE = 1

    @classmethod
    def check_settings(cls, settings: AlgorithmSettings) -> None:
        lexicon = settings.imatch_lexicon
        if not (isinstance(lexicon, str) and os.path.isfile(lexicon)):
            raise SettingProblem(
                "NEARDUP_IMATCH_LEXICON",
                lexicon,
                "the path of a lexicon file (one term per line; "
                "make one with `scrapy-neardup lexicon`), required by NEARDUP_ALGORITHM = 'imatch'",
            )

    @classmethod
    def from_settings(cls, settings: AlgorithmSettings) -> IMatch:
        assert settings.imatch_lexicon is not None
        with open(settings.imatch_lexicon, encoding="utf-8") as f:
            return cls([line.strip() for line in f if line.strip()], seed=settings.minhash_seed)

    def __init__(self, lexicon: Iterable[str] = (), extra_lexicons: int = 4, drop: float = 0.33, seed: int = 1) -> None:
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
        return {
            "algorithm": self.name,
            "lexicon": digest,
            "lexicon_terms": len(self.lexicon),
            "extra_lexicons": self.extra_lexicons,
            "drop": self.drop,
            "seed": self.seed,
        }

    def fingerprint(self, text: str) -> Fingerprint:
        terms = np.unique(words(text))
        kept = terms[np.isin(terms, self.lexicon, assume_unique=True)]
        digests = [hashlib.sha1(kept.astype("<u8").tobytes()).digest()]
        limit = _U64(int(self.drop * 2**64) & (2**64 - 1))
        for salt in self._salts:
            in_lexicon = fmix64(kept ^ salt) >= limit
            digests.append(hashlib.sha1(kept[in_lexicon].astype("<u8").tobytes()).digest())
        keys = salted_keys((int.from_bytes(d[:8], "little") for d in digests), 0x1A7C)
        keys ^= np.arange(len(digests), dtype=np.int64)  # one table per lexicon
        return Fingerprint(b"".join(digests), keys)

    def similarity(self, a: bytes, b: bytes) -> float:
        n = 1 + self.extra_lexicons
        same = sum(a[i * 20 : (i + 1) * 20] == b[i * 20 : (i + 1) * 20] for i in range(n))
        return same / n
