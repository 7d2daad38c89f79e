"""A crawl worker's job over real pages in one process, then split over N processes at once.

    python3 dev.py bench bench/job_parallel.py ../shared/neardup-dev [--processes 2] [--repeat 2]

Each process runs the job a crawl's worker runs (decode, extract with the page text, fingerprints; the
defaults) on its share of the pages. Prints the CPU milliseconds a page with 1 and with N processes and
their wall time: whether the job slows down when its copies share the machine's cores (it is the job alone
that ``bench_crawl.py``'s floor assumes), without a crawler beside them.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from scrapy_neardup import Config
from scrapy_neardup.assembly import build_pipeline
from scrapy_neardup.engine.extract import decode_html, quiet_trafilatura
from scrapy_neardup.offline.evaluation import load_manifest, read_page


def job(pages: list[tuple[bytes, str]], results: object) -> None:
    quiet_trafilatura()
    pipeline = build_pipeline(Config.from_settings({}))
    pipeline.from_html(decode_html(pages[0][0], "text/html"), pages[0][1])  # imports and caches warm
    started = time.process_time()
    for body, url in pages:
        pipeline.from_html(decode_html(body, "text/html"), url)
    results.put((time.process_time() - started, len(pages)))  # type: ignore[attr-defined]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    pages = []
    for row in load_manifest(os.path.join(args.dataset, "manifest.jsonl")):
        pages.append((read_page(os.path.join(args.dataset, row["file"])), row["url"]))
    ctx = multiprocessing.get_context("fork")
    runs = []
    for _ in range(args.repeat):
        for procs in (1, args.processes):
            results = ctx.Queue()
            children = [ctx.Process(target=job, args=(pages[i::procs], results)) for i in range(procs)]
            started = time.perf_counter()
            for child in children:
                child.start()
            done = [results.get() for _ in children]
            for child in children:
                child.join()
            runs.append(
                {
                    "processes": procs,
                    "cpu_ms_per_page": round(1000 * sum(c for c, _ in done) / len(pages), 2),
                    "wall_seconds": round(time.perf_counter() - started, 1),
                }
            )
    print(
        json.dumps(
            {"command": "bench/job_parallel.py " + " ".join(sys.argv[1:]), "pages": len(pages), "runs": runs}, indent=1
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
