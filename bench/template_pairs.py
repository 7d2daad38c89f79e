"""How similar are the page texts around one identical main text: template sites against copies on one host.

    python dev.py bench bench/template_pairs.py ../shared/neardup-dev

For each host of the set and each main text (trafilatura, the default settings) that several of its pages
share, the pages whose main text is at most half of their page text (the only ones the template guard
compares) are compared pairwise on the guard's own page-text sketch. A group whose pages belong to
different labelled clusters is a template failure (different articles around one block); a group within one
cluster is copies. Prints one JSON object: the similarity range of each kind, and the groups.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from collections import defaultdict
from urllib.parse import urlsplit

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from scrapy_neardup.assembly import build_algorithm
from scrapy_neardup.engine.prepare import page_sketcher
from scrapy_neardup.engine.template import PAGE_TEXTS_DIFFER
from scrapy_neardup.offline.evaluation import extract_pages, load_manifest
from scrapy_neardup.settings import Config


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    config = Config.from_settings({})
    manifest = load_manifest(os.path.join(args.dataset, "manifest.jsonl"))
    extracted = [page.extraction for page in extract_pages(manifest, args.dataset, config, args.workers)]
    sketcher = page_sketcher(build_algorithm(config))  # what a crawl at the defaults compares with
    groups: dict[tuple[str, str], list[tuple[dict, str]]] = defaultdict(list)
    for row, got in zip(manifest, extracted):
        if got.method == "main" and got.page_text:
            key = " ".join(got.text.casefold().split())
            groups[((urlsplit(row["url"]).hostname or ""), key)].append((row, got.page_text))
    out: dict[str, list[float]] = {"template": [], "copies": []}
    listing = []
    for (host, _), members in groups.items():
        if len(members) < 2:
            continue
        sketches = [sketcher.fingerprint(text).signature for _, text in members]
        kind = "template" if len({row["cluster"] for row, _ in members}) > 1 else "copies"
        for (i, a), (j, b) in itertools.combinations(enumerate(sketches), 2):
            if kind == "template" and members[i][0]["cluster"] == members[j][0]["cluster"]:
                continue  # two copies of one article inside a template group
            out[kind].append(round(sketcher.similarity(a, b), 3))
        listing.append(
            {"host": host, "kind": kind, "pages": len(members), "kinds": [row["kind"] for row, _ in members]}
        )
    print(
        json.dumps(
            {
                "command": "bench/template_pairs.py " + " ".join(sys.argv[1:]),
                "cut": PAGE_TEXTS_DIFFER,
                "template_pairs": {
                    "n": len(out["template"]),
                    "min": min(out["template"], default=None),
                    "max": max(out["template"], default=None),
                },
                "copy_pairs": {
                    "n": len(out["copies"]),
                    "min": min(out["copies"], default=None),
                    "max": max(out["copies"], default=None),
                    "below_cut": sum(s < PAGE_TEXTS_DIFFER for s in out["copies"]),
                },
                "groups": sorted(listing, key=lambda g: (g["kind"], g["host"])),
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
