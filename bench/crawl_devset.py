"""A real tag-mode ``scrapy crawl`` over a labelled set (neardup-dev), scored pairwise.

    python bench/crawl_devset.py ../shared/neardup-dev [-s NEARDUP_ALGORITHM=simhash ...] [--out items.jsonl]

The pages are served by an HTTP server on 127.0.0.1 (one path per page, gzip-decoded, as text/html); the
spider requests every page with ``neardup_key`` set to the page's URL in the manifest, so the verdicts name
the manifest's URLs. Items carry ``near_duplicate_of`` in tag mode; the script scores them with the same
pairwise P/R/F1 as ``score.py`` and prints one JSON line. Any ``-s NAME=VALUE`` is passed to Scrapy.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import scrapy
from scrapy.crawler import CrawlerProcess

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from scrapy_neardup.evaluation import load_manifest, score  # noqa: E402


def serve(directory: str, manifest: list[dict]) -> ThreadingHTTPServer:
    files = {f"/{row['id']}": os.path.join(directory, row["file"]) for row in manifest}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            path = files.get(self.path)
            if path is None:
                self.send_error(404)
                return
            with open(path, "rb") as f:
                body = gzip.decompress(f.read())
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class DevSetSpider(scrapy.Spider):
    name = "devset"

    def __init__(self, base: str, manifest: list[dict], **kwargs):  # type: ignore[no-untyped-def]
        super().__init__(**kwargs)
        self.base = base
        self.rows = manifest

    async def start(self):  # type: ignore[no-untyped-def]
        for row in self.rows:
            yield scrapy.Request(f"{self.base}/{row['id']}", meta={"neardup_key": row["url"], "row": row},
                                 dont_filter=True)

    def parse(self, response):  # type: ignore[no-untyped-def]
        yield {"url": response.meta["row"]["url"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", help="folder with manifest.jsonl (e.g. ../shared/neardup-dev)")
    parser.add_argument("-s", dest="settings", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--out", help="write the items (JSON lines, score.py's format) here")
    args = parser.parse_args()
    manifest = load_manifest(os.path.join(args.dataset, "manifest.jsonl"))
    server = serve(args.dataset, manifest)
    out = args.out or os.path.join(tempfile.mkdtemp(), "items.jsonl")
    settings = {
        "ADDONS": {"scrapy_neardup.Addon": 300},
        "NEARDUP_ENABLED": True,
        "NEARDUP_ACTION": "tag",
        "NEARDUP_STORE_URL": "memory://",
        "LOG_LEVEL": "WARNING",
        "CONCURRENT_REQUESTS": 16,
        "TELNETCONSOLE_ENABLED": False,
        "FEEDS": {out: {"format": "jsonlines", "overwrite": True}},
    }
    for item in args.settings:
        name, _, value = item.partition("=")
        settings[name] = value
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(DevSetSpider)
    started = time.perf_counter()
    process.crawl(crawler, base=f"http://127.0.0.1:{server.server_address[1]}", manifest=manifest)
    process.start()
    seconds = time.perf_counter() - started
    server.shutdown()
    with open(out, encoding="utf-8") as f:
        items = [json.loads(line) for line in f]
    pairs = [(i["url"], i["near_duplicate_of"]) for i in items if i.get("near_duplicate_of")]
    result = score(manifest, pairs)
    stats = {k: v for k, v in crawler.stats.get_stats().items() if k.startswith("neardup/")}
    print(json.dumps({
        "f1": round(result.f1, 4), "precision": round(result.precision, 4), "recall": round(result.recall, 4),
        "kind_recall": {k: round(v, 3) for k, v in result.kind_recall.items()},
        "items": len(items), "pages": len(manifest), "seconds": round(seconds, 1), "stats": stats,
        "settings": args.settings, "items_file": out,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
