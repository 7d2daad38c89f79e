"""MinHash signatures: n independent permutations, one permutation with densification, and bottom-k.

Broder, "On the resemblance and containment of documents" (1997): for a random permutation π of the
shingle universe, Pr[min π(A) = min π(B)] = J(A, B), the Jaccard similarity of the shingle sets. A
signature of ``num_perm`` minima estimates J as the fraction of equal positions, with standard error
sqrt(J(1-J)/num_perm).

The permutations are simulated by multiply-shift hashing (Dietzfelbinger et al., 1997) on the 64-bit
shingle hashes, which :func:`~scrapy_neardup.engine.text.shingle_hashes` has already mixed with fmix64:
``h_i(x) = ((a_i * x + b_i) mod 2**64) >> 32`` with odd ``a_i``. That is one multiply and one add per
shingle and permutation, done for a whole document at once in numpy. The ``a_i, b_i`` come from a
``numpy.random.PCG64`` generator seeded with the configured seed, so a seed always gives the same
permutations, on every machine.

Byte layout of a stored signature: ``num_perm`` little-endian ``uint32`` values (4 × num_perm bytes), or
with ``bits=16`` only the low 16 bits of each, as ``uint16`` (2 × num_perm bytes). That is b-bit minwise
hashing (Li & König, "b-Bit Minwise Hashing", WWW 2010): two different minima agree in their low b bits
with probability about 2^-b, so the fraction of agreeing positions ``m`` estimates
J = (m - 2^-b) / (1 - 2^-b). At b = 16 the correction is 1.5e-5, far under the estimate's own error
(~0.04 at 128 permutations), and a signature takes half the space in every store.

:class:`OnePermutationHasher` gives signatures of the same layout and the same estimator from *one*
permutation (one-permutation hashing with optimal densification), about fifteen times cheaper to compute;
it is the default sketch of the ``minhash`` algorithm.
"""

from __future__ import annotations

import threading

import numpy as np

_U64 = np.uint64
_EMPTY = np.uint32(0xFFFFFFFF)
# Shingles processed per block, bounding the (block × num_perm) matrix to a few MB on huge pages.
_BLOCK = 4096
_U64_MAX = np.iinfo(np.uint64).max
# SplitMix64's increment and output mixer (Steele, Lea & Flood, "Fast splittable pseudorandom number
# generators", OOPSLA 2014): fixed arithmetic, so the constants it draws never change with numpy's version.
_GAMMA = _U64(0x9E3779B97F4A7C15)
_MIX1 = _U64(0xBF58476D1CE4E5B9)
_MIX2 = _U64(0x94D049BB133111EB)


def splitmix64(seed: int, count: int, stream: int = 0) -> np.ndarray:
    """``count`` 64-bit values of the SplitMix64 sequence of ``(seed, stream)``: stable on every machine."""
    start = (seed * 0x2545F4914F6CDD1D + stream * 0xD1342543DE82EF95) & (2**64 - 1)
    with np.errstate(over="ignore"):
        z = _U64(start) + np.arange(1, count + 1, dtype=np.uint64) * _GAMMA
        z = (z ^ (z >> _U64(30))) * _MIX1
        z = (z ^ (z >> _U64(27))) * _MIX2
    return z ^ (z >> _U64(31))


