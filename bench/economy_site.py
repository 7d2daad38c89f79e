"""Dedup that pays for itself: real crawls of a linked site built from real pages, the plugin at its defaults.

    python3 dev.py bench bench/economy_site.py ../shared/neardup-dev [--repeat 3] [--skip-net] [--skip-redis]

The site (:func:`build_site`): neardup-dev's original articles, whole real pages (their own ``rel=canonical``
removed), on three hosts (``news0.example`` … ``news2.example``), each host a home page and section pages
that list its articles. Aliases at the rates real news sites show: a tracking-parameter share link on half
of the articles, an AMP copy on 30 %, a print copy on 20 %, a ``www.`` link from a section on 10 %; 15 % of
the section links are tracking links (a newsletter's). 70 % of the articles declare themselves canonical
and their aliases declare them; 30 % declare nothing. A seventh of the articles have a second page
(``?page=2``, another real page: a parameter that matters). Each section links a dead link: ``news0``
answers them 404, ``news1`` 200 with a short "not found" page (a heading and a sentence repeating the
path), ``news2`` 200 with a long one. Every page links its aliases and three related articles of its host.
A crawl starts at the three home pages and follows every link of its host, as a crawl does.

Measured, each the median of ``--repeat`` alternating rounds where it is a timing:

1. **The net**: the server answers after 50 ms, 16 requests at a time; the plugin off, and on at its
   defaults: wall seconds, CPU seconds (the crawler process's, plus the plugin's in its workers, from its
   books), fetches.
2. **Fetches avoided**: the plugin at its defaults against ``NEARDUP_URL_RULES=learn`` (which fetches what
   the plugin off fetches): the share of the duplicate fetches (alias URLs) after each crawl's first 500
   responses that the defaults did not make; unique pages and second pages never fetched (none allowed).
3. **Three crawls on one store**, in drop mode, in two link orders (plain links first; alias links first):
   every article delivered in every crawl, the share delivered exactly once, the same set each time; on
   SQLite, and (unless ``--skip-redis``) by three processes (one a host) on one redis-server.
4. **Soft-404**: precision and recall of the soft-404 verdicts (the pages the crawl's books name) against
   the dead links of the short and of the long host, and any verdict elsewhere.
5. **An adversarial site** (:func:`adversarial_site`), where parameters and prefixes matter: pagination,
   ids, languages, sort orders, a ``sid`` that is a session on two hosts and a section on the third, a host
   whose ``/amp/`` paths are other pages: crawled twice on one store, no unique page left unfetched.
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing
import os
import random
import re
import resource
import statistics
import sys
import tempfile
import time
from urllib.parse import urlsplit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import localsite

from scrapy_neardup.offline.evaluation import load_manifest

HOSTS = ("news0.example.com", "news1.example.net", "news2.example.org")
SOUND_HOST, SHORT_HOST, LONG_HOST = HOSTS
LONG_NOT_FOUND = localsite.NOT_FOUND
_CANONICAL = re.compile(r"<link\b[^>]*\bcanonical\b[^>]*>", re.IGNORECASE)
_BODY = re.compile(r"<body\b[^>]*>", re.IGNORECASE)
_HEAD = re.compile(r"<head\b[^>]*>", re.IGNORECASE)


def short_not_found(path: str) -> str:
    return (
        f"<html><head><title>404</title></head><body><nav>Home News Sport</nav><h1>Page not found</h1>"
        f"<p>Sorry, {path} does not exist.</p></body></html>"
    )


class Site:
    """URL -> page, what each URL is (``article``, ``alias``, ``page2``, ``section``, ``dead``), and the article
    (its number) each article, alias or second page stands for."""

    def __init__(self) -> None:
        self.pages: dict[str, str] = {}
        self.kind: dict[str, str] = {}
        self.article: dict[str, int] = {}


def _real_pages(dataset: str) -> list[tuple[str, str]]:
    """neardup-dev's original pages: (slug, HTML without its rel=canonical)."""
    out = []
    for row in load_manifest(os.path.join(dataset, "manifest.jsonl")):
        if row.get("kind") != "original":
            continue
        with open(os.path.join(dataset, row["file"]), "rb") as f:
            body = f.read()
        body = gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body
        html = _CANONICAL.sub("", body.decode("utf-8", "replace"))
        slug = "".join(c if c.isalnum() else "-" for c in (urlsplit(row["url"]).path.strip("/") or "home"))[:50]
        out.append((slug, html))
    return out


