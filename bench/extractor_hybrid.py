"""A probe: would a fast extractor checked by a cheap rule, with trafilatura only where the rule doubts it,
keep trafilatura's F1 at a fraction of its cost?

    python3 dev.py bench bench/extractor_hybrid.py ../shared/neardup-dev [--fast resiliparse-blocks]

Every page of the labelled set is extracted once by trafilatura and once by the fast extractor (in the
extraction runtime's workers, timed there); then, for each rule, the pages the rule doubts take
trafilatura's text, the others the fast one's, and the set is decided and scored as ``evaluate`` does. The
cost of a rule is the fast extractor's on every page plus trafilatura's on the pages it doubts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Callable

from scrapy_neardup.engine.extract import Extraction
from scrapy_neardup.offline.evaluation import PageText, decide_pages, extract_pages, load_manifest, score
from scrapy_neardup.settings import Config

#: Rules that doubt a fast extraction, given it and the page's whole visible text.
RULES: dict[str, Callable[[Extraction], bool]] = {
    "never (the fast extractor alone)": lambda got: False,
    "no main text": lambda got: got.method != "main",
    "main text under 1,000 characters": lambda got: got.method != "main" or len(got.text) < 1000,
    "main text under 2,000 characters": lambda got: got.method != "main" or len(got.text) < 2000,
    "main text under 4,000 characters": lambda got: got.method != "main" or len(got.text) < 4000,
    "always (trafilatura alone)": lambda got: True,
}


def arguments(description: str) -> argparse.Namespace:
    """The options of the extractor probes: the labelled set, the fast extractor, the workers."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("dataset", help="folder with manifest.jsonl (e.g. ../shared/neardup-dev)")
    parser.add_argument("--fast", default="resiliparse-blocks", help="the fast extractor (NEARDUP_EXTRACTOR)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    return parser.parse_args()


def both_extractions(args: argparse.Namespace) -> tuple[list[dict], Config, list[PageText], list[PageText]]:
    """The labelled set, the reference configuration, and every page extracted by trafilatura and by the
    fast extractor. The template guard is off: it reads the page text, which the two take differently."""
    manifest = load_manifest(os.path.join(args.dataset, "manifest.jsonl"))
    settings = {"NEARDUP_ENABLED": True, "NEARDUP_TEMPLATE_REPEATS": 0}
    reference = Config.from_settings(settings)
    fast = Config.from_settings({**settings, "NEARDUP_EXTRACTOR": args.fast})
    slow_pages = extract_pages(manifest, args.dataset, reference, args.workers)
    return manifest, reference, slow_pages, extract_pages(manifest, args.dataset, fast, args.workers)


def main() -> int:
    args = arguments(__doc__.split("\n\n")[0])
    manifest, reference, slow_pages, fast_pages = both_extractions(args)
    slow_ms = 1000 * statistics.median(p.seconds for p in slow_pages)
    fast_ms = 1000 * statistics.median(p.seconds for p in fast_pages)
    declared = [p.declared for p in slow_pages]
    rows = []
    for name, doubts in RULES.items():
        chosen = [s if doubts(f.extraction) else f for s, f in zip(slow_pages, fast_pages)]
        texts = [p.extraction for p in chosen]
        _, pairs = decide_pages(manifest, reference, texts, declared)
        result = score(manifest, [(a, b) for a, b, _ in pairs])
        doubted = sum(1 for s, p in zip(slow_pages, chosen) if p is s)
        mean_ms = sum(f.seconds + (s.seconds if p is s else 0.0) for s, f, p in zip(slow_pages, fast_pages, chosen))
        rows.append(
            {
                "rule": name,
                "f1": round(result.f1, 4),
                "precision": round(result.precision, 4),
                "recall": round(result.recall, 4),
                "trafilatura_share": round(doubted / len(manifest), 3),
                "mean_ms_per_page": round(1000 * mean_ms / len(manifest), 2),
            }
        )
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(
        json.dumps(
            {
                "command": " ".join(["bench/extractor_hybrid.py", *sys.argv[1:]]),
                "pages": len(manifest),
                "median_ms_per_page": {"trafilatura": round(slow_ms, 2), args.fast: round(fast_ms, 2)},
                "rules": rows,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