class MinHasher:
    """Computes MinHash signatures of ``num_perm`` permutations from shingle hashes."""

    def __init__(self, num_perm: int = 128, seed: int = 1) -> None:
        if num_perm < 1:
            raise ValueError(f"num_perm must be >= 1, got {num_perm}")
        self.num_perm = num_perm
        self.seed = seed
        rng = np.random.Generator(np.random.PCG64(seed))
        self._a = rng.integers(0, 2**63, size=num_perm, dtype=np.uint64) * _U64(2) + _U64(1)
        self._b = rng.integers(0, 2**63, size=num_perm, dtype=np.uint64)
        self._local = threading.local()

    def signature(self, shingles: np.ndarray) -> np.ndarray:
        """The ``uint32`` signature of a set of shingle hashes (duplicates are harmless).

        Works in one preallocated (block × num_perm) buffer per thread: fresh temporaries of that size
        would cost more in page faults than the arithmetic itself.
        """
        if len(shingles) == 0:
            return np.full(self.num_perm, _EMPTY, dtype=np.uint32)
        buf = getattr(self._local, "buf", None)
        if buf is None:
            buf = self._local.buf = np.empty((_BLOCK, self.num_perm), dtype=np.uint64)
        sig = np.full(self.num_perm, np.iinfo(np.uint64).max, dtype=np.uint64)
        for start in range(0, len(shingles), _BLOCK):
            block = shingles[start : start + _BLOCK]
            view = buf[: len(block)]
            np.multiply(block[:, None], self._a, out=view)
            np.add(view, self._b, out=view)
            np.minimum(sig, view.min(axis=0), out=sig)
        return (sig >> _U64(32)).astype(np.uint32)

    @staticmethod
    def similarity(a: np.ndarray, b: np.ndarray, bits: int = 32) -> float:
        """Estimated Jaccard similarity: the fraction of positions where two signatures agree, corrected
        for chance agreement of ``bits``-bit values (b-bit minwise hashing)."""
        agree = float(np.count_nonzero(a == b)) / len(a)
        if bits >= 32:
            return agree
        chance = 2.0**-bits
        return max(0.0, (agree - chance) / (1.0 - chance))

    def to_bytes(self, sig: np.ndarray, bits: int = 32) -> bytes:
        """Stored form of a signature: full ``uint32`` values, or their low 16 bits with ``bits=16``."""
        if bits == 16:
            return (sig & np.uint32(0xFFFF)).astype("<u2").tobytes()
        return sig.astype("<u4", copy=False).tobytes()

    def from_bytes(self, data: bytes, bits: int = 32) -> np.ndarray:
        sig = np.frombuffer(data, dtype="<u2" if bits == 16 else "<u4")
        if len(sig) != self.num_perm:
            raise ValueError(f"MinHash signature has {len(sig)} values, expected {self.num_perm}")
        return sig


