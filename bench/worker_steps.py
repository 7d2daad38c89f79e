"""What an extraction worker spends its CPU on, step by step, over real pages.

    python dev.py bench bench/worker_steps.py ../shared/neardup-dev
    python dev.py bench bench/worker_steps.py DIR --replayed    # a template-rich set (bench/template_site.py)

For every page of the set, in one process and at the defaults, as :func:`~scrapy_neardup.engine.extract.extract`
does them: decoding the body, parsing it once, trafilatura's main text (from a copy of that tree), the
page's whole text (read from the tree, for the template guard), the main-text fingerprint, and, for pages
whose main text is at most half of their page text, the page-text fingerprint. Prints one JSON object: each step's
mean CPU milliseconds over all pages, and the share of pages that needed a page-text fingerprint.

``--replayed``: the pages a learned template replays instead. The set is read once in a shuffled order by the
learner as a crawler process runs it (its selectors learned, checked, retired); then each page its selectors
replay is timed step by step as a worker does it: decoding, the pre-key, lexbor's parse, the skeleton key,
the replay, the page text, both fingerprints, the declared canonical, and the worker's whole task.
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
    parser.add_argument("--replayed", action="store_true", help="the steps of pages a learned template replays")
    args = parser.parse_args()
    if args.replayed:
        return replayed_steps(args.dataset)
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


def replayed_steps(dataset: str) -> int:
    import pickle

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_crawl
    from learner_passes import BASE, CONTENT_TYPE, learn_from

    from scrapy_neardup.assembly import build_pipeline, build_template_learner
    from scrapy_neardup.engine.canonical import declared_canonical
    from scrapy_neardup.engine.learned import page_text_of, parse, prekey, replay, skeleton_key
    from scrapy_neardup.engine.urlrules import host_of
    from scrapy_neardup.workers.tasks import prepare_html

    config = Config.from_settings({"NEARDUP_ENABLED": True})
    pipeline, learner = build_pipeline(config), build_template_learner(config)
    assert learner is not None
    manifest = load_manifest(os.path.join(dataset, "manifest.jsonl"))
    pages = bench_crawl.load_pages(dataset, manifest)
    order = bench_crawl.crawl_orders(manifest, ["shuffled-1"])["shuffled-1"]
    base, content_type = BASE, CONTENT_TYPE
    for path in order:  # the crawler process's learner, one page after another
        learn_from(pipeline, learner, pages[path], base + path)
    steps = ("decode", "prekey", "parse", "skeleton_key", "replay", "page_text", "main_fingerprint")
    spent = dict.fromkeys((*steps, "page_fingerprint", "declared_canonical", "whole_task"), 0.0)
    clock, timed = time.process_time, 0
    for path in order:
        url = base + path
        offers = learner.offers(host_of(url))
        t0 = clock()
        html = decode_html(pages[path], content_type)
        t1 = clock()
        prekey(html)
        t2 = clock()
        tree = parse(html)
        t3 = clock()
        offer = None if tree is None else offers.selectors.get(skeleton_key(tree))
        t4 = clock()
        text = None if offer is None or offer.unstable else replay(tree, offer)
        if not text:
            continue
        t5 = clock()
        page = page_text_of(tree)
        t6 = clock()
        algorithm = pipeline.algorithm
        algorithm.fingerprint(text)
        t7 = clock()
        algorithm.fingerprint(page)
        t8 = clock()
        declared_canonical(html, url)
        t9 = clock()
        packed = pickle.dumps(offers)
        t10 = clock()
        prepare_html(pipeline, pages[path], url, content_type, packed)
        t11 = clock()
        for name, took in zip(
            (*steps, "page_fingerprint", "declared_canonical", "whole_task"),
            (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5, t7 - t6, t8 - t7, t9 - t8, t11 - t10),
        ):
            spent[name] += took
        timed += 1
    print(
        json.dumps(
            {
                "command": "bench/worker_steps.py " + " ".join(sys.argv[1:]),
                "pages": len(order),
                "pages_replayed": timed,
                "mean_cpu_ms_per_replayed_page": {k: round(1000 * v / max(1, timed), 3) for k, v in spent.items()},
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
