"""How closely each learned template's replay reproduces trafilatura, page by page.

    python3 dev.py bench bench/replay_fidelity.py DIR [--order shuffled-1] [--below 0.95]

DIR: a template-rich set (``bench/template_site.py``). The pages are read once in one crawl order by the
learner as a crawler process runs it (``learner_passes.learn_from``, under the crawl benchmark's URLs: its
selectors learned, checked, retired; each check that disagreed is listed). Then every page whose template
has an active selector at the end is replayed by it and compared with trafilatura's text of it by the
learner's own ``agreement`` (the share of trafilatura's word pairs the replay holds). Printed: one JSON
object: for each template (``bench/learned_templates.py``'s ``template_of``) its pages replayed, the share
below ``--below`` (the learner's bound by default) and below 0.98, the mean and the least agreement, its
pages not replayed (refused, or no active selector); the same shares by the replay's length in words; and
the pages of least agreement with both texts' lengths. A check samples 1 page in 32 at the least, so this
shows what the checks see only in part.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections import Counter, defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_crawl
from learned_templates import template_of
from learner_passes import BASE, CONTENT_TYPE, learn_from

from scrapy_neardup.assembly import build_pipeline, build_template_learner
from scrapy_neardup.engine.extract import decode_html
from scrapy_neardup.engine.learned import AGREEMENT, agreement, parse, replay, skeleton_key
from scrapy_neardup.engine.urlrules import host_of
from scrapy_neardup.offline.evaluation import load_manifest
from scrapy_neardup.settings import Config

#: The replays' lengths in words, by upper bound, for the agreement by length.
WORD_BINS = (60, 100, 150, 200, 300, 500, 800, float("inf"))


def run(args: argparse.Namespace) -> dict:
    manifest = load_manifest(os.path.join(args.dataset, "manifest.jsonl"))
    template = {bench_crawl.site_path(r["url"]): template_of(r["url"]) for r in manifest}
    pages = bench_crawl.load_pages(args.dataset, manifest)
    order = bench_crawl.crawl_orders(manifest, [args.order])[args.order]
    config = Config.from_settings({"NEARDUP_ENABLED": True, "NEARDUP_TEMPLATE_REPEATS": 0})
    pipeline, learner = build_pipeline(config), build_template_learner(config)
    assert learner is not None
    how: Counter[str] = Counter()
    disagreed = []
    for n, path in enumerate(order):  # the crawler process's learner, one page after another
        done, change = learn_from(pipeline, learner, pages[path], BASE + path)
        how[done.learned or ("trafilatura" if done.template is not None else "unparsed")] += 1
        if done.learned == "disagreed":
            disagreed.append(
                {"page": n, "template": template[path], "agreement": round(done.agreement, 3), "then": change}
            )
    agreements: dict[str, list[float]] = defaultdict(list)
    by_words: dict[float, list[float]] = defaultdict(list)
    without: Counter[str] = Counter()
    least = []
    for path in order:
        url, name = BASE + path, template[path]
        html = decode_html(pages[path], CONTENT_TYPE)
        tree = parse(html)
        offer = None if tree is None else learner.offers(host_of(url)).selectors.get(skeleton_key(tree))
        text = None if offer is None or offer.unstable else replay(tree, offer, AGREEMENT)
        if not text:
            without[name] += 1
            continue
        reference = pipeline.text_of(html, url)
        agreed = agreement(text, reference.text) if reference.method == "main" else 0.0
        agreements[name].append(agreed)
        least.append((agreed, name, len(text), len(reference.text), path))
        by_words[next(b for b in WORD_BINS if len(text.split()) < b)].append(agreed)
    least.sort()
    every = [a for values in agreements.values() for a in values]
    return {
        "command": " ".join(["bench/replay_fidelity.py", *sys.argv[1:]]),
        "pages": len(manifest),
        "first_pass": dict(sorted(how.items())),
        "checks_that_disagreed": disagreed,
        "replayed_at_the_end": len(every),
        "below": args.below,
        "share_below": round(sum(a < args.below for a in every) / max(1, len(every)), 4),
        "share_below_0.98": round(sum(a < 0.98 for a in every) / max(1, len(every)), 4),
        "templates": {
            name: {
                **_agreements(values, args.below),
                "least": round(min(values), 3),
                "not_replayed": without.get(name, 0),
            }
            for name, values in sorted(agreements.items())
        },
        "by_replay_words": {
            (f"under {bound:g}" if bound < WORD_BINS[-1] else f"{WORD_BINS[-2]:g} or more"): _agreements(
                values, args.below
            )
            for bound, values in sorted(by_words.items())
        },
        "templates_not_replayed": {k: v for k, v in sorted(without.items()) if k not in agreements},
        "least_agreement": [
            {"agreement": round(a, 3), "template": t, "replay_chars": r, "trafilatura_chars": f, "path": p}
            for a, t, r, f, p in least[: args.show]
        ],
    }


def _agreements(values: list[float], below: float) -> dict:
    """A group of replays' agreements summed up: how many, the shares under ``below`` and 0.98, the mean."""
    return {
        "replayed": len(values),
        "share_below": round(sum(a < below for a in values) / len(values), 3),
        "share_below_0.98": round(sum(a < 0.98 for a in values) / len(values), 3),
        "mean": round(statistics.mean(values), 4),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", help="folder with manifest.jsonl")
    parser.add_argument("--order", default="shuffled-1", help="manifest or shuffled-N")
    parser.add_argument("--below", type=float, default=AGREEMENT, help="the agreement counted as a miss")
    parser.add_argument("--show", type=int, default=10, help="pages of least agreement listed")
    args = parser.parse_args()
    print(json.dumps(run(args), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