def _inject(html: str, links: list[str], head: str = "") -> str:
    nav = "<nav class=bench-links>" + "".join(f'<a href="{u}">{u}</a> ' for u in links) + "</nav>"
    html = _HEAD.sub(lambda m: m.group(0) + head, html, count=1) if head else html
    return _BODY.sub(lambda m: m.group(0) + nav, html, count=1) if _BODY.search(html) else nav + html


def build_site(dataset: str, aliases_first: bool, seed: int = 7) -> Site:
    rng = random.Random(seed)
    real = _real_pages(dataset)
    site = Site()
    plain: dict[int, str] = {}
    alias_links: dict[int, list[str]] = {}
    declares: dict[int, bool] = {}
    second: dict[int, str] = {}
    articles: dict[str, list[int]] = {h: [] for h in HOSTS}
    numbers = iter(range(len(real)))
    for n in numbers:
        slug, _ = real[n]
        host = HOSTS[n % 3]
        url = f"http://{host}/a/{n}/{slug}"
        plain[n] = url
        articles[host].append(n)
        declares[n] = rng.random() < 0.7
        links = []
        for chance, alias in (
            (0.5, f"{url}?utm_source=share&utm_medium=social"),
            (0.3, f"http://{host}/amp/a/{n}/{slug}"),
            (0.2, f"{url}/print"),
        ):
            if rng.random() < chance:
                links.append(alias)
        alias_links[n] = links
        if rng.random() < 1 / 7:
            extra = next(numbers, None)
            if extra is not None:
                second[n] = extra
    related_pool = {h: list(ns) for h, ns in articles.items()}
    for n, url in plain.items():
        slug, html = real[n]
        host = urlsplit(url).hostname or ""
        related = rng.sample([m for m in related_pool[host] if m != n], 3)
        own = [url, *alias_links[n]] + ([f"{url}?page=2"] if n in second else [])
        links = (own[1:] + own[:1] if aliases_first else own) + [plain[m] for m in related]
        head = f'<link rel="canonical" href="{url}">' if declares[n] else ""
        site.pages[url] = _inject(html, links, head)
        site.kind[url], site.article[url] = "article", n
        for alias in alias_links[n]:
            site.pages[alias] = _inject(html, links, head)
            site.kind[alias], site.article[alias] = "alias", n
        if n in second:
            page2 = f"{url}?page=2"
            site.pages[page2] = _inject(real[second[n]][1], [url])
            site.kind[page2] = "page2"
    dead = 0
    for host, ns in articles.items():
        sections = [ns[i : i + 20] for i in range(0, len(ns), 20)]
        home_links = [f"http://{host}/section/{k}" for k in range(len(sections))]
        site.pages[f"http://{host}/"] = _inject(
            "<html><head><title>Home</title></head><body></body></html>", home_links
        )
        site.kind[f"http://{host}/"] = "section"
        for k, members in enumerate(sections):
            links = []
            for n in members:
                draw = rng.random()
                if draw < 0.15:
                    link = f"{plain[n]}?utm_source=newsletter&utm_medium=email"
                elif draw < 0.25:
                    link = plain[n].replace("http://", "http://www.", 1)
                else:
                    link = plain[n]
                if link != plain[n] and link not in site.pages:
                    site.pages[link] = site.pages[plain[n]]
                    site.kind[link], site.article[link] = "alias", n
                links.append(link)
            if aliases_first:
                links.sort(key=lambda u: u in site.kind and site.kind[u] != "alias")
            for _ in range(5):
                links.append(f"http://{host}/a/gone-{dead}")
                site.kind[f"http://{host}/a/gone-{dead}"] = "dead"
                dead += 1
            url = f"http://{host}/section/{k}"
            site.pages[url] = _inject("<html><head><title>Section</title></head><body></body></html>", links)
            site.kind[url] = "section"
    return site


