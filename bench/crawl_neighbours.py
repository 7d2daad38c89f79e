"""A probe: what another busy process on the machine does to a CPU-bound crawl with the plugin off.

    python3 dev.py bench bench/crawl_neighbours.py DIR [--repeat 3] [--order shuffled-1]

In each round, in alternation, each crawl in a fresh process (``bench_crawl.py``'s local site, settings and
order; the plugin off): the crawl alone; beside one process at nice 19 that adds integers in a loop
(``alu``: the core, and next to no memory); and beside one at nice 19 that adds to a million random places
of a 64 MB array, again and again (``memory``: the caches and the memory bus more than the core). At nice
19 the neighbour takes a core only where the crawl leaves it idle (the local server's core, most of the
time), so what slows the crawl beside it is not the turns on its cores.

Printed: for each, the median crawl time (its rounds), its ratio to the crawl alone (``t_on_over_t_off``:
here "on" is "beside the neighbour") and the crawler's CPU ms a page. A crawler process that
spends more CPU on the same pages beside the ``memory`` neighbour than alone is slowed by the memory both
share; the plugin's workers extract beside the crawler process the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_crawl

from scrapy_neardup.offline.evaluation import load_manifest

#: What each neighbour runs (``python -c``), at nice 19.
NEIGHBOURS = {
    "alone": None,
    "alu": "x = 0\nwhile True:\n    for i in range(10_000_000):\n        x += i\n",
    "memory": (
        "import numpy as np\n"
        "a = np.zeros(8_000_000, dtype=np.int64)\n"  # 64 MB
        "at = np.random.default_rng(1).integers(0, len(a), size=1_000_000)\n"
        "while True:\n"
        "    a[at] += 1\n"
    ),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--order", default="shuffled-1")
    args = parser.parse_args()
    manifest = load_manifest(os.path.join(args.dataset, "manifest.jsonl"))
    pages = bench_crawl.load_pages(args.dataset, manifest)
    paths = bench_crawl.crawl_orders(manifest, [args.order])[args.order]
    base, server = bench_crawl.serve(pages)
    workdir = tempfile.mkdtemp(prefix="bench-neighbours-")
    runs: dict[str, list[dict]] = {name: [] for name in NEIGHBOURS}
    try:
        for round_ in range(args.repeat):
            for name, code in NEIGHBOURS.items():
                neighbour = None
                if code is not None:
                    neighbour = subprocess.Popen([sys.executable, "-c", code], preexec_fn=lambda: os.nice(19))
                try:
                    settings = {**bench_crawl.base_settings(workdir), "NEARDUP_ENABLED": False}
                    result = bench_crawl.run_crawl(base, paths, settings, workdir)
                finally:
                    if neighbour is not None:
                        neighbour.kill()
                        neighbour.wait()
                runs[name].append(result)
                print(f"round {round_ + 1} {name}: {result['seconds']:.2f} s", file=sys.stderr, flush=True)
    finally:
        server.terminate()
        shutil.rmtree(workdir, ignore_errors=True)
    n = len(paths)
    rows = {name: bench_crawl.timing_row(results, runs["alone"], n) for name, results in runs.items()}
    command = " ".join(["bench/crawl_neighbours.py", *sys.argv[1:]])
    print(json.dumps({"command": command, "pages": n, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
