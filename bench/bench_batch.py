"""Batch near-duplicate detection, side by side: scrapy-neardup against datasketch, rensa and simhash.

    python3 dev.py bench bench/bench_batch.py [--docs 5000] [--repeat 3] [--workers 2] [--out FILE.md]

One job, built on each library the way a user would build it: read JSON lines ``{"url", "text"}``, turn
each text into a signature, query the index and insert, write the near-duplicate pairs. MinHash jobs use
128 permutations, word 5-shingles and threshold 0.8; SimHash jobs 64 bits and Hamming distance 3. The
corpus is synthetic (``--docs`` documents of ~7.7 KB from a Zipf vocabulary, a fifth of them lightly edited
copies of others) unless ``--corpus FILE.jsonl`` is given. Each job runs ``--repeat`` times in this one
run; the table shows medians and the ratio to scrapy-neardup's time. scrapy-neardup runs as its real CLI
(``scrapy-neardup dedup``, process start-up included), with 1 worker and with ``--workers``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

HERE = os.path.dirname(os.path.abspath(__file__))


def make_corpus(path: str, docs: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(30_000)]
    weights = [1.0 / (rank + 1) for rank in range(len(vocab))]
    originals: list[list[str]] = []
    with open(path, "w", encoding="utf-8") as f:
        for i in range(docs):
            if originals and rng.random() < 0.2:
                words = list(rng.choice(originals))
                for j in rng.sample(range(len(words)), max(1, len(words) // 100)):
                    words[j] = rng.choice(vocab)
            else:
                words = rng.choices(vocab, weights, k=1250)
                originals.append(words)
            f.write(json.dumps({"url": f"https://example.com/{i}", "text": " ".join(words)}) + "\n")


def read_docs(path: str) -> list[tuple[str, str]]:
    with open(path, encoding="utf-8") as f:
        return [(d["url"], d["text"]) for d in map(json.loads, f)]


def shingles(text: str, k: int = 5) -> list[str]:
    words = text.lower().split()
    return [" ".join(words[i : i + k]) for i in range(max(len(words) - k + 1, 1))]


def job_datasketch(path: str, out: str, bulk: bool) -> int:
    from datasketch import MinHash, MinHashLSH

    docs = read_docs(path)
    lsh = MinHashLSH(threshold=0.8, num_perm=128)
    pairs = 0
    with open(out, "w") as f:
        if bulk:
            sets = [[s.encode() for s in set(shingles(text))] for _, text in docs]
            hashes = MinHash.bulk(sets, num_perm=128)
        for i, (url, text) in enumerate(docs):
            if bulk:
                m = hashes[i]
            else:
                m = MinHash(num_perm=128)
                m.update_batch([s.encode() for s in set(shingles(text))])
            for other in lsh.query(m):
                f.write(f"{url}\t{other}\n")
                pairs += 1
            lsh.insert(url, m)
    return pairs


def job_rensa(path: str, out: str) -> int:
    from rensa import RMinHash, RMinHashLSH

    docs = read_docs(path)
    lsh = RMinHashLSH(threshold=0.8, num_perm=128, num_bands=16)
    pairs = 0
    with open(out, "w") as f:
        for i, (url, text) in enumerate(docs):
            m = RMinHash(num_perm=128, seed=42)
            m.update(shingles(text))
            for other in lsh.query(m):
                f.write(f"{url}\t{docs[other][0]}\n")
                pairs += 1
            lsh.insert(i, m)
    return pairs


def job_simhash_package(path: str, out: str) -> int:
    from simhash import Simhash, SimhashIndex

    docs = read_docs(path)
    index = SimhashIndex([], k=3)
    pairs = 0
    with open(out, "w") as f:
        for url, text in docs:
            h = Simhash(text.lower().split())
            for other in index.get_near_dups(h):
                f.write(f"{url}\t{other}\n")
                pairs += 1
            index.add(url, h)
    return pairs


def job_neardup_cli(path: str, out: str, algorithm: str, workers: int) -> int:
    cli = [sys.executable, "-m", "scrapy_neardup.cli", "dedup", path, "-o", out, "--workers", str(workers),
           "--algorithm", algorithm, "--no-progress"]
    if algorithm == "minhash":
        cli += ["--threshold", "0.8", "--shingle-size", "5", "--min-text-length", "1"]
    else:
        cli += ["--max-distance", "3", "--shingle-size", "1", "--min-text-length", "1"]
    subprocess.run(cli, check=True, capture_output=True)
    with open(out) as f:
        return sum(1 for _ in f)


def timed(fn: Callable[[], int], repeat: int) -> tuple[float, int]:
    times, found = [], 0
    for _ in range(repeat):
        started = time.perf_counter()
        found = fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times), found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--corpus", help="JSON lines {url, text} instead of the synthetic corpus")
    parser.add_argument("--out", help="also write the table (markdown) to this file")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp()
    corpus = args.corpus or os.path.join(tmp, "corpus.jsonl")
    if not args.corpus:
        make_corpus(corpus, args.docs)
    n = sum(1 for _ in open(corpus))
    size_kb = os.path.getsize(corpus) / n / 1024
    out = os.path.join(tmp, "pairs.tsv")
    jobs: list[tuple[str, str, Callable[[], int]]] = [
        ("minhash", f"scrapy-neardup dedup, 1 worker", lambda: job_neardup_cli(corpus, out, "minhash", 1)),
        ("minhash", f"scrapy-neardup dedup, {args.workers} workers",
         lambda: job_neardup_cli(corpus, out, "minhash", args.workers)),
        ("minhash", "datasketch MinHash.update_batch + MinHashLSH", lambda: job_datasketch(corpus, out, False)),
        ("minhash", "datasketch MinHash.bulk + MinHashLSH", lambda: job_datasketch(corpus, out, True)),
        ("minhash", "rensa RMinHash + RMinHashLSH", lambda: job_rensa(corpus, out)),
        ("simhash", f"scrapy-neardup dedup --algorithm simhash, 1 worker",
         lambda: job_neardup_cli(corpus, out, "simhash", 1)),
        ("simhash", f"scrapy-neardup dedup --algorithm simhash, {args.workers} workers",
         lambda: job_neardup_cli(corpus, out, "simhash", args.workers)),
        ("simhash", "simhash Simhash + SimhashIndex(k=3)", lambda: job_simhash_package(corpus, out)),
    ]
    results = []
    for family, name, fn in jobs:
        seconds, pairs = timed(fn, args.repeat)
        results.append((family, name, seconds, pairs))
        print(f"{name}: {seconds:.2f} s, {pairs} pairs", file=sys.stderr, flush=True)
    lines = [
        f"{n} documents of {size_kb:.1f} KB, median of {args.repeat} runs; {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}",
        "",
        "| job | seconds | docs/s | pairs | time / scrapy-neardup (1 worker) |",
        "|---|---|---|---|---|",
    ]
    for family in ("minhash", "simhash"):
        base = next(s for f, name, s, _ in results if f == family and "1 worker" in name)
        for f, name, seconds, pairs in results:
            if f == family:
                lines.append(f"| {name} | {seconds:.2f} | {n / seconds:,.0f} | {pairs} | {seconds / base:.2f}x |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
