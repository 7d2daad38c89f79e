"""How many responses enter Scrapy's scraper in one turn of the event loop, plugin off and on.

    python3 dev.py bench bench/loop_bursts.py DIR [--order shuffled-1] [--crawls off on]

One crawl of each kind as ``bench_crawl.py`` runs it (the same local site, settings and order; ``on``: the
defaults with 2 workers). A probe, reading Scrapy's and asyncio's internals: it counts the turns of the
event loop (``BaseEventLoop._run_once``), the responses whose output Scrapy's scraper starts on in each turn
(``Scraper.handle_spider_output_async``), and how many turns each response's ``_parallel_asyncio`` (the
``CONCURRENT_ITEMS`` tasks Scrapy 2.19 starts for every response's output) lives. The tasks alive at once,
which the garbage collector walks, are about those two numbers multiplied, times ``CONCURRENT_ITEMS``.
Printed: one JSON object a crawl.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
from asyncio import base_events

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_crawl

from scrapy_neardup.offline.evaluation import load_manifest

_turns = {"now": 0}
_entered: collections.Counter[int] = collections.Counter()
_lives: collections.Counter[int] = collections.Counter()
_out = {"path": ""}


def _instrument() -> None:
    """Patched before the crawl's process is forked from this one, so that it runs the patched code."""
    from scrapy.core import scraper

    run_once = base_events.BaseEventLoop._run_once

    def counted_run_once(self):  # type: ignore[no-untyped-def]
        _turns["now"] += 1
        return run_once(self)

    handle = scraper.Scraper.handle_spider_output_async

    async def counted_handle(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        _entered[_turns["now"]] += 1
        return await handle(self, *args, **kwargs)

    parallel = scraper._parallel_asyncio

    async def timed_parallel(*args, **kwargs):  # type: ignore[no-untyped-def]
        started = _turns["now"]
        try:
            return await parallel(*args, **kwargs)
        finally:
            _lives[_turns["now"] - started] += 1

    base_events.BaseEventLoop._run_once = counted_run_once  # type: ignore[method-assign]
    scraper.Scraper.handle_spider_output_async = counted_handle  # type: ignore[method-assign]
    scraper._parallel_asyncio = timed_parallel

    from scrapy import signals
    from scrapy.crawler import Crawler

    create = Crawler.__init__

    def init(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        create(self, *args, **kwargs)

        def closed(spider: object, reason: str) -> None:  # in the crawl's process, to _out["path"]
            with open(_out["path"], "w") as f:
                json.dump({"turns": _turns["now"], "entered": dict(_entered), "lives": dict(_lives)}, f)

        self.signals.connect(closed, signal=signals.spider_closed, weak=False)

    Crawler.__init__ = init  # type: ignore[method-assign]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset")
    parser.add_argument("--order", default="shuffled-1")
    parser.add_argument("--crawls", nargs="+", default=["off", "on"], choices=["off", "on"])
    args = parser.parse_args()
    manifest = load_manifest(os.path.join(args.dataset, "manifest.jsonl"))
    pages = bench_crawl.load_pages(args.dataset, manifest)
    paths = bench_crawl.crawl_orders(manifest, [args.order])[args.order]
    base, server = bench_crawl.serve(pages)
    workdir = tempfile.mkdtemp()
    _instrument()
    try:
        for name in args.crawls:
            out = _out["path"] = os.path.join(workdir, f"bursts-{name}.json")
            settings = bench_crawl.base_settings(workdir)
            settings["NEARDUP_ENABLED"] = name == "on"
            if name == "on":
                settings["NEARDUP_WORKERS"] = 2
            crawl = bench_crawl.run_crawl(base, paths, settings, workdir)
            with open(out) as f:
                seen = json.load(f)
            per_turn = collections.Counter(seen["entered"].values())
            lives = {int(k): v for k, v in seen["lives"].items()}
            responses = sum(seen["entered"].values())
            print(
                json.dumps(
                    {
                        "crawl": name,
                        "seconds": round(crawl["seconds"], 2),
                        "turns_of_the_loop": seen["turns"],
                        "responses": responses,
                        "turns_by_responses_entering": dict(sorted(per_turn.items())),
                        "responses_entering_with_a_response_mean": round(
                            sum(n * n * c for n, c in per_turn.items()) / max(1, responses), 2
                        ),
                        "parallel_lives_in_turns": dict(sorted(lives.items())),
                    }
                ),
                flush=True,
            )
    finally:
        server.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
