"""The extraction of this checkout against another's, page by page, over real pages.

    python3 dev.py bench bench/extract_ab.py ../shared/neardup-dev --against /path/to/other/checkout [--passes 3]

Loads ``scrapy_neardup/engine/extract.py`` of both checkouts into one process and runs each one's
``extract`` (defaults, the page text asked for, as a crawl's workers do) on every page, alternating which
goes first, so that a busy machine slows both alike. Prints the mean CPU milliseconds a page of each, per
pass, and how many pages got a different text, method or page text.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from scrapy_neardup.engine import extract as this
from scrapy_neardup.offline.evaluation import load_manifest, read_page


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset")
    parser.add_argument("--against", required=True, help="root of the other checkout")
    parser.add_argument("--passes", type=int, default=3)
    args = parser.parse_args()
    spec = importlib.util.spec_from_file_location(
        "other_extract", os.path.join(args.against, "scrapy_neardup", "engine", "extract.py")
    )
    assert spec is not None and spec.loader is not None
    other = importlib.util.module_from_spec(spec)
    sys.modules["other_extract"] = other
    spec.loader.exec_module(other)
    this.quiet_trafilatura()
    pages = []
    for row in load_manifest(os.path.join(args.dataset, "manifest.jsonl")):
        body = read_page(os.path.join(args.dataset, row["file"]))
        pages.append((this.decode_html(body, "text/html"), row["url"]))
    clock = time.process_time
    passes, differ = [], {"text": 0, "method": 0, "page_text": 0}
    for number in range(args.passes):
        spent = {"this": 0.0, "other": 0.0}
        for k, (html, url) in enumerate(pages):
            got = {}
            for name, module in (("this", this), ("other", other)) if k % 2 else (("other", other), ("this", this)):
                started = clock()
                got[name] = module.extract(html, url, with_page_text=True)
                spent[name] += clock() - started
            if number == 0:
                for field in differ:
                    differ[field] += getattr(got["this"], field) != getattr(got["other"], field)
        passes.append({name: round(1000 * seconds / len(pages), 2) for name, seconds in spent.items()})
    print(
        json.dumps(
            {
                "command": "bench/extract_ab.py " + " ".join(sys.argv[1:]),
                "pages": len(pages),
                "mean_cpu_ms_per_page": passes,
                "pages_that_differ": differ,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
