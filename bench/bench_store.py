"""The embedded stores at scale: insert rate, query latency, file size and memory per document.

    python3 dev.py bench bench/bench_store.py [--store sqlite|memory] [--algorithm minhash|simhash]
                                              [--sizes 10000,100000,1000000,10000000] [--queries 2000]
                                              [--repeat 3] [--plot FILE.png]

One store grows to each size in turn through the real check-and-insert path (``Detector.check_many`` in
batches of 1,000, as the plugin's store thread and the batch CLI call it). Fingerprints are made up front
from synthetic signatures, so the figures are the store's own work, not hashing: MinHash-128 at the default
threshold 0.45 (29 bands of 3 rows), or 64-bit SimHash with k = 3 (10 tables); a fifth of the documents
are near-duplicates of earlier ones (a few signature values changed, or a few bits flipped). At each size:

* the insert rate over the last step (documents per second, check-and-insert), and the longest single
  batch of the step: the pause a writer sees when the SQLite store merges its staged documents into the
  band index, or the in-memory store merges its levels;
* query latency: ``--queries`` lookups of new documents (a fifth of them near-duplicates of stored ones), each
  a full lookup of its buckets plus verification of the candidates, nothing inserted; p50 and p99;
* the SQLite file size per document (after a checkpoint folds the write-ahead log into it), and the
  process's resident memory per document (for SQLite: its page cache, Python, and the pages of the file's
  memory map, which are the OS page cache, not the process's own memory).

Prints a Markdown table; ``--plot`` draws time and memory against size on log-log axes (matplotlib).
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing
import os
import platform
import statistics
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from scrapy_neardup.engine.algorithms.minhash import MinHashLSH  # noqa: E402
from scrapy_neardup.engine.algorithms.simhash import SimHashHamming  # noqa: E402
from scrapy_neardup.engine.detector import Check, Detector  # noqa: E402
from scrapy_neardup.engine.hamming import SimHasher  # noqa: E402
from scrapy_neardup.engine.lsh import band_keys_many  # noqa: E402
from scrapy_neardup.store import store_from_url  # noqa: E402

BATCH = 1000


def status_bytes(field: str) -> int:
    """A memory figure of this process from /proc/self/status (``VmRSS``: resident now, ``VmHWM``: peak)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


class Synthetic:
    """Fingerprints of a made-up collection, a fifth of them near-duplicates of earlier ones."""

    def __init__(self, algorithm: MinHashLSH | SimHashHamming, seed: int = 3) -> None:
        self.algorithm = algorithm
        self.rng = np.random.default_rng(seed)
        self.minhash = isinstance(algorithm, MinHashLSH)
        width = algorithm.hasher.num_perm if self.minhash else 1
        self.recent = np.empty((0, width), dtype=np.uint32 if self.minhash else np.uint64)  # originals to copy

    def batch(self, start: int, n: int, prefix: str = "https://site.example/") -> list[tuple[str, bytes, np.ndarray]]:
        rng, width = self.rng, self.recent.shape[1]
        if self.minhash:
            sigs = rng.integers(0, 2**32, size=(n, width), dtype=np.uint32)
        else:
            sigs = rng.integers(0, 2**63, size=(n, 1), dtype=np.uint64) * np.uint64(2) + rng.integers(
                0, 2, size=(n, 1), dtype=np.uint64
            )
        near = np.flatnonzero(rng.random(n) < 0.2) if len(self.recent) else np.empty(0, dtype=np.int64)
        if len(near):
            sigs[near] = self.recent[rng.integers(0, len(self.recent), size=len(near))]
            if self.minhash:  # 20 of 128 values replaced: estimated Jaccard ~0.84
                cols = np.argsort(rng.random((len(near), width)), axis=1)[:, :20]
                sigs[near[:, None], cols] = rng.integers(0, 2**32, size=cols.shape, dtype=np.uint32)
            else:  # two bits flipped
                bits = np.argsort(rng.random((len(near), 64)), axis=1)[:, :2].astype(np.uint64)
                sigs[near, 0] ^= (np.uint64(1) << bits[:, 0]) ^ (np.uint64(1) << bits[:, 1])
        originals = np.setdiff1d(np.arange(n), near)
        self.recent = np.concatenate([self.recent, sigs[originals]])[-10_000:]
        algorithm = self.algorithm
        if self.minhash:
            keys = band_keys_many(sigs, algorithm.bands, algorithm.rows)
            blobs = [algorithm.hasher.to_bytes(sig, algorithm.signature_bits) for sig in sigs]
        else:
            keys = [algorithm.tables.keys(int(fp)) for fp in sigs[:, 0]]
            blobs = [SimHasher.to_bytes(int(fp)) for fp in sigs[:, 0]]
        return [(f"{prefix}{start + i:09d}/article.html", blobs[i], keys[i]) for i in range(n)]


def query_latencies(detector: Detector, synthetic: Synthetic, n: int) -> list[float]:
    """Seconds per lookup + verification of ``n`` new documents (nothing inserted)."""
    items = synthetic.batch(0, n, prefix="https://query.example/")
    store, out = detector.store, []
    for key, signature, buckets in items:
        started = time.perf_counter()
        found = store.lookup_many([(key, signature, buckets)])[0]
        detector.best_matches(Check(key, signature, buckets), found.candidates)
        out.append(time.perf_counter() - started)
    return out