def adversarial_site(dataset: str, seed: int = 5) -> Site:
    """Three hosts where parameters and prefixes matter, each page another real text but the true copies:
    ``/list?page=N`` pages, ``/item?id=N`` items, ``/story/N?lang=xx`` translations; ``/list?sort=`` orders of
    one listing (near-duplicates: the same items); tracking copies of items (``?utm_source``), AMP copies of
    stories on ``adv0`` and ``adv1``; ``?sid=`` a session (copies) on ``adv0`` and ``adv1`` and a section (other
    texts) on ``adv2``, whose ``/amp/`` paths are other pages too."""
    rng = random.Random(seed)
    real = iter(_real_pages(dataset))
    site = Site()

    def page(url: str, kind: str, text: str | None = None) -> str:
        site.pages[url] = _inject(text if text is not None else next(real)[1], [])
        site.kind[url] = kind
        return site.pages[url]

    def copy(url: str, of: str) -> None:
        site.pages[url], site.kind[url] = site.pages[of], "alias"

    for h in range(3):
        host = f"http://adv{h}.example.com"
        home = [f"{host}/list?page={p}" for p in range(1, 9)] + [f"{host}/list?sort=date", f"{host}/list?sort=title"]
        for i in range(30):
            home += [f"{host}/item?id={i}", f"{host}/story/{i}?lang=en", f"{host}/story/{i}?lang=fr"]
            home += [f"{host}/amp/story/{i}", f"{host}/view?sid={i}"]
            if rng.random() < 0.5:
                home.append(f"{host}/item?id={i}&utm_source=feed")
        page(f"{host}/", "section", _inject("<html><head><title>Home</title></head><body></body></html>", home))
        for p in range(1, 9):
            page(f"{host}/list?page={p}", "article")
        listing = next(real)[1]
        for order in ("date", "title"):
            page(f"{host}/list?sort={order}", "article", listing)
        view = next(real)[1]
        for i in range(30):
            page(f"{host}/item?id={i}", "article")
            copy(f"{host}/item?id={i}&utm_source=feed", f"{host}/item?id={i}")
            page(f"{host}/story/{i}?lang=en", "article")
            page(f"{host}/story/{i}?lang=fr", "article")
            if h < 2:  # AMP copies, and a session parameter
                copy(f"{host}/amp/story/{i}", f"{host}/story/{i}?lang=en")
                page(f"{host}/view?sid={i}", "alias" if i else "article", view)
            else:  # /amp/ paths are other pages; sid picks a section
                page(f"{host}/amp/story/{i}", "article")
                page(f"{host}/view?sid={i}", "article")
    return site


# -- serving and crawling ------------------------------------------------------------------------------
def serve(site: Site, latency: float = 0.0) -> tuple[str, multiprocessing.Process]:
    pages = {url: body.encode() for url, body in site.pages.items()}

    def lookup(request):  # type: ignore[no-untyped-def]
        url = request.path if request.path.startswith("http") else f"http://{request.headers['Host']}{request.path}"
        if latency:
            time.sleep(latency)
        body = pages.get(url)
        if body is not None:
            return body, "text/html; charset=utf-8"
        host = urlsplit(url).hostname
        if host == SHORT_HOST:
            return short_not_found(urlsplit(url).path).encode(), "text/html; charset=utf-8"
        if host == LONG_HOST:
            return LONG_NOT_FOUND.encode(), "text/html; charset=utf-8"
        return None

    return localsite.serve(lookup)


