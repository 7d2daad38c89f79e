"""A probe: where a fast extractor loses the pairs trafilatura finds, and what it keeps or drops there.

    python3 dev.py bench bench/extractor_failures.py ../shared/neardup-dev [--fast resiliparse-blocks]

For every labelled pair (a page and its cluster's original) whose main texts reach the default threshold's
exact Jaccard (word 2-shingles) with trafilatura and not with the fast extractor, the pair is put in one
bucket by what the fast extractor did on its worse side: kept more than trafilatura (``kept_more``: its
text at least 1.5 times as long: comments, related links, site furniture), kept less (``kept_less``: at
most two thirds as long: the article cut), or took another block of about the same length (``other_block``);
counted per kind of copy.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from extractor_hybrid import arguments, both_extractions

from scrapy_neardup.engine.text import shingle_set


def jaccard(a: str, b: str) -> float:
    left, right = set(shingle_set(a, 2).tolist()), set(shingle_set(b, 2).tolist())
    return len(left & right) / max(1, len(left | right))


def main() -> int:
    args = arguments(__doc__.split("\n\n")[0])
    manifest, reference, slow_pages, fast_pages = both_extractions(args)
    threshold = reference.threshold
    slow = [p.extraction.text for p in slow_pages]
    fast = [p.extraction.text for p in fast_pages]
    original = {}
    for i, row in enumerate(manifest):
        if row.get("kind") == "original":
            original[row["cluster"]] = i
    lost: Counter[tuple[str, str]] = Counter()
    found: Counter[str] = Counter()
    for i, row in enumerate(manifest):
        j = original.get(row.get("cluster"))
        if j is None or j == i or row.get("kind") in ("original", "teaser"):
            continue
        if jaccard(slow[i], slow[j]) < threshold:
            continue
        found[row["kind"]] += 1
        if jaccard(fast[i], fast[j]) >= threshold:
            continue
        ratios = [len(fast[k]) / max(1, len(slow[k])) for k in (i, j)]
        worst = max(ratios, key=lambda r: abs(r - 1.0))
        how = "kept_more" if worst >= 1.5 else "kept_less" if worst <= 2 / 3 else "other_block"
        lost[(row["kind"], how)] += 1
    kinds = sorted(found)
    table = {
        kind: {
            "pairs_trafilatura_finds": found[kind],
            **{how: lost[(kind, how)] for how in ("kept_more", "kept_less", "other_block")},
        }
        for kind in kinds
    }
    print(
        json.dumps(
            {"command": " ".join(["bench/extractor_failures.py", *sys.argv[1:]]), "fast": args.fast, "kinds": table},
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
