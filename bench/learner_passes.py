"""Crawls of one site on one store, as the learned templates see them: the learner of a crawler process fed a
labelled set page by page, pass after pass (each pass a crawl in another shuffled order), in one process.

    python dev.py bench bench/learner_passes.py DIR [--passes 3] [--orders shuffled-3 ...] [--in-flight 24]
        [-s NEARDUP_LEARN_LESSONS=3 ...]

Prints one JSON object: for each pass, how each page was extracted (``replayed``, ``agreed`` and
``disagreed`` checks, ``refused``, ``trafilatura`` while a template has no selector or an unstable one,
``unparsed``: its pre-key not met before, ``stale``: replayed by a selector retired before the page's result
came back, extracted again by trafilatura), the pages each pass sent to trafilatura in all
(``to_trafilatura``: every kind but ``replayed``) and after each template's first 10 of the pass, and each
retirement (the template, the pages its selector served, the check's agreement, whether the template became
``unstable``). Pass N takes the pages in the order ``shuffled-N``, or in ``--orders`` (one pass an order).
``--in-flight N``: a page goes with its host's offers as they are when it is sent and its result reaches
the learner N pages later, as a crawl's results come back while other pages wait for a worker (about 24 of
the 32 in flight at the crawl benchmark's concurrency); 0, the default, one page after another. What a
crawl's workers add (their own selectors) and its timing still change when a selector reaches the pages.
``-s NAME=VALUE``: a setting other than its default (``NEARDUP_LEARN_LESSONS``, ``NEARDUP_LEARN_CHECK_SHARE``).
``--new-process``: each pass after the first is the crawl of a new process, as a site's next crawl is: a new
learner that starts from the selectors the last one left (their records read back from their JSON, as the
store keeps them); by default one learner runs every pass, as one long-lived process would. Each pass also
counts the unstable templates learned again (``relearning``).
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
from scrapy_neardup.engine.learned import Selector
from scrapy_neardup.engine.urlrules import host_of
from scrapy_neardup.offline.evaluation import load_manifest, read_page
from scrapy_neardup.settings import Config
from scrapy_neardup.workers.tasks import prepare_html

if TYPE_CHECKING:
    from scrapy_neardup.engine.learned import TemplateLearner
    from scrapy_neardup.engine.prepare import DocumentPipeline, Prepared

#: Pages of a template a pass may send to trafilatura before they count ("after its first 10").
FIRST_PAGES = 10
#: Where the set's pages are served from, as the crawl benchmark's pages are (its port is never opened here).
BASE, CONTENT_TYPE = "http://127.0.0.1:1", "text/html; charset=utf-8"


def extract(pipeline: DocumentPipeline, learner: TemplateLearner, body: bytes, url: str) -> Prepared:
    """One page extracted with its host's offers as they are now, as a worker does."""
    return prepare_html(pipeline, body, url, CONTENT_TYPE, pickle.dumps(learner.offers(host_of(url))))


def learn_from(pipeline: DocumentPipeline, learner: TemplateLearner, body: bytes, url: str) -> tuple[Prepared, str]:
    """One page as a crawl handles it: extracted with its host's offers, as a worker does, then observed by
    the crawler process's learner; what was prepared, and what changed (:meth:`TemplateLearner.observe`)."""
    done = extract(pipeline, learner, body, url)
    host = host_of(url)
    return done, learner.observe(host, done.template, done.learned, done.lesson, done.prekey, done.agreement)


class PageReader:
    """A set's pages by path, read from its files as they are asked for (as the crawl benchmark serves them:
    :func:`bench_crawl.load_pages`), so that a set of 100,000 pages is not held in memory."""

    def __init__(self, dataset: str, manifest: list[dict]) -> None:
        self.dataset = dataset
        self.in_set = {row["url"] for row in manifest}
        self.rows = {bench_crawl.site_path(row["url"]): row for row in manifest}

    def __getitem__(self, path: str) -> bytes:
        row = self.rows[path]
        body = read_page(os.path.join(self.dataset, row["file"]))
        return bench_crawl.local_canonical(body, row["url"], self.in_set)

    def get(self, path: str) -> bytes | None:
        """The page at ``path``, or ``None`` (as a dict answers the local site: :func:`bench_crawl.serve`)."""
        return self[path] if path in self.rows else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--orders", nargs="+", help="one pass an order (manifest, copies-first, shuffled-N)")
    parser.add_argument("--in-flight", type=int, default=0, help="pages whose results are still to come back")
    parser.add_argument("-s", dest="setting", action="append", default=[], metavar="NAME=VALUE", help="a setting")
    parser.add_argument("--new-process", action="store_true", help="each pass a new learner, from the stored selectors")
    args = parser.parse_args()
    config = Config.from_settings({"NEARDUP_ENABLED": True, **bench_crawl.named_settings(args.setting)})
    pipeline, learner = build_pipeline(config), build_template_learner(config)
    assert learner is not None
    manifest = load_manifest(os.path.join(args.dataset, "manifest.jsonl"))
    template = {bench_crawl.site_path(r["url"]): template_of(r["url"]) for r in manifest}
    pages = PageReader(args.dataset, manifest)
    names = args.orders or [f"shuffled-{n}" for n in range(1, args.passes + 1)]
    orders = bench_crawl.crawl_orders(manifest, names)
    passes = []
    for n, name in enumerate(names, 1):
        if args.new_process and n > 1:
            stored = [Selector.from_json(selector.to_json()) for selector in learner.selectors()]
            learner = build_template_learner(config)
            assert learner is not None
            learner.adopt([record for record in stored if record is not None])
        how: collections.Counter[str] = collections.Counter()
        relearning = 0
        met: collections.Counter[str] = collections.Counter()
        late, retirements = 0, []
        flight: collections.deque[tuple[str, str, Prepared]] = collections.deque()

        def land() -> None:
            nonlocal late, relearning
            path, url, done = flight.popleft()
            host = host_of(url)
            if done.learned == "replayed" and not learner.active(host, done.template or 0):
                kind, change, before = "stale", "", None
            else:
                before = next((s for s in learner.selectors() if (s.host, s.template) == (host, done.template)), None)
                change = learner.observe(host, done.template, done.learned, done.lesson, done.prekey, done.agreement)
                kind = done.learned or ("trafilatura" if done.template is not None else "unparsed")
            how[kind] += 1
            relearning += change == "relearning"
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

        for path in orders[name]:
            url = BASE + path
            flight.append((path, url, extract(pipeline, learner, pages[path], url)))
            if len(flight) > args.in_flight:
                land()
        while flight:
            land()
        passes.append(
            {
                "pass": n,
                "order": name,
                "how": dict(sorted(how.items())),
                "to_trafilatura": sum(v for k, v in how.items() if k != "replayed"),
                "to_trafilatura_after_first_10": late,
                "retirements": retirements,
                "relearning": relearning,
            }
        )
    print(json.dumps({"command": "bench/learner_passes.py " + " ".join(sys.argv[1:]), "passes": passes}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
