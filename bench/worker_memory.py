"""Does an extraction worker's memory grow with the pages it has done?

    python dev.py bench bench/worker_memory.py ../shared/neardup-dev --passes 2

Runs one worker's job (:func:`scrapy_neardup.workers.analyze_html`, after the worker's own start-up) in
this process over every page of the set, ``--passes`` times, and prints the resident set size after the
start-up and every ``--every`` pages, as one JSON object. Growth past the first pass is what
``NEARDUP_WORKER_MAX_TASKS`` (recycling) is there to bound.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from scrapy_neardup.offline.evaluation import load_manifest, read_page
from scrapy_neardup.settings import Config
from scrapy_neardup.workers import analyze_html, init_worker


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset")
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--every", type=int, default=250)
    args = parser.parse_args()
    manifest = load_manifest(os.path.join(args.dataset, "manifest.jsonl"))
    bodies = []
    for row in manifest:
        bodies.append((read_page(os.path.join(args.dataset, row["file"])), row["url"]))
    before = rss_mb()  # the pages themselves are held in this process: measured before the worker starts
    init_worker(Config.from_settings({}))
    samples = [{"pages": 0, "rss_mb": round(rss_mb() - before, 1)}]
    done = 0
    for _ in range(args.passes):
        for body, url in bodies:
            analyze_html(body, url, "text/html; charset=utf-8")
            done += 1
            if done % args.every == 0:
                samples.append({"pages": done, "rss_mb": round(rss_mb() - before, 1)})
    print(
        json.dumps(
            {
                "command": "bench/worker_memory.py " + " ".join(sys.argv[1:]),
                "pages_per_pass": len(bodies),
                "rss_above_the_loaded_pages_mb": samples,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
