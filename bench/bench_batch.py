"""Batch near-duplicate detection, side by side: scrapy-neardup against datasketch, rensa and simhash.

    python3 dev.py bench bench/bench_batch.py ../shared/neardup-dev [--docs 5000] [--repeat 3] [--out FILE.md]

One job, built on each library the way its documentation shows: read JSON lines ``{"url", "text"}``, turn
each text into a signature, query the index and insert, write the near-duplicate pairs. MinHash jobs use
128 permutations, word 5-shingles and threshold 0.8 (rensa with 16 bands); SimHash jobs 64 bits and
Hamming distance 3, the ``simhash`` package on ``Simhash(text)`` (its default character features) with a
``SimhashIndex(k=3)``.

Two corpora, two tables. The headline is **real text**: ``--docs`` documents of about 7 KB made by
``../shared/bench/textcorpus.py`` from the paragraphs of neardup-dev's original pages (a fifth of them
near-duplicates with 2% of words replaced). The second is synthetic (a Zipf vocabulary, a fifth lightly
edited copies), which flatters every library. ``--corpus FILE.jsonl`` times one corpus of your own.

Each job runs ``--repeat`` times in this one run, the jobs alternating (A B C ... A B C ...), so that a
slow minute of a shared machine falls on all of them; the tables show medians, the range, and the ratio of
each peer's time to scrapy-neardup's with the default workers (one per CPU) and with one worker.
scrapy-neardup runs as its real CLI (``scrapy-neardup dedup``, process start-up included); the peers run
inside this process, so they pay no start-up.
"""

from __future__ import annotations

import argparse
import json
import logging
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

    logging.getLogger("simhash").setLevel(logging.ERROR)  # one "Big bucket found" line per large bucket
    docs = read_docs(path)
    index = SimhashIndex([], k=3)
    pairs = 0
    with open(out, "w") as f:
        for url, text in docs:
            h = Simhash(text)
            for other in index.get_near_dups(h):
                f.write(f"{url}\t{other}\n")
                pairs += 1
            index.add(url, h)
    return pairs


def job_neardup_cli(path: str, out: str, algorithm: str, workers: int) -> int:
    cli = [
        sys.executable,
        "-m",
        "scrapy_neardup.offline.cli",
        "dedup",
        path,
        "-o",
        out,
        "--workers",
        str(workers),
        "--algorithm",
        algorithm,
        "--no-progress",
    ]
    if algorithm == "minhash":
        cli += ["--threshold", "0.8", "--shingle-size", "5", "--min-text-length", "1"]
    else:
        cli += ["--max-distance", "3", "--shingle-size", "1", "--min-text-length", "1"]
    subprocess.run(cli, check=True, capture_output=True)
    with open(out) as f:
        return sum(1 for _ in f)


def real_corpus(dev: str, docs: int, directory: str) -> str:
    """The real-text corpus of ``../shared/bench/textcorpus.py``, made once per size in ``directory``."""
    path = os.path.join(directory, f"texts{docs}.jsonl")
    if not os.path.exists(path):
        script = os.path.join(os.path.dirname(os.path.abspath(dev)), "bench", "textcorpus.py")
        subprocess.run([sys.executable, script, dev, str(docs), path + ".part"], check=True)
        os.replace(path + ".part", path)
    return path