class OnePermutationHasher(MinHasher):
    """One-permutation hashing with optimal densification: a MinHash signature from one hash per shingle.

    Li, Owen & Zhang, "One Permutation Hashing" (NIPS 2012): permute the shingle universe once, cut the
    permuted range into ``num_perm`` equal bins, and keep the minimum of each bin. For two sets the bins
    are disjoint samples without replacement, so the fraction of bins with equal minima estimates J(A, B)
    as ``num_perm`` independent permutations do, with a variance no larger. A bin can be empty when a
    set has few elements; Shrivastava, "Optimal Densification for Fast and Accurate Minwise Hashing"
    (ICML 2017) fills an empty bin ``i`` from the first non-empty bin on a probe sequence that depends
    only on ``i`` and the seed, which keeps the estimator unbiased with a variance close to MinHash's.

    The permutation is ``x -> a*x + b (mod 2^64)`` (odd ``a``) on the fmix64-mixed shingle hashes; a
    value's bin is ``floor(high32 * num_perm / 2^32)`` of the permuted value, and the bin's slot holds the
    low 32 bits of its smallest permuted value. The cost is one multiply-add per shingle and one
    scatter-minimum, against ``num_perm`` multiply-adds per shingle for :class:`MinHasher`. Constants and
    probe sequences come from :func:`splitmix64`. Signatures have :class:`MinHasher`'s layout, ``uint32``
    (or 16-bit) values, so LSH banding and verification are shared; they are *not* interchangeable with
    it: the store records which sketch made them (parameter ``sketch``).
    """

    #: Probes drawn per empty bin in one vectorised step; the rare bin still empty after them probes on.
    _PROBES = 32

    def __init__(self, num_perm: int = 128, seed: int = 1) -> None:  # pylint: disable=super-init-not-called
        if not 1 <= num_perm <= 2**16:
            raise ValueError(f"num_perm must be between 1 and 65536, got {num_perm}")
        self.num_perm = num_perm
        self.seed = seed
        a, b = splitmix64(seed, 2, stream=1)
        self._a, self._b = a | _U64(1), b
        self._probes = self._probe_bins(0, self._PROBES)

    def _probe_bins(self, first: int, count: int) -> np.ndarray:
        """Probe ``first .. first+count-1`` of every bin's sequence, as a ``(num_perm, count)`` array."""
        draws = splitmix64(self.seed, self.num_perm * count, stream=2 + first // self._PROBES)
        return ((draws >> _U64(32)) * _U64(self.num_perm) >> _U64(32)).astype(np.intp).reshape(self.num_perm, count)

    def signature(self, shingles: np.ndarray) -> np.ndarray:
        if len(shingles) == 0:
            return np.full(self.num_perm, _EMPTY, dtype=np.uint32)
        with np.errstate(over="ignore"):
            permuted = shingles * self._a + self._b
        bins = ((permuted >> _U64(32)) * _U64(self.num_perm)) >> _U64(32)
        minima = np.full(self.num_perm, _U64_MAX, dtype=np.uint64)
        np.minimum.at(minima, bins.astype(np.intp), permuted)
        sig = (minima & _U64(0xFFFFFFFF)).astype(np.uint32)
        nonempty = minima != _U64_MAX
        if not nonempty.all():
            self._densify(sig, nonempty)
        return sig

    def _densify(self, sig: np.ndarray, nonempty: np.ndarray) -> None:
        """Fill each empty bin from the first non-empty bin on its probe sequence (in place)."""
        empty = np.flatnonzero(~nonempty)
        probes = self._probes[empty]
        first = 0
        while len(empty):
            hit = nonempty[probes]
            found = hit.any(axis=1)
            choice = probes[found, hit[found].argmax(axis=1)]
            sig[empty[found]] = sig[choice]
            empty = empty[~found]
            if len(empty):  # rare: a bin still empty after its first probes draws the next ones
                first += self._PROBES
                probes = self._probe_bins(first, self._PROBES)[empty]


class BottomKSketch:
    """Broder's "n minimal values in one permutation" sketch (bottom-k).

    One hash function; the sketch is the ``k`` smallest shingle hashes. For two sketches, the ``k``
    smallest of their union are a uniform sample of the union of the sets, and the fraction of them
    present in both sketches estimates J(A, B) (Broder 1997, §3; Cohen & Kaplan, "Summarizing data using
    bottom-k sketches", PODC 2007). Cheaper to compute than ``k`` permutations (one pass, one partial
    sort) and unbiased; but it does not split into LSH bands, so it serves verification, not indexing.

    Byte layout: up to ``k`` little-endian ``uint64`` values, ascending.
    """

    def __init__(self, k: int = 128, seed: int = 1) -> None:
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        self.k = k
        self.seed = seed
        rng = np.random.Generator(np.random.PCG64(seed))
        self._a = rng.integers(0, 2**63, dtype=np.uint64) * _U64(2) + _U64(1)
        self._b = rng.integers(0, 2**63, dtype=np.uint64)

    def sketch(self, shingles: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            permuted = np.unique(shingles * self._a + self._b)
        return permuted[: self.k]

    def similarity(self, a: np.ndarray, b: np.ndarray) -> float:
        if len(a) == 0 and len(b) == 0:
            return 1.0
        union_k = np.union1d(a, b)[: self.k]
        both = np.intersect1d(a, b, assume_unique=True)
        return float(np.isin(union_k, both, assume_unique=True).sum()) / len(union_k)

    def to_bytes(self, sketch: np.ndarray) -> bytes:
        return sketch.astype("<u8", copy=False).tobytes()

    def from_bytes(self, data: bytes) -> np.ndarray:
        return np.frombuffer(data, dtype="<u8")
