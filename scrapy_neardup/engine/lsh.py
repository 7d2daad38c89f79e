"""LSH banding for MinHash signatures (Leskovec, Rajaraman & Ullman, *Mining of Massive Datasets*, §3.4).

A signature of ``b × r`` values is cut into ``b`` bands of ``r`` rows; two documents become candidates
when all rows of at least one band agree. For Jaccard similarity ``s`` that happens with probability
``1 - (1 - s**r)**b``, an S-curve whose steep part sits near ``(1/b)**(1/r)``.

:func:`optimal_bands` chooses ``b`` and ``r`` for a threshold ``t`` by minimising the weighted areas under
the curve where it is wrong: the false-positive area ``∫_0^t P(s) ds`` and the false-negative area
``∫_t^1 (1 - P(s)) ds`` (the rule datasketch also follows). Candidates are then verified on the full
signature, so false positives cost only time, while a false negative is lost for good; the default weights
therefore favour recall.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from .text import fmix64

_U64 = np.uint64
_MULT = _U64(0x9E3779B97F4A7C15)


def candidate_probability(s: np.ndarray | float, bands: int, rows: int) -> np.ndarray:
    """Probability that two documents of Jaccard similarity ``s`` share at least one band."""
    s = np.asarray(s, dtype=float)
    return 1.0 - (1.0 - s**rows) ** bands


def error_areas(threshold: float, bands: int, rows: int, samples: int = 1001) -> tuple[float, float]:
    """False-positive and false-negative areas under the S-curve for a threshold."""
    lo = np.linspace(0.0, threshold, samples)
    hi = np.linspace(threshold, 1.0, samples)
    fp = float(np.trapezoid(candidate_probability(lo, bands, rows), lo))
    fn = float(np.trapezoid(1.0 - candidate_probability(hi, bands, rows), hi))
    return fp, fn


@lru_cache(maxsize=64)
def optimal_bands(threshold: float, num_perm: int, fp_weight: float = 0.1, fn_weight: float = 0.9) -> tuple[int, int]:
    """``(bands, rows)`` with ``bands * rows <= num_perm`` minimising the weighted error areas."""
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold must be between 0 and 1 (exclusive), got {threshold}")
    best: tuple[float, int, int] | None = None
    for bands in range(1, num_perm + 1):
        for rows in range(1, num_perm // bands + 1):
            fp, fn = error_areas(threshold, bands, rows, samples=201)
            cost = fp_weight * fp + fn_weight * fn
            if best is None or cost < best[0] - 1e-12:
                best = (cost, bands, rows)
    assert best is not None
    return best[1], best[2]


def band_keys(signature: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """One 64-bit bucket key per band (as ``int64``, the width SQLite and Redis store natively).

    A key mixes the band's index with its rows, so equal rows in different bands never collide.
    """
    return band_keys_many(signature[None, :], bands, rows)[0]


def band_keys_many(signatures: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """:func:`band_keys` of each row of a ``(documents, num_perm)`` array, as one ``(documents, bands)`` array.

    A band's key is the polynomial ``band * M^rows + sum_j row_j * M^(rows-1-j)`` (mod 2^64, what Horner's
    rule over the band's rows gives), finished with fmix64; computed for every band at once.
    """
    band_term, powers = _band_polynomial(bands, rows)
    table = signatures[:, : bands * rows].astype(np.uint64).reshape(len(signatures), bands, rows)
    with np.errstate(over="ignore"):
        acc = (table * powers).sum(axis=2, dtype=np.uint64) + band_term
    return fmix64(acc).view(np.int64)


@lru_cache(maxsize=64)
def _band_polynomial(bands: int, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """``band * M^rows`` for each band and ``M^(rows-1-j)`` for each row (mod 2^64)."""
    powers = [pow(int(_MULT), rows - 1 - j, 2**64) for j in range(rows)]
    lead = pow(int(_MULT), rows, 2**64)
    band_term = np.array([(band * lead) % 2**64 for band in range(1, bands + 1)], dtype=np.uint64)
    return band_term, np.array(powers, dtype=np.uint64)