def crawl_child(proxy: str, starts: list[str], settings: dict, out: str) -> None:
    os.environ["http_proxy"] = proxy
    import scrapy
    from scrapy import signals
    from scrapy.crawler import CrawlerProcess

    hosts = sorted({urlsplit(u).hostname for u in starts})
    responses: list[str] = []
    scheduled: list[str] = []

    class SiteSpider(scrapy.Spider):
        name = "economy"
        allowed_domains = [h for host in hosts for h in (host, f"www.{host}")]

        async def start(self):  # type: ignore[no-untyped-def]
            for url in starts:
                yield scrapy.Request(url, meta={"neardup_enabled": False})

        def parse(self, response):  # type: ignore[no-untyped-def]
            if "/section/" not in response.url and not response.url.endswith("/"):
                verdict = response.meta.get("neardup") or {}
                yield {
                    "url": response.url,
                    "asked": response.request.url,
                    "status": verdict.get("status"),
                    "canonical": verdict.get("canonical"),
                    "from": response.meta.get("neardup_followed_from") or response.meta.get("neardup_predicted"),
                }
            # The site's own links (the real pages' links lead to their real sites, or nowhere here).
            for href in response.css("nav.bench-links a::attr(href)").getall():
                yield response.follow(href)

    items_path = out + ".items.jsonl"
    process = CrawlerProcess({**settings, "FEEDS": {items_path: {"format": "jsonlines", "overwrite": True}}})
    crawler = process.create_crawler(SiteSpider)

    def received(response, request, spider):  # type: ignore[no-untyped-def]
        responses.append(request.url)  # every download, dropped pages included (not a kept response)

    def queued(request, spider):  # type: ignore[no-untyped-def]
        scheduled.append(request.url)

    # Held here: Scrapy's signals keep weak references to their receivers.
    crawler.signals.connect(received, signals.response_downloaded)
    crawler.signals.connect(queued, signals.request_scheduled)
    started = time.perf_counter()
    process.crawl(crawler)
    process.start()
    seconds = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_SELF)
    with open(items_path, encoding="utf-8") as f:
        items = [json.loads(line) for line in f]
    stats = {k: v for k, v in crawler.stats.get_stats().items() if isinstance(v, (int, float))}
    with open(out, "w") as f:
        json.dump(
            {
                "seconds": seconds,
                "cpu": usage.ru_utime + usage.ru_stime,
                "items": items,
                "stats": stats,
                "responses": responses,
                "scheduled": scheduled,
            },
            f,
        )


def crawl(proxy: str, starts: list[str], settings: dict, workdir: str, processes: int = 1) -> dict:
    """One crawl from ``starts``; with ``processes`` > 1, one process a start URL's host, at once."""
    parts = [starts] if processes == 1 else [[s] for s in starts]
    results, stats = localsite.crawl_processes(crawl_child, proxy, parts, settings, workdir)
    return {
        "seconds": max(r["seconds"] for r in results),
        "cpu": sum(r["cpu"] for r in results) + stats.get("neardup/books/cpu_seconds", 0),
        "items": [item for r in results for item in r["items"]],
        "responses": [u for r in results for u in r["responses"]],
        "scheduled": [u for r in results for u in r["scheduled"]],
        "stats": stats,
    }


def settings_for(store_url: str, **more: object) -> dict:
    return {
        "ADDONS": {"scrapy_neardup.Addon": 300},
        "NEARDUP_ENABLED": True,
        "NEARDUP_STORE_URL": store_url,
        "LOG_LEVEL": os.environ.get("BENCH_LOG_LEVEL", "WARNING"),
        "CONCURRENT_REQUESTS": 16,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 16,
        "TELNETCONSOLE_ENABLED": False,
        "ROBOTSTXT_OBEY": False,
        "COOKIES_ENABLED": False,
        **more,
    }


def homes(site: Site) -> list[str]:
    return sorted(u for u in site.pages if urlsplit(u).path == "/" and not urlsplit(u).query)


# -- figures -------------------------------------------------------------------------------------------
def after_500(result: dict, site: Site) -> int:
    """Alias fetches after the crawl's first 500 responses."""
    return sum(1 for url in result["responses"][500:] if site.kind.get(url) == "alias")


