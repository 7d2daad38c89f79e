"""The crawl's start: how long a crawl takes to its first page, plugin off and on, side by side.

    python3 dev.py bench bench/crawl_start.py DIR [--pages 64] [--repeat 7] [--code CHECKOUT]

Each round crawls the first ``--pages`` pages of the set (its ``shuffled-1`` order) as ``bench_crawl.py`` crawls
a site (its local site, spider and settings: tag mode, SQLite, 32 concurrent requests, 2 workers), once with the
plugin off and once on, in alternation, each crawl in a fresh process. Timed from the crawl's start
(``process.crawl``) to the spider opening, to its first page, and to the crawl's end. Printed: the medians of
each, and the median over the rounds of the on crawl less the off crawl of the same round: what the plugin
adds to the start of a crawl (its store, its workers' start, their first pages).

``--code``: import ``scrapy_neardup`` from that checkout (another commit's, for a before and after on one
machine; this file and ``bench_crawl.py`` stay this checkout's).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


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
                    results.append(bench_crawl.run_crawl(base, paths, settings, workdir))
                    if "first_page" not in results[-1]:
                        raise SystemExit(f"a crawl with the plugin {name} reached the spider with no page")
                print(
                    f"round {round_ + 1}: " + ", ".join(f"{k} {v[-1]['seconds']:.3f} s" for k, v in rounds.items()),
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        server.terminate()
    marks = ("opened", "first_page", "seconds")
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
