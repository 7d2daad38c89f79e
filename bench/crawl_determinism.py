"""A probe: how far a crawl's verdicts and fingerprints move from one crawl of a site to the next, each on a
fresh store, in one order.

    python3 dev.py bench bench/crawl_determinism.py DIR [--runs 4] [--order shuffled-1] [--action tag]

``--runs`` crawls as ``bench_crawl.py`` times them (its local site, served once for all of them, so that every
crawl meets the same URLs; 2 workers, SQLite, 32 concurrent requests, the defaults; ``--action``: tag or drop
mode), one after the other, each on a store of its own. In each crawl's process every page's verdict (its
``neardup`` meta) and its prepared result (how its text was found: a learned template's replay, a check,
trafilatura; the signature of its fingerprint) are recorded where the crawl takes them (a probe that reads the
plugin's internals). With the same pages at the same URLs in the same order, what differs between the crawls is
what their timing decides: which pages of a template reach trafilatura before its selector is learned, which
pages teach it, and so which selector replays the rest.

Printed: one JSON object: the pages each crawl decided, the pages whose verdict (near-duplicate or not, and
of which page) differs between the crawls, the pages whose fingerprint differs and how far (the least
similarity between two crawls' fingerprints of the page, by the crawl's own algorithm), the ways their texts
were found, and the pages of least similarity.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_crawl


def recorded(crawl: Callable[..., None]) -> Callable[..., None]:
    """``crawl_child`` with each page's verdict and prepared result recorded in the crawl's result."""

    def run(base: str, paths: list[str], settings: dict, out: str) -> None:
        from scrapy_neardup.crawl import downloader, service
        from scrapy_neardup.engine.prepare import Prepared

        verdicts: dict[str, list[Any]] = {}
        prepared: dict[str, list[Any]] = {}
        verdict_meta = downloader.verdict_meta
        prepare = service.NearDupService.prepare

        def path(url: str) -> str:  # each crawl serves the site on a port of its own
            return url[len(base) :] if url.startswith(base) else url

        def recorded_meta(verdict: Any) -> dict:
            meta = verdict_meta(verdict)
            verdicts[path(verdict.key)] = [meta["duplicate"], path(meta["canonical"])]
            return meta

        async def recorded_prepare(self: Any, key: str, job: Any, url: str | None = None) -> Any:
            got = await prepare(self, key, job, url)
            if isinstance(got, Prepared) and url is not None:
                fp = got.fingerprint
                how = got.learned or ("reused" if got.reused else "")
                prepared[path(url)] = [how, fp.signature.hex() if fp else None]
            return got

        downloader.verdict_meta = recorded_meta  # type: ignore[assignment]
        service.NearDupService.prepare = recorded_prepare  # type: ignore[method-assign]
        crawl(base, paths, settings, out)
        bench_crawl.add_to_result(out, verdicts=verdicts, prepared=prepared)

    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset")
    parser.add_argument("--runs", type=int, default=4, help="crawls, each on a fresh store (default 4)")
    parser.add_argument("--order", default="shuffled-1", help="manifest, copies-first or shuffled-N")
    parser.add_argument("--action", default="tag", choices=("tag", "drop"), help="NEARDUP_ACTION (default tag)")
    args = parser.parse_args()

    from scrapy_neardup.assembly import build_algorithm
    from scrapy_neardup.settings import Config

    settings = {"NEARDUP_ENABLED": True, "NEARDUP_ACTION": args.action}
    manifest = bench_crawl.load_manifest(os.path.join(args.dataset, "manifest.jsonl"))
    paths = bench_crawl.crawl_orders(manifest, [args.order])[args.order]
    base, server = bench_crawl.serve(bench_crawl.load_pages(args.dataset, manifest))
    crawls = []
    try:
        for i in range(args.runs):
            with tempfile.TemporaryDirectory() as workdir, bench_crawl.wrapped_crawl_child(recorded):
                crawl_settings = {**bench_crawl.base_settings(workdir), **settings}
                result = bench_crawl.run_crawl(base, paths, crawl_settings, workdir)
            crawls.append(result)
            print(f"crawl {i + 1}: {len(result['verdicts'])} verdicts in {result['seconds']:.1f} s", file=sys.stderr)
    finally:
        server.terminate()
    algorithm = build_algorithm(Config.from_settings(settings))
    decided = set.intersection(*(set(c["verdicts"]) for c in crawls))
    verdict_differs = sorted(u for u in decided if len({json.dumps(c["verdicts"][u]) for c in crawls}) > 1)
    fingerprinted = set.intersection(*(set(c["prepared"]) for c in crawls))
    moved = []
    for url in fingerprinted:
        signatures = {c["prepared"][url][1] for c in crawls}
        if len(signatures) > 1 and None not in signatures:
            sigs = [bytes.fromhex(s) for s in signatures]
            least = min(algorithm.similarity(a, b) for a in sigs for b in sigs)
            moved.append((least, url, [c["prepared"][url][0] or "trafilatura" for c in crawls]))
    moved.sort()
    out = {
        "command": " ".join(["bench/crawl_determinism.py", *sys.argv[1:]]),
        "runs": args.runs,
        "order": args.order,
        "action": args.action,
        "pages_decided": [len(c["verdicts"]) for c in crawls],
        "near_duplicates": [sum(1 for v in c["verdicts"].values() if v[0]) for c in crawls],
        "verdicts_differ": len(verdict_differs),
        "verdicts_differ_on": {u: [c["verdicts"].get(u) for c in crawls] for u in verdict_differs[:20]},
        "pages_fingerprinted_in_every_crawl": len(fingerprinted),
        "fingerprints_differ": len(moved),
        "fingerprints_differ_least_similarity_under": {
            str(bound): sum(1 for least, *_ in moved if least < bound) for bound in (0.98, 0.95, 0.9, 0.8, 0.7)
        },
        "fingerprints_differ_by_how": dict(Counter(" / ".join(how) for *_, how in moved).most_common(10)),
        "least_similar": [{"url": url, "similarity": round(least, 3), "how": how} for least, url, how in moved[:10]],
    }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
