"""How many responses enter Scrapy's scraper in one turn of the event loop, plugin off and on.

    python3 dev.py bench bench/loop_bursts.py DIR [--order shuffled-1] [--crawls off on]

One crawl of each kind as ``bench_crawl.py`` runs it (``bench_crawl.probe_crawl``: the same local site,
settings and order; ``on``: the defaults with 2 workers). A probe, reading Scrapy's and asyncio's
internals: it counts the turns of the event loop (``BaseEventLoop._run_once``), the responses whose output
Scrapy's scraper starts on in each turn (``Scraper.handle_spider_output_async``), and how many turns each
response's ``_parallel_asyncio`` (the ``CONCURRENT_ITEMS`` tasks Scrapy 2.19 starts for every response's
output) lives. The tasks alive at once, which the garbage collector walks, are about those two numbers
multiplied, times ``CONCURRENT_ITEMS``. Printed: one JSON object a crawl.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
from asyncio import base_events
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_crawl


def counted(crawl: Callable[..., None]) -> Callable[..., None]:
    """``crawl_child`` with the loop's turns, the responses entering the scraper in each and the lives of
    their ``_parallel_asyncio`` counted (patched in the crawl's own process), written beside its result."""

    def run(base: str, paths: list[str], settings: dict, out: str) -> None:
        from scrapy.core import scraper

        turns = [0]
        entered: collections.Counter[int] = collections.Counter()
        lives: collections.Counter[int] = collections.Counter()
        run_once, handle, parallel = (
            base_events.BaseEventLoop._run_once,
            scraper.Scraper.handle_spider_output_async,
            scraper._parallel_asyncio,
        )

        def counted_run_once(self):  # type: ignore[no-untyped-def]
            turns[0] += 1
            return run_once(self)

        async def counted_handle(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            entered[turns[0]] += 1
            return await handle(self, *args, **kwargs)

        async def timed_parallel(*args, **kwargs):  # type: ignore[no-untyped-def]
            started = turns[0]
            try:
                return await parallel(*args, **kwargs)
            finally:
                lives[turns[0] - started] += 1

        base_events.BaseEventLoop._run_once = counted_run_once  # type: ignore[method-assign]
        scraper.Scraper.handle_spider_output_async = counted_handle  # type: ignore[method-assign]
        scraper._parallel_asyncio = timed_parallel
        crawl(base, paths, settings, out)
        bench_crawl.add_to_result(
            out, loop={"turns": turns[0], "entered": list(entered.values()), "lives": dict(lives)}
        )

    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset")
    parser.add_argument("--order", default="shuffled-1")
    parser.add_argument("--crawls", nargs="+", default=["off", "on"], choices=["off", "on"])
    args = parser.parse_args()
    for name in args.crawls:
        settings = {"NEARDUP_ENABLED": name == "on", **({"NEARDUP_WORKERS": 2} if name == "on" else {})}
        crawl, _ = bench_crawl.probe_crawl(args.dataset, args.order, settings, counted)
        loop = crawl["loop"]
        per_turn = collections.Counter(loop["entered"])
        responses = sum(loop["entered"])
        print(
            json.dumps(
                {
                    "crawl": name,
                    "seconds": round(crawl["seconds"], 2),
                    "turns_of_the_loop": loop["turns"],
                    "responses": responses,
                    "turns_by_responses_entering": dict(sorted(per_turn.items())),
                    "responses_entering_with_a_response_mean": round(
                        sum(n * n * c for n, c in per_turn.items()) / max(1, responses), 2
                    ),
                    "parallel_lives_in_turns": dict(sorted((int(k), v) for k, v in loop["lives"].items())),
                }
            ),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
