"""The crawl's start: how long a crawl takes to its first page, plugin off and on, side by side.

    python3 dev.py bench bench/crawl_start.py DIR [--pages 64] [--repeat 7] [--code CHECKOUT]

Each round crawls the first ``--pages`` pages of the set (its ``shuffled-1`` order) from ``bench_crawl.py``'s
local site at its settings (tag mode, SQLite, 32 concurrent requests, 2 workers), once with the plugin off and
once on, in alternation, each crawl in a fresh process. Timed from the crawl's start (``process.crawl``) to the
spider's first page, to the spider opening, and to the crawl's end. Printed: the medians of each, and the
median over the rounds of the on crawl less the off crawl of the same round: what the plugin adds to the
start of a crawl (its store, its workers' start, their first pages).

``--code``: import ``scrapy_neardup`` from that checkout (another commit's, for a before and after on one
machine; this file and ``bench_crawl.py`` stay this checkout's).
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

HERE = os.path.dirname(os.path.abspath(__file__))


def crawl_child(base: str, paths: list[str], settings: dict, out: str) -> None:
    """One crawl in this (fresh) process; writes when its spider opened, was given its first page and ended."""
    import scrapy
    from scrapy import signals
    from scrapy.crawler import CrawlerProcess

    marks: dict[str, float] = {}

    class SiteSpider(scrapy.Spider):
        name = "site"

        async def start(self):  # type: ignore[no-untyped-def]
            for path in paths:
                yield scrapy.Request(base + path)

        def parse(self, response):  # type: ignore[no-untyped-def]
            marks.setdefault("first_page", time.perf_counter() - started)
            yield {"path": response.url}

    def opened(spider: object) -> None:
        marks["opened"] = time.perf_counter() - started

    process = CrawlerProcess(settings)
    crawler = process.create_crawler(SiteSpider)
    crawler.signals.connect(opened, signal=signals.spider_opened)
    started = time.perf_counter()
    process.crawl(crawler)
    process.start()
    marks["end"] = time.perf_counter() - started
    with open(out, "w") as f:
        json.dump(marks, f)


def run(base: str, paths: list[str], settings: dict, workdir: str) -> dict:
    out = tempfile.mktemp(dir=workdir, suffix=".json")
    process = multiprocessing.get_context("fork").Process(target=crawl_child, args=(base, paths, settings, out))
    process.start()
    process.join()
    if process.exitcode != 0 or not os.path.exists(out):
        raise RuntimeError(f"crawl failed (exit code {process.exitcode})")
    with open(out) as f:
        return json.load(f)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset")
    parser.add_argument("--pages", type=int, default=64, help="pages a crawl fetches (default 64)")
    parser.add_argument("--repeat", type=int, default=7, help="rounds, each a crawl off and one on (default 7)")
    parser.add_argument("--code", help="a checkout to import scrapy_neardup from (default: this one)")
    args = parser.parse_args()
    sys.path.insert(0, os.path.abspath(args.code) if args.code else os.path.dirname(HERE))
    import scrapy_neardup  # first: bench_crawl puts this checkout first on the path, for what it imports

    sys.path.insert(0, HERE)
    import bench_crawl

    from scrapy_neardup.offline.evaluation import load_manifest

    manifest = load_manifest(os.path.join(args.dataset, "manifest.jsonl"))
    pages = bench_crawl.load_pages(args.dataset, manifest)
    paths = bench_crawl.crawl_orders(manifest, ["shuffled-1"])["shuffled-1"][: args.pages]
    base, server = bench_crawl.serve({path: pages[path] for path in paths})
    rounds: dict[str, list[dict]] = {"off": [], "on": []}
    try:
        with tempfile.TemporaryDirectory() as workdir:
            for round_ in range(args.repeat):
                for name, results in rounds.items():
                    settings = {
                        **bench_crawl.base_settings(workdir),
                        "LOG_LEVEL": "ERROR",
                        "NEARDUP_ENABLED": name == "on",
                        "NEARDUP_WORKERS": 2,
                    }
                    results.append(run(base, paths, settings, workdir))
                    if "first_page" not in results[-1]:
                        raise SystemExit(f"a crawl with the plugin {name} reached the spider with no page")
                print(
                    f"round {round_ + 1}: " + ", ".join(f"{k} {v[-1]['end']:.3f} s" for k, v in rounds.items()),
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        server.terminate()
    marks = ("opened", "first_page", "end")
    result = {
        "command": "bench/crawl_start.py " + " ".join(sys.argv[1:]),
        "code": os.path.dirname(os.path.dirname(os.path.abspath(scrapy_neardup.__file__))),
        "pages": len(paths),
        "repeat": args.repeat,
        "median_seconds": {
            name: {mark: round(statistics.median(r[mark] for r in results), 3) for mark in marks}
            for name, results in rounds.items()
        },
        "on_less_off_by_round_median": {
            mark: round(statistics.median(on[mark] - off[mark] for on, off in zip(rounds["on"], rounds["off"])), 3)
            for mark in marks
        },
    }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
