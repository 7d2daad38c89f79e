"""Dedup that pays for itself, at the defaults: predicted duplicates left unfetched, and nothing lost on any
re-crawl, whatever the order the crawl met a group's copies in (a group's page is its best copy, not the
first met; a skip never removes the page a group reaches the spider through)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections import Counter

import pytest
from helpers.crawlkit import ServerThread, pages_server, site_crawl
from helpers.pages import html, story

from scrapy_neardup.store import SqliteStore

pytestmark = pytest.mark.slow

ARTICLES = 60


def article_text(i: int) -> str:
    rnd = random.Random(i)
    words = [f"w{n}" for n in range(5000)]
    return " ".join(rnd.choice(words) for _ in range(400))


def article(i: int) -> str:
    return (
        f"<html><head><title>Story {i}</title></head><body><article><h1>Story {i}</h1><p>{article_text(i)}</p>"
        f"</article><a href='/a/{i}.html?utm_source=home'>share</a> <a href='/a/{i}.html'>permalink</a></body></html>"
    )


def tracking_site(tracked_first: range) -> dict[str, str]:
    """The issue's site: every article links its ``?utm_source`` copy and its plain URL; the home page links
    the articles of ``tracked_first`` only by their tracking URL, the others plainly. No rel=canonical."""
    home = "".join(
        f"<a href='/a/{i}.html{'?utm_source=home' if i in tracked_first else ''}'>{i}</a> " for i in range(ARTICLES)
    )
    pages = {"/": f"<html><body>{home}</body></html>"}
    for i in range(ARTICLES):
        pages[f"/a/{i}.html"] = pages[f"/a/{i}.html?utm_source=home"] = article(i)
    return pages


def cli(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "scrapy_neardup.offline.cli", *args], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def articles_of(result) -> Counter:
    return Counter(int(item["path"][3:].split(".")[0]) for item in result.items)


@pytest.mark.parametrize(
    "tracked_first",
    [range(55, 60), pytest.param(range(0, 60), marks=pytest.mark.extended)],
    ids=["five-tracked", "all-tracked"],
)
def test_three_crawls_deliver_every_article_once_whichever_url_was_met_first(tmp_path, tracked_first):
    """The issue's reproduction, at the defaults (drop mode, URL rules skipping): a tracking URL met before
    its article becomes the group's page only until the plain URL arrives; the group is re-pointed to the
    plain URL, and the next crawls skip the tracking URLs (or fetch the plain page in their place) without
    losing an article."""
    with ServerThread(pages_server(tracking_site(tracked_first))) as server:
        crawls = [site_crawl(tmp_path, server.url, name=f"crawl{n}", items="/a/") for n in range(3)]
    for n, result in enumerate(crawls):
        counts = articles_of(result)
        missing = sorted(set(range(ARTICLES)) - set(counts))
        assert not missing, (n, missing, result.neardup_stats(), result.log[-4000:])
        assert max(counts.values()) == 1, (n, counts.most_common(3))
    # Each tracked article's plain URL was fetched and decided first (the prior every site shares: a tracking
    # parameter makes a copy), or, once the rule was confident, fetched in the tracking URL's place: the first
    # crawl delivers every article under its own URL, as the later ones do.
    first = crawls[0].neardup_stats()
    made_plain = ("neardup/url_rules/page_first", "neardup/url_rules/rewritten", "neardup/repointed")
    assert sum(first.get(name, 0) for name in made_plain) == len(tracked_first), first
    assert first.get("neardup/url_rules/page_first", 0) >= 5, first
    assert all("utm_source" not in item["url"] for item in crawls[0].items), crawls[0].items
    # store show says why a tracking URL the store holds no record of was never filed: its host's rule.
    urls = [f"{server.url}a/{i}.html?utm_source=home" for i in tracked_first]
    shown = [
        json.loads(line) for line in cli("store", f"sqlite:///{tmp_path}/store.sqlite3", "show", *urls).splitlines()
    ]
    never_filed = [line for line in shown if line["canonical"] is None]
    explored_later = sum(c.stats.get("neardup/url_rules/explored", 0) for c in crawls[1:])  # fetched, so filed
    rewritten = first.get("neardup/url_rules/rewritten", 0)
    assert rewritten - explored_later <= len(never_filed) <= rewritten, shown
    for line in never_filed:
        assert line["status"] == "predicted" and line["becomes"] == line["url"].split("?")[0], line
        assert line["rules"][0]["rule"] == "param:utm_source" and line["rules"][0]["successes"] >= 8, line
    # Each crawl's books: the later ones avoid the tracking URLs' fetches, and say so in the stats, the
    # closing log line and the store (one record a crawl).
    later = crawls[1].stats
    explored = later.get("neardup/url_rules/explored", 0)  # a young rule's share, by a hash of the URL
    assert later["neardup/books/fetches_avoided"] + explored == ARTICLES, later  # every tracking URL
    assert later["neardup/books/bytes_avoided"] > 2000 * later["neardup/books/fetches_avoided"] > 0
    assert later["neardup/books/cpu_seconds"] > 0 and "scrapy-neardup: the books of this crawl:" in crawls[1].log
    store = SqliteStore(str(tmp_path / "store.sqlite3"))
    store.open_existing()
    books = store.books.read()
    store.close()
    assert [b.fetches_avoided for b in books] == [c.stats.get("neardup/books/fetches_avoided", 0) for c in crawls]
    # The later crawls deliver each article under its plain URL, and fetch no tracking URL but explored ones.
    for result in crawls[1:]:
        assert all("utm_source" not in item["url"] for item in result.items), result.items
        stats = result.stats
        fetched_tracking = stats.get("neardup/url_rules/explored", 0)
        assert stats.get("downloader/response_count", 0) <= 1 + ARTICLES + 1 + fetched_tracking + 1, stats


def declared_site() -> dict[str, str]:
    """Articles with an AMP copy that declares them, the copy linked first: the declared page is fetched
    before its copy is decided, while the spider's own request for it is queued or in flight."""
    links = "".join(f"<a href='/amp/a/{i}.html'>amp</a> <a href='/a/{i}.html'>{i}</a> " for i in range(30))
    pages = {"/": f"<html><body>{links}</body></html>"}
    for i in range(30):
        head = f"<link rel='canonical' href='/a/{i}.html'>"
        pages[f"/a/{i}.html"] = html(story(500 + i), head=head)
        pages[f"/amp/a/{i}.html"] = html(story(500 + i), head=head, chrome="<div>amp</div>")
    return pages


