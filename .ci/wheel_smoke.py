"""What a user gets from ``pip install scrapy-neardup``: run with the python of a fresh virtual environment
that has the built wheel installed (not the source tree), from a folder outside the repository.

A real ``scrapy runspider`` against a local site (tag mode, the default SQLite store, an AMP copy that
declares its article, a mirror), then ``scrapy-neardup dedup`` over a JSONL of the same pages; each checked
for the verdicts it must give. Exits non-zero with the reason on any failure.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def story(seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(f"w{rng.randrange(50_000)}" for _ in range(300))


def page(text: str, head: str = "") -> str:
    return (
        f"<html><head><title>t</title>{head}</head><body><article><h1>A story</h1><p>{text}</p></article></body></html>"
    )


PAGES = {
    "/amp/a": page(story(1), '<link rel="canonical" href="/a">'),
    "/a": page(story(1)),
    "/b": page(story(2)),
    "/mirror/b": page(story(2)),
    "/c": page(story(3)),
}

SPIDER = """
import scrapy

class Smoke(scrapy.Spider):
    name = "smoke"
    custom_settings = {"ADDONS": {"scrapy_neardup.Addon": 300}, "NEARDUP_ENABLED": True, "NEARDUP_ACTION": "tag",
                       "CONCURRENT_REQUESTS": 1, "TELNETCONSOLE_ENABLED": False, "LOG_LEVEL": "INFO"}

    def __init__(self, base="", paths="", **kwargs):
        super().__init__(**kwargs)
        self.base, self.paths = base, paths.split(",")

    async def start(self):
        for path in self.paths:
            yield scrapy.Request(self.base + path)

    def parse(self, response):
        verdict = response.meta.get("neardup") or {}
        yield {"url": response.url, "status": verdict.get("status"), "canonical": verdict.get("canonical")}
"""


def fail(message: str) -> None:
    print(f"wheel smoke test: {message}", file=sys.stderr)
    sys.exit(1)


def main() -> int:
    import scrapy_neardup

    if "site-packages" not in scrapy_neardup.__file__:
        fail(f"scrapy_neardup was imported from {scrapy_neardup.__file__}, not from an installed wheel")
    # Package data: the Redis store's Lua scripts, read by name at run time.
    from scrapy_neardup.store import redis as redis_store

    for name in ("alloc", "claim", "lookup", "write_meta"):
        if len(redis_store.lua_script(name)) < 100:
            fail(f"the wheel lacks the Redis script {name}.lua")
    with tempfile.TemporaryDirectory(prefix="neardup-wheel-") as workdir:
        return crawl_and_dedup(scrapy_neardup, workdir)


def crawl_and_dedup(scrapy_neardup, workdir: str) -> int:  # type: ignore[no-untyped-def]
    """A real crawl and a dedup with the installed wheel, in ``workdir``."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = PAGES.get(self.path)
            if body is None:
                self.send_error(404)
                return
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    class Server(ThreadingHTTPServer):
        request_queue_size = 64

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    spider = os.path.join(workdir, "smoke.py")
    with open(spider, "w") as f:
        f.write(SPIDER)
    items = os.path.join(workdir, "items.jsonl")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "scrapy",
            "runspider",
            spider,
            "-a",
            f"base={base}",
            "-a",
            "paths=" + ",".join(PAGES),
            "-O",
            f"{items}:jsonlines",
        ],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=300,
    )
    server.shutdown()
    if proc.returncode != 0:
        fail(f"scrapy runspider exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    with open(items) as f:
        got = {row["url"][len(base) :]: row for row in map(json.loads, f)}
    if (
        got.get("/mirror/b", {}).get("canonical") != base + "/b"
        or got.get("/amp/a", {}).get("canonical") != base + "/a"
    ):
        fail(f"the crawl's verdicts are not the expected ones: {got}\n{proc.stderr[-3000:]}")
    if not os.path.exists(os.path.join(workdir, ".scrapy", "neardup", "smoke.sqlite3")):
        fail("the crawl left no SQLite store in .scrapy/neardup/")
    jsonl = os.path.join(workdir, "pages.jsonl")
    with open(jsonl, "w") as f:
        for path, html in PAGES.items():
            f.write(json.dumps({"url": base + path, "html": html}) + "\n")
    pairs = os.path.join(workdir, "pairs.tsv")
    proc = subprocess.run(
        ["scrapy-neardup", "dedup", jsonl, "-o", pairs], cwd=workdir, capture_output=True, text=True, timeout=300
    )
    if proc.returncode != 0:
        fail(f"scrapy-neardup dedup exited {proc.returncode}: {proc.stderr[-2000:]}")
    with open(pairs) as f:
        found = {tuple(line.split("\t")[:2]) for line in f if line.strip()}
    if found != {(base + "/amp/a", base + "/a"), (base + "/mirror/b", base + "/b")}:
        fail(f"dedup wrote other pairs: {found}")
    where = os.path.dirname(scrapy_neardup.__file__)
    print(
        f"wheel smoke test: scrapy_neardup {scrapy_neardup.__version__} from {where}: a crawl and a dedup gave the "
        "expected verdicts"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
