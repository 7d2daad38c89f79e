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

``--every N``: only the pages whose path's CRC-32 is a multiple of N are compared (the same pages in every
run), for a set of 100,000 pages; the pages are read from their files as they are needed.

Where a replay agrees under ``--below``, what the two texts differ by. A line (paragraph) of trafilatura's
text found on at least ``--repeated`` of the compared pages is template text (a block of the page around its
article), since an article's paragraph is on a few pages only (its copies, and on a set past neardup-dev's
articles the recombined articles that reuse it); its word pairs are the template's pairs (a replay's text is
not split in the same lines, so the texts are compared by word pairs). Printed for those pages: which text
holds more of the template's pairs than the other (``below_template_text_in``), and how many agree at the
bound once the template's pairs are taken out of both (``below_agree_without_template_text``): those differ
by template text alone. ``identical_texts_of_different_articles``: pairs of compared pages of different
labelled articles whose texts are identical, by trafilatura and by the replays.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import zlib
from collections import Counter, defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_crawl
from learned_templates import template_of
from learner_passes import BASE, CONTENT_TYPE, PageReader, learn_from

from scrapy_neardup.assembly import build_pipeline, build_template_learner
from scrapy_neardup.engine.extract import decode_html
from scrapy_neardup.engine.learned import AGREEMENT, agreement, parse, replay, skeleton_key, word_pairs, words
from scrapy_neardup.engine.urlrules import host_of
from scrapy_neardup.offline.evaluation import load_manifest
from scrapy_neardup.settings import Config

#: The replays' lengths in words, by upper bound, for the agreement by length.
WORD_BINS = (60, 100, 150, 200, 300, 500, 800, float("inf"))


def run(args: argparse.Namespace) -> dict:
    manifest = load_manifest(os.path.join(args.dataset, "manifest.jsonl"))
    template = {bench_crawl.site_path(r["url"]): template_of(r["url"]) for r in manifest}
    cluster = {bench_crawl.site_path(r["url"]): r["cluster"] for r in manifest}
    pages = PageReader(args.dataset, manifest)
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
    lines_on: Counter[str] = Counter()  # how many compared pages carry each line of trafilatura's text
    under: list[tuple[str, list[str]]] = []  # each replay under --below, and the lines of trafilatura's text
    # The labelled clusters of the compared pages, by each extractor's text (a digest of it).
    alike: dict[str, defaultdict[bytes, list[str]]] = {"trafilatura": defaultdict(list), "replay": defaultdict(list)}
    for path in order:
        if args.every > 1 and zlib.crc32(path.encode()) % args.every:
            continue
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
        reference_lines = _lines(reference.text)
        lines_on.update(set(reference_lines))
        if agreed < args.below:
            under.append((text, reference_lines))
        agreements[name].append(agreed)
        alike["replay"][hashlib.sha256(text.encode()).digest()].append(cluster[path])
        alike["trafilatura"][hashlib.sha256(reference.text.encode()).digest()].append(cluster[path])
        least.append((agreed, name, len(text), len(reference.text), path))
        by_words[next(b for b in WORD_BINS if len(text.split()) < b)].append(agreed)
    least.sort()
    every = [a for values in agreements.values() for a in values]
    template_pairs = {pair for line, n in lines_on.items() if n >= args.repeated for pair in _pairs(line)}
    holds: Counter[str] = Counter()
    agree_without = 0
    for text, reference_lines in under:
        replay_pairs, reference_pairs = _pairs(text), _pairs("\n".join(reference_lines))
        replay_more = len((replay_pairs - reference_pairs) & template_pairs)
        reference_more = len((reference_pairs - replay_pairs) & template_pairs)
        holds["replay" if replay_more > reference_more else "trafilatura" if reference_more else "neither"] += 1
        agree_without += agreement(replay_pairs - template_pairs, reference_pairs - template_pairs) >= args.below
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
        "identical_texts_of_different_articles": {name: _pairs_apart(groups) for name, groups in alike.items()},
        "below_pages": len(under),
        "below_template_text_in": dict(sorted(holds.items())),
        "below_agree_without_template_text": agree_without,
        "templates_not_replayed": {k: v for k, v in sorted(without.items()) if k not in agreements},
        "least_agreement": [
            {"agreement": round(a, 3), "template": t, "replay_chars": r, "trafilatura_chars": f, "path": p}
            for a, t, r, f, p in least[: args.show]
        ],
    }


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.split("\n") if line.strip()]


def _pairs(text: str) -> set[tuple[str, ...]]:
    return word_pairs(words(text))


def _pairs_apart(groups: defaultdict[bytes, list[str]]) -> dict:
    """Pairs of compared pages of different labelled clusters whose texts are identical (each such pair a false
    near-duplicate whatever the fingerprint), and the pages of the largest group of one text."""
    pairs = 0
    for clusters in groups.values():
        n = len(clusters)
        pairs += n * (n - 1) // 2 - sum(k * (k - 1) // 2 for k in Counter(clusters).values())
    return {"pairs": pairs, "largest_group": max((len(c) for c in groups.values()), default=0)}


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
    parser.add_argument("--every", type=int, default=1, help="compare the pages whose path's CRC-32 %% N is 0")
    parser.add_argument(
        "--repeated", type=int, default=10, help="a line on at least this many compared pages is template text"
    )
    args = parser.parse_args()
    if args.every < 1 or args.repeated < 2:
        parser.error("--every must be at least 1 and --repeated at least 2")
    print(json.dumps(run(args), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