def delivery(result: dict, site: Site, store_url: str, prefix: str | None = None) -> dict:
    """Articles delivered (by the URL of any of their copies), how many once, and the ones missing: of those,
    the ones the store holds as a near-duplicate of another page: another article, or a second page, which is
    another real page (a dedup verdict on two real pages, not a skip: neardup-dev has such pairs of originals,
    the same agency story on two sites)."""
    counts: dict[int, int] = {}
    for item in result["items"]:
        n = site.article.get(item["url"])
        if n is not None and site.kind.get(item["url"]) in ("article", "alias"):
            counts[n] = counts.get(n, 0) + 1
    every = {n for url, n in site.article.items() if site.kind[url] == "article"}
    missing = sorted(every - set(counts))
    from scrapy_neardup.store import store_from_url
    from scrapy_neardup.store.base import group_of

    store = store_from_url(store_url, **({"prefix": prefix} if prefix else {}))
    store.open_existing()
    try:
        plain = {n: u for u, n in site.article.items() if site.kind[u] == "article"}
        groups = {n: group_of(store, plain[n]) for n in missing}
        judged = [n for n in missing if groups[n] is not None and site.article.get(groups[n]) != n]
    finally:
        store.close()
    return {
        "articles": len(every),
        "delivered": len(set(counts) & every),
        "exactly_once": round(sum(1 for n in every if counts.get(n) == 1) / len(every), 4),
        "missing": missing[:20],
        "missing_as_near_duplicates_of_another_page": judged[:20],
        "set": sorted(set(counts) & every),
    }


def never_fetched(result: dict, site: Site, kinds: tuple[str, ...]) -> list[str]:
    """Pages of ``kinds`` that the crawl asked for but never fetched (skipped, or replaced by another URL)."""
    fetched = set(result["responses"])
    return sorted({u for u in result["scheduled"] if site.kind.get(u) in kinds and u not in fetched})


def soft404_figures(store_url: str, site: Site, prefix: str | None = None) -> dict:
    from scrapy_neardup.store import store_from_url
    from scrapy_neardup.store.books import added_up, crawls_of

    store = store_from_url(store_url, **({"prefix": prefix} if prefix else {}))
    store.open_existing()
    try:
        last = added_up(crawls_of(store.books.read())[-1])
    finally:
        store.close()
    called = {page.url for page in last.soft404_pages}
    out = {}
    for host in (SHORT_HOST, LONG_HOST):
        dead = {u for u, k in site.kind.items() if k == "dead" and urlsplit(u).hostname == host}
        mine = {u for u in called if urlsplit(u).hostname == host}
        out[host] = {
            "precision": round(len(mine & dead) / len(mine), 4) if mine else None,
            "recall": round(len(mine & dead) / len(dead), 4) if dead else None,
        }
    out["elsewhere"] = sorted(u for u in called if urlsplit(u).hostname not in (SHORT_HOST, LONG_HOST))[:10]
    out["books"] = {
        "fetches": last.fetches,
        "fetches_avoided": last.fetches_avoided,
        "bytes_avoided": last.bytes_avoided,
        "cpu_seconds": last.cpu_seconds,
    }
    return out


