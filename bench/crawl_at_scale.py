"""One crawl of a large labelled set with the plugin's defaults, scored: what ``bench_crawl.py --quality`` does
for one order, for a set that does not fit in memory.

    python3 dev.py bench bench/crawl_at_scale.py DIR [--order shuffled-1] [-s NAME=VALUE ...]

DIR: a labelled set (``bench/template_site.py --per 2800`` makes 100,768 pages). The local site serves each
page from its file as it is requested (``bench_crawl.py`` holds them all in memory, 19 GB at that size), and
the crawl is ``bench_crawl.py``'s (tag mode, SQLite, 32 concurrent requests, its start requests paced as
``--start lazy``, 2 workers on this machine's cores). No ``dedup`` run beside it: its input would be the
whole set decoded in one JSONL file. Printed: one JSON object: the crawl's near-duplicate F1, precision and
recall (by kind of copy) by the set's labels, with the pages the URL rules kept from the fetch scored by
their prediction, as ``--quality`` scores them; its time, the crawler's and the workers' CPU a page and peak
memory, the store's size on disk, and the crawl's ``neardup/*`` stats.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_crawl
from learner_passes import PageReader

from scrapy_neardup.offline.evaluation import load_manifest


def run(args: argparse.Namespace) -> dict:
    workdir = tempfile.mkdtemp(prefix="crawl-at-scale-")
    try:
        return crawled(args, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def crawled(args: argparse.Namespace, workdir: str) -> dict:
    manifest = load_manifest(os.path.join(args.dataset, "manifest.jsonl"))
    paths = bench_crawl.crawl_orders(manifest, [args.order])[args.order]
    settings = {
        **bench_crawl.base_settings(workdir),
        "NEARDUP_ENABLED": True,
        bench_crawl.LAZY_START: True,
        **bench_crawl.named_settings(args.setting),
    }
    base, server = bench_crawl.serve(PageReader(args.dataset, manifest))  # type: ignore[arg-type]
    try:
        result = bench_crawl.run_crawl(base, paths, settings, workdir)
    finally:
        server.terminate()
    with open(result["items"]) as f:
        items = [json.loads(line) for line in f]
    scored, predicted, wrong = bench_crawl.scored_crawl(manifest, base, paths, settings, items)
    pages = len(paths)
    store = settings["NEARDUP_STORE_URL"][len("sqlite:///") :]
    return {
        "command": " ".join(["bench/crawl_at_scale.py", *sys.argv[1:]]),
        "pages": pages,
        "order": args.order,
        "items": len(items),
        "pages_predicted_away": len(predicted),
        "predicted_wrongly": len(wrong),
        "f1": round(scored.f1, 4),
        "precision": round(scored.precision, 4),
        "recall": round(scored.recall, 4),
        "recall_by_kind": {k: round(v, 3) for k, v in sorted(scored.kind_recall.items())},
        "seconds": round(result["seconds"], 1),
        "crawler_cpu_ms_per_page": round(1000 * result["crawler_cpu"] / pages, 2),
        "worker_cpu_ms_per_page": round(1000 * result["worker_cpu"] / pages, 2),
        "crawler_peak_rss_mb": round(result["crawler_rss"] / 2**20),
        "worker_peak_rss_mb": round(result["worker_rss"] / 2**20),
        "store_mb": round(os.path.getsize(store) / 2**20, 1),
        "stats": result["stats"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", help="a labelled set (manifest.jsonl and its pages)")
    parser.add_argument("--order", default="shuffled-1", help="manifest, copies-first or shuffled-N")
    parser.add_argument("-s", "--setting", action="append", default=[], help="NAME=VALUE, a setting for the crawl")
    args = parser.parse_args()
    print(json.dumps(run(args), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