def file_bytes(path: str) -> int:
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


def grow(args: argparse.Namespace, sizes: list[int]) -> list[dict[str, float]]:
    """One store grown through every size in turn; a row of figures per size."""
    algorithm = MinHashLSH(0.45) if args.algorithm == "minhash" else SimHashHamming(max_distance=3)
    path = os.path.join(args.dir or tempfile.mkdtemp(), f"bench-{args.algorithm}.db")
    url = "memory://" if args.store == "memory" else f"sqlite:///{path}"
    for p in (path, path + "-wal", path + "-shm"):
        if os.path.exists(p):
            os.remove(p)
    detector = Detector(algorithm, store_from_url(url, commit_every=10_000, commit_secs=5.0))
    gc.collect()
    base_rss = status_bytes("VmRSS")
    detector.open()
    synthetic = Synthetic(algorithm)
    queries = Synthetic(algorithm, seed=11)
    rows = []
    done, elapsed = 0, 0.0
    for size in sizes:
        step_docs, step_secs, longest = size - done, 0.0, 0.0
        while done < size:
            n = min(BATCH, size - done)
            items = synthetic.batch(done, n)
            started = time.perf_counter()
            detector.check_many(items)
            took = time.perf_counter() - started
            step_secs += took
            longest = max(longest, took)  # a batch that commits or merges (SQLite) or merges levels (memory)
            done += n
        started = time.perf_counter()
        detector.store.flush()
        step_secs += time.perf_counter() - started
        if args.store == "sqlite":  # measure the file at rest, its write-ahead log checkpointed
            detector.store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        elapsed += step_secs
        queries.recent = synthetic.recent  # a fifth of the queries are near-duplicates of stored documents
        lat = sorted(query_latencies(detector, queries, args.queries))
        row = {
            "size": size,
            "rate": step_docs / max(step_secs, 1e-9),
            "total_secs": elapsed,
            "p50_ms": statistics.median(lat) * 1e3,
            "p99_ms": lat[int(0.99 * (len(lat) - 1))] * 1e3,
            "longest_batch_s": longest,
            "file_per_doc": file_bytes(path) / size if args.store == "sqlite" else 0.0,
            "rss_per_doc": (status_bytes("VmRSS") - base_rss) / size,
            "peak_per_doc": (status_bytes("VmHWM") - base_rss) / size,
        }
        rows.append(row)
        print(
            f"{size:>11,} docs: {row['rate']:,.0f} docs/s, query p50 {row['p50_ms']:.3f} ms "
            f"p99 {row['p99_ms']:.3f} ms, longest batch {longest:.2f} s, file {row['file_per_doc']:.0f} B/doc, "
            f"RSS {row['rss_per_doc']:.0f} B/doc "
            f"(peak {row['peak_per_doc']:.0f})",
            file=sys.stderr,
            flush=True,
        )
    detector.close()
    for p in (path, path + "-wal", path + "-shm"):
        if os.path.exists(p):
            os.remove(p)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=("sqlite", "memory"), default="sqlite")
    parser.add_argument("--algorithm", choices=("minhash", "simhash"), default="minhash")
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=1, help="grow the store this many times; medians are shown")
    parser.add_argument("--dir", default=None, help="where the SQLite file goes (default: a temporary folder)")
    parser.add_argument("--plot", default=None, help="write a log-log plot of time and memory to this PNG")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    ctx = multiprocessing.get_context("fork")
    runs = []
    for _ in range(args.repeat):
        with ctx.Pool(1) as pool:  # a fresh process per run: resident memory starts from nothing
            runs.append(pool.apply(grow, (args, sizes)))
    rows = [{k: statistics.median(run[i][k] for run in runs) for k in runs[0][i]} for i in range(len(sizes))]

    params = MinHashLSH(0.45).params() if args.algorithm == "minhash" else SimHashHamming(max_distance=3).params()
    print(
        f"{args.store} store, {args.algorithm} ({params}), median of {args.repeat} run(s), "
        f"{time.strftime('%Y-%m-%d')}, Python {platform.python_version()}, {os.cpu_count()} CPUs\n"
    )
    print(
        "| documents | check-and-insert docs/s (this step) | total insert time s | query p50 ms | query p99 ms "
        "| longest batch s | file bytes/doc | RSS bytes/doc | peak RSS bytes/doc |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['size']:,.0f} | {r['rate']:,.0f} | {r['total_secs']:,.1f} | {r['p50_ms']:.3f} | {r['p99_ms']:.3f} "
            f"| {r['longest_batch_s']:.2f} | {r['file_per_doc']:,.0f} | {r['rss_per_doc']:,.0f} "
            f"| {r['peak_per_doc']:,.0f} |"
        )
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        xs = [r["size"] for r in rows]
        ax.loglog(xs, [r["total_secs"] for r in rows], "o-", label="total insert time (s)")
        ax.loglog(xs, [r["rss_per_doc"] * r["size"] / 2**20 for r in rows], "s-", label="resident memory (MiB)")
        if args.store == "sqlite":
            ax.loglog(xs, [r["file_per_doc"] * r["size"] / 2**20 for r in rows], "^-", label="file size (MiB)")
        ax.set_xlabel("documents")
        ax.set_title(f"{args.store} store, {args.algorithm} (median of {args.repeat})")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
