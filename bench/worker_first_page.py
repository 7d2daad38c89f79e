"""A fresh worker's first page: what the fork server's preparation spares each worker, side by side.

    python3 dev.py bench bench/worker_first_page.py DIR [--pages 40] [--repeat 5]

DIR: a folder with ``manifest.jsonl`` (neardup-dev, or a template-rich set of ``bench/template_site.py``).
Each round runs, each in a fresh process and in alternating order, a pool of one worker that is recycled
after every page (``max_tasks=1``), so that each of the first ``--pages`` pages of the set is the first page
of a new worker: once with the fork server as a crawl has it (its preload list: the extraction modules
imported, the tokenizer's tables built, :mod:`scrapy_neardup.workers.preload`), and once with the tables
left out of the list (the former fork server: each worker builds them on its first page). Then the same
pages go through one worker that is never recycled: a page's cost once its worker is warm. Each page's
job is timed in the worker (its CPU seconds, ``Prepared.cpu_seconds``: decoding, extraction and
fingerprints at the defaults, no learned templates). Printed: one JSON object with the medians over the
rounds of each variant's median CPU milliseconds a page, and the difference from the warm worker's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

PRELOAD = "scrapy_neardup.workers.preload"


def run_variant(dataset: str, pages: int, variant: str) -> list[float]:
    """In this (fresh) process: each page's job CPU milliseconds under ``variant`` (``preload``,
    ``no-tables``, ``warm``)."""
    import multiprocessing.context

    from scrapy_neardup.engine.prepare import Prepared
    from scrapy_neardup.offline.evaluation import load_manifest, read_page
    from scrapy_neardup.settings import Config
    from scrapy_neardup.workers import ExtractionPool, analyze_html

    if variant == "no-tables":  # the fork server as it was: the same list without the tables' module
        setter = multiprocessing.context.ForkServerContext.set_forkserver_preload

        def without_tables(self, modules):  # type: ignore[no-untyped-def]
            setter(self, [m for m in modules if m != PRELOAD])

        multiprocessing.context.ForkServerContext.set_forkserver_preload = without_tables  # type: ignore[method-assign]
    manifest = load_manifest(os.path.join(dataset, "manifest.jsonl"))[:pages]
    config = Config.from_settings({"NEARDUP_LEARN_TEMPLATES": False})
    pool = ExtractionPool(config, 1, max_tasks=1_000_000 if variant == "warm" else 1)
    pool.start()
    try:
        ms = []
        for row in manifest:
            body = read_page(os.path.join(dataset, row["file"]))
            wire = pool.submit(analyze_html, body, row["url"], "text/html; charset=utf-8").result(timeout=120)
            ms.append(1000 * Prepared.from_wire(wire).cpu_seconds)
    finally:
        pool.close()
    return ms


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset")
    parser.add_argument("--pages", type=int, default=40, help="pages, each a new worker's first (default 40)")
    parser.add_argument("--repeat", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--variant", help=argparse.SUPPRESS)  # a round's child process
    args = parser.parse_args()
    if args.variant:
        print(json.dumps(run_variant(args.dataset, args.pages, args.variant)))
        return 0
    variants = ("preload", "no-tables", "warm")
    medians: dict[str, list[float]] = {v: [] for v in variants}
    for round_ in range(args.repeat):
        order = variants if round_ % 2 == 0 else (variants[1], variants[0], variants[2])
        for variant in order:
            out = subprocess.run(
                [sys.executable, __file__, args.dataset, "--pages", str(args.pages), "--variant", variant],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            medians[variant].append(statistics.median(json.loads(out)))
        print(f"round {round_ + 1}: " + ", ".join(f"{v} {medians[v][-1]:.2f}" for v in variants), file=sys.stderr)
    warm = statistics.median(medians["warm"])
    result = {
        "command": " ".join(["bench/worker_first_page.py", *sys.argv[1:]]),
        "pages": args.pages,
        "repeat": args.repeat,
        "cpu_ms_a_page": {
            "first_page_of_a_worker_from_this_fork_server": round(statistics.median(medians["preload"]), 2),
            "first_page_of_a_worker_without_the_tables_built": round(statistics.median(medians["no-tables"]), 2),
            "a_warm_worker": round(warm, 2),
        },
        "more_than_a_warm_worker_ms": {
            "this_fork_server": round(statistics.median(medians["preload"]) - warm, 2),
            "without_the_tables_built": round(statistics.median(medians["no-tables"]) - warm, 2),
        },
        "rounds": {v: [round(m, 2) for m in ms] for v, ms in medians.items()},
    }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
