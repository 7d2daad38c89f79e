"""How far exact comparison can go on a labelled set: the ceiling any sketch of the same text is under.

    python bench/quality_ceiling.py ../shared/neardup-dev [--workers N]

Takes the text the default pipeline fingerprints (trafilatura's main text favouring recall, the page text
when it is short, the template guard), its word 2-shingles, and compares each page *exactly* (Jaccard of the
whole shingle sets, no sketch) with every canonical page filed before it, as the detector does with its
estimates: a page joins its most similar canonical page at or above the threshold, or is filed as canonical.
Rows at several thresholds:

* ``exact``: the method above, what a perfect MinHash would do;
* ``exact, teaser oracle``: the same, but a pair involving a page *labelled* teaser is never accepted. This
  reads the labels, so it is not a method: it bounds what any teaser detector, however good, could add.

For each row the false merges (pairs of gold clusters joined, with the false pairs each costs in the
pairwise count) are printed, so what limits precision can be read, not guessed. Output: one JSON line per
row, then a readable table on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter, defaultdict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from scrapy_neardup.assembly import build_pipeline, build_template_guard
from scrapy_neardup.engine.text import shingle_set
from scrapy_neardup.offline.evaluation import error_report, extract_pages, load_manifest, score
from scrapy_neardup.settings import Config

THRESHOLDS = (0.3, 0.35, 0.4, 0.45, 0.5)


def shingle_sets(manifest_path: str, workers: int) -> tuple[list[dict], list[set[int] | None]]:
    """The default pipeline's text of every page, as exact shingle sets (``None``: page skipped)."""
    config = Config.from_settings({"NEARDUP_ENABLED": True})
    pipeline = build_pipeline(config)
    manifest = load_manifest(manifest_path)
    base = os.path.dirname(os.path.abspath(manifest_path))
    extracted = [page.extraction for page in extract_pages(manifest, base, config, workers)]
    guard = build_template_guard(config)
    index = {row["url"]: i for i, row in enumerate(manifest)}
    sets: list[set[int] | None] = []
    for row, got in zip(manifest, extracted):
        if got.method == "none":
            sets.append(None)
            continue
        text = got.text
        if guard is not None:  # the same decisions as a crawl: which text, and which earlier pages move
            prepared, refile = guard.decide(row["url"], row["url"], pipeline.from_extraction(got))
            if prepared.method == "template":
                text = got.page_text
            for key, _ in refile:
                sets[index[key]] = set(shingle_set(extracted[index[key]].page_text, config.shingle_size).tolist())
        sets.append(set(shingle_set(text, config.shingle_size).tolist()))
    return manifest, sets


def exact_stream(
    manifest: list[dict], sets: list[set[int] | None], threshold: float, refuse=lambda i, j: False
) -> list[tuple[str, str, float]]:  # type: ignore[no-untyped-def]
    """Each page against every canonical page before it, exactly (an inverted index of shingles)."""
    postings: dict[int, list[int]] = defaultdict(list)
    pairs = []
    for i, shingles in enumerate(sets):
        if shingles is None:
            continue
        shared: Counter[int] = Counter()
        for h in shingles:
            shared.update(postings.get(h, ()))
        best = None
        for j, inter in shared.items():
            other = sets[j]
            assert other is not None
            sim = inter / (len(shingles) + len(other) - inter)
            if sim >= threshold and not refuse(i, j) and (best is None or (sim, -j) > (best[0], -best[1])):
                best = (sim, j)
        if best is not None:
            pairs.append((manifest[i]["url"], manifest[best[1]]["url"], best[0]))
        else:
            for h in shingles:
                postings[h].append(i)
    return pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("devset", help="folder of neardup-dev (manifest.jsonl inside)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    manifest, sets = shingle_sets(os.path.join(args.devset, "manifest.jsonl"), args.workers)
    kinds = [row["kind"] for row in manifest]

    def teaser(i: int, j: int) -> bool:
        return "teaser" in (kinds[i], kinds[j])

    for name, refuse in (("exact", lambda i, j: False), ("exact, teaser oracle", teaser)):
        for threshold in THRESHOLDS:
            pairs = exact_stream(manifest, sets, threshold, refuse)
            result = score(manifest, [(a, b) for a, b, _ in pairs])
            merges = [r for r in error_report(manifest, pairs) if r["type"] == "false_merge"]
            row = {
                "method": name,
                "threshold": threshold,
                "f1": round(result.f1, 4),
                "precision": round(result.precision, 4),
                "recall": round(result.recall, 4),
                "false_pairs": result.predicted_pairs - result.true_pairs,
                "false_merges": [
                    [*m["clusters"], m["false_pairs"], max(e["similarity"] for e in m["edges"])] for m in merges
                ],
            }
            print(json.dumps(row), flush=True)
            print(
                f"{name:22} {threshold:.2f}  F1 {result.f1:.4f}  P {result.precision:.4f}  R {result.recall:.4f}"
                f"  false pairs {row['false_pairs']}",
                file=sys.stderr,
            )


if __name__ == "__main__":
    main()
