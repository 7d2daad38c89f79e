"""SimHash's index at scale: what each Hamming distance costs a lookup at 10^4-10^6 documents, and what it
scores on a labelled set. The figures behind SimHash's default threshold (docs/algorithms.md).

    python3 dev.py bench bench/simhash_scale.py ../shared/neardup-dev [--sizes 5000 100000 1000000]

Manku, Jain & Das Sarma's permuted tables (WWW 2007) find every fingerprint within ``k`` bits by exact
keys on ``m - k`` of ``m`` blocks: a table is keyed on about ``64 (m - k) / m`` bits, and an unrelated
fingerprint shares a key with a lookup with probability ``2^-bits`` a table. The candidates a lookup meets
therefore grow with the index; a distance is usable at a size where they stay few.

1. **Cost**: the real-text corpus of ``../shared/bench/textcorpus.py`` (paragraphs of neardup-dev's pages
   recombined into ~7 KB documents, a fifth of them lightly edited copies), generated in its order up to the
   largest size and fingerprinted as the product does (weighted 2-shingle SimHash, 64 bits). For each
   distance ``k`` and its default blocks (``k + 2``): tables, key bits, and the candidates a lookup meets
   (index entries sharing a key, counted over the last tenth of the documents of each size), against the
   true near-duplicates within ``k`` bits among them.
2. **Quality**: ``scrapy-neardup evaluate``'s F1, precision and recall on the labelled set at the Jaccard
   threshold each ``k`` serves.
3. **End to end**: ``scrapy-neardup dedup --algorithm simhash`` at its default on the first 5,000 and on
   the first 100,000 documents: exit status, wall seconds, documents a second.

Prints one JSON document.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from scrapy_neardup.engine.algorithms.simhash import SimHashHamming, simhash_jaccard  # noqa: E402
from scrapy_neardup.engine.hamming import HammingTables  # noqa: E402

DISTANCES = [3, 4, 5, 6, 7, 8, 10, 13]


def corpus(dev: str, n: int, script: str):  # type: ignore[no-untyped-def]
    """textcorpus.py's documents, in its order, without writing them out (its recipe, its seed)."""
    import random

    spec = importlib.util.spec_from_file_location("textcorpus", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rng = random.Random(3)
    paras = module.paragraphs(dev)
    vocab = " ".join(paras[:5000]).split()
    docs: list[str] = []
    for _ in range(n):
        if docs and rng.random() < 0.2:
            words = [rng.choice(vocab) if rng.random() < 0.02 else w for w in rng.choice(docs).split()]
            text = " ".join(words)
        else:
            parts, size = [], 0
            while size < 7000:
                p = rng.choice(paras)
                parts.append(p)
                size += len(p)
            text = "\n".join(parts)
        if len(docs) < 2000:
            docs.append(text)
        yield text


_ALGORITHM = SimHashHamming()


def _fingerprint(text: str) -> int:
    return int.from_bytes(_ALGORITHM.fingerprint(text).signature, "little")


def fingerprints(dev: str, n: int, script: str, cache: str) -> np.ndarray:
    path = os.path.join(cache, f"simhash-{n}.npy")
    if os.path.exists(path):
        return np.load(path)
    with multiprocessing.get_context("fork").Pool(os.cpu_count()) as pool:
        fps = np.fromiter(pool.imap(_fingerprint, corpus(dev, n, script), chunksize=256), dtype=np.uint64, count=n)
    np.save(path, fps)
    return fps


def lookup_cost(fps: np.ndarray, k: int, sizes: list[int]) -> list[dict]:
    """Candidates a lookup meets at each size: for the last tenth of the first ``size`` documents, the index
    entries (earlier documents) sharing a key with it, summed over the tables, and the true ones within ``k``."""
    tables = HammingTables(k)
    rows = []
    for size in sizes:
        head = fps[:size]
        start = size - size // 10
        met = np.zeros(size - start, dtype=np.int64)
        for mask in tables.table_masks:
            keys = head & np.uint64(mask)
            # For each of the last documents: how many earlier documents have its key in this table.
            order = np.argsort(keys, kind="stable")
            ranks = np.empty(size, dtype=np.int64)
            sorted_keys = keys[order]
            first = np.searchsorted(sorted_keys, sorted_keys, side="left")
            ranks[order] = np.arange(size) - first  # earlier in stable order = earlier documents
            met += ranks[start:]
        tail = head[start:]
        near = 0
        sample = tail[:: max(1, len(tail) // 2000)]  # true neighbours, on a sample of the tail
        for i, fp in enumerate(sample):
            index = start + i * max(1, len(tail) // 2000)
            distances = (
                np.bitwise_count(head[:index] ^ fp) if hasattr(np, "bitwise_count") else _popcount(head[:index] ^ fp)
            )
            near += int((distances <= k).sum())
        rows.append(
            {
                "size": size,
                "candidates_per_lookup": round(float(met.mean()), 1),
                "within_k_per_lookup": round(near / len(sample), 2),
                "max_candidates": int(met.max()),
            }
        )
    return rows


def _popcount(values: np.ndarray) -> np.ndarray:
    v = values.copy()
    count = np.zeros(len(v), dtype=np.int64)
    for shift in range(0, 64, 8):
        count += np.array([bin(b).count("1") for b in range(256)], dtype=np.int64)[
            ((v >> np.uint64(shift)) & np.uint64(255)).astype(np.int64)
        ]
    return count


def threshold_for(k: int) -> float:
    """The Jaccard threshold whose Hamming distance is ``k`` (the estimate of ``k``, rounded down a little)."""
    return math.floor(simhash_jaccard(k) * 1000) / 1000


def quality(dev: str, workers: int | None) -> dict[int, dict]:
    from scrapy_neardup.offline.evaluation import evaluate_configurations
    from scrapy_neardup.settings import Config

    configurations = [
        (
            str(k),
            Config.from_settings(
                {"NEARDUP_ENABLED": True, "NEARDUP_ALGORITHM": "simhash", "NEARDUP_THRESHOLD": threshold_for(k)}
            ),
        )
        for k in DISTANCES
    ]
    rows = evaluate_configurations(os.path.join(dev, "manifest.jsonl"), configurations, workers=workers)
    return {
        int(r["name"]): {
            "f1": round(r["f1"], 4),
            "precision": round(r["precision"], 4),
            "recall": round(r["recall"], 4),
        }
        for r in rows
    }


def end_to_end(dev: str, script: str, size: int, scratch: str, threshold: float | None = None) -> dict:
    source = os.path.join(scratch, f"texts-{size}.jsonl")
    if not os.path.exists(source):
        with open(source, "w") as f:
            for i, text in enumerate(corpus(dev, size, script)):
                f.write(json.dumps({"url": f"doc:{i}", "text": text}, ensure_ascii=False) + "\n")
    out = os.path.join(scratch, f"pairs-{size}.tsv")
    command = [sys.executable, "-m", "scrapy_neardup.offline.cli", "dedup", source, "-o", out, "--algorithm", "simhash"]
    started = time.perf_counter()
    proc = subprocess.run(
        command + (["--threshold", str(threshold)] if threshold is not None else []), capture_output=True, text=True
    )
    wall = time.perf_counter() - started
    return {
        "size": size,
        "threshold": threshold if threshold is not None else SimHashHamming.DEFAULT_THRESHOLD,
        "exit": proc.returncode,
        "wall_secs": round(wall, 1),
        "docs_per_sec": round(size / wall),
        "pairs": sum(1 for _ in open(out)) if proc.returncode == 0 else None,
        "stderr_tail": proc.stderr.strip().splitlines()[-1][:300] if proc.stderr.strip() else "",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--corpus-script", default=os.path.join(ROOT, "..", "shared", "bench", "textcorpus.py"))
    parser.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "neardup-simhash-scale"))
    parser.add_argument("--end-to-end", type=int, nargs="*", default=[5_000, 100_000])
    parser.add_argument("--e2e-threshold", type=float, help="the threshold of the end-to-end runs (default: SimHash's)")
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--skip-cost", action="store_true", help="only the end-to-end runs")
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args()
    os.makedirs(args.cache, exist_ok=True)
    sizes = sorted(args.sizes)
    report: dict = {"distances": []}
    scores = {} if args.skip_quality or args.skip_cost else quality(args.dataset, args.workers)
    fps = None if args.skip_cost else fingerprints(args.dataset, sizes[-1], args.corpus_script, args.cache)
    for k in [] if fps is None else DISTANCES:
        tables = HammingTables(k)
        report["distances"].append(
            {
                "k": k,
                "threshold": threshold_for(k),
                "blocks": tables.blocks,
                "tables": tables.tables,
                "key_bits": round(64 * (tables.blocks - k) / tables.blocks, 1),
                "quality": scores.get(k),
                "cost": lookup_cost(fps, k, sizes),
            }
        )
        print(json.dumps(report["distances"][-1]), file=sys.stderr, flush=True)
    report["default_threshold"] = SimHashHamming.DEFAULT_THRESHOLD
    report["end_to_end"] = [
        end_to_end(args.dataset, args.corpus_script, n, args.cache, args.e2e_threshold) for n in args.end_to_end
    ]
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
