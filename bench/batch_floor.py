"""The floor of the batch job: each step of ``scrapy-neardup dedup`` timed alone on the same corpus.

    python3 dev.py bench bench/batch_floor.py ../shared/neardup-dev [--docs 5000] [--repeat 5]

On the real-text corpus of ``bench_batch.py`` (``../shared/bench/textcorpus.py``: 5,000 documents of about
7 KB), one core, in this process: reading and decoding the JSON lines, normalising (NFKC, case folding),
finding the tokens, hashing them, hashing the word 5-shingles, the MinHash sketch (one permutation, and the
128 permutations of the older format for comparison), the LSH band keys and the SimHash fingerprint. Next
to them, what a compiled hash costs on the same bytes (``mmh3.hash128`` over each text's UTF-8, in GB/s),
the whole per-document work as the CLI's workers do it, and the whole CLI job (process start-up, the
store and the output included) at one worker and at one per CPU. Medians of ``--repeat`` passes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import mmh3
from bench_batch import real_corpus

from scrapy_neardup.assembly import build_algorithm, build_pipeline
from scrapy_neardup.engine import text as T
from scrapy_neardup.engine.hamming import SimHasher
from scrapy_neardup.engine.lsh import band_keys
from scrapy_neardup.engine.minwise import MinHasher, OnePermutationHasher
from scrapy_neardup.settings import Config


def median_seconds(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def cli_seconds(corpus: str, workers: int, repeat: int) -> float:
    out = os.path.join(os.path.dirname(corpus), "floor-pairs.tsv")
    cmd = [
        sys.executable,
        "-m",
        "scrapy_neardup.offline.cli",
        "dedup",
        corpus,
        "-o",
        out,
        "--workers",
        str(workers),
        "--threshold",
        "0.8",
        "--shingle-size",
        "5",
        "--min-text-length",
        "1",
        "--no-progress",
    ]
    return median_seconds(lambda: subprocess.run(cmd, check=True, capture_output=True), repeat)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dev", help="neardup-dev's folder (the corpus is made from it)")
    parser.add_argument("--docs", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    corpus = real_corpus(args.dev, args.docs, tempfile.mkdtemp(prefix="bench-floor-"))
    with open(corpus, "rb") as f:
        lines = f.readlines()
    texts = [json.loads(line)["text"] for line in lines]
    n = len(texts)
    megabytes = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    algorithm = build_algorithm(Config.from_settings({"NEARDUP_THRESHOLD": 0.8, "NEARDUP_SHINGLE_SIZE": 5}))
    bands, rows = algorithm.bands, algorithm.rows  # type: ignore[attr-defined]
    one, many, sim = OnePermutationHasher(128, 1), MinHasher(128, 1), SimHasher()
    normal = [T.normalize(t) for t in texts]
    spans = [T.token_spans(t) for t in normal]
    tokens = [T.span_hashes(*s) for s in spans]
    shingles = [T.shingle_hashes(t, 5) for t in tokens]
    sketches = [one.signature(s) for s in shingles]
    encoded = [t.encode("utf-8") for t in texts]
    pipeline = build_pipeline(
        Config.from_settings({"NEARDUP_THRESHOLD": 0.8, "NEARDUP_SHINGLE_SIZE": 5, "NEARDUP_MIN_TEXT_LENGTH": 1})
    )
    steps: list[tuple[str, Callable[[], object]]] = [
        ("read and decode the JSON lines", lambda: [json.loads(line.decode("utf-8")) for line in lines]),
        ("normalise (NFKC, case fold)", lambda: [T.normalize(t) for t in texts]),
        ("find the tokens", lambda: [T.token_spans(t) for t in normal]),
        ("hash the tokens", lambda: [T.span_hashes(*s) for s in spans]),
        ("hash the word 5-shingles", lambda: [T.shingle_hashes(t, 5) for t in tokens]),
        ("MinHash sketch, one permutation (default)", lambda: [one.signature(s) for s in shingles]),
        ("MinHash sketch, 128 permutations (format 2)", lambda: [many.signature(s) for s in shingles]),
        (f"LSH band keys ({bands} x {rows})", lambda: [band_keys(s, bands, rows) for s in sketches]),
        ("SimHash fingerprint (words)", lambda: [sim.fingerprint(t) for t in tokens]),
        ("reference: mmh3.hash128 of each text's UTF-8", lambda: [mmh3.hash128(b) for b in encoded]),
        (
            "**a worker's whole work per document** (text to fingerprint)",
            lambda: [pipeline.from_text(t) for t in texts],
        ),
    ]
    print(f"{n:,} documents, {megabytes:.1f} MB of UTF-8 text; median of {args.repeat} passes, one core\n")
    print("| step | seconds for the corpus | µs per document | MB/s |")
    print("|---|---|---|---|")
    for name, fn in steps:
        seconds = median_seconds(fn, args.repeat)
        print(f"| {name} | {seconds:.3f} | {seconds / n * 1e6:.1f} | {megabytes / seconds:,.0f} |", flush=True)
    for workers in sorted({1, os.cpu_count() or 1}):
        seconds = cli_seconds(corpus, workers, max(3, args.repeat // 2))
        print(
            f"| whole CLI job, {workers} worker{'s' if workers > 1 else ''} (start-up, store, output included) | "
            f"{seconds:.3f} | {seconds / n * 1e6:.1f} | {megabytes / seconds:,.0f} |",
            flush=True,
        )
    start = median_seconds(
        lambda: subprocess.run(
            [sys.executable, "-m", "scrapy_neardup.offline.cli", "--version"], check=True, capture_output=True
        ),
        args.repeat,
    )
    print(f"| CLI start-up (`scrapy-neardup --version`) | {start:.3f} | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