def run_jobs(corpus: str, workers: int, repeat: int) -> list[tuple[str, str, list[float], int]]:
    out = os.path.join(os.path.dirname(corpus), "pairs.tsv")
    jobs: list[tuple[str, str, Callable[[], int]]] = [
        ("minhash", "scrapy-neardup dedup, 1 worker", lambda: job_neardup_cli(corpus, out, "minhash", 1)),
        (
            "minhash",
            f"**scrapy-neardup dedup, {workers} workers** (default: one per CPU)",
            lambda: job_neardup_cli(corpus, out, "minhash", workers),
        ),
        ("minhash", "datasketch MinHash.update_batch + MinHashLSH", lambda: job_datasketch(corpus, out, False)),
        ("minhash", "datasketch MinHash.bulk + MinHashLSH", lambda: job_datasketch(corpus, out, True)),
        ("minhash", "rensa RMinHash + RMinHashLSH", lambda: job_rensa(corpus, out)),
        (
            "simhash",
            "scrapy-neardup dedup --algorithm simhash, 1 worker",
            lambda: job_neardup_cli(corpus, out, "simhash", 1),
        ),
        (
            "simhash",
            f"**scrapy-neardup dedup --algorithm simhash, {workers} workers**",
            lambda: job_neardup_cli(corpus, out, "simhash", workers),
        ),
        ("simhash", "simhash Simhash(text) + SimhashIndex(k=3)", lambda: job_simhash_package(corpus, out)),
    ]
    times: list[list[float]] = [[] for _ in jobs]
    found = [0] * len(jobs)
    for round_ in range(repeat):
        for i, (_, name, fn) in enumerate(jobs):
            started = time.perf_counter()
            found[i] = fn()
            times[i].append(time.perf_counter() - started)
            print(f"round {round_ + 1}: {name}: {times[i][-1]:.2f} s, {found[i]} pairs", file=sys.stderr, flush=True)
    return [(family, name, t, n) for (family, name, _), t, n in zip(jobs, times, found)]


def table(title: str, corpus: str, results: list[tuple[str, str, list[float], int]], repeat: int) -> str:
    with open(corpus, encoding="utf-8") as f:
        n = sum(1 for _ in f)
    size_kb = os.path.getsize(corpus) / n / 1024
    lines = [
        f"### {title}: {n:,} documents of {size_kb:.1f} KB",
        "",
        f"Median of {repeat} alternating runs; {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"{time.strftime('%Y-%m-%d')}.",
        "",
        "| job | seconds (median) | range | docs/s | pairs | peer time ÷ ours, default workers | ÷ ours, 1 worker |",
        "|---|---|---|---|---|---|---|",
    ]
    for family in ("minhash", "simhash"):
        rows = [r for r in results if r[0] == family]
        one = statistics.median(rows[0][2])
        default = statistics.median(rows[1][2])
        for i, (_, name, times, pairs) in enumerate(rows):
            median = statistics.median(times)
            ratio = f"**{median / default:.2f}×** | {median / one:.2f}×" if i >= 2 else "— | —"
            lines.append(
                f"| {name} | {median:.2f} | {min(times):.2f}–{max(times):.2f} | {n / median:,.0f} | "
                f"{pairs:,} | {ratio} |"
            )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dev", nargs="?", help="neardup-dev's folder: the real-text corpus is made from it")
    parser.add_argument("--docs", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--corpus", help="time this JSON lines file {url, text} only")
    parser.add_argument("--no-synthetic", action="store_true", help="leave out the synthetic table")
    parser.add_argument("--out", help="also write the tables (markdown) to this file")
    args = parser.parse_args()
    if not (args.dev or args.corpus):
        parser.error("give neardup-dev's folder (real text, the headline) or --corpus FILE.jsonl")
    tmp = tempfile.mkdtemp(prefix="bench-batch-")
    corpora: list[tuple[str, str]] = []
    if args.corpus:
        corpora.append(("Your corpus", args.corpus))
    else:
        corpora.append(("Real text (neardup-dev paragraphs, textcorpus.py)", real_corpus(args.dev, args.docs, tmp)))
        if not args.no_synthetic:
            synthetic = os.path.join(tmp, "synthetic.jsonl")
            make_corpus(synthetic, args.docs)
            corpora.append(("Synthetic text (Zipf vocabulary)", synthetic))
    tables = [table(title, path, run_jobs(path, args.workers, args.repeat), args.repeat) for title, path in corpora]
    text = "\n\n".join(tables)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
