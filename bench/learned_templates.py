"""Learned templates against trafilatura alone and Resiliparse alone: the share of pages that need no
trafilatura, the milliseconds a page, and near-duplicate F1, on one labelled set.

    python3 dev.py bench bench/learned_templates.py DATASET [--order shuffled-1] [--repeat 3] [--teaches-from N]

DATASET: a folder with ``manifest.jsonl`` (``bench/template_site.py``'s template-rich set, or neardup-dev).
The pages are taken in one crawl order (``shuffled-N``, or ``manifest``), one process, as a crawl's
deciding process meets them: each page by trafilatura (the reference, ``NEARDUP_LEARN_TEMPLATES = False``),
by Resiliparse 2 (``NEARDUP_EXTRACTOR = "resiliparse"``) and by the learned templates
(:mod:`scrapy_neardup.engine.learned`: the page's template key, its selector replayed, trafilatura for a
page no selector vouches for and for the sampled checks, a lesson from each such page). Times are CPU
seconds of each extraction of the page (the decode excluded, the same for all), the median of ``--repeat``
passes for each page; the learned pass counts the trafilatura runs it made.

Each text set is then decided and scored as ``evaluate`` does (MinHash at its defaults, the template guard
off: it reads the page text, which the extractors take differently). Printed: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections import defaultdict
from urllib.parse import urlsplit

from scrapy_neardup.assembly import build_pipeline, build_template_learner
from scrapy_neardup.engine.extract import Extraction, decode_html
from scrapy_neardup.engine.learned import learner as learner_module
from scrapy_neardup.offline.evaluation import decide_pages, load_manifest, read_page, score
from scrapy_neardup.settings import Config


def template_of(url: str) -> str:
    """The template a page was built from: its first path segment on the template-rich set (``/t07/``),
    its host elsewhere (for the per-template counts only; the learner finds templates itself)."""
    parts = urlsplit(url)
    first = parts.path.strip("/").split("/")[0]
    return first if parts.hostname == "template.example" and first.startswith("t") else parts.hostname or ""


def cpu(fn):  # type: ignore[no-untyped-def]
    started = time.thread_time()
    out = fn()
    return out, time.thread_time() - started


def run(args: argparse.Namespace) -> dict:
    manifest = load_manifest(os.path.join(args.dataset, "manifest.jsonl"))
    order = list(range(len(manifest)))
    if args.order.startswith("shuffled-"):
        random.Random(int(args.order.split("-", 1)[1])).shuffle(order)
    base = {"NEARDUP_ENABLED": True, "NEARDUP_TEMPLATE_REPEATS": 0}
    reference = Config.from_settings({**base, "NEARDUP_LEARN_TEMPLATES": False})
    traf = build_pipeline(reference)
    resil = build_pipeline(Config.from_settings({**base, "NEARDUP_EXTRACTOR": "resiliparse"}))
    learning = Config.from_settings(base)

    def html_of(i: int) -> str:  # read again at each pass: a large set's decoded pages do not fit in memory
        return decode_html(read_page(os.path.join(args.dataset, manifest[i]["file"])))

    times: dict[str, list[list[float]]] = {k: [[] for _ in manifest] for k in ("trafilatura", "resiliparse", "learned")}
    texts: dict[str, list[Extraction | None]] = {k: [None] * len(manifest) for k in times}
    learned_how: list[str] = [""] * len(manifest)
    for _ in range(args.repeat):
        learner = build_template_learner(learning)
        assert learner is not None
        pipeline = build_pipeline(learning)
        for i in order:
            url, html = manifest[i]["url"], html_of(i)
            texts["trafilatura"][i], seconds = cpu(lambda: traf.text_of(html, url))
            times["trafilatura"][i].append(seconds)
            texts["resiliparse"][i], seconds = cpu(lambda: resil.text_of(html, url))
            times["resiliparse"][i].append(seconds)
            host = urlsplit(url).hostname or ""
            offers = learner.offers(host)
            (got, found), seconds = cpu(lambda: pipeline.learned_text(html, url, offers))
            texts["learned"][i] = got
            times["learned"][i].append(seconds)
            how = found.get("learned", "")
            learned_how[i] = how
            learner.observe(
                host, found.get("template"), how, found.get("lesson"), found.get("prekey"), found.get("agreement")
            )
    ms = {k: [1000 * statistics.median(t) for t in v] for k, v in times.items()}
    # Pages after each template's first 10 (in the crawl order): the share extracted without trafilatura.
    seen: dict[str, int] = defaultdict(int)
    later = []
    for i in order:
        template = template_of(manifest[i]["url"])
        seen[template] += 1
        if seen[template] > 10:
            later.append(i)
    replayed = [i for i in range(len(manifest)) if learned_how[i] == "replayed"]
    declared = [None] * len(manifest)
    rows = {}
    for name, extracted in texts.items():
        _, pairs = decide_pages(manifest, reference, [e for e in extracted if e is not None], declared)
        result = score(manifest, [(a, b) for a, b, _ in pairs])
        rows[name] = {
            "f1": round(result.f1, 4),
            "precision": round(result.precision, 4),
            "recall": round(result.recall, 4),
            "recall_by_kind": {k: round(v, 3) for k, v in sorted(result.kind_recall.items())},
            "median_ms": round(statistics.median(ms[name]), 2),
            "mean_ms": round(statistics.mean(ms[name]), 2),
        }
    later_replayed = [i for i in later if learned_how[i] == "replayed"]
    rows["learned"].update(
        {
            "pages_without_trafilatura": round(len(replayed) / len(manifest), 3),
            "after_first_10_pages": len(later),
            "after_first_10_without_trafilatura": round(len(later_replayed) / max(1, len(later)), 3),
            "after_first_10_median_ms": round(statistics.median(ms["learned"][i] for i in later) if later else 0.0, 2),
            "replayed_median_ms": round(statistics.median(ms["learned"][i] for i in replayed) if replayed else 0.0, 2),
            "how": {k: learned_how.count(k) for k in sorted(set(learned_how))},
            "selectors": sum(1 for s in learner.selectors() if s.usable),
        }
    )
    return {
        "command": " ".join(["bench/learned_templates.py", *sys.argv[1:]]),
        "pages": len(manifest),
        "templates": len(seen),
        "order": args.order,
        "repeat": args.repeat,
        "extractors": rows,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", help="folder with manifest.jsonl")
    parser.add_argument("--order", default="shuffled-1", help="manifest or shuffled-N")
    parser.add_argument("--repeat", type=int, default=3, help="passes; each page's time is their median")
    parser.add_argument(
        "--teaches-from",
        type=int,
        help="a template's pages parsed before it teaches, plus one (the constant TEACHES_FROM, changed here)",
    )
    args = parser.parse_args()
    if args.teaches_from is not None:
        learner_module.TEACHES_FROM = args.teaches_from
    print(json.dumps(run(args), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
