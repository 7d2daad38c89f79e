"""A probe: where the extraction workers' CPU goes in a crawl, by how each page's main text was found.

    python3 dev.py bench bench/worker_kinds.py DIR [--order shuffled-1]

One crawl as ``bench_crawl.py`` times it (``bench_crawl.probe_crawl``: its local site, 2 workers, tag mode,
SQLite, 32 concurrent requests), the defaults. Each page's prepared result is read as the crawler process
receives it (``Preparer.prepare``, wrapped in the crawl's own process: a probe that reads the plugin's
internals; a page that reused another response's job, the same bytes, is not counted again) and counted by
its kind: ``replayed`` (a learned selector's text), ``agreed`` / ``disagreed`` (replayed and
checked against trafilatura), ``refused`` (a selector could not vouch for the page), and trafilatura alone,
split by why: ``first_of_prekey`` (a page whose pre-key its host had not met: not parsed for a template),
``template_not_teaching`` (parsed; its template not met often enough to teach, or left to trafilatura),
``lesson`` (it taught its template). A kind with ``+lesson`` taught as well.

Printed: one JSON object: for each kind its pages, the workers' CPU seconds in all (each job's own CPU time,
``Prepared.cpu_seconds``: the worker's reading of the pipe and its unpickling are not in it), and ms a page;
with the crawl's time and the workers' CPU read from /proc, for scale.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_crawl


def kind_of(learned: str, template: int | None, taught: bool) -> str:
    """A worker result's kind (the module's docstring)."""
    if learned:
        return learned + ("+lesson" if taught else "")
    if template is None:
        return "first_of_prekey"
    return "lesson" if taught else "template_not_teaching"


def counted(crawl: Callable[..., None]) -> Callable[..., None]:
    """``crawl_child`` with each worker result counted by its kind, written beside the crawl's result."""

    def run(base: str, paths: list[str], settings: dict, out: str) -> None:
        from scrapy_neardup.crawl.preparer import Preparer
        from scrapy_neardup.engine.prepare import Prepared

        pages: Counter[str] = Counter()
        cpu: Counter[str] = Counter()
        prepare = Preparer.prepare

        async def counted_prepare(self: Preparer, *args: Any, **kwargs: Any) -> Any:
            got = await prepare(self, *args, **kwargs)
            if isinstance(got, Prepared) and not got.reused:  # a copy's result is its first copy's job
                kind = kind_of(got.learned, got.template, got.lesson is not None)
                pages[kind] += 1
                cpu[kind] += got.cpu_seconds
            return got

        Preparer.prepare = counted_prepare  # type: ignore[method-assign]
        try:
            crawl(base, paths, settings, out)
        finally:
            Preparer.prepare = prepare  # type: ignore[method-assign]
        bench_crawl.add_to_result(out, kinds={kind: [pages[kind], cpu[kind]] for kind in pages})

    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset")
    parser.add_argument("--order", default="shuffled-1")
    args = parser.parse_args()
    settings = {"NEARDUP_ENABLED": True, "NEARDUP_WORKERS": 2}
    result, _ = bench_crawl.probe_crawl(args.dataset, args.order, settings, counted)
    kinds = sorted(result["kinds"].items(), key=lambda item: -item[1][1])
    jobs_cpu = sum(seconds for _, (_, seconds) in kinds)
    print(
        json.dumps(
            {
                "command": " ".join(["bench/worker_kinds.py", *sys.argv[1:]]),
                "crawl_seconds": round(result["seconds"], 2),
                "workers_cpu_seconds_from_proc": round(result["worker_cpu"], 2),
                "jobs_cpu_seconds": round(jobs_cpu, 2),
                "kinds": {
                    kind: {
                        "pages": pages,
                        "cpu_seconds": round(seconds, 2),
                        "share_of_jobs_cpu": round(seconds / jobs_cpu, 3) if jobs_cpu else 0.0,
                        "ms_a_page": round(1000 * seconds / pages, 2),
                    }
                    for kind, (pages, seconds) in kinds
                },
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
