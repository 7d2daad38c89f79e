"""Text normalisation, tokenisation and hashed shingles.

Everything a sketch sees passes through here, so every choice is fixed and stable across processes and
machines: Unicode NFKC, case folding, and MurmurHash3 (``mmh3``) with a fixed seed. Python's ``hash()`` is
never used, since it is salted per process.

Tokens are words where the script separates words with spaces, and single characters for the scripts that
do not (Chinese, Japanese, Thai, Lao, Khmer, Myanmar); a k-shingle of those characters is then a character
k-gram, as Broder's shingling would use on unsegmented text (Broder et al., "Syntactic clustering of the
Web", 1997, shingles as contiguous subsequences of tokens).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

import mmh3
import numpy as np

#: Seed for token hashes. Part of the fingerprint format: changing it changes every stored fingerprint.
TOKEN_SEED = 0x5EED_D00D

_UNSEGMENTED = (
    "\u0e00-\u0e7f"  # Thai
    "\u0e80-\u0eff"  # Lao
    "\u1000-\u109f"  # Myanmar
    "\u1780-\u17ff"  # Khmer
    "\u3040-\u30ff"  # Hiragana, Katakana
    "\u3100-\u312f"  # Bopomofo
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\uac00-\ud7af"  # Hangul syllables: spaced, but short words; character grams match better
    "\U00020000-\U0002ebef"  # CJK extensions B-F
)
_TOKEN_RE = re.compile(rf"[{_UNSEGMENTED}]|[^\W{_UNSEGMENTED}]+")
_SPACE_RE = re.compile(r"\s+")

_U64 = np.uint64
# Constants of MurmurHash3's 64-bit finaliser (fmix64): a bijection that spreads every input bit.
_FMIX_C1 = _U64(0xFF51AFD7ED558CCD)
_FMIX_C2 = _U64(0xC4CEB9FE1A85EC53)
# Odd multiplier for combining consecutive token hashes into one shingle hash (the 64-bit golden ratio).
_SHINGLE_MULT = _U64(0x9E3779B97F4A7C15)


def normalize(text: str) -> str:
    """Return ``text`` in NFKC, case-folded, with runs of white space collapsed to one space."""
    return _SPACE_RE.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def tokenize(text: str) -> list[str]:
    """Split normalised text into word tokens, or single characters for unsegmented scripts."""
    return _TOKEN_RE.findall(normalize(text))


def hash_tokens(tokens: Sequence[str]) -> np.ndarray:
    """Hash each token with 64-bit MurmurHash3 (fixed seed); returns a ``uint64`` array."""
    cache: dict[str, int] = {}
    out = np.empty(len(tokens), dtype=np.uint64)
    for i, token in enumerate(tokens):
        h = cache.get(token)
        if h is None:
            h = mmh3.hash64(token, TOKEN_SEED, signed=False)[0]
            cache[token] = h
        out[i] = h
    return out


def fmix64(values: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser applied element-wise (a stable, invertible bit mixer)."""
    h = values.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        h ^= h >> _U64(33)
        h *= _FMIX_C1
        h ^= h >> _U64(33)
        h *= _FMIX_C2
        h ^= h >> _U64(33)
    return h


def shingle_hashes(token_hashes: np.ndarray, k: int) -> np.ndarray:
    """Hashes of the contiguous k-shingles of a token-hash sequence, as a ``uint64`` array.

    A shingle's hash is a polynomial of its token hashes (position-dependent, so word order counts)
    finished with fmix64. Computed for all shingles at once with numpy; a text shorter than ``k`` tokens
    yields one shingle of all its tokens, so short texts still have a fingerprint.
    """
    n = len(token_hashes)
    if n == 0:
        return np.empty(0, dtype=np.uint64)
    k = min(k, n)
    count = n - k + 1
    acc = np.zeros(count, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(k):
            acc = acc * _SHINGLE_MULT + token_hashes[j : j + count]
    return fmix64(acc ^ _U64(k))


def shingle_set(text: str, k: int) -> np.ndarray:
    """Sorted distinct k-shingle hashes of ``text`` (the set Jaccard similarity is defined on)."""
    return np.unique(shingle_hashes(hash_tokens(tokenize(text)), k))


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard similarity of two sorted distinct hash arrays."""
    if len(a) == 0 and len(b) == 0:
        return 1.0
    inter = len(np.intersect1d(a, b, assume_unique=True))
    return inter / (len(a) + len(b) - inter)
