"""Does one NEARDUP_THRESHOLD mean one thing for MinHash and SimHash? Measured on real pages.

    python bench/threshold_scales.py ../shared/neardup-dev [--workers N]

The threshold is a Jaccard similarity of word-shingle sets. MinHash estimates it directly; SimHash compares
64-bit fingerprints, whose Hamming distance ``d`` relates to the angle between the pages' feature vectors
(Charikar 2002: a bit differs with probability ``theta / pi``). For two sets of equal size the cosine is
``2J / (1 + J)``, hence the map SimHash now uses: ``d(T) = floor(64 * arccos(2T / (1 + T)) / pi)``. The map
it replaced read the threshold as ``1 - d/64``.

For every pair of pages (all 2.7 million of neardup-dev's 2,340) the script computes the exact Jaccard of the
word 2-shingle sets of the text the default pipeline fingerprints, and each pair's SimHash distance with the
features SimHash is given (word 1-grams, the old default; word 2-shingles, the new default). At each
threshold T, "the truth" is exact Jaccard >= T; for each way of choosing SimHash's distance the table gives
how many pairs SimHash accepts, and its precision and recall against that truth. One line of JSON per row
on stdout, a table on stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

import numpy as np
from scipy import sparse

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from scrapy_neardup.engine.algorithms.base import NoWords, words
from scrapy_neardup.engine.hamming import SimHasher
from scrapy_neardup.engine.text import shingle_hashes
from scrapy_neardup.offline.evaluation import extract_pages, load_manifest
from scrapy_neardup.settings import Config

THRESHOLDS = (0.45, 0.6, 0.7, 0.8, 0.9, 0.95)


def old_distance(t: float) -> int:
    return int(math.floor((1.0 - t) * 64 + 1e-9))


def new_distance(t: float) -> int:
    return int(math.floor(64 * math.acos(2 * t / (1 + t)) / math.pi + 1e-9))


def texts(manifest_path: str, workers: int) -> list[str | None]:
    config = Config.from_settings({"NEARDUP_ENABLED": True})
    manifest = load_manifest(manifest_path)
    base = os.path.dirname(os.path.abspath(manifest_path))
    extracted = [page.extraction for page in extract_pages(manifest, base, config, workers)]
    return [None if got.method == "none" else got.text for got in extracted]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", help="folder of neardup-dev (manifest.jsonl)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    docs = [t for t in texts(os.path.join(args.dataset, "manifest.jsonl"), args.workers) if t]
    shingles, sim1, sim2 = [], [], []
    hasher = SimHasher()
    for text in docs:
        try:
            one, two = shingle_hashes(words(text, 1), 1), shingle_hashes(words(text, 2), 2)
        except NoWords:
            continue
        shingles.append(np.unique(two))
        sim1.append(hasher.fingerprint(one))
        sim2.append(hasher.fingerprint(two))
    n = len(shingles)
    # Exact Jaccard of every pair through a sparse page x shingle matrix: |A & B| = (M M^T)[a, b].
    vocabulary, columns = np.unique(np.concatenate(shingles), return_inverse=True)
    rows = np.repeat(np.arange(n), [len(s) for s in shingles])
    matrix = sparse.csr_matrix((np.ones(len(rows), dtype=np.int32), (rows, columns)), shape=(n, len(vocabulary)))
    inter = sparse.triu(matrix @ matrix.T, k=1).tocoo()
    sizes = np.array([len(s) for s in shingles])
    jaccard = inter.data / (sizes[inter.row] + sizes[inter.col] - inter.data)
    upper = np.triu_indices(n, k=1)
    exact = np.zeros(len(upper[0]))
    position = inter.row * n + inter.col
    index = np.searchsorted(upper[0] * n + upper[1], position)
    exact[index] = jaccard

    def distances(fps: list[int]) -> np.ndarray:
        values = np.array(fps, dtype=np.uint64)
        xor = values[upper[0]] ^ values[upper[1]]
        return np.unpackbits(xor.view(np.uint8).reshape(-1, 8), axis=1).sum(axis=1)

    dist = {"word 1-grams": distances(sim1), "word 2-shingles": distances(sim2)}
    print(f"{n} pages, {len(exact):,} pairs", file=sys.stderr)
    print(
        f"{'T':>5} {'pairs J>=T':>10} | {'features':<16} {'map':<10} {'d':>3} {'accepted':>10} {'precision':>9} "
        f"{'recall':>7}",
        file=sys.stderr,
    )
    for t in THRESHOLDS:
        truth = exact >= t
        for features, d in dist.items():
            for name, limit in (("1-d/64", old_distance(t)), ("arccos", new_distance(t))):
                accepted = d <= limit
                hits = int((accepted & truth).sum())
                row = {
                    "threshold": t,
                    "pairs_at_or_above": int(truth.sum()),
                    "features": features,
                    "map": name,
                    "distance": limit,
                    "accepted": int(accepted.sum()),
                    "precision": round(hits / max(1, int(accepted.sum())), 4),
                    "recall": round(hits / max(1, int(truth.sum())), 4),
                }
                print(json.dumps(row))
                print(
                    f"{t:>5} {row['pairs_at_or_above']:>10} | {features:<16} {name:<10} {limit:>3} "
                    f"{row['accepted']:>10,} {row['precision']:>9.4f} {row['recall']:>7.4f}",
                    file=sys.stderr,
                )


if __name__ == "__main__":
    main()
