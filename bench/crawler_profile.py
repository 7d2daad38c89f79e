"""A probe: where the crawler process spends its CPU in one crawl of a labelled set (plugin on, 2 workers).

    python3 dev.py bench bench/crawler_profile.py ../shared/neardup-dev [--order shuffled-1] [--off]
        [--start lazy] [-o FILE]

One crawl as ``bench_crawl.py`` runs it (the same local site, settings and order), its crawler process under
``cProfile``; printed: the crawl's wall time and CPU, and the self time of the functions grouped by where they
live (the plugin's modules one by one; Scrapy, Twisted and the rest as a whole), and the garbage collector's
CPU in the crawler process by generation with the kinds of objects most numerous when the crawl ends (each full
collection walks every one of them). Wall time under the profiler is not the crawl's: compare two checkouts
(``PYTHONPATH``) with this probe, never with a timing suite.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import gc
import json
import os
import pstats
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_crawl


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset")
    parser.add_argument("--order", default="shuffled-1")
    parser.add_argument("--off", action="store_true", help="the plugin off")
    parser.add_argument("--start", choices=("eager", "lazy"), default="eager", help="as bench_crawl.py --start")
    parser.add_argument("-o", "--output", help="also keep the profile (pstats) here")
    args = parser.parse_args()
    workdir = tempfile.mkdtemp()
    out = args.output or os.path.join(workdir, "crawler.pstats")
    collected = out + ".gc.json"

    def profiled(crawl):  # type: ignore[no-untyped-def]
        def run(*crawl_args):  # type: ignore[no-untyped-def]
            profile = cProfile.Profile()
            with bench_crawl.CollectorTimer() as collector:
                profile.enable()
                try:
                    crawl(*crawl_args)
                finally:
                    profile.disable()
                    profile.dump_stats(out)
                    kinds = collections.Counter(
                        f"{getattr(type(o), '__module__', '')}.{type(o).__qualname__}" for o in gc.get_objects()
                    )
                    with open(collected, "w") as f:
                        json.dump({**collector.summary(), "most_numerous": kinds.most_common(8)}, f)

        return run

    settings = {"NEARDUP_ENABLED": not args.off, "NEARDUP_WORKERS": 2, bench_crawl.LAZY_START: args.start == "lazy"}
    result, _ = bench_crawl.probe_crawl(args.dataset, args.order, settings, profiled)
    stats = pstats.Stats(out)
    where: collections.Counter[str] = collections.Counter()
    for (path, _, _), (_, _, self_time, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        if "scrapy_neardup" in path:
            where["scrapy_neardup/" + path.split("scrapy_neardup/")[-1]] += self_time
        else:
            where["scrapy" if "/scrapy/" in path else "twisted" if "/twisted/" in path else "other"] += self_time
    plugin = sum(t for name, t in where.items() if name.startswith("scrapy_neardup/"))
    with open(collected) as f:
        garbage = json.load(f)
    print(
        json.dumps(
            {
                "command": " ".join(["bench/crawler_profile.py", *sys.argv[1:]]),
                "seconds": round(result["seconds"], 2),
                "crawler_cpu_seconds": round(result["crawler_cpu"], 2),
                "plugin_self_seconds": round(plugin, 3),
                "self_seconds": {name: round(t, 3) for name, t in where.most_common(20)},
                "garbage_collector": garbage,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
