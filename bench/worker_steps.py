"""What an extraction worker spends its CPU on, step by step, over real pages.

    python dev.py bench bench/worker_steps.py ../shared/neardup-dev

For every page of the set, in one process and at the defaults, as :func:`~scrapy_neardup.engine.extract.extract`
does them: decoding the body, parsing it once, trafilatura's main text (from a copy of that tree), the
page's whole text (read from the tree, for the template guard), the main-text fingerprint, and, for pages
whose main text is at most half of their page text, the page-text fingerprint. Prints one JSON object: each step's
mean CPU milliseconds over all pages, and the share of pages that needed a page-text fingerprint.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from scrapy_neardup.assembly import build_algorithm
from scrapy_neardup.engine.extract import (
    TEMPLATE_MAX_SHARE,
    _visible_text,
    decode_html,
    main_text,
    page_text,
    parse_for_extraction,
)
from scrapy_neardup.offline.evaluation import load_manifest, read_page
from scrapy_neardup.settings import Config


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset")
    args = parser.parse_args()
    config = Config.from_settings({})
    algorithm = build_algorithm(config)
    manifest = load_manifest(os.path.join(args.dataset, "manifest.jsonl"))
    spent = dict.fromkeys(("decode", "parse", "main_text", "page_text", "main_fingerprint", "page_fingerprint"), 0.0)
    with_page = 0
    clock = time.process_time
    for row in manifest:
        body = read_page(os.path.join(args.dataset, row["file"]))
        t0 = clock()
        html = decode_html(body, "text/html")
        t1 = clock()
        tree = parse_for_extraction(html)
        tp = clock()
        main = main_text(
            html if tree is None else tree, row["url"], fast=config.extract_fast, favor=config.extract_favor
        )
        t2 = clock()
        page = page_text(html) if tree is None else _visible_text(tree)
        t3 = clock()
        algorithm.fingerprint(main if len(main) >= config.min_text_length else page)
        t4 = clock()
        spent["decode"] += t1 - t0
        spent["parse"] += tp - t1
        spent["main_text"] += t2 - tp
        spent["page_text"] += t3 - t2
        spent["main_fingerprint"] += t4 - t3
        if len(main) >= config.min_text_length and len(main) <= TEMPLATE_MAX_SHARE * len(page):
            with_page += 1
            t5 = clock()
            algorithm.fingerprint(page)
            spent["page_fingerprint"] += clock() - t5
    n = len(manifest)
    print(
        json.dumps(
            {
                "command": "bench/worker_steps.py " + " ".join(sys.argv[1:]),
                "pages": n,
                "mean_cpu_ms_per_page": {k: round(1000 * v / n, 2) for k, v in spent.items()},
                "pages_with_a_page_text_fingerprint": round(with_page / n, 3),
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
