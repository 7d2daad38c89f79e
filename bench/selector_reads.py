"""What reading the store's learned selectors costs a crawl process: every record, or those changed since its mark.

    python3 dev.py bench bench/selector_reads.py DIR [--selectors 20000] [--changed 10] [--repeat 5]

A crawl process reads the selectors other processes learned every 10 seconds, and at once after it learned or
retired one itself (``scrapy_neardup.crawl.templates``); a broad crawl's store holds tens of thousands of them.
DIR is a template-rich set (``bench/template_site.py``): its first 1,200 pages (the order ``shuffled-1``) are
learned as a crawl learns them, and the selectors' real JSON records are saved under ``--selectors`` names
(the same records under other hosts) in a Redis store (a ``redis-server`` from the PATH, started here on a
free port with nothing saved to disk) and in a SQLite file. Then, for each, in ``--repeat`` rounds: a read of
every record (``read_changed(None)``, each record parsed as the crawl parses it, ``Selector.from_json``), and
a read of what changed since the mark after a second store object (another process) saved ``--changed``
records. Printed as JSON: the median CPU and wall milliseconds of each read, and the records each returned;
and what a crawl process holds for the selectors it adopted (every record read, each parsed and adopted by
a learner as ``LearnedTemplates.adopt`` adopts them): bytes a selector (``tracemalloc``) and the objects the
garbage collector tracks a selector.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_crawl
import learner_passes

from scrapy_neardup.assembly import build_pipeline, build_template_learner
from scrapy_neardup.engine.learned import Selector
from scrapy_neardup.offline.evaluation import load_manifest
from scrapy_neardup.settings import Config
from scrapy_neardup.store import SqliteStore, Store

META = {"format_version": 1, "algorithm": "bench"}
LEARNED_FROM = 1200


def real_records(dataset: str, count: int) -> dict[str, str]:
    """``count`` selector records: the set's selectors as a crawl learns them, each under hosts of its own."""
    config = Config.from_settings({"NEARDUP_ENABLED": True})
    pipeline, learner = build_pipeline(config), build_template_learner(config)
    assert learner is not None
    manifest = load_manifest(os.path.join(dataset, "manifest.jsonl"))
    pages = learner_passes.PageReader(dataset, manifest)
    for path in bench_crawl.crawl_orders(manifest, ["shuffled-1"])["shuffled-1"][:LEARNED_FROM]:
        learner_passes.learn_from(pipeline, learner, pages[path], learner_passes.BASE + path)
    learned = [json.loads(s.to_json()) for s in learner.selectors()]
    if not learned:
        raise SystemExit(f"no selector was learned from the first {LEARNED_FROM} pages of {dataset}")
    records = {}
    for i in range(count):
        record = dict(learned[i % len(learned)], host=f"h{i}.example")
        records[f"h{i}.example\t{record['template']:x}"] = json.dumps(record)
    return records


def timed_read(store: Store, mark: int | None) -> tuple[float, float, int, int]:
    """CPU and wall milliseconds of one read and the parse of what it returned, its records, its mark."""
    cpu, wall = time.process_time(), time.perf_counter()
    stored, after = store.selectors.read_changed(mark)
    parsed = [Selector.from_json(text) for text in stored.values()]
    assert all(p is not None for p in parsed)
    return (time.process_time() - cpu) * 1000, (time.perf_counter() - wall) * 1000, len(stored), after


def measure(one: Store, two: Store, records: dict[str, str], changed: int, repeat: int) -> dict:
    """Full reads and reads of what ``two`` saved since ``one``'s mark (``two`` may be ``one``)."""
    one.selectors.save(records)
    names = list(records)
    full, since = [], []
    for round_ in range(repeat):
        cpu, wall, count, mark = timed_read(one, None)
        full.append((cpu, wall, count))
        two.selectors.save({name: records[name] for name in names[round_ * changed : (round_ + 1) * changed]})
        since.append(timed_read(one, mark)[:3])

    def summary(reads: list[tuple[float, float, int]]) -> dict:
        return {
            "cpu_ms": round(statistics.median(r[0] for r in reads), 2),
            "wall_ms": round(statistics.median(r[1] for r in reads), 2),
            "records": statistics.median(r[2] for r in reads),
        }

    return {"every_record": summary(full), "changed_since_mark": summary(since)}


def adopted_memory(records: dict[str, str]) -> dict:
    """Bytes and tracked objects a selector, as a crawl process's learner holds every record it adopted."""
    learner = build_template_learner(Config.from_settings({"NEARDUP_ENABLED": True}))
    assert learner is not None
    gc.collect()
    objects = len(gc.get_objects())
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    taken = learner.adopt([record for text in records.values() if (record := Selector.from_json(text))])
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    tracked = len(gc.get_objects()) - objects
    return {
        "adopted": taken,
        "bytes_a_selector": round(held / taken),
        "objects_tracked_a_selector": round(tracked / taken, 2),
    }


def redis_server(folder: str) -> tuple[subprocess.Popen, str]:
    binary = shutil.which("redis-server") or shutil.which("valkey-server")
    if binary is None:
        raise SystemExit("no redis-server or valkey-server on the PATH")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", folder],
        stdout=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    for _ in range(100):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.1):
                return server, url
        except OSError:
            time.sleep(0.05)
    server.kill()
    raise SystemExit(f"{binary} did not start")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", help="a template-rich set (bench/template_site.py)")
    parser.add_argument("--selectors", type=int, default=20_000, help="selector records in the store")
    parser.add_argument("--changed", type=int, default=10, help="records another process saves between reads")
    parser.add_argument("--repeat", type=int, default=5, help="rounds (medians)")
    args = parser.parse_args()
    records = real_records(args.dataset, args.selectors)
    from scrapy_neardup.store.redis import RedisStore

    out: dict = {
        "command": "bench/selector_reads.py " + " ".join(sys.argv[1:]),
        "selectors": len(records),
        "mean_record_bytes": round(sum(map(len, records.values())) / len(records)),
    }
    with tempfile.TemporaryDirectory() as folder:
        server, url = redis_server(folder)
        try:
            one, two = RedisStore(url, prefix="bench:{sel}"), RedisStore(url, prefix="bench:{sel}")
            for store in (one, two):
                store.open(META)
            out["redis"] = measure(one, two, records, args.changed, args.repeat)
            for store in (one, two):
                store.close()
        finally:
            server.kill()
            server.wait()
        sqlite = SqliteStore(os.path.join(folder, "store.sqlite3"))
        sqlite.open(META)
        out["sqlite"] = measure(sqlite, sqlite, records, args.changed, args.repeat)
        sqlite.close()
    out["in_memory"] = adopted_memory(records)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
