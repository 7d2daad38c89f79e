"""A probe: what the plugin-off crawl's time, the denominator of T_on / T_off, depends on besides the plugin.

    python3 dev.py bench bench/crawl_context.py DIR [--repeat 3] [--order shuffled-1]

``bench_crawl.py`` compares a crawl that keeps one core busy (the plugin off) with one that keeps both busy
(the plugin's extraction workers). Two things outside the plugin move that ratio, and this probe measures
both in alternating crawls of ``bench_crawl.py``'s local site, in one run:

* **The second core.** The plugin-off crawl alone; beside one process that extracts the site's pages in a
  loop with the plugin's own pipeline (trafilatura, as a worker does); and beside one that only spins. The
  local server, which has the second core to itself in the crawl alone, then shares a core.
* **Scrapy's CONCURRENT_ITEMS.** With the asyncio reactor, Scrapy's scraper starts ``CONCURRENT_ITEMS`` tasks
  for the spider output of every response (``scrapy.utils.asyncio._parallel_asyncio``), however few items
  the page gives. The plugin-off and plugin-on crawls at Scrapy's default (100) and at 10.

Printed as JSON: for each kind of crawl its median time, the crawler's CPU and the garbage collector's CPU
in the crawler, with the rounds; the ratios to the plugin-off crawl alone. Reads no internals of the plugin.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_crawl

#: The kinds of crawl of one round, in the order they alternate: (name, plugin on, CONCURRENT_ITEMS, what
#: the second core does meanwhile).
KINDS: list[tuple[str, bool, int, str]] = [
    ("off", False, 100, ""),
    ("off_beside_extraction", False, 100, "extraction"),
    ("off_beside_spin", False, 100, "spin"),
    ("on", True, 100, ""),
    ("off_items_10", False, 10, ""),
    ("on_items_10", True, 10, ""),
]


def extract_forever(pages: dict[str, bytes], base: str, stop: multiprocessing.synchronize.Event) -> None:
    """The plugin's pipeline over the site's distinct pages, again and again, until ``stop``."""
    from scrapy_neardup import Config
    from scrapy_neardup.assembly import build_pipeline
    from scrapy_neardup.engine.extract import quiet_trafilatura

    quiet_trafilatura()
    pipeline = build_pipeline(Config.from_settings({}))
    items = list(bench_crawl.distinct_bodies(pages).items())
    while not stop.is_set():
        for path, body in items:
            pipeline.from_html(body, base + path)
            if stop.is_set():
                return


def spin_forever(stop: multiprocessing.synchronize.Event) -> None:
    while not stop.is_set():
        for _ in range(100_000):
            pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of alternating crawls (medians over them)")
    parser.add_argument("--order", default="shuffled-1")
    args = parser.parse_args()
    manifest = bench_crawl.load_manifest(os.path.join(args.dataset, "manifest.jsonl"))
    paths = bench_crawl.crawl_orders(manifest, [args.order])[args.order]
    pages = bench_crawl.load_pages(args.dataset, manifest)
    base, server = bench_crawl.serve(pages)
    workdir = tempfile.mkdtemp()
    bench_crawl.crawl_child = bench_crawl.collected(bench_crawl.crawl_child)  # run_crawl forks a process for it
    rounds: dict[str, list[dict]] = {name: [] for name, *_ in KINDS}
    try:
        for number in range(1, args.repeat + 1):
            for name, on, items, beside in KINDS:
                stop = multiprocessing.get_context("fork").Event()
                other = None
                if beside:
                    target, targs = (
                        (extract_forever, (pages, base, stop)) if beside == "extraction" else (spin_forever, (stop,))
                    )
                    other = multiprocessing.get_context("fork").Process(target=target, args=targs)
                    other.start()
                    time.sleep(2.0)  # its start (trafilatura's import) before the crawl's
                settings = {
                    **bench_crawl.base_settings(workdir),
                    "NEARDUP_ENABLED": on,
                    "CONCURRENT_ITEMS": items,
                }
                try:
                    result = bench_crawl.run_crawl(base, paths, settings, workdir)
                finally:
                    stop.set()
                    if other is not None:
                        other.join()
                rounds[name].append(result)
                print(f"round {number} {name}: {result['seconds']:.2f} s", file=sys.stderr, flush=True)
    finally:
        server.terminate()

    def median(name: str, field: str) -> float:
        return statistics.median(r[field] for r in rounds[name])

    off = median("off", "seconds")
    print(
        json.dumps(
            {
                "command": " ".join(["bench/crawl_context.py", *sys.argv[1:]]),
                "pages": len(paths),
                "cores": os.cpu_count(),
                "repeat": args.repeat,
                "rows": {
                    name: {
                        "median_seconds": round(median(name, "seconds"), 2),
                        "all_seconds": [round(r["seconds"], 2) for r in rounds[name]],
                        "over_off_alone": round(median(name, "seconds") / off, 3),
                        "crawler_cpu_seconds": round(median(name, "crawler_cpu"), 2),
                        "collector_cpu_seconds": round(median(name, "collector_cpu"), 2),
                        "worker_cpu_seconds": round(median(name, "worker_cpu"), 2),
                    }
                    for name, *_ in KINDS
                },
                "t_on_over_t_off": {
                    "items_100": round(median("on", "seconds") / off, 3),
                    "items_10": round(median("on_items_10", "seconds") / median("off_items_10", "seconds"), 3),
                },
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
