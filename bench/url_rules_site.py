"""URL rules and soft-404 pages on a site of several thousand URLs: what the rules save, and what they cost.

    python3 dev.py bench bench/url_rules_site.py ../shared/neardup-dev [--repeat 3]

The site is built from neardup-dev's real pages: every original article under one of four hosts
(``site0.example`` … ``site3.example``, by its position in the manifest), each with the alias patterns of
real sites at these rates: a tracking-parameter copy (``?utm_source=newsletter&utm_medium=email``) for half
of them, an AMP copy (``/amp/...``) for 30 %, a print copy (``.../print``) for 20 %, a ``www.`` copy for 10 %;
the set's real copies (mirrors, syndicated, edited, printed and noisy copies) under ``copies.example``; and
300 dead links, 150 on ``site3.example``, which answers every unknown URL with one "not found" page and
status 200 (a soft-404 host), and 150 on ``site0.example``, which answers 404. Every URL is requested once,
in one shuffled order, through the local server as the crawl's HTTP proxy (the plugin sees the hosts a real
crawl would). The crawl runs in tag mode (every fetched page reaches the spider with its verdict) with
``NEARDUP_URL_RULES`` ``learn`` (everything fetched) and ``skip``, alternating, ``--repeat`` times; the
figures are medians. Reported: fetches, bytes and seconds saved; the aliases never fetched, over the whole
crawl and over its second half (after the warm-up); every request that was skipped although its page is
not an alias (a unique page wrongly skipped); the soft-404 verdicts' precision and recall against the dead
links of the soft-404 host, and any soft-404 verdict on another host.
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing
import os
import random
import statistics
import sys
import tempfile
import time
from urllib.parse import urlsplit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import localsite

from scrapy_neardup.offline.evaluation import load_manifest
from scrapy_neardup.settings import default_of

NOT_FOUND = localsite.NOT_FOUND.encode()
SOFT_HOST, SOUND_HOST = "site3.example", "site0.example"


#: The alias pattern of each alias URL (``utm``, ``amp``, ``print``, ``www``), set by :func:`build_site`.
PATTERNS: dict[str, str] = {}


def build_site(dataset: str, seed: int = 7) -> tuple[dict[str, bytes], dict[str, str]]:
    """The site: URL -> body, and URL -> what it is (``original``, ``alias``, ``copy``, ``dead-soft``,
    ``dead-404``)."""
    manifest = load_manifest(os.path.join(dataset, "manifest.jsonl"))
    rng = random.Random(seed)
    pages: dict[str, bytes] = {}
    kinds: dict[str, str] = {}
    for i, row in enumerate(manifest):
        with open(os.path.join(dataset, row["file"]), "rb") as f:
            body = f.read()
        body = gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body
        slug = "".join(c if c.isalnum() else "-" for c in (urlsplit(row["url"]).path.strip("/") or "home"))[:60]
        if row.get("kind") != "original":
            url = f"http://copies.example/{i}/{slug}"
            pages[url], kinds[url] = body, "copy"
            continue
        host = f"site{i % 4}.example"
        url = f"http://{host}/{i}/{slug}"
        pages[url], kinds[url] = body, "original"
        for chance, pattern, alias in (
            (0.5, "utm", f"{url}?utm_source=newsletter&utm_medium=email"),
            (0.3, "amp", f"http://{host}/amp/{i}/{slug}"),
            (0.2, "print", f"{url}/print"),
            (0.1, "www", f"http://www.{host}/{i}/{slug}"),
        ):
            if rng.random() < chance:
                pages[alias], kinds[alias] = body, "alias"
                PATTERNS[alias] = pattern
    for n in range(150):
        kinds[f"http://{SOFT_HOST}/gone/{n}"] = "dead-soft"
        kinds[f"http://{SOUND_HOST}/gone/{n}"] = "dead-404"
    return pages, kinds


def serve(pages: dict[str, bytes]) -> tuple[str, multiprocessing.Process]:
    def page(request):  # type: ignore[no-untyped-def]
        url = request.path if request.path.startswith("http") else f"http://{request.headers['Host']}{request.path}"
        body = pages.get(url)
        if body is not None:
            return body, "text/html; charset=utf-8"
        if urlsplit(url).hostname == SOFT_HOST:
            return NOT_FOUND, "text/html; charset=utf-8"
        return None

    return localsite.serve(page)


def crawl_child(proxy: str, urls: list[str], settings: dict, out: str) -> None:
    os.environ["http_proxy"] = proxy
    import scrapy
    from scrapy.crawler import CrawlerProcess

    class SiteSpider(scrapy.Spider):
        name = "rules"

        async def start(self):  # type: ignore[no-untyped-def]
            for url in urls:
                yield scrapy.Request(url)

        def parse(self, response):  # type: ignore[no-untyped-def]
            verdict = response.meta.get("neardup") or {}
            yield {"url": response.request.url, "status": verdict.get("status")}

    items_path = out + ".items.jsonl"
    process = CrawlerProcess({**settings, "FEEDS": {items_path: {"format": "jsonlines", "overwrite": True}}})
    crawler = process.create_crawler(SiteSpider)
    started = time.perf_counter()
    process.crawl(crawler)
    process.start()
    seconds = time.perf_counter() - started
    with open(items_path, encoding="utf-8") as f:
        items = [json.loads(line) for line in f]
    stats = {k: v for k, v in crawler.stats.get_stats().items() if isinstance(v, (int, float))}
    with open(out, "w") as f:
        json.dump({"seconds": seconds, "items": items, "stats": stats}, f)


def crawl(proxy: str, urls: list[str], settings: dict, workdir: str, processes: int = 1) -> dict:
    """The crawl of ``urls``, by ``processes`` crawler processes at once (each every ``processes``-th URL,
    all on the store of ``settings``); their items, summed stats and the longest one's seconds."""
    parts = [urls[n::processes] for n in range(processes)]
    results, stats = localsite.crawl_processes(crawl_child, proxy, parts, settings, workdir)
    return {
        "seconds": max(r["seconds"] for r in results),
        "items": [item for r in results for item in r["items"]],
        "stats": stats,
    }