@pytest.mark.parametrize("scheduler", ["scrapy", "scrapy-redis"])
def test_a_declared_page_is_downloaded_once_whatever_the_scheduler(tmp_path, scheduler):
    settings = {"CONCURRENT_REQUESTS": "16", "NEARDUP_URL_RULES": "learn"}
    server_redis = None
    if scheduler == "scrapy-redis":
        pytest.importorskip("scrapy_redis")
        from helpers.redis_server import RedisServer

        server_redis = RedisServer(str(tmp_path / "redis")).start()
        settings.update(
            {
                "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
                "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
                "REDIS_URL": server_redis.url,
            }
        )
    try:
        with ServerThread(pages_server(declared_site())) as server:
            result = site_crawl(tmp_path, server.url, settings, name=scheduler, items="/")
    finally:
        if server_redis is not None:
            server_redis.stop()
    assert sorted(item["path"] for item in result.items) == sorted(["/"] + [f"/a/{i}.html" for i in range(30)])
    # The home page, 30 articles, 30 AMP copies and the soft-404 probe: each downloaded once (a declared page's
    # kept response, served to the request of its URL, reaches the downloader's stats middleware, at 850,
    # as a response but not as a request).
    assert result.stats["downloader/request_count"] == 62, result.neardup_stats()


def test_a_rewrite_into_a_url_that_does_not_exist_fetches_the_url_asked(tmp_path):
    """Once ``param:utm_source`` is confident, a tracking URL met before its article is requested as the plain
    URL; a page that exists only under its tracking URL (the plain URL answers 404) is then fetched as itself
    after all: a wrong prediction never loses a page."""
    pages = tracking_site(range(0, 60))
    orphans = {f"/only/{i}.html?utm_source=home": article(100 + i) for i in range(3)}
    pages.update(orphans)
    pages["/"] = pages["/"].replace("</body>", "".join(f"<a href='{p}'>o</a>" for p in orphans) + "</body>")
    with ServerThread(pages_server(pages)) as server:
        site_crawl(tmp_path, server.url, name="warm", items="/a/")
        result = site_crawl(tmp_path, server.url, name="again", items="/")
    delivered = {item["path"] for item in result.items}
    assert set(orphans) <= delivered, sorted(delivered)[:10]
    assert result.stats.get("neardup/url_rules/fell_back") == 3, result.neardup_stats()
