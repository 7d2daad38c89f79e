"""A real tag-mode ``scrapy crawl`` over a labelled set (neardup-dev), scored pairwise.

    python bench/crawl_devset.py ../shared/neardup-dev [-s NEARDUP_ALGORITHM=simhash ...] [--out items.jsonl]

The pages are served by an HTTP server on 127.0.0.1 (gzip-decoded, as text/html). The spider requests
every page under its own host and path (``http://`` + the manifest URL's host and path, with the local
server as its HTTP proxy), so the plugin sees the hosts a real crawl would, and with ``neardup_key`` set
to the manifest URL, so the verdicts name the manifest's URLs. Items carry ``near_duplicate_of`` in tag
mode; the script scores them with the same pairwise P/R/F1 as ``score.py`` and prints one JSON line.
Any ``-s NAME=VALUE`` is passed to Scrapy.

``bench/crawl_timings.py`` (a probe) times the plugin's steps in the same crawl, one page at a time.
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing
import os
import sys
import tempfile
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import scrapy
from scrapy.crawler import CrawlerProcess

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import bench_crawl
import localsite

from scrapy_neardup.offline.evaluation import load_manifest, score


def serve(directory: str, manifest: list[dict]) -> tuple[str, multiprocessing.Process]:
    """Serve each page by its id: the ``X-Devset-Id`` header when the request comes through the server as
    a proxy (the page's own URL), else the path ``/<id>``."""
    files = {row["id"]: os.path.join(directory, row["file"]) for row in manifest}

    def page(request) -> tuple[bytes, str] | None:  # type: ignore[no-untyped-def]
        path = files.get(request.headers.get("X-Devset-Id") or request.path.lstrip("/"))
        if path is None:
            return None
        with open(path, "rb") as f:
            return gzip.decompress(f.read()), "text/html"

    return localsite.serve(page)


class DevSetSpider(scrapy.Spider):
    name = "devset"

    def __init__(self, base: str, manifest: list[dict], **kwargs):  # type: ignore[no-untyped-def]
        super().__init__(**kwargs)
        self.base = base
        self.rows = manifest

    async def start(self):  # type: ignore[no-untyped-def]
        for row in self.rows:
            yield self.request_for(row)

    def request_for(self, row: dict) -> scrapy.Request:
        """The page fetched under its own host and path (over http, through the local server as a proxy),
        as a real crawl would see it: host-aware parts of the plugin (the template guard) need the host."""
        parts = urlsplit(row["url"])
        meta = {"neardup_key": row["url"], "row": row}
        if parts.scheme in ("http", "https") and parts.hostname:
            url = urlunsplit(("http", parts.netloc, parts.path or "/", parts.query, ""))
            try:
                return scrapy.Request(
                    url, meta={**meta, "proxy": self.base}, headers={"X-Devset-Id": row["id"]}, dont_filter=True
                )
            except ValueError:  # not a URL Scrapy can fetch (the set has a few made-up ones)
                pass
        return scrapy.Request(f"{self.base}/{row['id']}", meta=meta, dont_filter=True)

    def parse(self, response):  # type: ignore[no-untyped-def]
        yield {"url": response.meta["row"]["url"]}


def crawl(settings: dict, base: str, manifest: list[dict]) -> tuple[object, float]:
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(DevSetSpider)
    started = time.perf_counter()
    process.crawl(crawler, base=base, manifest=manifest)
    process.start()
    return crawler, time.perf_counter() - started


def crawl_settings(out: str, extra: list[str]) -> dict[str, Any]:
    """The crawl's settings: tag mode, an in-memory store, items to ``out``, and ``-s NAME=VALUE``s."""
    settings: dict[str, Any] = {
        "ADDONS": {"scrapy_neardup.Addon": 300},
        "NEARDUP_ENABLED": True,
        "NEARDUP_ACTION": "tag",
        "NEARDUP_STORE_URL": "memory://",
        "LOG_LEVEL": "WARNING",
        "CONCURRENT_REQUESTS": 16,
        "TELNETCONSOLE_ENABLED": False,
        "FEEDS": {out: {"format": "jsonlines", "overwrite": True}},
    }
    return {**settings, **bench_crawl.named_settings(extra)}


def scored(crawler: Any, seconds: float, manifest: list[dict], out: str) -> dict[str, Any]:
    """The crawl's items scored against the manifest, with its stats."""
    with open(out, encoding="utf-8") as f:
        items = [json.loads(line) for line in f]
    pairs = [(i["url"], i["near_duplicate_of"]) for i in items if i.get("near_duplicate_of")]
    result = score(manifest, pairs)
    return {
        "f1": round(result.f1, 4),
        "precision": round(result.precision, 4),
        "recall": round(result.recall, 4),
        "kind_recall": {k: round(v, 3) for k, v in result.kind_recall.items()},
        "items": len(items),
        "pages": len(manifest),
        "seconds": round(seconds, 1),
        "stats": {k: v for k, v in crawler.stats.get_stats().items() if k.startswith("neardup/")},
        "items_file": out,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", help="folder with manifest.jsonl (e.g. ../shared/neardup-dev)")
    parser.add_argument("-s", dest="settings", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--out", help="write the items (JSON lines, score.py's format) here")
    args = parser.parse_args()
    manifest = load_manifest(os.path.join(args.dataset, "manifest.jsonl"))
    base, server_process = serve(args.dataset, manifest)
    out = args.out or os.path.join(tempfile.mkdtemp(), "items.jsonl")
    crawler, seconds = crawl(crawl_settings(out, args.settings), base, manifest)
    server_process.terminate()
    print(json.dumps({**scored(crawler, seconds, manifest, out), "settings": args.settings}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