def confident_rules(store_url: str, prefix: str | None = None) -> list[str]:
    """The rules a crawl with the default thresholds uses, as the store holds them at the end."""
    from scrapy_neardup.assembly import build_rule_book
    from scrapy_neardup.settings import Config
    from scrapy_neardup.store import store_from_url

    store = store_from_url(store_url, **({"prefix": prefix} if prefix else {}))
    store.open_existing()
    try:
        counts = store.rules.read()
    finally:
        store.close()
    book = build_rule_book(Config.from_settings({}))
    book.merge(counts)
    return sorted(f"{host} {rule.name}" for host, rule, _, used in book.listing() if used)


def warm_up(confidence: float, min_support: int) -> int:
    """The successes a rule needs before it is used: ``min_support``, and enough for Laplace's estimate,
    (s + 1) / (s + 2), to reach ``confidence``."""
    needed = 0
    while (needed + 1) / (needed + 2) < confidence and needed < 1_000_000:
        needed += 1
    return max(min_support, needed)


def after_warm_up(urls: list[str], kinds: dict[str, str], needed: int) -> set[str]:
    """The aliases requested after the first ``needed`` aliases of their pattern on their host: those a
    rule could predict once it had its successes (each earlier alias at most one success)."""
    seen: dict[tuple[str, str], int] = {}
    out = set()
    for url in urls:
        if kinds[url] != "alias":
            continue
        host = (urlsplit(url).hostname or "").removeprefix("www.")
        key = (host, PATTERNS[url])
        seen[key] = seen.get(key, 0) + 1
        if seen[key] > needed:
            out.add(url)
    return out


def after_first_use(urls: list[str], kinds: dict[str, str], fetched: dict[str, str]) -> tuple[int, int]:
    """The aliases requested after the rule of their pattern on their host was first used (the first alias
    of that pattern and host not fetched, in request order): how many, and how many of them were fetched."""
    first: dict[tuple[str, str], int] = {}
    for position, url in enumerate(urls):
        if kinds[url] == "alias" and url not in fetched:
            first.setdefault(((urlsplit(url).hostname or "").removeprefix("www."), PATTERNS[url]), position)
    later = [
        url
        for position, url in enumerate(urls)
        if kinds[url] == "alias"
        and position > first.get(((urlsplit(url).hostname or "").removeprefix("www."), PATTERNS[url]), len(urls))
    ]
    return len(later), sum(1 for url in later if url in fetched)


