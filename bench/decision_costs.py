"""A probe: what a page's decision costs the crawler's reactor, in a CPU-bound crawl and alone, warm and cold.

    python3 dev.py bench bench/decision_costs.py DIR --texts TEXTS.jsonl [--pages 3600] [--repeat 5]

``DIR``: one crawl as ``bench_crawl.py`` times it (its local site, 2 workers, tag mode, SQLite, 32
concurrent requests, shuffled), with the decision's steps wrapped to read the reactor thread's CPU time
around each call: the whole decision (``StoreThread._decide``: the template guard, the declared page, the
check-and-insert, the URL rules and the learned templates' bookkeeping), the check-and-insert
(``Detector.check_many``), the store's lookup (``SqliteStore.lookup_many``), its SQL reads
(``_select_in``), its writes (``_insert``) and the staged index's lookup (``LevelIndex.lookup``):
microseconds a call, calls, seconds.

``--texts``: the same decision code (the decision loop on a new SQLite store, one page at a time as a crawl
decides them; documents given as text, which the template guard leaves alone) over the first ``--pages``
texts of a JSONL of ``{url, text}`` (``../shared/bench/textcorpus.py`` makes one), fingerprinted first:
microseconds a page, back to back (``warm``), and with the CPU's caches swept (16 MB written, a small HTML
page parsed by lxml) before every 1, 2, 4 and 8 decisions, as a crawl's other work sweeps them between its
decisions. Medians of ``--repeat`` rounds.

A decision that costs several times more in the crawl than back to back is paying for cold caches, which
less work per decision (fewer numpy calls, fewer SQL statements) reduces and doing the same work in
fewer places does not. This probe reads the plugin's internals (the methods it wraps).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_crawl

#: What the crawl's part times: (class, method) by import path.
WRAPPED = (
    ("scrapy_neardup.crawl.storethread", "StoreThread", "_decide"),
    ("scrapy_neardup.engine.detector", "Detector", "check_many"),
    ("scrapy_neardup.store.sqlite.store", "SqliteStore", "lookup_many"),
    ("scrapy_neardup.store.sqlite.store", "SqliteStore", "_select_in"),
    ("scrapy_neardup.store.sqlite.store", "SqliteStore", "_insert"),
    ("scrapy_neardup.store.compact", "LevelIndex", "lookup"),
)


def in_crawl(dataset: str) -> dict[str, Any]:
    """One crawl of ``dataset`` with the decision's steps timed on the reactor thread's CPU clock."""
    import importlib

    spent: dict[str, list[float]] = {}
    out = os.path.join(tempfile.mkdtemp(), "steps.json")

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            began = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                step = spent.setdefault(name, [0, 0.0])
                step[0] += 1
                step[1] += time.thread_time() - began

        return call

    for module, cls_name, method in WRAPPED:
        cls = getattr(importlib.import_module(module), cls_name)
        setattr(cls, method, timed(f"{cls_name}.{method}", getattr(cls, method)))

    def probed(crawl: Callable[..., None]) -> Callable[..., None]:
        def run(*args: Any) -> None:
            try:
                crawl(*args)
            finally:
                with open(out, "w") as f:
                    json.dump(spent, f)

        return run

    settings = {"NEARDUP_ENABLED": True, "NEARDUP_WORKERS": 2, "NEARDUP_WORKER_MAX_TASKS": 0}
    result, _ = bench_crawl.probe_crawl(dataset, "shuffled-1", settings, probed)
    with open(out) as f:
        steps = json.load(f)
    return {
        "seconds": round(result["seconds"], 2),
        "crawler_cpu_seconds": round(result["crawler_cpu"], 2),
        "steps": {
            name: {"us_a_call": round(1e6 * secs / max(calls, 1)), "calls": calls, "seconds": round(secs, 3)}
            for name, (calls, secs) in steps.items()
        },
    }


def alone(path: str, pages: int, repeat: int) -> dict[str, Any]:
    """The decision of ``pages`` texts one at a time on a new SQLite store: µs a page, warm and swept."""
    import lxml.html
    from scrapy.settings import Settings

    from scrapy_neardup.assembly import build_pipeline, build_store, build_template_guard, open_detector
    from scrapy_neardup.engine.decisions import DecisionLoop
    from scrapy_neardup.settings import Config

    with open(path) as f:
        texts = [json.loads(line)["text"] for _, line in zip(range(pages), f)]
    config = Config.from_settings(Settings({"NEARDUP_ENABLED": True}))
    pipeline = build_pipeline(config)
    prepared = [pipeline.from_text(text) for text in texts]
    sweep = bytearray(16_000_000)
    blocks = "".join(f"<div class=a{i}><p>word {i} and more</p></div>" for i in range(300))
    html = f"<html><body>{blocks}</body></html>"

    def round_us(every: int) -> float:
        with tempfile.TemporaryDirectory() as folder:
            store = build_store(config, "probe", folder)
            _, detector, _ = open_detector(config, store)
            loop = DecisionLoop(detector, build_template_guard(config, detector.algorithm))
            spent = 0.0
            try:
                for i, page in enumerate(prepared):
                    if every and i % every == 0:
                        sweep[::64] = bytes(len(sweep[::64]))
                        lxml.html.fromstring(html)
                    began = time.perf_counter()
                    loop.decide(f"http://probe.example/{i}", f"http://probe.example/{i}", page, None)
                    spent += time.perf_counter() - began
            finally:
                detector.close()
        return 1e6 * spent / len(prepared)

    rows = {}
    for every in (0, 1, 2, 4, 8):
        name = f"swept_every_{every}" if every else "warm"
        rounds = [round_us(every) for _ in range(repeat)]
        rows[name] = {"us_a_page": round(statistics.median(rounds)), "rounds": [round(r) for r in rounds]}
    return {"pages": len(prepared), "repeat": repeat, "decisions": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", nargs="?", help="a labelled set to crawl (neardup-dev's format)")
    parser.add_argument("--texts", help="a JSONL of {url, text}: the decision alone, warm and swept")
    parser.add_argument("--pages", type=int, default=3600)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if not args.dataset and not args.texts:
        parser.error("give a dataset to crawl, --texts, or both")
    report: dict[str, Any] = {"command": " ".join(["bench/decision_costs.py", *sys.argv[1:]])}
    if args.texts:
        report["alone"] = alone(args.texts, args.pages, args.repeat)
    if args.dataset:
        report["in_crawl"] = in_crawl(args.dataset)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