def three_crawls(proxy: str, site: Site, store_url: str, workdir: str, processes: int = 1, **more: object) -> dict:
    runs = []
    for _ in range(3):
        result = crawl(proxy, homes(site), settings_for(store_url, **more), workdir, processes)
        runs.append(result)
    prefix = more.get("NEARDUP_REDIS_KEY")
    deliveries = [delivery(r, site, store_url, str(prefix) if prefix else None) for r in runs]
    return {
        "crawls": [
            {
                **{k: v for k, v in d.items() if k != "set"},
                "fetches": r["stats"].get("response_received_count", 0),
                "fetches_avoided": r["stats"].get("neardup/books/fetches_avoided", 0),
                "repointed": r["stats"].get("neardup/repointed", 0),
                "unique_or_second_pages_never_fetched": never_fetched(r, site, ("article", "page2"))[:10],
            }
            for d, r in zip(deliveries, runs)
        ],
        "same_set_each_time": all(d["set"] == deliveries[0]["set"] for d in deliveries),
        "soft404": soft404_figures(store_url, site, str(prefix) if prefix else None),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", help="folder with manifest.jsonl (e.g. ../shared/neardup-dev)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-net", action="store_true", help="leave out the timed run (1)")
    parser.add_argument("--skip-redis", action="store_true", help="leave out the three processes on Redis")
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="bench-economy-")
    report: dict = {"command": " ".join(["bench/economy_site.py", *sys.argv[1:]])}
    plain_first = build_site(args.dataset, aliases_first=False)
    report["site"] = {
        k: sum(1 for v in plain_first.kind.values() if v == k) for k in sorted(set(plain_first.kind.values()))
    }
    print(f"site: {report['site']}", file=sys.stderr, flush=True)

    def store() -> str:
        return f"sqlite:///{tempfile.mktemp(dir=workdir, suffix='.sqlite3')}"

    if not args.skip_net:
        proxy, server = serve(plain_first, latency=0.05)
        rounds: dict[str, list[dict]] = {"off": [], "on": []}
        try:
            for _ in range(args.repeat):
                for mode in rounds:
                    enabled = {"NEARDUP_ENABLED": mode == "on"}
                    result = crawl(proxy, homes(plain_first), settings_for(store(), **enabled), workdir)
                    rounds[mode].append(
                        {"seconds": result["seconds"], "cpu": result["cpu"], "fetches": len(result["responses"])}
                    )
                    print(f"net {mode}: {rounds[mode][-1]}", file=sys.stderr, flush=True)
        finally:
            server.terminate()
        report["net_50ms_16_concurrent"] = {
            mode: {k: round(statistics.median(r[k] for r in runs), 2) for k in ("seconds", "cpu", "fetches")}
            for mode, runs in rounds.items()
        }
        on, off = report["net_50ms_16_concurrent"]["on"], report["net_50ms_16_concurrent"]["off"]
        report["net_ratios_on_over_off"] = {k: round(on[k] / off[k], 3) for k in ("seconds", "cpu", "fetches")}

    proxy, server = serve(plain_first)
    try:
        learn = crawl(proxy, homes(plain_first), settings_for(store(), NEARDUP_URL_RULES="learn"), workdir)
        default = crawl(proxy, homes(plain_first), settings_for(store()), workdir)
        report["fetches_avoided"] = {
            "fetches_learn": len(learn["responses"]),
            "fetches_defaults": len(default["responses"]),
            "alias_fetches_after_500_learn": after_500(learn, plain_first),
            "alias_fetches_after_500_defaults": after_500(default, plain_first),
            "avoided_after_500": round(1 - after_500(default, plain_first) / max(1, after_500(learn, plain_first)), 4),
            "unique_or_second_pages_never_fetched": never_fetched(default, plain_first, ("article", "page2")),
        }
        print(f"fetches: {report['fetches_avoided']}", file=sys.stderr, flush=True)
        report["three_crawls_sqlite_plain_first"] = three_crawls(proxy, plain_first, store(), workdir)
        print(f"three crawls: {report['three_crawls_sqlite_plain_first']}", file=sys.stderr, flush=True)
    finally:
        server.terminate()
    aliases_first = build_site(args.dataset, aliases_first=True)
    proxy, server = serve(aliases_first)
    try:
        report["three_crawls_sqlite_aliases_first"] = three_crawls(proxy, aliases_first, store(), workdir)
        print(f"three crawls: {report['three_crawls_sqlite_aliases_first']}", file=sys.stderr, flush=True)
        if not args.skip_redis:
            sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
            from helpers.redis_server import RedisServer

            redis = RedisServer(os.path.join(workdir, "redis")).start()
            try:
                report["three_crawls_redis_three_processes_aliases_first"] = three_crawls(
                    proxy, aliases_first, redis.url, workdir, processes=3, NEARDUP_REDIS_KEY="economy:{bench}"
                )
            finally:
                redis.stop()
    finally:
        server.terminate()
    adversarial = adversarial_site(args.dataset)
    proxy, server = serve(adversarial)
    try:
        where = store()
        runs = [crawl(proxy, homes(adversarial), settings_for(where), workdir) for _ in range(2)]
        report["adversarial"] = {
            "urls": len(adversarial.pages),
            "unique_pages_never_fetched": [never_fetched(r, adversarial, ("article",)) for r in runs],
            "fetches": [len(r["responses"]) for r in runs],
            "fetches_avoided": [r["stats"].get("neardup/books/fetches_avoided", 0) for r in runs],
            "aliases_fetched": [sum(1 for u in r["responses"] if adversarial.kind.get(u) == "alias") for r in runs],
        }
    finally:
        server.terminate()
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