def figures(result: dict, urls: list[str], kinds: dict[str, str], needed: int) -> dict:
    fetched = {item["url"]: item["status"] for item in result["items"]}
    late = after_warm_up(urls, kinds, needed)
    used_late, used_fetched = after_first_use(urls, kinds, fetched)
    requested_html = [u for u in urls if kinds[u] != "dead-404"]
    skipped = [u for u in requested_html if u not in fetched]
    aliases = [u for u in urls if kinds[u] == "alias"]
    second_half = set(urls[len(urls) // 2 :])
    wrongly = [u for u in skipped if kinds[u] != "alias"]
    soft = {u for u, status in fetched.items() if status == "soft404"}
    dead_soft = {u for u in urls if kinds[u] == "dead-soft"}
    stats = result["stats"]
    return {
        "seconds": round(result["seconds"], 2),
        "fetches": stats.get("response_received_count", 0),
        "bytes": stats.get("downloader/response_bytes", 0),
        "predicted_skips": stats.get("neardup/skipped/predicted", 0),
        "aliases_not_fetched": f"{sum(1 for u in aliases if u not in fetched)} of {len(aliases)}",
        "aliases_not_fetched_second_half": (
            f"{sum(1 for u in aliases if u in second_half and u not in fetched)} of "
            f"{sum(1 for u in aliases if u in second_half)}"
        ),
        "aliases_not_fetched_after_warm_up": f"{sum(1 for u in late if u not in fetched)} of {len(late)}",
        "aliases_not_fetched_once_their_rule_is_used": f"{used_late - used_fetched} of {used_late}",
        "unique_pages_wrongly_skipped": wrongly,
        "soft404_precision": round(len(soft & dead_soft) / len(soft), 4) if soft else None,
        "soft404_recall": round(len(soft & dead_soft) / len(dead_soft), 4) if dead_soft else None,
        "soft404_on_other_hosts": sorted(u for u in soft if urlsplit(u).hostname != SOFT_HOST),
    }


def three_on_redis(proxy: str, urls: list[str], kinds: dict[str, str], settings: dict, workdir: str) -> dict:
    """The skip-mode crawl again, by three processes sharing a real redis-server: its figures and rules."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
    from helpers.redis_server import RedisServer

    server = RedisServer(os.path.join(workdir, "redis")).start()
    try:
        prefix = "rules:{bench}"
        shared = {**settings, "NEARDUP_STORE_URL": server.url, "NEARDUP_REDIS_KEY": prefix}
        needed = warm_up(
            float(shared.get("NEARDUP_URL_RULES_CONFIDENCE", default_of("NEARDUP_URL_RULES_CONFIDENCE"))),
            int(shared.get("NEARDUP_URL_RULES_MIN_SUPPORT", default_of("NEARDUP_URL_RULES_MIN_SUPPORT"))),
        )
        result = figures(crawl(proxy, urls, shared, workdir, processes=3), urls, kinds, needed)
        result["confident_rules"] = confident_rules(server.url, prefix)
        return result
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", help="folder with manifest.jsonl (e.g. ../shared/neardup-dev)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("-s", dest="settings", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument(
        "--redis",
        action="store_true",
        help="then crawl once more in skip mode with three processes sharing a real redis-server, and compare",
    )
    args = parser.parse_args()
    pages, kinds = build_site(args.dataset)
    urls = list(kinds)
    random.Random(11).shuffle(urls)
    proxy, server = serve(pages)
    workdir = tempfile.mkdtemp(prefix="bench-rules-")
    extra = dict(item.partition("=")[::2] for item in args.settings)
    runs: dict[str, list[dict]] = {"learn": [], "skip": []}
    try:
        for round_ in range(args.repeat):
            for mode in runs:
                settings = {
                    "ADDONS": {"scrapy_neardup.Addon": 300},
                    "NEARDUP_ENABLED": True,
                    "NEARDUP_ACTION": "tag",
                    "NEARDUP_URL_RULES": mode,
                    "NEARDUP_STORE_URL": f"sqlite:///{tempfile.mktemp(dir=workdir, suffix='.sqlite3')}",
                    "LOG_LEVEL": "WARNING",
                    "CONCURRENT_REQUESTS": 16,
                    "CONCURRENT_REQUESTS_PER_DOMAIN": 16,
                    "TELNETCONSOLE_ENABLED": False,
                    "ROBOTSTXT_OBEY": False,
                    "COOKIES_ENABLED": False,
                    **extra,
                }
                needed = warm_up(
                    float(settings.get("NEARDUP_URL_RULES_CONFIDENCE", default_of("NEARDUP_URL_RULES_CONFIDENCE"))),
                    int(settings.get("NEARDUP_URL_RULES_MIN_SUPPORT", default_of("NEARDUP_URL_RULES_MIN_SUPPORT"))),
                )
                result = figures(crawl(proxy, urls, settings, workdir), urls, kinds, needed)
                result["confident_rules"] = confident_rules(settings["NEARDUP_STORE_URL"])
                runs[mode].append(result)
                print(f"round {round_ + 1} {mode}: {json.dumps(result)[:300]}", file=sys.stderr, flush=True)
        distributed = None
        if args.redis:
            distributed = three_on_redis(proxy, urls, kinds, {**settings, "NEARDUP_URL_RULES": "skip"}, workdir)
    finally:
        server.terminate()
    summary = {}
    for mode, results in runs.items():
        summary[mode] = {
            "median_seconds": statistics.median(r["seconds"] for r in results),
            "median_fetches": statistics.median(r["fetches"] for r in results),
            "median_bytes": statistics.median(r["bytes"] for r in results),
            "last": results[-1],
        }
    learn, skip = summary["learn"], summary["skip"]
    counts = {kind: sum(1 for k in kinds.values() if k == kind) for kind in sorted(set(kinds.values()))}
    print(
        json.dumps(
            {
                "command": " ".join(["bench/url_rules_site.py", *sys.argv[1:]]),
                "urls": len(urls),
                "kinds": counts,
                "repeat": args.repeat,
                "three_processes_on_redis": distributed,
                "saved": {
                    "fetches": f"{1 - skip['median_fetches'] / learn['median_fetches']:.1%}",
                    "bytes": f"{1 - skip['median_bytes'] / learn['median_bytes']:.1%}",
                    "seconds": f"{1 - skip['median_seconds'] / learn['median_seconds']:.1%}",
                },
                **summary,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
