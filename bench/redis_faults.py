"""What each Redis fault costs the store, on every server of the test matrix (tests/helpers/redis_server.py).

    python3 dev.py bench bench/redis_faults.py [--docs 3000] [--repeat 3]

For each server kind and each fault, one process checks-and-inserts ``--docs`` distinct documents (MinHash,
the product's defaults, batches of 16 as a crawl's store thread sends them) on a server of its own with its
AOF on (``appendfsync always``); the fault is injected by another thread when a third of them are filed.
Printed per fault, medians of ``--repeat`` runs: documents that failed (each would be a page passed on
unchecked, ``neardup/store_error``), the longest batch (the stall the crawl sees), the whole run against the
same run without a fault (the extra seconds), how often the scripts were loaded again, and whether a second
pass finds every acknowledged document (each one *seen*).

Faults: ``script flush`` (SCRIPT FLUSH), ``client kill`` (CLIENT KILL TYPE normal), ``restart`` (SIGTERM,
then start again on the same AOF), ``kill -9`` (SIGKILL, then start again), ``no persistence`` (SIGKILL,
the AOF deleted, start again: the index is gone, the documents are filed again), ``pause 2.5 s`` (CLIENT
PAUSE longer than the default retries last: 0.2 + 0.4 + 0.8 s of back-off after each timed-out try, with
the default 5 s timeout a try waits out the pause).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from helpers.redis_server import RedisServer, server_kinds  # noqa: E402

from scrapy_neardup.assembly import build_algorithm, new_detector  # noqa: E402
from scrapy_neardup.settings import Config  # noqa: E402
from scrapy_neardup.store import StoreError  # noqa: E402
from scrapy_neardup.store.redis import RedisStore  # noqa: E402

FAULTS = ["none", "script flush", "client kill", "restart", "kill -9", "no persistence", "pause 2.5 s"]
BATCH = 16


def texts(n: int, seed: int) -> list[str]:
    import random

    rng = random.Random(seed)
    return [" ".join(f"w{rng.randrange(200_000)}" for _ in range(300)) for _ in range(n)]


def inject(server: RedisServer, fault: str) -> None:
    if fault == "script flush":
        server.cli("SCRIPT", "FLUSH")
    elif fault == "client kill":
        server.cli("CLIENT", "KILL", "TYPE", "normal")
    elif fault == "restart":
        server.stop()
        server.start()
    elif fault == "kill -9":
        server.kill()
        server.start()
    elif fault == "no persistence":
        server.kill()
        shutil.rmtree(server.directory)
        server.start()
    elif fault == "pause 2.5 s":
        server.cli("CLIENT", "PAUSE", "2500", "ALL")


def run(kind, fault: str, fingerprints, workdir: str) -> dict:
    server = RedisServer(tempfile.mkdtemp(dir=workdir), persistent=True, kind=kind).start()
    config = Config.from_settings({"NEARDUP_ENABLED": True})
    store = RedisStore(
        server.url, prefix="faults:{bench}", retries=config.redis_retries, timeout_secs=config.redis_timeout_secs
    )
    detector = new_detector(config, build_algorithm(config), store)
    detector.open()
    failed, longest, fired = 0, 0.0, threading.Event()
    started = time.perf_counter()
    try:
        for start in range(0, len(fingerprints), BATCH):
            if not fired.is_set() and start >= len(fingerprints) // 3 and fault != "none":
                fired.set()
                threading.Thread(target=inject, args=(server, fault)).start()
                time.sleep(0.01)  # the fault lands while batches are in flight
            batch = fingerprints[start : start + BATCH]
            began = time.perf_counter()
            try:
                detector.check_many(batch)
            except StoreError:
                failed += len(batch)
            longest = max(longest, time.perf_counter() - began)
        seconds = time.perf_counter() - started
        again = detector.check_many(fingerprints)
        seen = sum(v.status == "seen" for v in again)
        reloaded = store.scripts_reloaded
    finally:
        detector.close()
        server.stop()
    return {"failed": failed, "longest_batch_s": longest, "seconds": seconds, "reloaded": reloaded, "seen_after": seen}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    algorithm = build_algorithm(Config.from_settings({"NEARDUP_ENABLED": True}))
    fingerprints = [
        (f"http://bench/{i}", fp.signature, fp.buckets)
        for i, fp in enumerate(map(algorithm.fingerprint, texts(args.docs, 1)))
    ]
    workdir = tempfile.mkdtemp(prefix="redis-faults-")
    out: dict[str, dict] = {}
    try:
        for kind in server_kinds():
            rows: dict[str, dict] = {}
            for fault in FAULTS:
                runs = [run(kind, fault, fingerprints, workdir) for _ in range(args.repeat)]
                rows[fault] = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
            base = rows["none"]["seconds"]
            for row in rows.values():
                row["extra_s"] = round(row["seconds"] - base, 2)
                row["longest_batch_s"] = round(row["longest_batch_s"], 2)
                row["seconds"] = round(row["seconds"], 2)
            out[kind.name] = rows
            print(kind.name, json.dumps(rows), file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(
        json.dumps(
            {
                "command": " ".join(["bench/redis_faults.py", *sys.argv[1:]]),
                "docs": args.docs,
                "repeat": args.repeat,
                "servers": out,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
