"""What the URL rules' bookkeeping costs a crawl process as a broad crawl meets more and more hosts.

    python3 dev.py bench bench/url_rules_hosts.py ../shared/neardup-dev [--hosts 10000 30000 100000] [--store sqlite]

The URL rules (``scrapy_neardup.engine.urlrules``) are proposed by near-duplicate verdicts, tried on every page
decided after them, and their counts are shared through the store every 200 pages or 2 seconds. This takes the
labelled set's real URLs: each cluster's original and the copies whose URL the rules explain (``?rev=``,
``?sid=``, ``?utm_source=``, ``/print``), and gives host *i* three clusters of the set (*3i*, *3i + 1*,
*3i + 2*, in turn) under a name of its own (``h<i>.example``), their originals decided first, then their
copies, as a crawl decides them (``Learner.observe`` with the verdict the labels give). The store is a SQLite
file (or the memory store), as a one-process crawl has it.

Printed as JSON for each number of hosts: the pages decided, the rules counted, the CPU microseconds a page of
the whole run and of its last tenth (what a page costs once the crawl has met that many hosts), the
median and longest sync (the counts added to the store and the others' read; a sync may meet a full
collection of the garbage collector), the bytes the rule book holds a host, the objects of it the collector
tracks (each full
collection of the crawl process walks them), and what a full collection costs with the book beside it, as
the median CPU milliseconds of three, and without it (the book let go).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from urllib.parse import urlsplit, urlunsplit

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from scrapy_neardup.assembly import build_rule_book
from scrapy_neardup.engine.urlrules import Learner, explain
from scrapy_neardup.offline.evaluation import load_manifest
from scrapy_neardup.settings import Config
from scrapy_neardup.store import MemoryStore, SqliteStore

META = {"format_version": 1, "algorithm": "bench"}


def real_clusters(dataset: str) -> list[tuple[str, list[str]]]:
    """Each cluster's original URL and the URLs of its copies the rules explain, as paths and queries."""
    by_cluster: dict[str, list[dict]] = defaultdict(list)
    for row in load_manifest(os.path.join(dataset, "manifest.jsonl")):
        by_cluster[row["cluster"]].append(row)
    out = []
    for rows in by_cluster.values():
        original = next((r["url"] for r in rows if r["kind"] == "original"), None)
        if original is None:
            continue
        copies = [r["url"] for r in rows if r["url"] != original and explain(r["url"], original)]
        if copies:
            out.append((original, copies))
    return out


def held_by(root: object) -> tuple[int, int]:
    """The objects reachable from ``root`` that the garbage collector tracks, and the bytes of every object
    reachable from it (``sys.getsizeof``; types, modules and functions not followed: they are the
    program's, not the book's)."""
    seen: set[int] = set()
    stack, count, size = [root], 0, 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (type, type(gc), type(on_host))):
            continue
        seen.add(id(obj))
        count += gc.is_tracked(obj)
        size += sys.getsizeof(obj)
        stack.extend(gc.get_referents(obj))
    return count, size


def full_collection_ms() -> float:
    times = []
    for _ in range(3):
        started = time.process_time()
        gc.collect()
        times.append(time.process_time() - started)
    return round(statistics.median(times) * 1000, 1)


def on_host(url: str, host: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, host, parts.path, parts.query, ""))


def run(clusters: list[tuple[str, list[str]]], hosts: int, store_kind: str, folder: str) -> dict:
    store = MemoryStore() if store_kind == "memory" else SqliteStore(os.path.join(folder, f"rules-{hosts}.sqlite3"))
    store.open(META)
    groups: dict[str, str] = {}
    learner = Learner(build_rule_book(Config.from_settings({"NEARDUP_ENABLED": True})), store.rules, groups.get)
    pages, syncs, times = 0, [], []
    started = time.process_time()
    for i in range(hosts):
        host = f"h{i}.example"
        chosen = [clusters[(3 * i + k) % len(clusters)] for k in range(3)]
        decided = [(on_host(original, host), "unique", None) for original, _ in chosen]
        decided += [(on_host(copy, host), "duplicate", on_host(o, host)) for o, copies in chosen for copy in copies]
        for url, status, canonical in decided:
            groups[url] = canonical or url
            before = time.process_time()
            synced = learner.observe(url, status, canonical or url)
            now = time.process_time()
            times.append(now - before)
            if synced:
                syncs.append(now - before)
            pages += 1
    total = time.process_time() - started
    last = times[-max(1, len(times) // 10) :]
    rules = sum(len(r) for r in learner.book.counts.values())
    (tracked, size), with_book = held_by(learner.book), full_collection_ms()
    store.close()
    del learner
    without_book = full_collection_ms()
    return {
        "hosts": hosts,
        "pages": pages,
        "rules_counted": rules,
        "cpu_us_per_page": round(total / pages * 1e6, 1),
        "cpu_us_per_page_last_tenth": round(sum(last) / len(last) * 1e6, 1),
        "syncs": len(syncs),
        "median_sync_ms": round(statistics.median(syncs) * 1000, 2) if syncs else 0.0,
        "longest_sync_ms": round(max(syncs, default=0.0) * 1000, 1),
        "book_objects_tracked": tracked,
        "book_bytes_a_host": round(size / hosts),
        "full_collection_ms_with_book": with_book,
        "full_collection_ms_without": without_book,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", help="a labelled set (neardup-dev's format)")
    parser.add_argument("--hosts", type=int, nargs="+", default=[10_000, 30_000, 100_000])
    parser.add_argument("--store", choices=("sqlite", "memory"), default="sqlite")
    args = parser.parse_args()
    clusters = real_clusters(args.dataset)
    with tempfile.TemporaryDirectory() as folder:
        runs = [run(clusters, hosts, args.store, folder) for hosts in args.hosts]
    print(
        json.dumps(
            {"command": "bench/url_rules_hosts.py " + " ".join(sys.argv[1:]), "clusters": len(clusters), "runs": runs},
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
