"""Crawls of one site on one store, as the learned templates see them: the learner of a crawler process fed a
labelled set page by page, pass after pass (each pass a crawl in another shuffled order), in one process.

    python dev.py bench bench/learner_passes.py DIR [--passes 3]

Prints one JSON object: for each pass, how each page was extracted (``replayed``, ``agreed`` and
``disagreed`` checks, ``refused``, ``trafilatura`` while a template has no selector or an unstable one,
``unparsed``: its pre-key not met before), the pages sent to trafilatura after each template's first 10 of the
pass, and each retirement (the template, the pages its selector served, the check's agreement, whether the
template became ``unstable``). What a crawl's workers add (their own selectors) and its concurrency change
when a selector reaches the pages, not what it decides.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pickle
import sys
from typing import TYPE_CHECKING

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_crawl
from learned_templates import template_of

from scrapy_neardup.assembly import build_pipeline, build_template_learner
from scrapy_neardup.engine.urlrules import host_of
from scrapy_neardup.offline.evaluation import load_manifest
from scrapy_neardup.settings import Config
from scrapy_neardup.workers.tasks import prepare_html

if TYPE_CHECKING:
    from scrapy_neardup.engine.learned import TemplateLearner
    from scrapy_neardup.engine.prepare import DocumentPipeline, Prepared

#: Pages of a template a pass may send to trafilatura before they count ("after its first 10").
FIRST_PAGES = 10
#: Where the set's pages are served from, as the crawl benchmark's pages are (its port is never opened here).
BASE, CONTENT_TYPE = "http://127.0.0.1:1", "text/html; charset=utf-8"


def learn_from(pipeline: DocumentPipeline, learner: TemplateLearner, body: bytes, url: str) -> tuple[Prepared, str]:
    """One page as a crawl handles it: extracted with its host's offers, as a worker does, then observed by
    the crawler process's learner; what was prepared, and what changed (:meth:`TemplateLearner.observe`)."""
    host = host_of(url)
    done = prepare_html(pipeline, body, url, CONTENT_TYPE, pickle.dumps(learner.offers(host)))
    return done, learner.observe(host, done.template, done.learned, done.lesson, done.prekey, done.agreement)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset")
    parser.add_argument("--passes", type=int, default=3)
    args = parser.parse_args()
    config = Config.from_settings({"NEARDUP_ENABLED": True})
    pipeline, learner = build_pipeline(config), build_template_learner(config)
    assert learner is not None
    manifest = load_manifest(os.path.join(args.dataset, "manifest.jsonl"))
    template = {bench_crawl.site_path(r["url"]): template_of(r["url"]) for r in manifest}
    pages = bench_crawl.load_pages(args.dataset, manifest)
    passes = []
    for n in range(1, args.passes + 1):
        order = bench_crawl.crawl_orders(manifest, [f"shuffled-{n}"])[f"shuffled-{n}"]
        how: collections.Counter[str] = collections.Counter()
        met: collections.Counter[str] = collections.Counter()
        late, retirements = 0, []
        for path in order:
            url = BASE + path
            held = {(s.host, s.template): s for s in learner.selectors()}
            done, change = learn_from(pipeline, learner, pages[path], url)
            before = held.get((host_of(url), done.template))
            kind = done.learned or ("trafilatura" if done.template is not None else "unparsed")
            how[kind] += 1
            met[template[path]] += 1
            if kind != "replayed" and met[template[path]] > FIRST_PAGES:
                late += 1
            if change in ("retired", "unstable") and before is not None:
                retirements.append(
                    {
                        "template": template[path],
                        "served": before.served,
                        "agreement": round(done.agreement or 0.0, 3),
                        "became": change,
                    }
                )
        passes.append(
            {
                "pass": n,
                "how": dict(sorted(how.items())),
                "to_trafilatura_after_first_10": late,
                "retirements": retirements,
            }
        )
    print(json.dumps({"command": "bench/learner_passes.py " + " ".join(sys.argv[1:]), "passes": passes}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
